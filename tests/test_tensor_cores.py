"""The tensor-core path (csrc/cuda/matmul_sm90.cu): shapes it takes (K a multiple
of 64, aligned operands), with tails in M and N, batches, split-K over a cluster,
both scale layouts, dual and grouped. On a Hopper GPU each test also asserts,
through the profiler, that the wgmma kernel ran (and not the SIMT fallback);
elsewhere the same cases check the other paths (CPU included)."""

import json
import os
import re
import tempfile
import time

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels.testing import random_operand
from conftest import HAS_CUDA, assert_matches
from helpers import (FORCED, gemm_problem, gemv_problem, is_gemv, launched, layouts_for, mma_rule, mma_share_steps,
                     poisoned, ref_gemm, ref_gemv, skinny_expected, w4a16_slack)
from nvfp4_kernels import reference
from test_epilogue import activations
from test_w4a4 import global_scale_of

IS_HOPPER = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
# Tests of which kernel the planner picks; with a kernel forced ahead of it they do not apply.
routing = pytest.mark.skipif(bool(FORCED), reason="asserts the planner's choice; a kernel is forced")

# (L, M, N, K): tails in M and N (1, 7, 129, 200, 300), K from one 64-step to
# 17 steps; (128, 256, 4096) has 2 tiles and 64 K steps: split-K over a cluster.
SHAPES = [
    (None, 1, 7, 64),
    (None, 7, 129, 128),
    (None, 129, 200, 1088),
    (3, 200, 300, 256),
    (None, 128, 256, 4096),
    (2, 300, 129, 2048),
    (None, 256, 384, 640),
    (2, 1, 300, 1024),
    (None, 33, 513, 4096),  # the 64-row activation tile, split-K
    (2, 20, 256, 2048),  # the 32-row activation tile, batched, split-K
    (3, 12, 129, 1024),  # the 32-row activation tile, batched, tails
]


