"""Every op against the exact reference, on every device this machine has.

Inputs: all 16 e2m1 codes, scales over many binades incl. subnormals, zeros and
negative scales (nvfp4_kernels.testing); outputs poisoned with NaN first; odd
shapes, tails, both scale layouts, batched and unbatched, the task.yml test
shapes, out= (strided too), uint8 views, alpha, NaN scales, empty problems.
"""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.gpumode import tasks
from nvfp4_kernels.testing import random_operand, vector_operand
from conftest import assert_matches
from helpers import gemm_problem, gemv_problem, layouts_for, poisoned, ref_gemm, ref_gemv

ODD = (1, 7, 129, 200)
ODD_K = (16, 48, 1040)


@pytest.mark.parametrize("L", [None, 3])
@pytest.mark.parametrize("k", ODD_K)
@pytest.mark.parametrize("n", ODD)
@pytest.mark.parametrize("m", ODD)
def test_gemm_odd_shapes(device, gen, m, n, k, L):
    lay = layouts_for(m, n, k)
    a, b = gemm_problem(L, m, n, k, gen, device, lay)
    out = poisoned((*([L] if L else []), m, n), device)
    nk.gemm(a.data, b.data, a.sf, b.sf, out=out)
    assert_matches(out, ref_gemm(a, b), f"gemm L={L} M={m} N={n} K={k} layouts={lay} on {device}")


@pytest.mark.parametrize("L", [None, 1, 3])
@pytest.mark.parametrize("k", ODD_K + (4096,))
@pytest.mark.parametrize("m", ODD + (1000,))
def test_gemv_odd_shapes(device, gen, m, k, L):
    lay = layouts_for(m, k, L or 0)
    a, b = gemv_problem(L, m, k, gen, device, lay)
    out = poisoned((*([L] if L else []), m), device)
    nk.gemv(a.data, b.data, a.sf, b.sf, out=out)
    assert_matches(out, ref_gemv(a, b), f"gemv L={L} M={m} K={k} layouts={lay} on {device}")


@pytest.mark.parametrize("L,m,k", [(None, 2177, 256), (3, 1500, 512)])
def test_gemv_row_quads(device, gen, L, m, k):
    """Blocked scales with enough rows for half a wave of warps (>= 8 x 132 / 2
    row sets on an H200): the GEMV takes rows r, r+32, r+64, r+96 of an atom
    together (csrc/cuda/gemv_dp4a.cu, RowSets). M is not a multiple of 128."""
    a, b = gemv_problem(L, m, k, gen, device, ("blocked", "linear"))
    out = poisoned((*([L] if L else []), m), device)
    nk.gemv(a.data, b.data, a.sf, b.sf, out=out)
    assert_matches(out, ref_gemv(a, b), f"gemv L={L} M={m} K={k} blocked on {device}")


@pytest.mark.parametrize("layouts", [("linear", "linear"), ("blocked", "blocked")])
@pytest.mark.parametrize("L,m,k", [(None, 7, 16384), (3, 50, 7168), (2, 300, 4096), (1100, 1, 16384),
                                   (None, 5, 131072), (None, 5001, 1024), (2, 8450, 2048), (None, 16390, 2048),
                                   (None, 5001, 4160), (3, 129, 192)])
def test_gemv_long_rows_many_batches(device, gen, layouts, L, m, k):
    """GEMV shapes at the edges of how the GEMV kernels (csrc/cuda/gemv.cuh) deal their work: few
    rows with long K (7 rows of 16384: most warps idle), rows that do not fill a
    row set or a 128-row atom, many batches of a single row (1100 x 1), a K
    whose vector nearly fills shared memory (131072: 160 KB decoded), and rows
    taken in pairs by a full wave of CTAs dealt one set each (5001 rows, linear
    scales, on a GPU of 80 to 160 SMs), and short rows that take fewer lanes
    each (2 x 8450 x 2048: 8 lanes, 16390 x 2048: 16, linear, on 132 SMs),
    with a partial last row set. Where K % 128 == 0 and rows fill a wave
    (5001, 2 x 8450, 16390 rows on 132 SMs) a lane streams two 16-byte chunks
    per step; with K % 128 == 64 (the last two: 4160, 192) one."""
    a, b = gemv_problem(L, m, k, gen, device, layouts)
    out = poisoned((*([L] if L else []), m), device)
    nk.gemv(a.data, b.data, a.sf, b.sf, out=out)
    assert_matches(out, ref_gemv(a, b), f"gemv L={L} M={m} K={k} layouts={layouts} on {device}")


