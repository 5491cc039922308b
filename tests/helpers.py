"""Problem builders for the tests: operands from nvfp4_kernels.testing, outputs
poisoned with NaN, and the reference result."""

import torch

from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand, vector_operand

LAYOUTS = ("linear", "blocked")


def layouts_for(*ints):
    """A deterministic (a, b) layout pair that varies with the shape, so a sweep
    over shapes covers all four combinations."""
    i = sum(ints)
    return LAYOUTS[i % 2], LAYOUTS[(i // 2) % 2]


def poisoned(shape, device):
    return torch.full(shape, float("nan"), dtype=torch.float16, device=device)


def gemm_problem(L, m, n, k, gen, device, layouts=("linear", "linear"), **kw):
    a = random_operand(L, m, k, gen=gen, device=device, layout=layouts[0], **kw)
    b = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1], **kw)
    return a, b


def gemv_problem(L, m, k, gen, device, layouts=("linear", "linear"), **kw):
    a = random_operand(L, m, k, gen=gen, device=device, layout=layouts[0], **kw)
    b = vector_operand(random_operand(L, 1, k, gen=gen, device=device, layout=layouts[1], **kw))
    return a, b


def ref_gemm(a, b, alpha=None):
    return reference.gemm(a.data, b.data, a.sf, b.sf, alpha)


def ref_gemv(a, b, alpha=None):
    return reference.gemv(a.data, b.data, a.sf, b.sf, alpha)