def launched_grids(fn):
    """Run fn once under the profiler; return [(name, grid)] of the CUDA kernels it launched."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    return [(e["name"], tuple(e["args"]["grid"])) for e in events if e.get("cat") == "kernel"]


def run(device, fn, kernel="matmul_sm90_kernel"):
    if device != "cuda" or not IS_HOPPER or FORCED:  # forced: tests/test_kernels.py checks what ran
        return fn()
    out, names = launched(fn)
    ran = any(is_gemv(n) for n in names) if kernel == "gemv" else any(kernel in n for n in names)
    assert ran, f"{kernel} did not run: {names}"
    return out


def gemm_or_dual(op, a, b1, b2, out):
    """(call, reference) of op into out: "gemm" a x b1, "dual" silu(a x b1) * (a x b2)."""
    if op == "gemm":
        return (lambda: nk.gemm(a.data, b1.data, a.sf, b1.sf, out=out)), ref_gemm(a, b1)
    return ((lambda: nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=out)),
            reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf))


def tc_kernel(op, *args):
    """The start of the tensor-core kernel's name: op's DUAL, then the template arguments args."""
    return f"matmul_sm90_kernel<{'true' if op == 'dual' else 'false'}, " + ", ".join(map(str, args)) + ","


@pytest.mark.parametrize("L,m,n,k", SHAPES)
def test_gemm(device, gen, L, m, n, k):
    lay = layouts_for(m, n, k)
    a, b = gemm_problem(L, m, n, k, gen, device, lay)
    out = poisoned(((L,) if L else ()) + (m, n), device)
    # M <= 4 (some M <= 8) runs as a GEMV with the roles swapped, some small M on mma.sync (csrc/cuda/plan.cu)
    kernel = ("skinny_kernel" if skinny_expected(m, n, k, L or 1) else
              "gemv" if m <= 4 or mma_expected("gemm", m, n, k, L) else "matmul_sm90_kernel")
    run(device, lambda: nk.gemm(a.data, b.data, a.sf, b.sf, out=out), kernel)
    assert_matches(out, ref_gemm(a, b), f"gemm L={L} M={m} N={n} K={k} layouts={lay} on {device}")


@pytest.mark.parametrize("L,m,n,k", SHAPES)
def test_dual_gemm(device, gen, L, m, n, k):
    lay = layouts_for(m, n, k + 1)
    a, b1 = gemm_problem(L, m, n, k, gen, device, lay)
    b2 = random_operand(L, n, k, gen=gen, device=device, layout=lay[1])
    out = poisoned(((L,) if L else ()) + (m, n), device)
    # M <= 4 (some M <= 8) runs as a GEMV with the roles swapped, B1 and B2 together (csrc/cuda/gemv_dp4a.cu, DUAL)
    run(device, lambda: nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=out),
        "gemv" if m <= 4 or mma_expected("dual", m, n, k, L) else "matmul_sm90_kernel")
    ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    assert_matches(out, ref, f"dual_gemm L={L} M={m} N={n} K={k} layouts={lay} on {device}")


def test_gemm_alpha(device, gen):
    a, b = gemm_problem(None, 130, 140, 512, gen, device)
    alpha = torch.tensor([0.37], device=device)
    out = run(device, lambda: nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha))
    assert_matches(out, ref_gemm(a, b, alpha), f"gemm alpha on {device}")


GROUPS = [
    [(1, 64, 64), (40, 128, 256), (384, 96, 512), (129, 200, 1088), (7, 1, 64)],
    [(80, 4096 // 16, 7168 // 8), (176, 4096 // 16, 7168 // 8), (248, 4096 // 16, 7168 // 8)],
    [(m, 33, 64 * (1 + m % 3)) for m in range(1, 20)],  # more groups than one launch takes
    [(64, 300, 1024), (2, 256, 4096), (33, 129, 128)],  # the 64-row activation tile
]


@pytest.mark.parametrize("sizes", GROUPS, ids=lambda s: f"{len(s)}groups")
def test_group_gemm(device, gen, sizes):
    probs = [gemm_problem(None, m, n, k, gen, device, layouts_for(m, n, k)) for m, n, k in sizes]
    outs = [poisoned((m, n), device) for m, n, _ in sizes]
    run(device, lambda: nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs],
                                      [a.sf for a, _ in probs], [b.sf for _, b in probs], outs=outs))
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm group {g} of {sizes} on {device}")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,m", [("gemm", m) for m in (129, 160, 161, 192, 193, 224, 225)] +
                         [("dual", 150), ("dual", 200)])
def test_narrow_last_tile(gen, op, m):
    """128-row tiles whose last holds 1..32, 33..64, 65..96 or 97 rows: the
    consumers run wgmma of N = 32, 64, 96 or 128 there (the first N rows of
    the fp16 tile into the first N / 2 accumulators; matmul_sm90.cu, consume),
    each boundary from both sides, split-K over a cluster (K = 2048)."""
    n, k = 300, 2048
    a, b1 = gemm_problem(None, m, n, k, gen, "cuda", ("blocked", "linear"))
    b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
    out = poisoned((m, n), "cuda")
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    run("cuda", call, tc_kernel(op, 128))
    assert_matches(out, ref, f"{op} M={m} N={n} K={k} on cuda (last row tile of {(m - 1) % 128 + 1} rows)")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
def test_fallbacks_on_hopper(gen):
    """K not a multiple of 64, or a misaligned slice: another kernel (matmul_mma.cu, tests/test_mma.py), still right."""
    a, b = gemm_problem(None, 64, 64, 48, gen, "cuda")
    out, names = launched(lambda: nk.gemm(a.data, b.data, a.sf, b.sf))
    assert not any("matmul_sm90_kernel" in n for n in names), names
    assert_matches(out, ref_gemm(a, b), "gemm K=48 on cuda")
    a, b = gemm_problem(None, 64, 64, 128 + 32, gen, "cuda")
    a_data, a_sf = a.data[:, 8:72], a.sf[:, 1:9]  # K = 128 starting 8 bytes into each row
    b_data, b_sf = b.data[:, 8:72], b.sf[:, 1:9]
    out, names = launched(lambda: nk.gemm(a_data, b_data, a_sf, b_sf))
    assert not any("matmul_sm90_kernel" in n for n in names), names
    ref = reference.gemm(a_data, b_data, a_sf, b_sf)
    assert_matches(out, ref, "gemm misaligned slice K=128 on cuda")


def off_16_bytes(sf):
    """A copy of `sf` whose storage starts 4 bytes past a 16-byte boundary."""
    buf = torch.empty(sf.numel() + 16, dtype=torch.uint8, device=sf.device)
    at = (4 - buf.data_ptr()) % 16
    out = buf[at:at + sf.numel()].view(sf.dtype).view(sf.shape)
    out.copy_(sf)
    assert out.data_ptr() % 16 == 4
    return out


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,m,n", [("gemm", 130, 300), ("gemm", 40, 100), ("dual", 130, 200), ("dual", 20, 129)])
@pytest.mark.parametrize("aligned16", [True, False])
def test_blocked_scales_at_any_4_bytes(gen, op, m, n, aligned16):
    """Blocked scales on the tensor-core kernel at 16-byte alignment and 4 bytes past it (both
    admitted by cp_async_ok: a copy of scales wider than 4 bytes would need the first), with weight
    rows that end inside an atom or with the 256-row tile's second half past the last atom (N = 100,
    129, 200, 300), and a padded activation tile (M = 130, 40, 20); the atoms' padding is NaN
    (random_operand's pad_byte), so a kernel whose products of padding rows reached a stored output
    would fail."""
    k = 1088
    a, b = gemm_problem(None, m, n, k, gen, "cuda", ("blocked", "blocked"))
    b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
    sfs = [o.sf if aligned16 else off_16_bytes(o.sf) for o in (a, b, b2)]
    out = poisoned((m, n), "cuda")
    if op == "gemm":
        ref = reference.gemm(a.data, b.data, a.sf, b.sf)
        call = lambda: nk.gemm(a.data, b.data, sfs[0], sfs[1], out=out)
    else:
        ref = reference.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
        call = lambda: nk.dual_gemm(a.data, b.data, b2.data, sfs[0], sfs[1], sfs[2], out=out)
    _, names = launched(call)
    assert any("matmul_sm90_kernel" in n for n in names), names
    assert_matches(out, ref, f"{op} M={m} N={n} blocked scales {'at' if aligned16 else '4 bytes past'} 16 bytes")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("m,tile", [(5, 32), (32, 32), (33, 64), (64, 64), (65, 128)])
def test_activation_tile(gen, m, tile):
    """The tensor-core kernel takes the smallest activation tile that holds M (K = 1088: not a
    multiple of 256, which M = 5..16 would take to the skinny kernel)."""
    a, b = gemm_problem(None, m, 256, 1088, gen, "cuda")
    out, names = launched(lambda: nk.gemm(a.data, b.data, a.sf, b.sf))
    assert any(re.search(rf"matmul_sm90_kernel<false, {tile}, false,", n) for n in names), names
    assert_matches(out, ref_gemm(a, b), f"gemm M={m} on cuda")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,sizes", [("gemm", [5]), ("gemm", [40]), ("gemm", [100]), ("dual", [20]), ("dual", [100]),
                                      ("group", [40, 200])])
def test_padding_rows_are_not_read(gen, op, sizes):
    """A tile's activation rows past M are neither copied nor decoded: their
    columns of the fp16 tile in shared memory keep what the kernel before left
    there. Here that is NaN (a launch whose activation scales are all NaN,
    one 128-row tile per SM, just before), and the products of those columns
    must reach no stored output. Tiles of 32, 64 and 128 rows, dual (whose
    64-row tile still decodes its padding), grouped."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nan_a, nan_b = gemm_problem(None, 128, 256 * sms, 256, gen, "cuda")
    nan_a.sf.view(torch.uint8).fill_(0x7F)  # e4m3 NaN
    n, k = 300, 1088  # K % 256 != 0: M = 5 stays on the tensor-core kernel
    probs = [gemm_problem(None, m, n, k, gen, "cuda", ("linear", "blocked")) for m in sizes]
    b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
    outs = [poisoned((m, n), "cuda") for m in sizes]
    (a, b), out = probs[0], outs[0]
    nk.gemm(nan_a.data, nan_b.data, nan_a.sf, nan_b.sf)
    if op == "gemm":
        run("cuda", lambda: nk.gemm(a.data, b.data, a.sf, b.sf, out=out))
        refs = [ref_gemm(a, b)]
    elif op == "dual":
        run("cuda", lambda: nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf, out=out))
        refs = [reference.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)]
    else:
        run("cuda", lambda: nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs],
                                          [a.sf for a, _ in probs], [b.sf for _, b in probs], outs=outs))
        refs = [ref_gemm(a, b) for a, b in probs]
    for m, o, r in zip(sizes, outs, refs):
        assert_matches(o, r, f"{op} M={m} N={n} K={k} after a launch that left NaN in shared memory")


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("m,n,gemv", [(2, 300, True), (3, 129, True), (4, 1024, True), (200, 4, True), (5, 300, None),
                                      (300, 8, None), (9, 300, False)])