# (L, M, N, K) with M or N <= 4: the GEMV kernel with that many vectors (csrc/cuda/plan.cu;
# M <= 4 with the roles swapped), 2, 4 and 8 lanes per row (K = 64, 128, >= 256), odd counts
# of rows, batches, N = 1; the last: 4 vectors of K = 65536 do not fit in shared memory, so
# another kernel takes it.
FEW_ROWS = [(None, 2, 7, 64), (3, 3, 129, 128), (None, 4, 300, 1024), (2, 2, 1, 512), (None, 4, 513, 16384),
            (2, 129, 3, 256), (None, 300, 2, 2048), (None, 1000, 4, 128), (3, 4, 4, 192), (None, 4, 33, 65536)]


@pytest.mark.parametrize("layouts", [("linear", "linear"), ("blocked", "blocked"), ("linear", "blocked")])
@pytest.mark.parametrize("L,m,n,k", FEW_ROWS)
def test_gemm_few_rows(device, gen, layouts, L, m, n, k):
    """Outputs in a view with padded rows: vector j's results are a row (swapped) or a column apart."""
    a, b = gemm_problem(L, m, n, k, gen, device, layouts)
    big = poisoned((*([L] if L else []), m, n + 3), device)
    nk.gemm(a.data, b.data, a.sf, b.sf, out=big[..., :n])
    assert_matches(big[..., :n], ref_gemm(a, b), f"gemm L={L} M={m} N={n} K={k} layouts={layouts} on {device}")
    assert torch.isnan(big[..., n:]).all(), "gemm wrote outside its out view"


# (L, M, N, K) of a dual gemm with M <= 4: on a GPU the GEMV kernel with M vectors and B2's rows on
# the other half of each warp (csrc/cuda/gemv_dp4a.cu, DUAL): 2, 4 and 8 lanes per row (K = 64, 128, >= 256),
# rows that do not fill a row set or a 128-row scale atom, batches, N = 1; the last does not fit in
# shared memory (the tensor cores take it).
FEW_ROWS_DUAL = [(None, 1, 7, 64), (3, 3, 129, 128), (None, 4, 300, 1024), (2, 2, 1, 512), (None, 1, 2000, 4096),
                 (None, 4, 513, 16384), (2, 1, 130, 2048), (None, 3, 33, 65536)]


# layouts of A, B1, B2: the last pair's B1 and B2 differ, which the GEMV does not take
@pytest.mark.parametrize("layouts", [("linear",) * 3, ("blocked",) * 3, ("linear", "blocked", "blocked"),
                                     ("blocked", "linear", "blocked")])
@pytest.mark.parametrize("L,m,n,k", FEW_ROWS_DUAL)
def test_dual_gemm_few_rows(device, gen, layouts, L, m, n, k):
    """Outputs in a view with padded rows."""
    a, b1 = gemm_problem(L, m, n, k, gen, device, layouts[:2])
    b2 = random_operand(L, n, k, gen=gen, device=device, layout=layouts[2])
    big = poisoned((*([L] if L else []), m, n + 3), device)
    nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=big[..., :n])
    ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    assert_matches(big[..., :n], ref, f"dual_gemm L={L} M={m} N={n} K={k} layouts={layouts} on {device}")
    assert torch.isnan(big[..., n:]).all(), "dual_gemm wrote outside its out view"


@pytest.mark.parametrize("L", [None, 2])
@pytest.mark.parametrize("k", (16, 1040))
@pytest.mark.parametrize("n", ODD)
@pytest.mark.parametrize("m", ODD)
def test_dual_gemm_odd_shapes(device, gen, m, n, k, L):
    lay = layouts_for(m, n, k)
    a, b1 = gemm_problem(L, m, n, k, gen, device, lay)
    b2 = random_operand(L, n, k, gen=gen, device=device, layout=lay[0])
    out = poisoned((*([L] if L else []), m, n), device)
    nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf, out=out)
    ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    assert_matches(out, ref, f"dual_gemm L={L} M={m} N={n} K={k} layouts={lay} on {device}")


GROUPS = [
    [(1, 1, 16)],
    [(1, 7, 16), (129, 1, 48), (7, 200, 1040)],
    [(40, 128, 256), (384, 96, 512), (1, 64, 16), (72, 129, 1040), (200, 7, 48)],
    [(m, 33, 64) for m in range(1, 40)],  # more groups than one launch takes
]


