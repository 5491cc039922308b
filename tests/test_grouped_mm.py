"""grouped_mm: rows grouped by expert (a mixture of experts), the group sizes on the device.

Exact against reference.grouped_mm on fresh full-range weights (every fp4 code, wide scales, NaN
and zero blocks) and 16-bit activations, on the CPU and on a GPU: empty experts, one expert taking
every row, rows past the last expert (left as they were), odd multiples of 16, both scale layouts,
plain and gated (W1 and W3 in one weight), per-expert alphas; capture once, replay with new
routings; bad arguments."""

import os

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand
from conftest import assert_matches, needs_cuda
from helpers import FORCED, poisoned, run_python, w4a16_slack, wgmma_built

DECODING = os.environ.get("NVFP4_FORCE_KERNEL") == "wgmma:decode"  # no pre-pass but for rows by token


def routing(sizes, device):
    """offs (int32 cumulative ends) of these group sizes."""
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)


def activations(t, k, dtype, gen, device):
    """x [T, K]: normal values over 2^-20 .. 2^10, some exact zeros."""
    x = torch.randn(t, k, generator=gen) * torch.exp2(torch.randint(-20, 10, (t, 1), generator=gen).float())
    x[torch.rand(t, k, generator=gen) < 0.05] = 0
    return x.to(dtype).to(device)


def slack(x, w, sf, offs, alphas, alphas2, gated):
    """helpers.w4a16_slack per expert's rows (what an fp32 sum of inexact products may be off by)."""
    n = w.shape[1] // 2 if gated else w.shape[1]
    out = torch.zeros(x.shape[0], n, dtype=torch.float64)
    start = 0
    for e, end in enumerate(int(v) for v in offs.cpu()):
        if end > start:
            a1 = 1.0 if alphas is None else float(alphas[e])
            xe, we, se = x[start:end].cpu(), w[e].cpu(), sf[e].cpu()
            if gated:
                h = n // 128 if sf.dim() == 6 else n
                a2 = 1.0 if alphas2 is None else float(alphas2[e])
                out[start:end] = w4a16_slack(xe, we[:n], se[:h], a1, we[n:], se[h:], a2)
            else:
                out[start:end] = w4a16_slack(xe, we, se, a1)
        start = end
    return out