def test_few_rows_take_the_gemv(gen, m, n, gemv):
    """A gemm with M or N of 4 at most streams the other operand through the GEMV kernel; of 5 to
    8 where the integer-mma kernel's rule takes it (None: mma_expected), of 9 never."""
    if gemv is None:
        gemv = mma_expected("gemm", m, n, 1024) if m <= 8 else mma_expected("gemm", n, m, 1024, swapped=False)
    a, b = gemm_problem(None, m, n, 1024, gen, "cuda", ("blocked", "linear"))
    out, names = launched(lambda: nk.gemm(a.data, b.data, a.sf, b.sf))
    assert any(is_gemv(n) for n in names) == gemv, names
    assert_matches(out, ref_gemm(a, b), f"gemm M={m} N={n} on cuda")


def mma_cpl(op, m, n, k, L):
    """Steps per item of the integer-mma kernel for M = m vectors by its rule (csrc/cuda/gemv_mma.cuh,
    mma_cpl): 2 where K % 256 == 0 and the busiest CTA has at least 12 steps a warp (4 vectors) or
    160 steps (5 to 8), else 1."""
    if m < 4 or k % 256 or k > 16384:  # (past 16384 its shared memory may not fit; no test goes there)
        return 1
    return 2 if mma_share_steps(op, n, k, L) >= (12 * 16 if m == 4 else 160) else 1


def mma_expected(op, m, n, k, L=None, swapped=True):
    """Whether a gemm (or dual) of M <= 8 activation rows runs the GEMV's integer-mma kernel
    (swapped=False: a gemm of N <= 8 weight rows, M streamed): its rule (helpers.mma_rule), unless
    the skinny kernel takes the gemm first (csrc/cuda/plan.cu; helpers.skinny_expected)."""
    if swapped and op == "gemm" and skinny_expected(m, n, k, L or 1):
        return False
    return mma_rule(op, m, n, k, L)


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", ["gemm", "dual"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("m,n,k,L", [(4, 4096, 1024, None), (4, 4100, 1152, 2), (4, 5000, 512, None), (4, 37, 128, 3),
                                     (3, 300, 1024, None), (4, 200, 1088, None), (4, 4096, 128, None),
                                     (4, 4000, 384, 8), (4, 30000, 256, None), (4, 8200, 8192, None),
                                     (2, 4100, 1152, 2), (3, 37, 128, 3), (2, 5000, 512, None), (3, 4000, 384, 8),
                                     (2, 30000, 256, None), (3, 8200, 8192, None), (2, 200, 1088, None),
                                     (3, 4096, 2048, None), (1, 4096, 1024, None), (2, 2048, 7168, None),
                                     (3, 1000, 8192, None), (2, 1000, 8192, 2)])
def test_vectors_on_mma(gen, op, layout, m, n, k, L):
    """Two to four activation rows: the GEMV's integer-mma kernel where K % 128 == 0 (two or
    three where the warps get 3.5 steps or more each), else the dp4a loop; either way the exact
    result, every output written. The shapes give the mma kernel rows split over 2 to 8 warps,
    whole rows per warp, several sets a warp, batches, a last set past N and an odd vector count;
    some take the dp4a loop (short or long shares, K % 128 == 64, one row)."""
    a, b1 = gemm_problem(L, m, n, k, gen, "cuda", (layout, layout))
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout=layout)
    out = poisoned(((L,) if L else ()) + (m, n), "cuda")
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    _, names = launched(call)
    assert any("gemv_mma_kernel" in x for x in names) == mma_expected(op, m, n, k, L), names
    assert any(is_gemv(x) for x in names), names
    assert_matches(out, ref, f"{op} M={m} N={n} K={k} L={L} {layout} on cuda")


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", ["gemm", "dual"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("m,n,k,L", [(8, 4096, 1024, None), (5, 4100, 1152, 2), (6, 37, 128, 3), (7, 300, 1024, None),
                                     (8, 8200, 8192, None), (8, 30000, 256, None), (6, 4000, 384, 8),
                                     (8, 200, 1088, None), (7, 2048, 7168, None), (5, 1000, 8192, 2),
                                     (8, 7168, 16384, None), (6, 24, 16384, 264), (8, 4096, 7168, None),
                                     (5, 5000, 4096, None)])