@pytest.mark.parametrize("sizes", GROUPS, ids=lambda s: f"{len(s)}groups")
def test_group_gemm(device, gen, sizes):
    probs = [gemm_problem(None, m, n, k, gen, device, layouts_for(m, n, k)) for m, n, k in sizes]
    outs = [poisoned((m, n), device) for m, n, _ in sizes]
    res = nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs], [a.sf for a, _ in probs],
                        [b.sf for _, b in probs], outs=outs)
    assert all(r is o for r, o in zip(res, outs))
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm group {g} of {sizes} on {device}")
    res = nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs], [a.sf for a, _ in probs],
                        [b.sf for _, b in probs])
    for g, ((a, b), out) in enumerate(zip(probs, res)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm (allocating) group {g} on {device}")


# ---- the competition's test shapes -------------------------------------------


def _task_ids(problem):
    return [f"{problem}{i}" for i in range(len(tasks.shapes(problem)["tests"]))]


@pytest.mark.parametrize("shape", tasks.shapes("gemv")["tests"], ids=_task_ids("gemv"))
def test_gemv_task_shapes(device, gen, shape):
    for lay in (("linear", "linear"), ("blocked", "blocked")):
        a, b = gemv_problem(shape["l"], shape["m"], shape["k"], gen, device, lay)
        out = nk.gemv(a.data, b.data, a.sf, b.sf)
        assert_matches(out, ref_gemv(a, b), f"gemv {shape} {lay} on {device}")


@pytest.mark.parametrize("shape", tasks.shapes("gemm")["tests"], ids=_task_ids("gemm"))
def test_gemm_task_shapes(device, gen, shape):
    lay = layouts_for(shape["m"], shape["n"], shape["k"])
    a, b = gemm_problem(shape["l"], shape["m"], shape["n"], shape["k"], gen, device, lay)
    out = nk.gemm(a.data, b.data, a.sf, b.sf)
    assert_matches(out, ref_gemm(a, b), f"gemm {shape} {lay} on {device}")


@pytest.mark.parametrize("shape", tasks.shapes("dual_gemm")["tests"], ids=_task_ids("dual_gemm"))
def test_dual_gemm_task_shapes(device, gen, shape):
    lay = layouts_for(shape["m"], shape["n"], shape["k"])
    a, b1 = gemm_problem(shape["l"], shape["m"], shape["n"], shape["k"], gen, device, lay)
    b2 = random_operand(shape["l"], shape["n"], shape["k"], gen=gen, device=device, layout=lay[1])
    out = nk.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    ref = reference.dual_gemm(a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    assert_matches(out, ref, f"dual_gemm {shape} {lay} on {device}")


@pytest.mark.parametrize("shape", tasks.shapes("group_gemm")["tests"], ids=_task_ids("group_gemm"))
def test_group_gemm_task_shapes(device, gen, shape):
    probs = [gemm_problem(None, m, n, k, gen, device, ("blocked", "blocked"))
             for m, n, k in zip(shape["m"], shape["n"], shape["k"])]
    outs = nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs], [a.sf for a, _ in probs],
                         [b.sf for _, b in probs])
    for g, ((a, b), out) in enumerate(zip(probs, outs)):
        assert_matches(out, ref_gemm(a, b), f"group_gemm {shape} group {g} on {device}")


# ---- variants ----------------------------------------------------------------


def test_uint8_views_and_mixed_dtypes(device, gen):
    a, b = gemm_problem(2, 65, 33, 96, gen, device, ("blocked", "linear"))
    out = nk.gemm(a.data.view(torch.uint8), b.data, a.sf, b.sf.view(torch.uint8))
    assert_matches(out, ref_gemm(a, b), f"gemm with uint8 views on {device}")


def test_out_strided(device, gen):
    """out= views with padded rows; gemv's out with a row stride of 2."""
    a, b = gemm_problem(3, 37, 45, 80, gen, device)
    big = poisoned((3, 37, 64), device)
    nk.gemm(a.data, b.data, a.sf, b.sf, out=big[:, :, :45])
    assert_matches(big[:, :, :45], ref_gemm(a, b), f"gemm strided out on {device}")
    assert torch.isnan(big[:, :, 45:]).all(), "gemm wrote outside its out view"
    big_v = poisoned((3, 37, 2), device)
    a2, v = gemv_problem(3, 37, 80, gen, device)
    nk.gemv(a2.data, v.data, a2.sf, v.sf, out=big_v[:, :, 1])
    assert_matches(big_v[:, :, 1], ref_gemv(a2, v), f"gemv strided out on {device}")
    assert torch.isnan(big_v[:, :, 0]).all(), "gemv wrote outside its out view"


