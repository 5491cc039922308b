"""The portable tensor-core kernel (csrc/cuda/matmul_mma.cu: mma.sync, sm_80+), the path of every
GPU without the wgmma kernel and, on Hopper, of K not a multiple of 64 and of rows 8 but not 16
bytes aligned. Every case compares with the exact reference on poisoned outputs (the CPU kernels
run the same cases) and, on a GPU, asserts through the profiler that the kernel ran where the
planner (csrc/cuda/plan.cu) must send the shape to it. tests/test_kernels.py reruns this file in
child processes with the kernel forced ahead of every other (NVFP4_FORCE_KERNEL=mma), its CTA shape
(WK) by its rule, forced to 1 (mma:wk1) and to 4 (mma:wk4)."""

import os

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand
from conftest import HAS_CUDA, assert_matches
from helpers import FORCED, gemm_problem, launched, poisoned, ref_gemm

ON_GPU = HAS_CUDA and torch.cuda.get_device_capability() >= (8, 0)
MMA = "matmul_mma_kernel"
FORCE = os.environ.get("NVFP4_FORCE_KERNEL", "")
SPLIT = {"mma:wk1": 1, "mma:wk4": 4}.get(FORCE)


def run(device, fn, expect_mma, variant=None):
    """fn() on device; on a GPU where expect_mma, assert the kernel ran (its template arguments
    starting with `variant` if given: "DUAL, CW, SF_ALIGNED, WK")."""
    if device != "cuda" or not ON_GPU or not expect_mma or FORCED not in ("", "mma"):
        return fn()
    out, names = launched(fn)
    want = MMA + (f"<{variant}" if variant else "")
    assert any(want in n for n in names), f"{want} did not run: {names}"
    return out


def expected_wk(op, L, m, n):
    """The kernel's WK: 4 (one 64 x 64 tile per CTA, K split over its 4 warps) or 1 (128 x 128
    tiles; dual 128 x 64 of each matrix) by the cost model of csrc/cuda/matmul_mma.cu
    (choose_wk); mma:wk1 / mma:wk4 force 1 / 4."""
    if not ON_GPU:
        return None  # (not asserted)
    if SPLIT is not None:
        return SPLIT
    tiles = -(-m // 128) * -(-n // (64 if op == "dual" else 128)) * (L or 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n1, n4 = -(-tiles // sms), -(-4 * tiles // sms)
    c1 = 1 / 0.82 if n1 <= 1 else n1
    c4 = (1 / 0.82 if n4 <= 1 else 1) * n4 / 4 / 0.82
    return 4 if c4 < 0.95 * c1 else 1


def variant(op, L, m, n, k, layouts, cw=None):
    """The template arguments the shape takes: (dual, 16- or 8-byte copies, scales in aligned
    words, WK); contiguous operands: rows of K / 2 bytes, linear scale rows of K / 16."""
    cw = cw or (16 if k % 32 == 0 else 8)
    sf_aligned = all(lay == "blocked" for lay in layouts) or k % 64 == 0
    return f"{'true' if op == 'dual' else 'false'}, {cw}, {'true' if sf_aligned else 'false'}, {expected_wk(op, L, m, n)}>"


# (L, M, N, K): K % 64 of 16, 32 and 48 (one step of 8 bytes, 16-byte and 8-byte copies), tails of
# both tiles (1, 7, 129, 200, 300), batches, up to 17 K steps.
ODD_K = [
    (None, 1, 1, 16),
    (None, 7, 129, 48),
    (None, 129, 7, 80),
    (2, 200, 300, 96),
    (None, 300, 200, 1040),
    (3, 129, 129, 1056),
    (None, 64, 256, 1072),
]
LAYOUTS = [("linear", "linear"), ("blocked", "blocked"), ("linear", "blocked")]


@pytest.mark.parametrize("layouts", LAYOUTS, ids="-".join)
@pytest.mark.parametrize("L,m,n,k", ODD_K)
def test_gemm_odd_k(device, gen, L, m, n, k, layouts):
    """K not a multiple of 64: the tail step's codes and scales past K are zeros (a blocked
    layout's NaN padding is never read), linear scale rows are not 4-byte aligned."""
    a, b = gemm_problem(L, m, n, k, gen, device, layouts)
    out = poisoned(((L,) if L else ()) + (m, n), device)
    run(device, lambda: nk.gemm(a.data, b.data, a.sf, b.sf, out=out, alpha=0.75), True, variant("gemm", L, m, n, k, layouts))
    assert_matches(out, ref_gemm(a, b, 0.75), f"gemm L={L} M={m} N={n} K={k} {layouts} on {device}")


@pytest.mark.parametrize("layouts", LAYOUTS[:2], ids="-".join)
@pytest.mark.parametrize("L,m,n,k", ODD_K)
def test_dual_odd_k(device, gen, L, m, n, k, layouts):
    a, b1 = gemm_problem(L, m, n, k, gen, device, layouts)
    b2 = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1])
    out = poisoned(((L,) if L else ()) + (m, n), device)
    run(device, lambda: nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=out), True,
        variant("dual", L, m, n, k, layouts))
    ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    assert_matches(out, ref, f"dual_gemm L={L} M={m} N={n} K={k} {layouts} on {device}")