def test_eight_vectors_on_mma(gen, op, layout, m, n, k, L):
    """Five to eight activation rows on the GEMV's integer-mma kernel where its rule takes them
    (mma_expected), else the skinny or tensor-core kernel; either way the exact result, every
    output written. Odd vector counts, batches, a last set past N, rows split over warps, shares
    on both sides of the rule, K % 128 == 64, shapes the skinny kernel takes; one or two steps per
    item (mma_cpl: 160 steps and more, e.g. the dual 5 x 5000 x 4096 and 8 x 4096 x 7168)."""
    a, b1 = gemm_problem(L, m, n, k, gen, "cuda", (layout, layout))
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout=layout)
    out = poisoned(((L,) if L else ()) + (m, n), "cuda")
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    _, names = launched(call)
    dual = "true" if op == "dual" else "false"
    on_mma = any(re.search(rf"gemv_mma_kernel<\d+, {m}, {dual}, ", x) for x in names)
    assert on_mma == mma_expected(op, m, n, k, L), names
    if on_mma:  # and two steps per item where its warps' shares are long (mma_cpl)
        cpl = mma_cpl(op, m, n, k, L)
        assert any(re.search(rf"gemv_mma_kernel<\d+, {m}, {dual}, (true|false), {cpl}, false>", x) for x in names), \
            names
    assert_matches(out, ref, f"{op} M={m} N={n} K={k} L={L} {layout} on cuda")


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("m,n,k,L", [(1000, 8, 7168, None), (4096, 5, 2048, None), (300, 7, 1024, 3),
                                     (20000, 6, 256, None), (500, 8, 1088, None)])
def test_few_weight_rows_on_mma(gen, layout, m, n, k, L):
    """A gemm of 5 to 8 weight rows (a router's) is a GEMV of that many vectors as given, the M
    activation rows streamed: the integer-mma kernel where its rule takes it, else the tensor-core
    kernel; the exact result either way."""
    a, b = gemm_problem(L, m, n, k, gen, "cuda", (layout, layout))
    out = poisoned(((L,) if L else ()) + (m, n), "cuda")
    _, names = launched(lambda: nk.gemm(a.data, b.data, a.sf, b.sf, out=out))
    on_mma = any(re.search(rf"gemv_mma_kernel<\d+, {n}, false, ", x) for x in names)
    assert on_mma == mma_expected("gemm", n, m, k, L, swapped=False), names
    assert_matches(out, ref_gemm(a, b), f"gemm M={m} N={n} K={k} L={L} {layout} on cuda")


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", ["gemm", "dual"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("n,k,L", [(4096, 16384, None), (4096, 16384 + 128, None), (2048, 7168, None),
                                   (4096, 8192, 2), (8200, 8192, None), (3000, 4096, None), (24, 16384, 264)])
def test_four_vectors_two_steps_per_item(gen, op, layout, n, k, L):
    """The gemm or dual of four activation rows on the integer-mma kernel copies two steps per
    item where its warps' shares are long (csrc/cuda/gemv_mma.cuh, mma_cpl), else one: the
    kernel's fifth template argument (the sixth: x not quantized in it), and the exact result."""
    if not mma_expected(op, 4, n, k):
        pytest.skip("another kernel is forced (NVFP4_FORCE_KERNEL)")
    cpl = mma_cpl(op, 4, n, k, L)
    a, b1 = gemm_problem(L, 4, n, k, gen, "cuda", (layout, layout))
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout=layout)
    out = poisoned(((L,) if L else ()) + (4, n), "cuda")
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    _, names = launched(call)
    dual = "true" if op == "dual" else "false"
    assert any(re.search(rf"gemv_mma_kernel<\d+, 4, {dual}, (true|false), {cpl}, false>", x) for x in names), names
    assert_matches(out, ref, f"{op} M=4 N={n} K={k} L={L} {layout} on cuda")


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("rows,k,chunks", [("wave", 4096, 2), ("wave", 256, 2), ("wave", 4160, 1), ("wave", 192, 1),
                                           ("few", 4096, 1)])
