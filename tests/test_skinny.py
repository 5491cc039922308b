"""The skinny kernel (csrc/cuda/skinny.cu): a gemm of M <= 16 activation rows with K a multiple
of 256 on mma.sync, any GPU from sm_80 (the planner gives it M = 5..16; on Hopper K >= 8192 and
M = 5..8, or M = 9..16 where L N K >= 2^26; tests/test_kernels.py runs this file again with the
kernel forced wherever it can run, M = 2..16).
Full-range inputs, outputs poisoned first. Shapes at its edges: M at the n8 tiles' edges (5, 8,
9, 16), N around its 64-row blocks (5, 63, 65, 129, 4100), K of one item (256) to rows dealt to
many CTAs (one row block of K = 65536: the block's partials added by its last CTA), batches, both
scale layouts, offset outputs in padded rows, alpha. On a GPU each case asserts which kernel ran;
the cases run on the CPU too (the same numbers by another kernel)."""

import pytest
import torch

import nvfp4_kernels as nk
from conftest import HAS_CUDA, assert_matches
from helpers import gemm_graph_replays, gemm_problem, launched, poisoned, ref_gemm, skinny_expected

SM80 = HAS_CUDA and torch.cuda.get_device_capability() >= (8, 0)
KERNEL = "skinny_kernel"

# (L, M, N, K)
SHAPES = [
    (None, 5, 5, 256),
    (None, 8, 63, 8192),
    (3, 9, 65, 1024),
    (None, 16, 129, 4096),
    (2, 12, 200, 2048),
    (None, 7, 4100, 256),
    (None, 8, 64, 65536),  # one row block, 256 items over many CTAs
    (None, 16, 64, 65536),
    (None, 6, 1000, 16384),
    (4, 13, 300, 7168),
    (2, 2, 77, 512),  # M = 2..4: the GEMV's, the skinny kernel's when forced
]


def gemm(device, a, b, **kw):
    fn = lambda: nk.gemm(a.data, b.data, a.sf, b.sf, **kw)  # noqa: E731
    if device != "cuda" or not SM80:
        return fn()
    out, names = launched(fn)
    (m, k), n = a.data.shape[-2:], b.data.shape[-2]
    k, batch = 2 * k, a.data.shape[0] if a.data.dim() == 3 else 1
    assert any(KERNEL in x for x in names) == skinny_expected(m, n, k, batch), f"M={m} N={n} K={k}: {names}"
    return out


@pytest.mark.parametrize("layouts", [("linear", "linear"), ("blocked", "blocked"), ("linear", "blocked"),
                                     ("blocked", "linear")])
@pytest.mark.parametrize("L,m,n,k", SHAPES)
def test_skinny_gemm(device, gen, layouts, L, m, n, k):
    """Into a view with padded rows: nothing written outside it."""
    a, b = gemm_problem(L, m, n, k, gen, device, layouts)
    big = poisoned((*([L] if L else []), m, n + 5), device)
    out = big[..., 2:n + 2]
    gemm(device, a, b, out=out)
    assert_matches(out, ref_gemm(a, b), f"gemm L={L} M={m} N={n} K={k} layouts={layouts} on {device}")
    assert torch.isnan(big[..., :2]).all() and torch.isnan(big[..., n + 2:]).all(), "wrote outside its out view"


def test_skinny_alpha(device, gen):
    a, b = gemm_problem(2, 7, 150, 8192, gen, device, ("blocked", "linear"))
    alpha = torch.tensor([0.37], device=device)
    out = gemm(device, a, b, alpha=alpha)
    assert_matches(out, ref_gemm(a, b, alpha), f"gemm alpha M=7 on {device}")


@pytest.mark.skipif(not SM80, reason="needs a CUDA GPU of sm_80 or later")
def test_skinny_deterministic(gen):
    """Partials are added in CTA order whichever CTA finishes last: the same bits every call."""
    a, b = gemm_problem(None, 8, 64, 65536, gen, "cuda")
    first = gemm("cuda", a, b)
    for _ in range(3):
        assert torch.equal(gemm("cuda", a, b), first)


@pytest.mark.skipif(not SM80, reason="needs a CUDA GPU of sm_80 or later")
@pytest.mark.parametrize("m,n,k", [(4, 300, 8192), (5, 300, 8192), (8, 300, 8192), (8, 300, 4096), (9, 300, 8192),
                                   (16, 300, 1024), (17, 300, 8192), (8, 300, 8256), (4, 4096, 16384),
                                   (12, 4096, 16384), (16, 4095, 16384), (16, 8192, 4096)])
def test_which_gemms_take_the_skinny_kernel(gen, m, n, k):
    """The planner's rule (tests/helpers.py: skinny_expected; on Hopper large weights,
    L N K >= 2^26, let M = 9..16 in; M = 4 stays the GEMV's), and the result either way."""
    a, b = gemm_problem(None, m, n, k, gen, "cuda", ("blocked", "linear"))
    out = gemm("cuda", a, b)
    assert_matches(out, ref_gemm(a, b), f"gemm M={m} N={n} K={k} on cuda")


@pytest.mark.skipif(not SM80, reason="needs a CUDA GPU of sm_80 or later")
def test_skinny_in_graph(gen):
    """Captured and replayed on new inputs: every replay keeps the captured ticket epoch, so the
    last CTA of each row block must leave its ticket cleared for the next replay."""
    for out, ref in gemm_graph_replays(8, 1000, 16384, gen, replays=3):
        assert_matches(out, ref, "graph replay of the skinny gemm")
