"""W4A4 with the activations quantized in the call (ops.gemm_w4a4 / dual_gemm_w4a4, what NVFP4Linear runs):
equal to the exact reference (reference.gemm_w4a4: the W4A16 product of quantized_values) on both of the
routes plan.cu picks between (codes and scales for the W4A4 kernels, the quantized values for the W4A16 ones),
for every row count, dtype, layout, leading dims and batch; in a CUDA graph; bad input refused by name."""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand
from conftest import assert_matches
from helpers import FORCED
from test_epilogue import activations, bias_of, poisoned

# decode rows (1: dp4a; 3, 4: the integer-mma GEMV; 5-8: the quantized values where plan.cu takes them), skinny
# and wgmma rows, K an odd multiple of 16 (the SIMT kernel) and of 64
SHAPES = [(1, 300, 4096), (3, 129, 1024), (5, 512, 2048), (8, 300, 4096), (8, 7, 1088), (12, 129, 8192),
          (33, 300, 1024), (200, 96, 2048), (7, 40, 48)]


def global_scale_of(x):
    return torch.tensor([2688.0], device=x.device) / x.abs().amax().float()


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_w4a4(device, gen, m, n, k):
    for i, (x_dtype, out_dtype, bias_dtype) in enumerate(((torch.bfloat16, None, torch.float32),
                                                          (torch.float16, torch.bfloat16, None),
                                                          (torch.bfloat16, torch.float16, torch.bfloat16))):
        b = random_operand(None, n, k, gen=gen, device=device, layout=("linear", "blocked")[i % 2])
        x = activations((m, k), x_dtype, gen, device)
        g = global_scale_of(x)
        bias = bias_of(n, bias_dtype, gen, device)
        want = reference.gemm_w4a4(x, b.data, b.sf, g, -0.75, bias, out_dtype)
        got = nk.gemm_w4a4(x, b.data, b.sf, global_scale=g, alpha=-0.75, bias=bias, out_dtype=out_dtype)
        assert got.dtype == (out_dtype or x_dtype)
        assert_matches(got, want, f"gemm_w4a4 {m}x{n}x{k} {x_dtype} -> {out_dtype}")
        out = poisoned((m, n), device, want.dtype)
        nk.gemm_w4a4(x, b.data, b.sf, global_scale=g, alpha=-0.75, bias=bias, out=out)
        assert_matches(out, want, f"gemm_w4a4 out= {m}x{n}x{k} {x_dtype}")


@pytest.mark.parametrize("m,n,k", [(1, 300, 4096), (4, 129, 1024), (6, 512, 2048), (8, 300, 4096), (16, 64, 4096),
                                   (40, 129, 512), (5, 24, 80)])
def test_dual_gemm_w4a4(device, gen, m, n, k):
    b1 = random_operand(None, n, k, gen=gen, device=device, layout="blocked")
    b2 = random_operand(None, n, k, gen=gen, device=device, layout="linear")
    x = activations((m, k), torch.bfloat16, gen, device)
    g = global_scale_of(x)
    want = reference.dual_gemm_w4a4(x, b1.data, b2.data, b1.sf, b2.sf, g, 0.5, -2.0)
    out = poisoned((m, n), device, torch.bfloat16)
    nk.dual_gemm_w4a4(x, b1.data, b2.data, b1.sf, b2.sf, global_scale=g, alpha1=0.5, alpha2=-2.0, out=out)
    assert_matches(out, want, f"dual_gemm_w4a4 {m}x{n}x{k}")
    got = nk.dual_gemm_w4a4(x.half(), b1.data, b2.data, b1.sf, b2.sf, global_scale=3.0)
    assert_matches(got, reference.dual_gemm_w4a4(x.half(), b1.data, b2.data, b1.sf, b2.sf, 3.0),
                   f"dual_gemm_w4a4 fp16 {m}x{n}x{k}")


def test_w4a4_equals_quantize_then_gemm(device, gen):
    """The op and the two ops it replaces: the same quantization, the same products."""
    b = random_operand(None, 64, 512, gen=gen, device=device)
    for m in (1, 6, 8, 40):
        x = activations((m, 512), torch.bfloat16, gen, device)
        xq, sx = nk.quantize(x, global_scale=0.37)
        want = nk.gemm(xq, b.data, sx, b.sf, alpha=1 / 0.37, out_dtype=torch.bfloat16)
        assert_matches(nk.gemm_w4a4(x, b.data, b.sf, global_scale=0.37, alpha=1 / 0.37), want, f"M = {m}")