def test_gemv_chunks_per_lane(gen, layout, rows, k, chunks):
    """A GEMV of one vector streams two 16-byte chunks per lane and step where K % 128 == 0 and
    there is a row for every warp of a full wave (4 CTAs of 8 warps per multiprocessor), one where
    K % 128 == 64 or rows are few (csrc/cuda/gemv_dp4a.cu, launch_shape): the kernel's CPL template
    argument (then SPLIT and QX: 0, x not quantized in it), and the result."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    m = 32 * sms + 3 if rows == "wave" else 500
    a, b = gemv_problem(None, m, k, gen, "cuda", (layout, "linear"))
    out = poisoned((m,), "cuda")
    _, names = launched(lambda: nk.gemv(a.data, b.data, a.sf, b.sf, out=out))
    kernel = rf"gemv_dp4a_kernel<\d+, \d+, 1, false, {chunks}, (true|false), 0>"
    assert any(re.search(kernel, n) for n in names), names
    assert_matches(out, ref_gemv(a, b), f"gemv M={m} K={k} {layout} on cuda")


# A GEMV of fewer row sets than a wave has warps (a set per warp) plans its grid by the busiest
# SM's load (csrc/cuda/gemv.cuh, gemv_launch): each set may be split along K over s warps of a CTA
# (GemvDeal; the kernel's SPLIT variant), load (CTAs per SM) x (steps per warp + 2); unsplit
# on every SM it may take k CTAs per SM, load (CTAs per SM) x (a CTA's sets x steps + 2 x 8).
# (op, L, M, N, K, linear, blocked), each (grid, split) on a GPU of 132 multiprocessors:
# - 7 rows of 16384 (16 steps of 32 lanes): over 8 warps, a row per CTA;
# - 256 rows of 16384: over 4 (128 CTAs: load 6; over 8, 256 CTAs: 2 x 4);
# - 2 x 129 rows of 4096 (4 steps): over 2, 4 rows per CTA;
# - 300 and 1000 rows of 7168 (7 steps: only 1 per warp over 7): not split;
# - 1100 rows of 4096 (4 steps): 138 CTAs (2 x (8 x 4 + 16)) -> 264 (2 x (5 x 4 + 16));
# - 1500 rows of 8192 (188 CTAs: 2 x 10): over 2 (375 CTAs: 3 x 6);
# - 3000 rows of 16384: with blocked scales 768 row quads of 64 steps, over 4 (96 -> 384 CTAs:
#   66 -> 3 x 18); with linear scales they fill a wave unsplit;
# - 4300 rows of 8192, blocked: 1088 quads of 16 steps (two chunks per lane), 136 CTAs (2 x 18)
#   -> over 2, 272 (3 x 10); linear: a wave unsplit;
# - 7168 rows of 16384, blocked: 1792 quads of 32 steps, 224 CTAs -> 264 unsplit (over 2, 448
#   CTAs, no lighter: 2 x 34 against 4 x 18); linear: a wave;
# - the dual of one row through the GEMV: 1100 rows of B1 and B2 (550 sets of 16 steps; blocked:
#   576 in whole 128-row atoms), 69 CTAs, over 4 warps; 3072 rows (1536 sets of 16 steps), 192
#   CTAs (2 x 18) -> 384 (3 x 10); 4096 rows of 7168 (28 steps), 256 CTAs (2 x 30), unchanged.
SPLIT_CASES = [("gemv", None, 7, 1, 16384, (7, True), (7, True)),
               ("gemv", None, 256, 1, 16384, (128, True), (128, True)),
               ("gemv", 2, 129, 1, 4096, (33, True), (33, True)),
               ("gemv", None, 300, 1, 7168, (38, False), (38, False)),
               ("gemv", None, 1000, 1, 7168, (125, False), (125, False)),
               ("gemv", None, 1100, 1, 4096, (264, False), (264, False)),
               ("gemv", None, 1500, 1, 8192, (375, True), (375, True)),
               ("gemv", None, 3000, 1, 16384, (528, False), (384, True)),
               ("gemv", None, 4300, 1, 8192, (528, False), (272, True)),
               ("gemv", None, 7168, 1, 16384, (528, False), (264, False)),
               ("dual", None, 1, 1100, 4096, (275, True), (288, True)),
               ("dual", None, 1, 3072, 4096, (384, True), (384, True)),
               ("dual", None, 1, 4096, 7168, (256, False), (256, False))]


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("op,L,m,n,k,linear,blocked", SPLIT_CASES)
def test_gemv_split_rows(gen, layout, op, L, m, n, k, linear, blocked):
    """The grid and kernel variant a GEMV launch takes (from the profiler), and its result. A GEMV
    of K = 131072 (1 CTA per multiprocessor fits) runs first: a launch plans with the occupancy at
    its own shared-memory size, not at the largest its kernel was opened for."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the grids asserted here are those of a GPU of 132 multiprocessors")
    for lay in ("linear", "blocked"):
        a, b = gemv_problem(None, 5, 131072, gen, "cuda", (lay, "linear"))
        nk.gemv(a.data, b.data, a.sf, b.sf)
    grid, split = linear if layout == "linear" else blocked
    if op == "gemv":
        a, b = gemv_problem(L, m, k, gen, "cuda", (layout, "linear"))
        out = poisoned((*([L] if L else []), m), "cuda")
        call = lambda: nk.gemv(a.data, b.data, a.sf, b.sf, out=out)  # noqa: E731
        ref = ref_gemv(a, b)
    else:
        a, b1 = gemm_problem(L, m, n, k, gen, "cuda", ("linear", layout))
        b2 = random_operand(L, n, k, gen=gen, device="cuda", layout=layout)
        out = poisoned((*([L] if L else []), m, n), "cuda")
        call = lambda: nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=out)  # noqa: E731
        ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    # the SPLIT template argument: gemv_dp4a_kernel<SFA, LPR, NV, DUAL, CPL, SPLIT, QX>
    grids = [(g, bool(re.search(r"gemv_dp4a_kernel<(?:\w+, ){5}true,", name))) for name, g in launched_grids(call)
             if is_gemv(name)]
    assert grids == [((grid, L or 1, 1), split)], grids
    assert_matches(out, ref, f"{op} L={L} M={m} N={n} K={k} {layout} on cuda")


@routing
@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90): x quantized in the GEMV")
@pytest.mark.parametrize("n,k,dual,threads", [(6144, 4096, False, 512), (14336, 4096, True, 512),
                                              (4096, 24576, False, 512), (18944, 3584, True, 768),
                                              (4096, 25600, False, 768), (34048, 64, False, 768),
                                              (28672, 1024, True, 1024), (128, 36864 + 128, False, 1024)])