def test_misaligned_slices(device, gen):
    """Operands that start at odd byte offsets and rows of odd stride."""
    m, n, k = 33, 17, 96
    a_big, b_big = gemm_problem(2, m, n + 1, k + 16, gen, device)
    a = a_big.data.view(torch.uint8)[:, :, 1:1 + k // 2]  # odd offset, row stride k/2 + 8
    b = b_big.data.view(torch.uint8)[:, 1:, 3:3 + k // 2]
    sfa = random_operand(2, m, k, gen=gen, device=device).sf
    sfb_full = random_operand(2, n, k + 16, gen=gen, device=device).sf
    sfb = sfb_full[:, :, 1:]  # linear scales at an odd offset, odd row stride K/16 + 1
    out = nk.gemm(a, b, sfa, sfb)
    ref = reference.gemm(a, b, sfa, sfb)
    assert_matches(out, ref, f"gemm on misaligned slices on {device}")
    v = b_big.data.view(torch.uint8)[:, 0, 5:5 + k // 2]
    out = nk.gemv(a, v, sfa, sfb[:, 0])
    assert_matches(out, reference.gemv(a, v, sfa, sfb[:, 0]), f"gemv on misaligned slices on {device}")


@pytest.mark.parametrize("kind", ["float", "cpu_tensor", "device_tensor"])
def test_alpha(device, gen, kind):
    a, b = gemm_problem(2, 19, 21, 64, gen, device)
    a2, v = gemv_problem(2, 19, 64, gen, device)
    for value in (0.37, 2.0**-20, 2.0**6):
        alpha = {"float": value, "cpu_tensor": torch.tensor(value),
                 "device_tensor": torch.tensor(value, device=device)}[kind]
        assert_matches(nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha), ref_gemm(a, b, value),
                       f"gemm alpha={value} ({kind}) on {device}")
        assert_matches(nk.gemv(a2.data, v.data, a2.sf, v.sf, alpha=alpha), ref_gemv(a2, v, value),
                       f"gemv alpha={value} ({kind}) on {device}")


def test_extreme_scales(device, gen):
    """A's scales from the top binades (to 448), B's from the subnormals: products
    stay in range, every large and tiny scale code is decoded exactly."""
    for n in (1, 5):
        a = random_operand(2, 64, 48, gen=gen, device=device, max_exp=8)
        b = random_operand(2, n, 48, gen=gen, device=device, max_exp=-7)
        if n == 1:
            b = vector_operand(b)
            assert_matches(nk.gemv(a.data, b.data, a.sf, b.sf), ref_gemv(a, b), f"gemv extreme scales {device}")
        else:
            assert_matches(nk.gemm(a.data, b.data, a.sf, b.sf), ref_gemm(a, b), f"gemm extreme scales {device}")


def test_nan_scale_propagates(device, gen):
    a, b = gemm_problem(None, 9, 6, 64, gen, device)
    sfa = a.sf.view(torch.uint8).clone()
    sfa[3, 2] = 0x7F  # NaN: row 3 of the output is NaN
    sfb = b.sf.view(torch.uint8).clone()
    sfb[4, 0] = 0xFF  # -NaN: column 4
    out = nk.gemm(a.data, b.data, sfa, sfb)
    ref = reference.gemm(a.data, b.data, sfa, sfb)
    assert torch.isnan(ref[3]).all() and torch.isnan(ref[:, 4]).all() and not torch.isnan(ref[0, 0])
    assert_matches(out, ref, f"gemm NaN scales on {device}")
    v = b.data[1]
    vsf = sfa[3]  # a NaN among the vector's scales: every output NaN
    out = nk.gemv(a.data, v, a.sf, vsf)
    assert torch.isnan(out.float()).all()


def test_empty_problems(device, gen):
    a, b = gemm_problem(2, 0, 5, 32, gen, device)
    assert nk.gemm(a.data, b.data, a.sf, b.sf).shape == (2, 0, 5)
    a, b = gemm_problem(0, 4, 5, 32, gen, device)
    assert nk.gemm(a.data, b.data, a.sf, b.sf).shape == (0, 4, 5)


def test_deterministic(device, gen):
    a, b = gemm_problem(2, 130, 70, 1040, gen, device)
    first = nk.gemm(a.data, b.data, a.sf, b.sf)
    for _ in range(3):
        assert torch.equal(nk.gemm(a.data, b.data, a.sf, b.sf).view(torch.int16), first.view(torch.int16))
    a, v = gemv_problem(3, 1000, 4096, gen, device)
    first = nk.gemv(a.data, v.data, a.sf, v.sf)
    for _ in range(3):
        assert torch.equal(nk.gemv(a.data, v.data, a.sf, v.sf).view(torch.int16), first.view(torch.int16))
    a, b = gemm_problem(1, 70, 33, 96, gen, device)
    b2 = random_operand(1, 33, 96, gen=gen, device=device)
    first = nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
    firsts = nk.group_gemm([a.data[0], b.data[0]], [b.data[0], a.data[0]], [a.sf[0], b.sf[0]], [b.sf[0], a.sf[0]])
    for _ in range(3):
        again = nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
        assert torch.equal(again.view(torch.int16), first.view(torch.int16))
        agains = nk.group_gemm([a.data[0], b.data[0]], [b.data[0], a.data[0]], [a.sf[0], b.sf[0]],
                               [b.sf[0], a.sf[0]])
        assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(agains, firsts))