def test_w4a4_leading_dims_and_batch(device, gen):
    b = random_operand(None, 40, 256, gen=gen, device=device)
    x = activations((2, 3, 256), torch.bfloat16, gen, device)
    got = nk.gemm_w4a4(x, b.data, b.sf, global_scale=2.0)
    assert got.shape == (2, 3, 40)
    assert_matches(got, reference.gemm_w4a4(x, b.data, b.sf, 2.0), "x [2, 3, K]")
    bl = random_operand(2, 40, 256, gen=gen, device=device)
    got = nk.gemm_w4a4(x, bl.data, bl.sf, global_scale=2.0)
    assert got.shape == (2, 3, 40)
    for i in range(2):  # one global scale for the whole call: batch i is the gemm of its own rows
        assert_matches(got[i], reference.gemm_w4a4(x[i], bl.data[i], bl.sf[i], 2.0), f"batch {i}")
    assert nk.gemm_w4a4(x[:, :0], b.data, b.sf).shape == (2, 0, 40)


def test_w4a4_nan(device, gen):
    b = random_operand(None, 24, 128, gen=gen, device=device)
    for m in (1, 8, 40):
        x = activations((m, 128), torch.bfloat16, gen, device)
        x[m // 2, 37] = float("nan")  # its block's scale is NaN: row m // 2 is NaN
        got = nk.gemm_w4a4(x, b.data, b.sf, global_scale=1.5)
        assert torch.isnan(got[m // 2]).all()
        assert_matches(got, reference.gemm_w4a4(x, b.data, b.sf, 1.5), f"NaN activation M = {m}")


def test_w4a4_routes(gen):
    """plan.cu's route: the quantized values on the W4A16 GEMV where it pays (Hopper, M = 5..8 of the integer-mma
    GEMV's and wgmma's shapes), the codes elsewhere; both right (forced runs take one route throughout)."""
    if not torch.cuda.is_available() or not nk.WITH_CUDA or FORCED:
        pytest.skip("needs a CUDA device and the CUDA build, unforced")
    hopper = torch.cuda.get_device_capability() == (9, 0)
    b1 = random_operand(None, 4096, 4096, gen=gen, device="cuda")
    b2 = random_operand(None, 4096, 4096, gen=gen, device="cuda")
    for m, values in ((1, False), (8, hopper), (64, False)):
        x = activations((m, 4096), torch.bfloat16, gen, "cuda")
        name = nk.kernel_name("gemm_w4a4", x, b1.data, b1.sf)
        assert name.startswith("w4a16") == values, (m, name)
        dual = nk.kernel_name("dual_gemm_w4a4", x, b1.data, b2.data, b1.sf, b2.sf)
        assert dual.startswith("w4a16") == values, (m, dual)
        if m == 1 and hopper:  # one row: the dp4a GEMV quantizes it itself (a global scale given as a tensor)
            assert name == dual == "gemv_dp4a (roles swapped, x quantized in the kernel)", (name, dual)
        elif not values:
            xq, sx = nk.quantize(x)
            assert name == nk.kernel_name("gemm", xq, b1.data, sx, b1.sf)
        assert_matches(nk.gemm_w4a4(x, b1.data, b1.sf, global_scale=0.5),
                       reference.gemm_w4a4(x, b1.data, b1.sf, 0.5), f"route of M = {m}")


def by_tile(b):
    """The checkpoint's bytes laid out by tile (layouts.to_expert_tiles), as a w4a4 NVFP4Linear holds them."""
    return nk.layouts.to_expert_tiles(b.data[None], b.sf[None])


# M = 1 (the dp4a GEMV quantizing x: one and two chunks a lane, rows split or not, K past whole groups of 4 K
# steps; CTAs of 512 threads, of 768 past 3 blocks of x a thread), 2 to 4 (the integer-mma GEMV: one and two steps
# an item (3, 4 x 128 x 24576), sets split unevenly, from odd steps (2, 3 x 128 x 3456: 27 steps over 8 warps), K past
# whole groups (640); 3 rows on its four-vector build), more (the quantized values on the W4A16 kernels: GEMV, tiles,
# wgmma)
TILE_SHAPES = [(1, 256, 4096), (1, 6144, 1024), (1, 4352, 768), (1, 128, 18944), (1, 384, 1088), (1, 4608, 3584),
               (1, 128, 28672), (2, 256, 2048), (2, 128, 3456), (2, 256, 640), (3, 384, 512), (3, 128, 3456),
               (3, 128, 24576),
               (4, 128, 4096), (4, 128, 24576), (4, 4096, 1024), (7, 256, 1024), (16, 384, 2048), (40, 256, 512),
               (200, 128, 1024)]


@pytest.mark.parametrize("m,n,k", TILE_SHAPES)
def test_w4a4_by_tile(device, gen, m, n, k):
    """Weights laid out by tile: the exact reference (gemm with a bias, dual; bf16 and fp16 x; a NaN block); at
    M = 1 on the dp4a GEMV (x quantized in it where its global scale is a tensor, here with bf16 x, else by the
    quantize kernel first), at 2 to 4 on the integer-mma GEMV: the checkpoint layout's results bit for bit where
    that runs the same kernel; other row counts on the quantized values."""
    b, b2 = (random_operand(None, n, k, gen=gen, device=device) for _ in range(2))
    (t, ts), (t2, ts2) = by_tile(b), by_tile(b2)
    codes = m <= 4  # plan.cu: the codes' GEMVs up to 4 rows by tile
    for x_dtype in (torch.bfloat16, torch.float16):
        x = activations((m, k), x_dtype, gen, device)
        if x_dtype == torch.float16:
            x[m // 2, k // 3] = float("nan")  # its block's scale is NaN: row m // 2 is NaN
        g = global_scale_of(x[~torch.isnan(x).any(1)]) if m > 1 else \
            torch.tensor([0.75], device=device) if x_dtype == torch.bfloat16 else 0.75
        bias = bias_of(n, torch.float32, gen, device)
        out = poisoned((m, n), device, x_dtype)
        nk.gemm_w4a4(x, t, ts, global_scale=g, alpha=-0.75, bias=bias, out=out)
        assert_matches(out, reference.gemm_w4a4(x, b.data, b.sf, g, -0.75, bias), f"by tile {m}x{n}x{k} {x_dtype}")
        dual = nk.dual_gemm_w4a4(x, t, t2, ts, ts2, global_scale=g, alpha1=0.5, alpha2=-2.0)
        assert_matches(dual, reference.dual_gemm_w4a4(x, b.data, b2.data, b.sf, b2.sf, g, 0.5, -2.0),
                       f"dual by tile {m}x{n}x{k} {x_dtype}")
        if device == "cuda" and codes and not FORCED:  # the same kernel (same name), either layout: the same bits
            if nk.kernel_name("gemm_w4a4", x, t, ts) == nk.kernel_name("gemm_w4a4", x, b.data, b.sf):
                flat = nk.gemm_w4a4(x, b.data, b.sf, global_scale=g, alpha=-0.75, bias=bias)
                assert torch.equal(out.view(torch.int16), flat.view(torch.int16)), (m, n, k, x_dtype)
            if nk.kernel_name("dual_gemm_w4a4", x, t, t2, ts, ts2) == \
                    nk.kernel_name("dual_gemm_w4a4", x, b.data, b2.data, b.sf, b2.sf):
                flat = nk.dual_gemm_w4a4(x, b.data, b2.data, b.sf, b2.sf, global_scale=g, alpha1=0.5, alpha2=-2.0)
                assert torch.equal(dual.view(torch.int16), flat.view(torch.int16)), ("dual", m, n, k, x_dtype)
    if device == "cuda" and not FORCED:
        for name in (nk.kernel_name("gemm_w4a4", x, t, ts), nk.kernel_name("dual_gemm_w4a4", x, t, t2, ts, ts2)):
            want = "gemv_dp4a" if m == 1 else "gemv_mma" if codes else ("w4a16", "wgmma", "cublas")
            assert name.startswith(want), (m, name)


@pytest.mark.parametrize("k", [64, 4096, 5120, 18944, 28672])
def test_w4a4_quantized_in_kernel(gen, k):
    """One activation row per batch and a global scale given as a tensor: the dp4a GEMV quantizes the row itself
    (no quantize launch); gemm and dual, fp16 and bf16 x, batched, scales subnormal, zero and saturated, a NaN block,
    K past one block a thread (18944: 37 steps a row, no split), K = 64 (half a warp's quarters of blocks), CTAs of
    512, 768 (K = 5120) and 1024 threads."""
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        pytest.skip("needs a CUDA device and the CUDA build")
    b1, b2 = (random_operand(2, 136, k, gen=gen, device="cuda", layout=lay) for lay in ("linear", "blocked"))
    for x_dtype in (torch.bfloat16, torch.float16):
        x = activations((2, 1, k), x_dtype, gen, "cuda")
        g = global_scale_of(x)
        if not FORCED and torch.cuda.get_device_capability() == (9, 0):  # plan.cu: measured on Hopper
            assert "x quantized in the kernel" in nk.kernel_name("gemm_w4a4", x, b1.data, b1.sf)
        out = poisoned((2, 1, 136), "cuda", x_dtype)
        nk.gemm_w4a4(x, b1.data, b1.sf, global_scale=g, alpha=-0.75, out=out)
        for i in range(2):
            assert_matches(out[i], reference.gemm_w4a4(x[i], b1.data[i], b1.sf[i], g, -0.75), f"K = {k} batch {i}")
        got = nk.dual_gemm_w4a4(x[0], b1.data[0], b2.data[0], b1.sf[0], b2.sf[0], global_scale=g, alpha1=0.5,
                                alpha2=-2.0)
        assert_matches(got, reference.dual_gemm_w4a4(x[0], b1.data[0], b2.data[0], b1.sf[0], b2.sf[0], g, 0.5, -2.0),
                       f"dual K = {k} {x_dtype}")
    x = activations((1, k), torch.bfloat16, gen, "cuda")
    for wide in (2.0**-12, 16.0):  # scales subnormal and zero, saturated at 448
        g = global_scale_of(x) * wide
        got = nk.gemm_w4a4(x, b1.data[0], b1.sf[0], global_scale=g)
        assert_matches(got, reference.gemm_w4a4(x, b1.data[0], b1.sf[0], g), f"K = {k} global scale x {wide}")
    x[0, k // 2] = float("nan")  # its block's scale is NaN: every output is NaN
    got = nk.gemm_w4a4(x, b1.data[0], b1.sf[0], global_scale=torch.tensor([1.5], device="cuda"))
    assert torch.isnan(got).all()


@pytest.mark.parametrize("m,k", [(2, 128), (3, 4096), (4, 4096), (2, 8192), (4, 640), (4, 8192)])
def test_w4a4_rows_quantized_in_kernel(gen, m, k):
    """2 to 4 activation rows and a global scale given as a tensor: on Hopper the integer-mma GEMV quantizes them
    itself where it streams weights laid out by tile, up to 2 blocks of 16 a thread (4 x 4096, 2 x 8192; 4 x 8192:
    the quantize kernel first), and results equal the exact reference either way: gemm and dual, both layouts (the
    checkpoint's with a tail of rows), bf16 and fp16, batched, scales subnormal, zero and saturated, a NaN block."""
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        pytest.skip("needs a CUDA device and the CUDA build")
    hopper = torch.cuda.get_device_capability() == (9, 0)
    b1 = random_operand(2, 264, k, gen=gen, device="cuda", layout="linear")
    b2, b3 = (random_operand(None, 256, k, gen=gen, device="cuda") for _ in range(2))
    (t2, ts2), (t3, ts3) = by_tile(b2), by_tile(b3)
    for x_dtype in (torch.bfloat16, torch.float16):
        x = activations((2, m, k), x_dtype, gen, "cuda")
        g = global_scale_of(x)
        if hopper and not FORCED:
            # gemv_mma_can_run: up to 2 blocks of 16 a thread of 512
            quantized = " (roles swapped, x quantized in the kernel)" if m * k <= 2 * 512 * 16 else " (roles swapped)"
            assert nk.kernel_name("gemm_w4a4", x[0], t2, ts2) == "gemv_mma" + quantized
            assert nk.kernel_name("gemm_w4a4", x[0], b1.data[0], b1.sf[0]).endswith("(roles swapped)")
        out = poisoned((2, m, 264), "cuda", x_dtype)
        nk.gemm_w4a4(x, b1.data, b1.sf, global_scale=g, alpha=-0.75, out=out)
        for i in range(2):
            assert_matches(out[i], reference.gemm_w4a4(x[i], b1.data[i], b1.sf[i], g, -0.75), f"{m}x{k} batch {i}")
        got = nk.gemm_w4a4(x[1], t2, ts2, global_scale=g)
        assert_matches(got, reference.gemm_w4a4(x[1], b2.data, b2.sf, g), f"by tile {m}x{k} {x_dtype}")
        got = nk.dual_gemm_w4a4(x[0], t2, t3, ts2, ts3, global_scale=g, alpha1=0.5, alpha2=-2.0)
        assert_matches(got, reference.dual_gemm_w4a4(x[0], b2.data, b3.data, b2.sf, b3.sf, g, 0.5, -2.0),
                       f"dual by tile {m}x{k} {x_dtype}")
        got = nk.dual_gemm_w4a4(x[0], b1.data[0], b1.data[1], b1.sf[0], b1.sf[1], global_scale=g)
        assert_matches(got, reference.dual_gemm_w4a4(x[0], b1.data[0], b1.data[1], b1.sf[0], b1.sf[1], g),
                       f"dual {m}x{k} {x_dtype}")
    x = activations((m, k), torch.bfloat16, gen, "cuda")
    for wide in (2.0**-12, 16.0):  # scales subnormal and zero, saturated at 448
        g = global_scale_of(x) * wide
        got = nk.gemm_w4a4(x, t2, ts2, global_scale=g)
        assert_matches(got, reference.gemm_w4a4(x, b2.data, b2.sf, g), f"{m}x{k} global scale x {wide}")
    x[m - 1, k // 2] = float("nan")  # its block's scale is NaN: row m - 1 is NaN
    got = nk.gemm_w4a4(x, t2, ts2, global_scale=global_scale_of(x[:m - 1]))
    assert torch.isnan(got[m - 1]).all() and not torch.isnan(got[:m - 1]).any()


def test_w4a4_cuda_graph(gen):
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        pytest.skip("needs a CUDA device and the CUDA build")
    b = random_operand(None, 512, 2048, gen=gen, device="cuda")
    g = torch.tensor([0.25], device="cuda")
    for m in (1, 8):
        x = activations((m, 2048), torch.bfloat16, gen, "cuda")
        out = torch.empty(m, 512, dtype=torch.bfloat16, device="cuda")
        nk.gemm_w4a4(x, b.data, b.sf, global_scale=g, out=out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            nk.gemm_w4a4(x, b.data, b.sf, global_scale=g, out=out)
        for scale in (0.5, 3.0):
            x.copy_(activations((m, 2048), torch.bfloat16, gen, "cuda"))
            g.fill_(scale)
            out.fill_(float("nan"))
            graph.replay()
            assert_matches(out, reference.gemm_w4a4(x, b.data, b.sf, g), f"graph replay M = {m}, scale {scale}")


def test_w4a4_bad_arguments(gen):
    b = random_operand(None, 5, 32, gen=gen)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="gemm_w4a4: weights repacked for bf16"):
        nk.gemm_w4a4(x, nk.pack_bf16_pairs(b.data), b.sf)
    with pytest.raises(TypeError, match="dual_gemm_w4a4: weights repacked for bf16"):
        nk.kernel_name("dual_gemm_w4a4", x, b.data, nk.pack_bf16_pairs(b.data), b.sf, b.sf)
    with pytest.raises(TypeError, match="gemm_w4a4: x must be float16 or bfloat16"):
        nk.gemm_w4a4(x.float(), b.data, b.sf)
    with pytest.raises(ValueError, match="global_scale=-1.0 must be positive"):
        nk.gemm_w4a4(x, b.data, b.sf, global_scale=-1.0)
    with pytest.raises(ValueError, match="gemm_w4a4: global_scale must be finite and positive"):
        nk.gemm_w4a4(x, b.data, b.sf, global_scale=torch.tensor([0.0]))
    with pytest.raises(ValueError, match="gemm_w4a4: global_scale must hold one value"):
        nk.gemm_w4a4(x, b.data, b.sf, global_scale=torch.ones(3))
    with pytest.raises(ValueError, match="gemm_w4a4: b has K/2=16 but x has K=48"):
        nk.gemm_w4a4(torch.zeros(3, 48, dtype=torch.bfloat16), b.data, b.sf)
    with pytest.raises(ValueError, match="gemm_w4a4: out has shape"):
        nk.gemm_w4a4(x, b.data, b.sf, out=torch.empty(3, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="dual_gemm_w4a4: b2 has shape"):
        nk.dual_gemm_w4a4(x, b.data, b.data[:4], b.sf, b.sf)
    with pytest.raises(ValueError, match="kernel_name: dual_gemm_w4a4 takes 5 tensors"):
        nk.kernel_name("dual_gemm_w4a4", x, b.data, b.sf)
    t, ts = by_tile(random_operand(None, 128, 256, gen=gen))
    xt = torch.zeros(3, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="gemm_w4a4: sfb laid out by tile must be"):
        nk.gemm_w4a4(xt, t, ts[..., :1024])
    with pytest.raises(ValueError, match=r"gemm_w4a4: b laid out by tile must be \[1, N/128, ceil\(K/256\)=2"):
        nk.gemm_w4a4(torch.zeros(3, 512, dtype=torch.bfloat16), t, ts)
    with pytest.raises(ValueError, match="dual_gemm_w4a4: b2 has shape"):
        nk.dual_gemm_w4a4(xt, t, torch.zeros(128, 128, dtype=torch.uint8), ts, ts)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="gemm_w4a4: global_scale is on cuda"):
            nk.gemm_w4a4(x, b.data, b.sf, global_scale=torch.ones(1, device="cuda"))


def test_layer_laid_out_by_tile(device, gen):
    """A w4a4 NVFP4Linear of N % 128 == 0 on a GPU holds the checkpoint's bytes laid out by tile with its scales
    (here forced on the CPU too): loading, state_dict, the accessors, set_weight_*, sharding and moves see the
    checkpoint's tensors, and its outputs are the reference's at decode and prefill row counts."""
    from helpers import random_layer
    from test_nn import fake_quantized

    def by_tile_layer(layer):
        if device == "cpu":
            layer._relayout(to_tiles=True)
        assert layer.weight.dim() == 4 and layer.weight.dtype == torch.uint8 and layer.weight_scale.dim() == 4
        return layer

    src = random_layer(256, 512, True, "w4a4", gen)
    layer = by_tile_layer(nk.nn.NVFP4Linear(512, 256, True, mode="w4a4", device=device))
    layer.load_state_dict(src.state_dict())
    assert layer.weight.dim() == 4 and torch.equal(layer.weight_codes().cpu(), src.weight)
    assert torch.equal(layer.weight_scales().cpu().view(torch.uint8), src.weight_scale.view(torch.uint8))
    sd = layer.state_dict()
    assert sd["weight"].shape == (256, 256) and torch.equal(sd["weight"].cpu(), src.weight)
    assert torch.equal(sd["weight_scale"].cpu().view(torch.uint8), src.weight_scale.view(torch.uint8))
    for m in (1, 3, 8, 40):
        x = activations((m, 512), torch.bfloat16, gen, device)
        assert_matches(layer(x), fake_quantized(layer, x), f"w4a4 by tile M = {m}")
    other = random_layer(256, 512, True, "w4a4", gen)
    layer.set_weight_codes(other.weight.to(device))
    layer.set_weight_scales(other.weight_scale.to(device))
    assert layer.weight.dim() == 4 and torch.equal(layer.weight_codes().cpu(), other.weight)
    x = activations((2, 3, 512), torch.float16, gen, device)
    assert_matches(layer(x), fake_quantized(layer, x), "w4a4 by tile, set weights, fp16 x")
    for dim in (0, 1):
        part = nk.nn.shard(layer, 1, 2, dim=dim)
        want = other.weight[128:] if dim == 0 else other.weight[:, 128:]
        assert torch.equal(part.weight_codes().cpu(), want), dim
        xr = x if dim == 0 else x[..., 256:]
        assert_matches(part(xr), fake_quantized(part, xr), f"shard dim {dim}")
    built = nk.nn.NVFP4Linear.from_linear(torch.nn.Linear(512, 256, dtype=torch.bfloat16, device=device),
                                          input_scale=0.01)
    assert (built.weight.dim() == 4) == (device == "cuda")
    back = layer.to("cpu")
    assert back.weight.dim() == 2 and back.weight.dtype == torch.uint8 and torch.equal(back.weight, other.weight)