def test_by_tile_gemv_quantizing_ctas(gen, n, k, dual, threads):
    """One activation row on weights laid out by tile, x quantized in the dp4a GEMV: CTAs of the fewest of 512, 768
    and 1024 threads where every warp of one CTA a multiprocessor has at most one row set (16 rows, 8 of a dual)
    and a thread at most 3 blocks of x: 512 to K = 24576 and 2112 sets; 768 for Qwen2.5-7B gate_up (2368 dual
    sets), K = 25600 and 2128 sets; 1024 for 3584 dual sets and K past 36864. The kernel's last template
    argument, and the exact result."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the choice asserted here is that of a GPU of 132 multiprocessors")
    b1, b2 = (random_operand(None, n, k, gen=gen, device="cuda") for _ in range(2))
    (t1, ts1), (t2, ts2) = (nk.layouts.to_expert_tiles(b.data[None], b.sf[None]) for b in (b1, b2))
    x = activations((1, k), torch.bfloat16, gen, "cuda")
    g = global_scale_of(x)
    if dual:
        out, names = launched(lambda: nk.dual_gemm_w4a4(x, t1, t2, ts1, ts2, global_scale=g, alpha2=-2.0))
        want = reference.dual_gemm_w4a4(x, b1.data, b2.data, b1.sf, b2.sf, g, None, -2.0)
    else:
        out, names = launched(lambda: nk.gemm_w4a4(x, t1, ts1, global_scale=g, alpha=-0.75))
        want = reference.gemm_w4a4(x, b1.data, b1.sf, g, -0.75)
    got = [re.search(r"gemv_dp4a_kernel<.*, (\d+)>", name) for name in names if is_gemv(name)]
    assert [m[1] for m in got if m] == [str(threads)], names
    assert_matches(out, want, f"{'dual' if dual else 'gemm'} 1 x {n} x {k} by tile")


@routing
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("m,n,b2_layout,gemv", [(1, 300, "blocked", True), (4, 129, "blocked", True),
                                                (5, 300, "blocked", None), (8, 300, "blocked", None),
                                                (9, 300, "blocked", False), (2, 4, "blocked", True),
                                                (2, 300, "linear", False), (200, 4, "blocked", False)])
def test_few_rows_dual_take_the_gemv(gen, m, n, b2_layout, gemv):
    """A dual gemm with M of 4 at most (5 to 8 where the integer-mma kernel's rule takes it, None:
    mma_expected) streams B1 and B2 through the GEMV kernel when their scales share a layout; a dual
    of M = 9 or of N <= 4 does not take it."""
    if gemv is None:
        gemv = mma_expected("dual", m, n, 1024)
    a, b1 = gemm_problem(None, m, n, 1024, gen, "cuda", ("linear", "blocked"))
    b2 = random_operand(None, n, 1024, gen=gen, device="cuda", layout=b2_layout)
    out, names = launched(lambda: nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf))
    assert any(is_gemv(n) for n in names) == gemv, names
    assert_matches(out, reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf), f"dual M={m} N={n}")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
def test_split_k_deterministic(gen):
    """Split-K sums its partials in a fixed order: bitwise repeatable."""
    a, b = gemm_problem(None, 128, 256, 4096, gen, "cuda")
    first = nk.gemm(a.data, b.data, a.sf, b.sf)
    for _ in range(5):
        assert torch.equal(nk.gemm(a.data, b.data, a.sf, b.sf).view(torch.int16), first.view(torch.int16))


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,m,n,k", [("gemm", 128, 7168, 16384), ("dual", 256, 2048, 14336), ("gemm", 512, 1024, 8192)])
def test_long_k_ring_reuse(gen, op, m, n, k):
    """16 to 64 K steps per CTA, so each raw ring slot is refilled several
    times. A slot is refilled by producer threads other than the ones that
    decode its activation rows: a variant that released slots one step earlier
    gave wrong sums on 128 x 7168 x 16384 in bench_gemm's check while the short
    shapes above passed. A race need not show in any
    one run; three fresh inputs each."""
    for _ in range(3):
        a, b1 = gemm_problem(None, m, n, k, gen, "cuda", ("blocked", "blocked"))
        out = poisoned((m, n), "cuda")
        b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked") if op == "dual" else None
        call, ref = gemm_or_dual(op, a, b1, b2, out)
        run("cuda", call)
        assert_matches(out, ref, f"{op} M={m} N={n} K={k} on cuda")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,L,m,n,k", [("gemm", 2, 1000, 4100, 256), ("dual", 2, 1000, 2100, 256),
                                         ("gemm", None, 40, 70000, 128), ("gemm", None, 20, 70000, 128),
                                         ("dual", None, 33, 35000, 192)])
def test_multi_wave_tiles(gen, op, L, m, n, k):
    """More tiles than multiprocessors (272-274 here), without split-K (K too
    short for it): CTAs in several waves, tails in M and N, batches, the 128-,
    64- and 32-row activation tiles."""
    a, b1 = gemm_problem(L, m, n, k, gen, "cuda", layouts_for(m, n, k))
    out = poisoned(((L,) if L else ()) + (m, n), "cuda")
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout=layouts_for(m, n, k)[1]) if op == "dual" else None
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    run("cuda", call)
    assert_matches(out, ref, f"{op} L={L} M={m} N={n} K={k} on cuda")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,n", [("gemm", 1200), ("dual", 600)])
def test_split_two_epilogue(gen, op, n):
    """40 tiles of 8 K steps (M = 1000: 8 activation tiles, the last of 104
    rows; 5 weight tiles, the last partly past N): split-K over clusters of 2,
    where the gemm's producer warps join the consumers in the epilogue's sums
    and stores (csrc/cuda/matmul_sm90.cu, store_share). Every output written,
    once, right."""
    m, k = 1000, 512
    a, b1 = gemm_problem(None, m, n, k, gen, "cuda", ("blocked", "blocked"))
    b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked") if op == "dual" else None
    out = poisoned((m, n), "cuda")
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    grids = [g for name, g in launched_grids(call) if tc_kernel(op, 128, "false") in name]
    assert grids == [(80, 1, 1)], grids  # 40 tiles x split 2
    assert_matches(out, ref, f"{op} M={m} N={n} K={k} on cuda")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,L", [("gemm", None), ("dual", 2)])
def test_stream_k(gen, op, L):
    """Whole 128-row tiles for about 3/4 of the multiprocessors, each with
    256 K steps: the launch runs stream-K (CTAs share tiles, partials through
    the workspace; csrc/cuda/matmul_sm90.cu). Tails in M and N; dual batched.
    Twice, each time on a workspace the caching allocator most likely hands
    back from a block of its size just filled with 0xFF: stale bytes must not
    pass for a raised flag (there is no memset of the flags per launch)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cols = 256 if op == "gemm" else 128  # output columns per tile
    m, k = (200, 16384) if L is None else (100, 16384)  # 2 or 1 row tiles per batch
    n = 3 * sms // 8 * cols - 77  # tiles: 3/4 of the SMs, the last column tile partial
    a, b1 = gemm_problem(L, m, n, k, gen, "cuda", ("blocked", "linear"))
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout="blocked")
    ws_bytes = sms * (256 * 128 * 4 + 8)  # a partial tile and a flag per CTA (sk_workspace_bytes)
    for _ in range(2):
        stale = torch.full((ws_bytes,), 0xFF, dtype=torch.uint8, device="cuda")
        del stale  # its block goes back to the allocator's pool, bytes and all
        out = poisoned(((L,) if L else ()) + (m, n), "cuda")
        call, ref = gemm_or_dual(op, a, b1, b2, out)
        run("cuda", call, tc_kernel(op, 128, "true"))
        assert_matches(out, ref, f"{op} L={L} M={m} N={n} K={k} on cuda (stream-K)")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,L,m,n,k", [("gemm", 2, 1000, 16381, 4096), ("dual", None, 500, 4000, 8192)])