@pytest.mark.parametrize("L,m,k", [(None, 300, 1040), (3, 129, 48)])
def test_gemv_odd_k(device, gen, L, m, k):
    """The gemv op where the GEMV kernel cannot take K: a gemm of one weight row."""
    a = random_operand(L, m, k, gen=gen, device=device)
    b = random_operand(L, 1, k, gen=gen, device=device)
    b_data, b_sf = b.data.squeeze(-2), b.sf.squeeze(-2)
    out = run(device, lambda: nk.gemv(a.data, b_data, a.sf, b_sf), True)
    assert_matches(out, reference.gemv(a.data, b_data, a.sf, b_sf), f"gemv L={L} M={m} K={k} on {device}")


def test_group_odd_k(device, gen):
    """One group with K % 64 != 0 takes the whole call off the wgmma kernel: every group here,
    M = 1 and K = 16 included, in one launch."""
    sizes = [(1, 64, 16), (40, 129, 1040), (384, 96, 512), (7, 1, 64), (129, 200, 4096)]
    probs = [gemm_problem(None, m, n, k, gen, device, ("blocked", "linear")) for m, n, k in sizes]
    outs = [poisoned((m, n), device) for m, n, _ in sizes]
    run(device, lambda: nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs],
                                      [a.sf for a, _ in probs], [b.sf for _, b in probs], outs=outs), True)
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm group {g} of {sizes} on {device}")


@pytest.mark.parametrize("offset,cw", [(8, 8), (16, 16), (24, 8)])
def test_sliced_operands(device, gen, offset, cw):
    """Views that start `offset` bytes into each row (their scales offset / 8 bytes in, never
    4-byte aligned): 8-byte copies where the rows are not 16-byte aligned; scales by the word."""
    k = 640
    a, b = gemm_problem(None, 150, 130, k + 2 * offset, gen, device)
    cols = slice(offset, offset + k // 2)
    scols = slice(offset // 8, offset // 8 + k // 16)
    a_data, a_sf, b_data, b_sf = a.data[:, cols], a.sf[:, scols], b.data[:, cols], b.sf[:, scols]
    out = run(device, lambda: nk.gemm(a_data, b_data, a_sf, b_sf), True,
              f"false, {cw}, false, {expected_wk('gemm', None, 150, 130)}>")
    assert_matches(out, reference.gemm(a_data, b_data, a_sf, b_sf), f"gemm sliced +{offset} bytes on {device}")


# K % 64 == 0: other kernels take these unless mma is forced (then asserted to run this one):
# several tiles in both directions, long K (the ring wraps many times), batches, both layouts,
# an alpha in device memory, the dual's 64-row weight tiles.
KERNEL_SHAPES = [
    ("gemm", None, 1, 9, 64, ("linear", "linear")),  # N <= 8 would be a GEMV of B's rows
    ("gemm", None, 4, 300, 256, ("blocked", "linear")),
    ("gemm", 2, 257, 383, 2048, ("linear", "blocked")),
    ("gemm", None, 128, 512, 7168, ("blocked", "blocked")),
    ("dual", None, 9, 129, 1024, ("linear", "blocked")),
    ("dual", 3, 200, 65, 512, ("blocked", "linear")),
    ("dual", None, 256, 192, 4096, ("blocked", "blocked")),
]


@pytest.mark.parametrize("op,L,m,n,k,layouts", KERNEL_SHAPES)
def test_kernel_shapes(device, gen, op, L, m, n, k, layouts):
    a, b1 = gemm_problem(L, m, n, k, gen, device, layouts)
    out = poisoned(((L,) if L else ()) + (m, n), device)
    if op == "gemm":
        alpha = torch.tensor([1.5], device=device)
        call, ref = (lambda: nk.gemm(a.data, b1.data, a.sf, b1.sf, out=out, alpha=alpha)), ref_gemm(a, b1, alpha)
    else:
        b2 = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1])
        call = lambda: nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=out)  # noqa: E731
        ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    run(device, call, FORCED == "mma", variant(op, L, m, n, k, layouts))
    assert_matches(out, ref, f"{op} L={L} M={m} N={n} K={k} {layouts} on {device}")


def test_unaligned_rows_take_simt(device, gen):
    """Rows an odd number of bytes apart: no cp.async can copy them, the SIMT kernel does."""
    m, n, k = 70, 90, 256
    a, b = gemm_problem(None, m, n, k, gen, device)
    wide = torch.zeros(m, k // 2 + 1, dtype=torch.uint8, device=device)
    wide[:, : k // 2] = a.data.view(torch.uint8)
    a_data = wide[:, : k // 2]
    out = poisoned((m, n), device)
    call = lambda: nk.gemm(a_data, b.data, a.sf, b.sf, out=out)  # noqa: E731
    if device == "cuda" and ON_GPU:
        _, names = launched(call)
        assert any("matmul_simt_kernel" in x for x in names), names
    else:
        call()
    assert_matches(out, reference.gemm(a_data, b.data, a.sf, b.sf), f"gemm of rows {k // 2 + 1} bytes apart on {device}")