CASES = [  # (group sizes, T, N, K, scale layout, gated)
    ([3, 0, 5, 1], 9, 48, 80, "linear", False),
    ([3, 0, 5, 1], 12, 48, 80, "linear", True),       # 3 rows past the last expert
    ([0, 0, 17, 0], 17, 16, 48, "blocked", False),    # one expert takes every row
    ([0, 0, 17, 0], 20, 128, 48, "blocked", True),
    ([1] * 7, 7, 144, 1040, "linear", True),          # decode: a row an expert
    # decode sizes with K % 128 == 0 (rows grouped by expert stay on the 16-row tiles where a dense M <= 8 takes
    # the GEMV kernel)
    ([1] * 7, 7, 144, 1024, "linear", True),
    ([2, 0, 5, 1, 0, 3], 14, 300, 2048, "blocked", False),  # 3 rows past the last expert
    ([0, 9, 0, 1], 10, 48, 128, "linear", True),
    ([i % 3 for i in range(70)], 70, 40, 256, "linear", True),
    ([40, 0, 0, 33, 70], 150, 96, 272, "linear", False),
    ([0, 0, 0], 5, 32, 64, "linear", False),          # no rows at all
    ([2, 5], 7, 300, 2048, "linear", False),          # long K over few tiles: CTAs share K on a GPU
    ([130, 3, 0, 60], 193, 128, 528, "blocked", True),  # 64-row tiles (K % 64 != 0: not wgmma)
    # under 16 rows an expert on average, busy experts among idle ones: 16-row tiles (an expert of more than 16 rows
    # in 32-row tiles: 17 rows in one, 33 in two)
    ([40, 0, 3, 1, 17, 0, 0, 2], 66, 96, 512, "linear", True),   # 3 rows past the last expert
    ([16, 17, 0, 33, 0], 66, 48, 256, "blocked", False),
    ([100, 1, 0, 0, 0, 0, 0, 2], 103, 64, 2048, "linear", False),  # long K over few tiles: CTAs share K
    ([0, 0, 0, 0, 0, 0, 0, 65], 65, 32, 128, "linear", True),      # one expert takes every row
    ([i % 4 for i in range(300)], 460, 16, 64, "linear", False),    # 300 experts: the offsets' scan in 2 rounds
    # 16 rows an expert or more, K % 64 == 0: the wgmma kernel's 128-row tiles on Hopper (plan.cu)
    ([130, 0, 70, 200], 410, 96, 256, "linear", False),  # 10 rows past the last expert
    ([0, 300, 0], 300, 136, 192, "linear", True),         # one expert takes every row
    ([64, 65, 63, 0, 129], 330, 128, 512, "blocked", True),
    ([200, 200], 400, 48, 1024, "linear", False),
    ([64], 64, 72, 128, "linear", True),                  # the 64-row tile
    ([16 + i % 3 for i in range(270)], 4600, 32, 64, "linear", True),  # 270 experts, 10 rows past the last
    # and K >= 2048 (32 K steps): a pre-pass lays each expert's tiles out where it gathers rows by token
    # (test_row_index) or 16 column tiles share it
    ([130, 0, 70, 200, 1], 410, 96, 2048, "linear", True),   # 9 rows past the last expert
    ([64, 65, 0, 129, 3], 261, 136, 2112, "blocked", False),  # 33 steps: the pre-pass's last piece of 1
    ([40, 0, 30], 72, 1936, 2048, "linear", True),           # 16 column tiles
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0][:4]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-{'gated' if c[5] else 'plain'}"
                                             for c in CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grouped_mm_matches_reference(device, gen, case, dtype):
    sizes, t, n, k, layout, gated = case
    e = len(sizes)
    w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=device, layout=layout)
    x = activations(t, k, dtype, gen, device)
    offs = routing(sizes, device)
    alphas = (torch.rand(e, generator=gen) + 0.25).to(device)
    alphas2 = (torch.rand(e, generator=gen) * 2).to(device) if gated else None
    out = poisoned((t, n), device).to(dtype)
    nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, alphas2=alphas2, gated=gated, out=out)
    want = reference.grouped_mm(x, w.data, w.sf, offs, alphas, alphas2, gated,
                                out=out.new_full(out.shape, float("nan")))
    rows = int(offs[-1])
    assert torch.isnan(out[rows:].float()).all(), "rows past the last expert were written"
    if device == "cuda":  # the planner's rule (plan.cu): wgmma from 16 rows an expert, where it can run
        name = nk.kernel_name("grouped_mm_gated" if gated else "grouped_mm", x, w.data, w.sf, offs)
        wgmma = wgmma_built() and k % 64 == 0 and FORCED != "w4a16" and (t >= 16 * e or FORCED == "wgmma")
        assert name.startswith("wgmma" if wgmma else "w4a16") and "rows by expert" in name, name
        pre = wgmma and t > 64 and k >= 2048 and -(-n // (128 if gated else 256)) >= 16 and not DECODING
        assert ("pre-decoded" in name) == pre, name
    assert_matches(out[:rows], want[:rows], f"grouped_mm {case}", slack=slack(x, w.data, w.sf, offs, alphas, alphas2,
                                                                             gated)[:rows])
    # allocating, no alphas, the other output dtype
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    got = nk.grouped_mm(x, w.data, w.sf, offs, gated=gated, out_dtype=other)
    assert got.dtype == other and got.shape == (t, n)
    want = reference.grouped_mm(x, w.data, w.sf, offs, gated=gated, out_dtype=other)
    assert_matches(got[:rows], want[:rows], f"grouped_mm {case} -> {other}",
                   slack=slack(x, w.data, w.sf, offs, None, None, gated)[:rows])


PAIRS_CASES = [CASES[i] for i in (0, 6, 13, 12, 16, 19, 21, 24)]


@pytest.mark.parametrize("case", PAIRS_CASES, ids=[f"{c[0][:4]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-{c[5]}" for c in PAIRS_CASES])
def test_bf16_pairs(device, gen, case):
    """Weights repacked for bf16 (pack_bf16_pairs: int32 [E, N, K/8]) with bf16 x: the reference's
    results on the checkpoint's bytes; fp16 x refused."""
    sizes, t, n, k, layout, gated = case
    e = len(sizes)
    w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=device, layout=layout)
    x = activations(t, k, torch.bfloat16, gen, device)
    offs = routing(sizes, device)
    alphas = (torch.rand(e, generator=gen) + 0.25).to(device)
    packed = nk.pack_bf16_pairs(w.data)
    assert packed.dtype == torch.int32 and packed.shape == (e, w.data.shape[1], k // 8)
    out = poisoned((t, n), device).to(torch.bfloat16)
    nk.grouped_mm(x, packed, w.sf, offs, alphas=alphas, gated=gated, out=out)
    want = reference.grouped_mm(x, w.data, w.sf, offs, alphas, None, gated, out=out.new_full(out.shape, float("nan")))
    rows = int(offs[-1])
    assert torch.isnan(out[rows:].float()).all(), "rows past the last expert were written"
    assert_matches(out[:rows], want[:rows], f"pairs {case}", slack=slack(x, w.data, w.sf, offs, alphas, None,
                                                                         gated)[:rows])
    if device == "cuda":
        name = nk.kernel_name("grouped_mm_gated" if gated else "grouped_mm", x, packed, w.sf, offs)
        assert "pairs" in name and "rows by expert" in name, name
    with pytest.raises(TypeError, match=r"weights repacked for bf16 \(int32, ops.pack_bf16_pairs\) need bfloat16 x"):
        nk.grouped_mm(x.half(), packed, w.sf, offs, gated=gated)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("sizes,k,pad", [
    ([1, 2, 0, 1], 6400, 0),   # 100 K steps over 3 tiles: CTAs share K from steps not a multiple of 4
    ([3, 0, 2], 832, 12),      # 13 steps, scale rows 64 bytes apart: the last 4 steps' scales hold one
    ([2, 1], 1088, 4),         # 17 steps, scale rows 72 bytes apart: every other row not 16-byte aligned
])
def test_scales_by_four_steps(device, gen, sizes, k, pad, gated):
    """Linear scales with rows 16-byte aligned reach the 16-row tiles 4 K steps a copy: a CTA's K share that
    starts inside such a group, a row's last group short of 4 steps (the next bytes are not its scales:
    NaN), and rows of either kind in one tile."""
    e, n = len(sizes), 64
    w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=device)
    wide = torch.full((*w.sf.shape[:-1], k // 16 + pad), 0x7F, dtype=torch.uint8, device=device).view(w.sf.dtype)
    wide[..., : k // 16] = w.sf
    sf = wide[..., : k // 16]
    x = activations(sum(sizes), k, torch.bfloat16, gen, device)
    offs = routing(sizes, device)
    out = poisoned((x.shape[0], n), device).to(torch.bfloat16)
    nk.grouped_mm(x, w.data, sf, offs, gated=gated, out=out)
    want = reference.grouped_mm(x, w.data, w.sf, offs, gated=gated)
    assert_matches(out, want, f"scales by four steps {sizes} {k}",
                   slack=slack(x, w.data, w.sf, offs, None, None, gated))


TILE_CASES = [  # (group sizes, T, N, K, gated, misaligned x): N a multiple of 128 (gated: of 64)
    ([3, 0, 5, 1], 12, 64, 80, True, False),             # K % 64 != 0: a last partial step; 1 run of 4 steps
    ([1] * 7, 7, 128, 1024, True, False),                # decode: a row an expert
    ([2, 0, 5, 1, 0, 3], 14, 256, 2048, False, False),   # 3 rows past the last expert
    ([2, 5], 7, 384, 2048, False, False),                # long K over few tiles: 64-column tiles, CTAs share K
    ([40, 0, 3, 1, 17, 0, 0, 2], 66, 128, 512, True, False),  # 32-row tiles
    ([100, 1, 0, 0, 0, 0, 0, 2], 103, 128, 2000, False, False),  # 31.25 steps, CTAs share K
    ([130, 3, 0, 60], 193, 128, 528, True, False),       # 64-row tiles
    ([3, 0, 5, 1], 9, 128, 272, False, True),            # rows not 16-byte aligned: the register-load path
    ([130, 3, 0, 60], 193, 64, 528, True, True),
    ([130, 0, 70, 200], 410, 128, 256, False, False),    # the wgmma kernel's tiles (Hopper)
    ([0, 300, 0], 300, 192, 192, True, False),
    ([40, 0, 30], 72, 1984, 2048, True, False),          # 16 column tiles: its pre-pass
]


@pytest.mark.parametrize("case", TILE_CASES, ids=[f"{c[0][:4]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-{c[5]}" for c in TILE_CASES])
@pytest.mark.parametrize("dtype,pairs", [(torch.bfloat16, False), (torch.float16, False), (torch.bfloat16, True)])
def test_experts_by_tile(device, gen, case, dtype, pairs):
    """Experts laid out by tile (layouts.to_expert_tiles) give the checkpoint layout's results bit for bit on
    the same kernel (which the reference checks above): plain and gated, K not a multiple of 64 or 256, the
    tile kernels' shapes, rows by token and quantized first (an MoE's W4A4 stage), pairs for bf16."""
    sizes, t, n, k, gated, misaligned = case
    e = len(sizes)
    w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=device)
    codes = nk.pack_bf16_pairs(w.data) if pairs else w.data
    tiles, tile_sf = nk.layouts.to_expert_tiles(codes, w.sf, gated)
    runs = -(-k // 256)
    assert tiles.shape == (e, (2 * n if gated else n) // 128, runs, 4096 if pairs else 16384)
    assert tile_sf.shape == (e, tiles.shape[1], runs, 2048) and tile_sf.dtype == w.sf.dtype
    x = activations(t, k, dtype, gen, device)
    if misaligned:
        x = torch.cat([x, x[:, :1]], dim=1)[:, 1:]  # rows 2 (K + 1) bytes apart
        x.copy_(activations(t, k, dtype, gen, device))
    offs = routing(sizes, device)
    alphas = (torch.rand(e, generator=gen) + 0.25).to(device)
    alphas2 = (torch.rand(e, generator=gen) * 2).to(device) if gated else None
    op = "grouped_mm_gated" if gated else "grouped_mm"
    for extra in ({}, {"row_index": torch.randint(0, t, (t + 3,), generator=gen, dtype=torch.int32).to(device),
                       "global_scale": (torch.rand(e, generator=gen) + 0.5).to(device)}):
        rows = t + 3 if extra else t
        want, got = (poisoned((rows, n), device).to(dtype) for _ in range(2))
        nk.grouped_mm(x, codes, w.sf, offs, alphas=alphas, alphas2=alphas2, gated=gated, out=want, **extra)
        nk.grouped_mm(x, tiles, tile_sf, offs, alphas=alphas, alphas2=alphas2, gated=gated, out=got, **extra)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"by tile {case} {extra.keys()}"
        if device == "cuda" and not extra:  # the same kernel; by tile every copy is one cp.async (any K)
            name, flat = nk.kernel_name(op, x, tiles, tile_sf, offs), nk.kernel_name(op, x, codes, w.sf, offs)
            assert name.split(" (")[0] == flat.split(" (")[0] and "rows by expert" in name, (name, flat)
            assert ("register loads" in name) == misaligned, name
    back = nk.layouts.from_expert_tiles(tiles, tile_sf, k, gated)
    assert back[0].dtype == codes.dtype and back[1].dtype == w.sf.dtype
    assert torch.equal(back[0].view(torch.uint8), codes.view(torch.uint8))
    assert torch.equal(back[1].view(torch.uint8), w.sf.view(torch.uint8))


def test_experts_by_tile_bad_arguments(device):
    e, t, n, k = 3, 5, 128, 64
    w = random_operand(e, n, k, gen=torch.Generator().manual_seed(0), device=device)
    tiles, sf = nk.layouts.to_expert_tiles(w.data, w.sf)
    x = torch.zeros(t, k, dtype=torch.bfloat16, device=device)
    offs = routing([1, 2, 2], device)
    cases = [
        (r"w laid out by tile must be \[E, tiles, ceil\(K/256\)=2, 16384 bytes\] for x's K=272",
         dict(x=torch.zeros(t, 272, dtype=torch.bfloat16, device=device))),
        (r"w_sf laid out by tile must be \[E, tiles, ceil\(K/256\), 2048\] = \[3, 1, 1, 2048\], got shape "
         r"\[3, 1, 1, 1024\]", dict(sf=sf[..., :1024])),
        (r"w_sf laid out by tile must be", dict(sf=w.sf)),
        (r"w must be \[E, N, K/2\] or laid out by tile", dict(w=tiles[None])),
        (r"must be contiguous within each tile", dict(w=torch.cat([tiles, tiles], dim=2)[:, :, ::2])),
    ]
    for msg, kw in cases:
        args = dict(x=x, w=tiles, sf=sf) | kw
        with pytest.raises(ValueError, match=msg):
            nk.grouped_mm(args["x"], args["w"], args["sf"], offs)
    with pytest.raises(ValueError, match=r"R=64 must be a multiple of 128"):
        nk.layouts.to_expert_tiles(w.data[:, :64], w.sf[:, :64])


@needs_cuda
@pytest.mark.parametrize("e,t,n,k,routings", [
    (6, 24, 96, 256, ([24, 0, 0, 0, 0, 0], [0, 3, 0, 11, 0, 10], [1, 2, 3, 4, 5, 9])),
    (4, 384, 128, 256, ([384, 0, 0, 0], [0, 100, 0, 284], [96, 96, 96, 96])),  # wgmma's on Hopper
    (4, 384, 128, 2048, ([384, 0, 0, 0], [0, 100, 0, 284], [96, 96, 96, 96])),  # and its pre-pass
])
def test_graph_replays_new_routings(gen, e, t, n, k, routings):
    """Captured once; each replay takes new offsets (and rows) copied into the captured tensors."""
    w = random_operand(e, 2 * n, k, gen=gen, device="cuda")
    x = activations(t, k, torch.bfloat16, gen, "cuda")
    offs = routing([t // e] * e, "cuda")
    alphas = (torch.rand(e, generator=gen) + 0.5).cuda()
    name = nk.kernel_name("grouped_mm_gated", x, w.data, w.sf, offs)
    wgmma = wgmma_built() and FORCED != "w4a16" and (t >= 16 * e or FORCED == "wgmma")
    assert "rows by expert" in name and name.startswith("wgmma" if wgmma else "w4a16"), name
    nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=True)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=True)
    for sizes in routings:
        offs.copy_(routing(sizes, "cuda"))
        x.copy_(activations(t, k, torch.bfloat16, gen, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        want = reference.grouped_mm(x, w.data, w.sf, offs, alphas, None, True)
        assert_matches(y, want, f"replay {sizes}", slack=slack(x, w.data, w.sf, offs, alphas, None, True))


def test_bad_arguments(device):
    e, t, n, k = 3, 5, 32, 64
    w = random_operand(e, n, k, gen=torch.Generator().manual_seed(0), device=device)
    x = torch.zeros(t, k, dtype=torch.bfloat16, device=device)
    offs = routing([1, 2, 2], device)
    cases = [
        (TypeError, r"offs must be int32, got Long", dict(offs=offs.long())),
        (ValueError, r"offs must be a contiguous \[E\] = \[3\]", dict(offs=offs[:2])),
        (TypeError, r"x must be float16 or bfloat16, got Float", dict(x=x.float())),
        (ValueError, r"x must be \[T, K\]", dict(x=x[None])),
        (ValueError, r"w has K/2=32 but x has K=48", dict(x=x[:, :48])),
        (ValueError, r"w must be \[E, N, K/2\]", dict(w=w.data[0])),
        (TypeError, r"alphas must be float32", dict(alphas=torch.ones(e, dtype=torch.float64, device=device))),
        (ValueError, r"alphas must be a contiguous \[E\] = \[3\]", dict(alphas=torch.ones(2, device=device))),
        (ValueError, r"alphas2 is for a gated call", dict(alphas2=torch.ones(e, device=device))),
        (ValueError, r"a gated w must have 2N rows", dict(gated=True, w=w.data[:, :31], sf=w.sf[:, :31])),
    ]
    if device == "cpu":
        cases += [(ValueError, r"offs must be non-decreasing from 0 and at most T=5; offs\[1\] = 1 after 3",
                   dict(offs=routing([3, -2, 1], device))),
                  (ValueError, r"at most T=5; offs\[2\] = 6", dict(offs=routing([1, 2, 3], device)))]
    else:
        cases += [(ValueError, r"offs is on cpu but x is on cuda", dict(offs=offs.cpu()))]
    for exc, msg, kw in cases:
        args = dict(x=x, w=w.data, sf=w.sf, offs=offs, alphas=None, alphas2=None, gated=False) | kw
        with pytest.raises(exc, match=msg):
            nk.grouped_mm(args["x"], args["w"], args["sf"], args["offs"], alphas=args["alphas"],
                          alphas2=args["alphas2"], gated=args["gated"])
    wb = random_operand(e, 2 * 64, k, gen=torch.Generator().manual_seed(1), device=device, layout="blocked")
    with pytest.raises(ValueError, match=r"blocked scales of a gated w need N % 128 == 0"):
        nk.grouped_mm(x, wb.data, wb.sf, offs, gated=True)


CHECK_OFFS = '''
import torch, nvfp4_kernels as nk
from nvfp4_kernels.testing import random_operand
w = random_operand(3, 32, 64, gen=torch.Generator().manual_seed(0), device="cuda")
x = torch.zeros(5, 64, dtype=torch.bfloat16, device="cuda")
try:
    nk.grouped_mm(x, w.data, w.sf, torch.tensor([3, 1, 5], dtype=torch.int32, device="cuda"))
    print("no error")
except ValueError as e:
    print("ValueError:", e)
offs = torch.tensor([1, 3, 5], dtype=torch.int32, device="cuda")
nk.grouped_mm(x, w.data, w.sf, offs)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    y = nk.grouped_mm(x, w.data, w.sf, offs)
graph.replay()
torch.cuda.synchronize()
print("captured")
'''


@needs_cuda
def test_offs_checked_where_asked():
    """NVFP4_CHECK_OFFS=1 (read once: a fresh interpreter): a GPU's offs read back and checked as the
    CPU's are; not while a CUDA graph captures. Unset: no check (the kernels count a decreasing
    entry as an empty expert)."""
    for flag, want in (("1", "ValueError: nvfp4.grouped_mm: offs must be non-decreasing from 0 and at most T=5; "
                             "offs[1] = 1 after 3"), ("0", "no error")):
        r = run_python(["-c", CHECK_OFFS], NVFP4_CHECK_OFFS=flag)
        assert r.returncode == 0, r.stderr
        assert want in r.stdout and "captured" in r.stdout, r.stdout


def test_torch_citizen(device, gen):
    """opcheck (schema, fake, compile) and torch.compile(fullgraph=True); every row belongs to an
    expert (an allocating call leaves the others unwritten)."""
    e, t, n, k = 3, 10, 32, 64
    w = random_operand(e, 2 * n, k, gen=gen, device=device)
    x = activations(t, k, torch.bfloat16, gen, device)
    offs = routing([4, 0, 6], device)
    alphas = torch.rand(e, generator=gen).to(device)
    u8 = lambda v: v.view(torch.uint8)  # noqa: E731  (opcheck cannot copy fp4 / fp8 tensors)
    torch.library.opcheck(torch.ops.nvfp4.grouped_mm.default, (x, u8(w.data), u8(w.sf), offs, alphas, None, True))
    torch.library.opcheck(torch.ops.nvfp4.grouped_mm_out.default,
                          (x, u8(w.data[:, :n]), u8(w.sf[:, :n]), offs, None, None, False,
                           poisoned((t, n), device).to(torch.bfloat16)))
    name = nk.kernel_name("grouped_mm_gated", x, w.data, w.sf, offs)
    kernel = "wgmma (bf16 activations" if FORCED == "wgmma" and wgmma_built() else "w4a16 (bf16 activations"
    assert name == "cpu" if device == "cpu" else name.startswith(kernel) and "rows by expert" in name
    f = torch.compile(lambda x, o: nk.grouped_mm(x, w.data, w.sf, o, alphas=alphas, gated=True), fullgraph=True)
    assert torch.equal(f(x, offs), nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=True))
    # rows by token, quantized with each expert's global scale (NVFP4MoE w4a4's call)
    index = torch.randint(0, t, (t,), generator=gen, dtype=torch.int32).to(device)
    g = (torch.rand(e, generator=gen) + 0.5).to(device)
    torch.library.opcheck(torch.ops.nvfp4.grouped_mm.default,
                          (x, u8(w.data), u8(w.sf), offs, alphas, None, True, None, index, g))
    f = torch.compile(lambda x, o: nk.grouped_mm(x, w.data, w.sf, o, gated=True, row_index=index, global_scale=g),
                      fullgraph=True)
    assert torch.equal(f(x, offs), nk.grouped_mm(x, w.data, w.sf, offs, gated=True, row_index=index, global_scale=g))


def test_gated_scales_checked_whole(device):
    """A gated call's w_sf must be the whole [E, 2N, K/16] (or its blocked grid), not just halves."""
    e, t, n, k = 2, 3, 16, 64
    w = random_operand(e, 2 * n, k, gen=torch.Generator().manual_seed(2), device=device)
    x = torch.zeros(t, k, dtype=torch.bfloat16, device=device)
    offs = routing([1, 2], device)
    wide = torch.cat([w.sf, w.sf[:, :n]], 1)  # 3N rows of scales
    with pytest.raises(ValueError, match=r"w_sf has shape \[2, 48, 4\]; the linear layout"):
        nk.grouped_mm(x, w.data, wide, offs, gated=True)


INDEX_CASES = [CASES[i] for i in (1, 5, 12, 13, 17, 18, 20, 22, 24, 25)]


@pytest.mark.parametrize("case", INDEX_CASES, ids=[f"{c[0][:4]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-{c[5]}"
                                                   for c in INDEX_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_row_index(device, gen, case, dtype):
    """row_index: the rows are x[row_index] (an MoE's pairs read from their tokens' rows: rows
    repeated and skipped, fewer tokens than rows), read in place by every kernel (16-row, 64-row and
    wgmma tiles): bit for bit what the gathered rows give, and the reference's result; weights in
    bf16 pairs too. A GPU reads a row outside x as zeros; the CPU refuses it."""
    sizes, t, n, k, layout, gated = case
    e = len(sizes)
    w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=device, layout=layout)
    tokens = t // 3 + 2
    x = activations(tokens, k, dtype, gen, device)
    index = torch.randint(0, tokens, (t,), generator=gen, dtype=torch.int32).to(device)
    offs = routing(sizes, device)
    alphas = (torch.rand(e, generator=gen) + 0.25).to(device)
    rows = int(offs[-1])
    weights = [w.data] + ([nk.pack_bf16_pairs(w.data)] if dtype == torch.bfloat16 else [])
    for wd in weights:
        out = poisoned((t, n), device).to(dtype)
        nk.grouped_mm(x, wd, w.sf, offs, alphas=alphas, gated=gated, out=out, row_index=index)
        assert torch.isnan(out[rows:].float()).all(), "rows past the last expert were written"
        gathered = nk.grouped_mm(x[index.long()], wd, w.sf, offs, alphas=alphas, gated=gated)
        assert torch.equal(out[:rows], gathered[:rows]), f"row_index {case}: not the gathered rows' result"
        got = nk.grouped_mm(x, wd, w.sf, offs, alphas=alphas, gated=gated, row_index=index)
        assert got.shape == (t, n) and torch.equal(got[:rows], out[:rows])
    want = reference.grouped_mm(x, w.data, w.sf, offs, alphas, None, gated, row_index=index)
    assert_matches(out[:rows], want[:rows], f"row_index {case}",
                   slack=slack(x[index.long()], w.data, w.sf, offs, alphas, None, gated)[:rows])
    bad = index.clone()
    bad[::5] = tokens + 3
    bad[1::7] = -1
    if device == "cpu":
        with pytest.raises(ValueError, match=r"row_index must lie in \[0, \d+\) \(x's rows\)"):
            nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=gated, row_index=bad)
    elif rows:
        zeros = torch.cat([x, torch.zeros_like(x[:1])])  # the rows outside x as a row of zeros
        inside = torch.where((bad >= 0) & (bad < tokens), bad, tokens)
        got = nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=gated, row_index=bad)
        want = nk.grouped_mm(zeros[inside.long()], w.data, w.sf, offs, alphas=alphas, gated=gated)
        assert torch.equal(got[:rows], want[:rows]), "rows outside x not read as zeros"


GLOBAL_CASES = [CASES[i] for i in (1, 5, 12, 20, 24)]


@pytest.mark.parametrize("case", GLOBAL_CASES, ids=[f"{c[0][:4]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-{c[5]}"
                                                    for c in GLOBAL_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("by_token", [False, True])
def test_global_scale(device, gen, case, dtype, by_token):
    """global_scale (W4A4): each row quantized with its expert's global scale first, bit for bit
    grouped_mm of quantized_values(x[row_index], global_scale[expert of the row]) (in the wgmma
    kernel's pre-pass where it has one, else by quantized_values' kernel first: 16-row, 64-row and
    wgmma tiles), weights in bf16 pairs too, and the reference's result. On a GPU a row_index
    outside x gives NaN rows, as quantized_values does."""
    sizes, t, n, k, layout, gated = case
    e = len(sizes)
    w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=device, layout=layout)
    tokens = t // 3 + 2 if by_token else t
    x = activations(tokens, k, dtype, gen, device)
    index = torch.randint(0, tokens, (t,), generator=gen, dtype=torch.int32).to(device) if by_token else None
    offs = routing(sizes, device)
    g = (torch.exp2(torch.randint(-6, 7, (e,), generator=gen).float()) * (torch.rand(e, generator=gen) + 0.5)).to(device)
    alphas = (torch.rand(e, generator=gen) + 0.25).to(device)
    rows = int(offs[-1])
    expert = torch.repeat_interleave(torch.arange(e), torch.tensor(sizes))
    expert = torch.cat([expert, torch.full((t - rows,), e - 1)]).to(torch.int32).to(device)
    values = nk.quantized_values(x, global_scale=g, row_index=index, scale_index=expert)
    weights = [w.data] + ([nk.pack_bf16_pairs(w.data)] if dtype == torch.bfloat16 else [])
    for wd in weights:
        out = poisoned((t, n), device).to(dtype)
        nk.grouped_mm(x, wd, w.sf, offs, alphas=alphas, gated=gated, out=out, row_index=index, global_scale=g)
        assert torch.isnan(out[rows:].float()).all(), "rows past the last expert were written"
        want = nk.grouped_mm(values, wd, w.sf, offs, alphas=alphas, gated=gated)
        assert torch.equal(out[:rows], want[:rows]), f"global_scale {case}: not the quantized values' result"
    ref = reference.grouped_mm(values, w.data, w.sf, offs, alphas, None, gated)
    assert_matches(out[:rows], ref[:rows], f"global_scale {case}",
                   slack=slack(values, w.data, w.sf, offs, alphas, None, gated)[:rows])
    if device == "cuda" and by_token and rows:
        bad = index.clone()
        bad[::5] = tokens + 3
        bad[1::7] = -1
        got = nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=gated, row_index=bad, global_scale=g)
        want = nk.grouped_mm(nk.quantized_values(x, global_scale=g, row_index=bad, scale_index=expert), w.data, w.sf,
                             offs, alphas=alphas, gated=gated)
        nan = torch.isnan(want[:rows].float())
        assert nan[::5].all() and torch.equal(torch.isnan(got[:rows].float()), nan), "rows outside x not NaN"
        assert torch.equal(got[:rows][~nan], want[:rows][~nan])


def test_global_scale_bad_arguments(device):
    e, t, n, k = 3, 6, 32, 64
    w = random_operand(e, n, k, gen=torch.Generator().manual_seed(0), device=device)
    x = torch.zeros(t, k, dtype=torch.bfloat16, device=device)
    offs = routing([1, 2, 3], device)
    g = torch.ones(e, device=device)
    cases = [
        (TypeError, r"global_scale must be float32, got Double", g.double()),
        (ValueError, r"global_scale must be a contiguous \[E\] = \[3\] tensor", g[:2]),
    ]
    if device == "cpu":
        cases.append((ValueError, r"global_scale must be finite and positive, got -1", -g))
    else:
        cases.append((ValueError, r"global_scale is on cpu but x is on cuda", g.cpu()))
    for exc, msg, bad in cases:
        with pytest.raises(exc, match=msg):
            nk.grouped_mm(x, w.data, w.sf, offs, global_scale=bad)


def test_row_index_bad_arguments(device):
    e, t, n, k = 3, 5, 32, 64
    w = random_operand(e, n, k, gen=torch.Generator().manual_seed(0), device=device)
    x = torch.zeros(t, k, dtype=torch.bfloat16, device=device)
    offs = routing([1, 2, 3], device)
    index = torch.tensor([0, 4, 4, 1, 2, 3], dtype=torch.int32, device=device)
    cases = [
        (TypeError, r"row_index must be int32, got Long", dict(row_index=index.long())),
        (ValueError, r"row_index must be a contiguous 1-D tensor", dict(row_index=index.view(2, 3))),
        (ValueError, r"row_index has 6 rows but x has none to index", dict(x=x[:0])),
        (ValueError, r"offs must be non-decreasing from 0 and at most R=4", dict(row_index=index[:4])),
    ]
    if device == "cuda":
        cases[-1] = (ValueError, r"row_index is on cpu but x is on cuda", dict(row_index=index.cpu()))
    for exc, msg, kw in cases:
        args = dict(x=x, row_index=index) | kw
        with pytest.raises(exc, match=msg):
            nk.grouped_mm(args["x"], w.data, w.sf, offs, row_index=args["row_index"])
    out = torch.empty(6, n, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match=r"out"):
        nk.grouped_mm(x, w.data, w.sf, offs, out=out[:5], row_index=index)
    if device == "cpu":
        got = nk.grouped_mm(x, w.data, w.sf, offs, row_index=index)
        assert got.shape == (6, n)