def test_predecoded(gen, op, L, m, n, k):
    """A 128-row launch with a workspace and >= 32 K steps a CTA (64 and 128
    here) pre-decodes its activations (act_predecode_kernel writes every fp16
    tile to the workspace, zeros in the rows past M; the main kernel brings a
    tile in per K step by one bulk copy; matmul_sm90.cu, Predecoded). Tails in
    M and N, batched, both scale layouts. (test_kernels runs this file with
    the pre-pass forced off, wgmma:decode: every 128-row case both ways.)"""
    pre = os.environ.get("NVFP4_FORCE_KERNEL") != "wgmma:decode"
    a, b1 = gemm_problem(L, m, n, k, gen, "cuda", ("blocked", "linear"))
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout="linear")
    out = poisoned(((L,) if L else ()) + (m, n), "cuda")
    call, ref = gemm_or_dual(op, a, b1, b2, out)
    _, names = launched(call)
    main = [re.search(r"matmul_sm90_kernel<\w+, \d+, \w+, (true|false)", n_) for n_ in names]
    main = [m_[1] for m_ in main if m_]  # the fourth template argument: PRE
    assert main == (["true"] if pre else ["false"]), names
    assert any("act_predecode_kernel" in n_ for n_ in names) == pre, names
    assert_matches(out, ref, f"{op} L={L} M={m} N={n} K={k} on cuda (pre-decoded: {pre})")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
def test_group_predecoded(gen):
    """Eight groups of 58 to 354 rows x 7168 x 4096: 26 row tiles x 28 column
    tiles for 132 SMs. Counted in K steps alone, stream-K looked cheaper than
    whole tiles; counted with the pre-pass that whole tiles get (9% off their
    steps), whole tiles pre-decoded win (choose_cover; 7% faster on an H100).
    On a 132-SM GPU the launch must be that: the pre-pass and the main kernel
    without stream-K. Every GPU: right against the reference, into poisoned
    outputs."""
    pre = os.environ.get("NVFP4_FORCE_KERNEL") != "wgmma:decode"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sizes = [231, 58, 321, 354, 194, 88, 191, 319]
    probs = [gemm_problem(None, m, 7168, 4096, gen, "cuda", ("blocked", "linear")) for m in sizes]
    outs = [poisoned((m, 7168), "cuda") for m in sizes]
    _, names = launched(lambda: nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs],
                                              [a.sf for a, _ in probs], [b.sf for _, b in probs], outs=outs))
    if sms == 132 and pre:
        assert any("act_predecode_kernel" in n_ for n_ in names), names
        assert any("matmul_sm90_kernel<false, 128, false, true," in n_ for n_ in names), names  # not stream-K, PRE
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm group {g} of {sizes} x 7168 x 4096 on cuda")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
def test_stream_k_with_few_sms(gen):
    """Stream-K is planned for one CTA per SM. Here another kernel holds all SMs
    but one for seconds, so the launch's CTAs run one at a time: the launch
    (test_stream_k's gemm shape, which it asserts runs stream-K) must still
    finish while that kernel runs, and be right. It can only if a tile's owner
    waits on CTAs that started before it (matmul_sm90.cu, StreamK); an owner
    waiting on a later CTA holds the one SM that CTA needs until the others
    come back. (With two free SMs that older order also got through this
    shape: each tile spans at most two ranges, so each owner waited on the
    next CTA only.)"""
    from sm_hog import SmHog

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    m, n, k = 200, 3 * sms // 8 * 256 - 77, 16384
    a, b = gemm_problem(None, m, n, k, gen, "cuda", ("blocked", "linear"))
    out = poisoned((m, n), "cuda")
    nk.gemm(a.data, b.data, a.sf, b.sf, out=out)  # warm-up: the allocator holds the workspace's size
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    hog, side = SmHog(), torch.cuda.Stream()
    hog_end, sk_end = torch.cuda.Event(), torch.cuda.Event()
    hog.launch(sms - 1, 3.0, side)
    hog_end.record(side)
    time.sleep(0.05)  # the hog's CTAs hold their SMs before the gemm is queued
    nk.gemm(a.data, b.data, a.sf, b.sf, out=out)
    sk_end.record()
    t0 = time.monotonic()
    while not sk_end.query() and time.monotonic() - t0 < 2.0:
        time.sleep(0.001)
    finished, hog_running = sk_end.query(), not hog_end.query()
    waited = time.monotonic() - t0
    torch.cuda.synchronize()
    assert finished and hog_running, (
        f"stream-K gemm on 1 free SM: finished {finished} after {waited:.3f} s, other kernel still running "
        f"{hog_running}")
    assert_matches(out, ref_gemm(a, b), f"gemm M={m} N={n} K={k} (stream-K on 1 SM)")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("short", [False, True])
def test_stream_k_group(gen, short):
    """A grouped launch as stream-K: groups of different M and N (tails), one
    K, 4/3 of the multiprocessors in whole tiles (the competition's 8-group
    4096 x 7168 shape has 176 tiles for 132 SMs); an empty group between.
    The last row tiles of the groups hold 80, 48 and 2 rows: wgmma of N = 128,
    64 and 32 (stream-K takes no N = 96; test_narrow_last_tile). `short`:
    groups of 1, 33 and 64 rows and one of 130, so that nearly every tile is
    short and the ranges of equal cost (sk_ranges) are far from equal K steps."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    k = 7168
    sizes = [(80, 4096 - 50), (0, 512), (176, 4096), (130, (4 * sms // 3 - 16 - 32) // 2 * 256 - 3)]
    if short:
        sizes = [(1, 4096 - 50), (33, 4096), (0, 512), (64, 4096 + 7), (130, (4 * sms // 3 - 16 - 16 - 17) // 2 * 256 - 3)]
    probs = [gemm_problem(None, m, n, k, gen, "cuda", ("linear", "blocked")) for m, n in sizes]
    outs = [poisoned((m, n), "cuda") for m, n in sizes]
    run("cuda", lambda: nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs],
                                      [a.sf for a, _ in probs], [b.sf for _, b in probs], outs=outs),
        "matmul_sm90_kernel<false, 128, true,")
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm group {g} of {sizes} on cuda (stream-K)")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
def test_multi_wave_group(gen):
    """A grouped launch of 171 tiles (K too short for split-K): two waves of
    CTAs, groups of different M, N and K."""
    sizes = [(600, 5000, 128), (77, 5000, 64), (260, 4100, 192)]
    probs = [gemm_problem(None, m, n, k, gen, "cuda", layouts_for(m, n, k)) for m, n, k in sizes]
    outs = [poisoned((m, n), "cuda") for m, n, _ in sizes]
    run("cuda", lambda: nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs],
                                      [a.sf for a, _ in probs], [b.sf for _, b in probs], outs=outs))
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm group {g} of {sizes} on cuda")


@pytest.mark.skipif(not IS_HOPPER, reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("op,L,n,x_dtype", [("gemm", 2, 1100, None), ("dual", None, 550, None),
                                              ("gemm", None, 1100, torch.bfloat16)])
def test_row_tile_bands(gen, op, L, n, x_dtype):
    """37 row tiles (M = 4686: the last of 78 rows) x 5 column tiles (the last
    partly past N), K too short for split-K: from 32 row tiles a launch runs in
    bands of 8 row tiles (matmul_sm90.cu, Dense tile order), the last band of
    5. Every output written, once, right: codes, a batch of 2, the dual, and
    bf16 activations (W4A16)."""
    m, k = 4686, 128
    a, b1 = gemm_problem(L, m, n, k, gen, "cuda", layouts_for(m, n, k))
    b2 = random_operand(L, n, k, gen=gen, device="cuda", layout="linear") if op == "dual" else None
    out = poisoned(((L,) if L else ()) + (m, n), "cuda")
    slack = None
    if x_dtype is None:
        call, ref = gemm_or_dual(op, a, b1, b2, out)
    else:
        x = (torch.randn(m, k, generator=gen) * 4).to(x_dtype).to("cuda")
        call = lambda: nk.gemm_w4a16(x, b1.data, b1.sf, out=out)  # noqa: E731
        ref = reference.gemm_w4a16(x, b1.data, b1.sf, out_dtype=torch.float16)
        slack = w4a16_slack(x, b1.data, b1.sf)
    if not FORCED:
        grids = [g for name, g in launched_grids(call) if "matmul_sm90_kernel" in name]
        assert grids == [(37 * 5 * (L or 1), 1, 1)], grids  # whole tiles, split 1
    call()
    assert_matches(out, ref, f"{op} L={L} M={m} N={n} K={k} x {x_dtype} on cuda", slack=slack)
