"""W4A16 weights repacked for bf16 activations (ops.pack_bf16_pairs, csrc/numerics.h's NVFP4_PAIR_BIT): the
repacking is a permutation of each word's bits that the GPU decoder's formula takes to bf16 pairs of adjacent
codes, and gemm_w4a16 / dual_gemm_w4a16 on repacked weights equal the exact reference of the checkpoint's, on
every kernel that takes them (the GEMV, the tiled kernels, wgmma with and without pre-decoded activations)."""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand
from conftest import assert_matches
from helpers import FORCED, cublas_built, w4a16_slack, wgmma_built
from test_epilogue import activations, bias_of, poisoned

MASK32 = 0xFFFFFFFF


def rotl(w, s):
    return ((w << s) | (w >> (32 - s))) & MASK32


def decoder_pairs(w):
    """numerics.cuh's nvfp4_e2m1x8_pairs_to_bf162x4 before the scale: four 32-bit bf16x2 bit patterns."""
    bits = 0x81C081C0
    return [w & bits, rotl(w, 10) & bits, rotl(w, 13) & bits, (((w & 0x001B001B) * 0x1084) & MASK32) & bits]


def bf16_bits_of_code(c):
    """A code's bits where the decoders put them in a bf16: m e0 e1 at 6..8, the sign at 15."""
    return ((c & 7) << 6) | ((c >> 3) << 15)


def test_pack_is_a_bit_permutation_the_decoder_inverts(gen):
    def as_i32(values):
        return torch.tensor([v - 2**32 if v >= 2**31 else v for v in values], dtype=torch.int32)

    # random words, single bits, and every value of every byte
    words = torch.cat([torch.randint(-2**31, 2**31, (4096,), generator=gen, dtype=torch.int64).to(torch.int32),
                       as_i32([1 << i for i in range(32)]), as_i32([v << (8 * p) for p in range(4) for v in range(256)])])
    packed = nk.pack_bf16_pairs(words.view(torch.uint8).view(-1, 8)).view(-1)
    assert packed.dtype == torch.int32 and packed.shape == words.shape
    assert torch.equal(nk.unpack_bf16_pairs(packed.view(-1, 2)).view(torch.int32).view(-1), words)
    for w, p in zip(words.tolist(), packed.tolist()):
        w, p = w & MASK32, p & MASK32
        assert bin(w).count("1") == bin(p).count("1")
        codes = [(w >> (4 * i)) & 15 for i in range(8)]
        want = [bf16_bits_of_code(codes[2 * q]) | bf16_bits_of_code(codes[2 * q + 1]) << 16 for q in range(4)]
        assert decoder_pairs(p) == want, (hex(w), hex(p))


def test_pack_shapes_and_devices(device, gen):
    b = random_operand(None, 5, 48, gen=gen, device=device)
    w = nk.pack_bf16_pairs(b.data)
    assert w.shape == (5, 6) and w.dtype == torch.int32 and w.device == b.data.device
    back = nk.unpack_bf16_pairs(w)
    assert back.dtype == torch.uint8 and torch.equal(back, b.data.view(torch.uint8))
    # batched and strided codes; rows are packed on their own (word j = codes 8j .. 8j + 7 of the row)
    bl = random_operand(3, 4, 64, gen=gen, device=device)
    assert torch.equal(nk.pack_bf16_pairs(bl.data)[1], nk.pack_bf16_pairs(bl.data[1]))
    wide = random_operand(None, 4, 128, gen=gen, device=device)
    assert torch.equal(nk.pack_bf16_pairs(wide.data[:, 16:48]), nk.pack_bf16_pairs(wide.data)[:, 4:12])


# decode sizes (the GEMV's 1, 2 and 4 n8 tiles, the tiled kernels past 32 rows or at K % 128 == 64) and prefill
# sizes (wgmma on Hopper: 32-, 64- and 128-row tiles, split-K and pre-decoded activations where planned)
SHAPES = [(1, 300, 4096), (8, 7, 1088), (16, 129, 128), (24, 33, 4096), (33, 300, 1024), (5, 65, 192),
          (64, 7, 64), (129, 300, 1024), (200, 513, 4096), (300, 136, 576)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_pairs(device, gen, m, n, k):
    for layout in ("linear", "blocked"):
        b = random_operand(None, n, k, gen=gen, device=device, layout=layout)
        w = nk.pack_bf16_pairs(b.data)
        bias = bias_of(n, torch.float32, gen, device)
        x = activations((m, k), torch.bfloat16, gen, device)
        if device == "cuda" and not FORCED:
            name = nk.kernel_name("gemm_w4a16", x, w, b.sf)
            assert "weights in bf16 pairs" in name, name
            assert name.replace(", weights in bf16 pairs", "") == nk.kernel_name("gemm_w4a16", x, b.data, b.sf)
        slack = w4a16_slack(x, b.data, b.sf, -1.5)
        for out_dtype in (torch.bfloat16, torch.float16):
            out = poisoned((m, n), device, out_dtype)
            nk.gemm_w4a16(x, w, b.sf, alpha=-1.5, bias=bias, out=out)
            assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf, -1.5, bias, out_dtype),
                           f"pairs {m}x{n}x{k} {layout} -> {out_dtype}", slack=slack)


@pytest.mark.parametrize("m,n,k", [(1, 300, 4096), (16, 129, 1024), (17, 64, 2048), (40, 129, 512),
                                   (200, 96, 2048)])
def test_dual_pairs(device, gen, m, n, k):
    b1 = random_operand(None, n, k, gen=gen, device=device, layout="blocked")
    for layout in ("blocked", "linear"):
        b2 = random_operand(None, n, k, gen=gen, device=device, layout=layout)
        x = activations((m, k), torch.bfloat16, gen, device)
        w1, w2 = nk.pack_bf16_pairs(b1.data), nk.pack_bf16_pairs(b2.data)
        d1, d2, s1, s2 = b1.data, b2.data, b1.sf, b2.sf
        out = poisoned((*x.shape[:-1], n), device, torch.bfloat16)
        nk.dual_gemm_w4a16(x, w1, w2, s1, s2, alpha1=0.5, alpha2=-2.0, out=out)
        assert_matches(out, reference.dual_gemm_w4a16(x, d1, d2, s1, s2, 0.5, -2.0), f"dual pairs {m}x{n}x{k} {layout}",
                       slack=w4a16_slack(x, d1, s1, 0.5, d2, s2, -2.0))


def tiled(b):
    """An operand's weights repacked for bf16 and laid out by tile, as a dense problem takes them."""
    return nk.layouts.to_expert_tiles(nk.pack_bf16_pairs(b.data)[None], b.sf[None])


# dense weights laid out by tile on every route: the GEMV (8, 16 and 32 rows; its 3-CTA instance: many tiles;
# split-K: few), the tiled kernels (K % 128 == 64; K past whole groups of 4 steps), wgmma on Hopper (32-, 64- and
# 128-row tiles, split-K, stream-K, pre-decoded activations)
TILE_SHAPES = [(1, 256, 4096), (3, 6144, 1024), (12, 128, 2048), (24, 384, 4096), (5, 128, 1088), (8, 256, 192),
               (40, 256, 512), (129, 384, 1024), (200, 512, 4096), (128, 4096, 2048)]


@pytest.mark.parametrize("m,n,k", TILE_SHAPES)
def test_dense_by_tile(device, gen, m, n, k):
    """Weights laid out by tile: the checkpoint layout's results bit for bit, on the same kernel."""
    b, b2 = (random_operand(None, n, k, gen=gen, device=device) for _ in range(2))
    (t, ts), (t2, ts2) = tiled(b), tiled(b2)
    w, w2 = nk.pack_bf16_pairs(b.data), nk.pack_bf16_pairs(b2.data)
    x = activations((2, m // 2, k) if m % 2 == 0 else (m, k), torch.bfloat16, gen, device)  # leading dims: rows
    bias = bias_of(n, torch.float32, gen, device)
    want = nk.gemm_w4a16(x, w, b.sf, alpha=-1.5, bias=bias)
    got = poisoned(want.shape, device, torch.bfloat16)
    nk.gemm_w4a16(x, t, ts, alpha=-1.5, bias=bias, out=got)
    assert want.shape == (*x.shape[:-1], n) and torch.equal(got.view(torch.int16), want.view(torch.int16)), (m, n, k)
    assert torch.equal(nk.gemm_w4a16(x, t, ts, alpha=-1.5, bias=bias).view(torch.int16), want.view(torch.int16))
    if m < 128:
        want = nk.dual_gemm_w4a16(x, w, w2, b.sf, b2.sf, alpha1=0.5, alpha2=-2.0)
        got = nk.dual_gemm_w4a16(x, t, t2, ts, ts2, alpha1=0.5, alpha2=-2.0)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), ("dual", m, n, k)
    if device == "cuda" and not FORCED:
        x2 = x.reshape(-1, k)
        name, flat = nk.kernel_name("gemm_w4a16", x2, t, ts), nk.kernel_name("gemm_w4a16", x2, w, b.sf)
        assert name == (flat[:-1] + " laid out by tile)" if flat.startswith("w4a16") else flat), (name, flat)
    # the checkpoint's bytes laid out by tile (what a w4a4 layer holds), bf16 and fp16 x: those of the bytes
    bt, bts = nk.layouts.to_expert_tiles(b.data[None], b.sf[None])
    for xx in (x, x.half()):
        want = nk.gemm_w4a16(xx, b.data, b.sf, alpha=-1.5, bias=bias)
        got = nk.gemm_w4a16(xx, bt, bts, alpha=-1.5, bias=bias)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), ("bytes", xx.dtype, m, n, k)


@pytest.mark.skipif(not cublas_built() or bool(FORCED), reason="the cuBLASLt route: Hopper, a build with it, unforced")
def test_prefill_every_layout_on_cublas(gen):
    """Prefill (M >= 1024, K <= 4096 on Hopper): the weights decoded then cuBLASLt, from every layout (bytes with
    linear or blocked scales, bf16 pairs, laid out by tile): the same decoded values, the same algorithm, the same
    bits; the exact reference; alpha on the device, a bias in cuBLASLt's epilogue; fp16 x; W4A4's quantized values."""
    m, n, k = 1024, 384, 4096
    b = random_operand(None, n, k, gen=gen, device="cuda")
    blocked = nk.layouts.to_blocked(b.sf)
    (t, ts), w = tiled(b), nk.pack_bf16_pairs(b.data)
    x = activations((m, k), torch.bfloat16, gen, "cuda")
    alpha, bias = torch.tensor(-1.5, device="cuda"), bias_of(n, torch.bfloat16, gen, "cuda")
    outs = []
    for codes, sf in ((b.data, b.sf), (b.data, blocked), (w, b.sf), (t, ts)):
        assert nk.kernel_name("gemm_w4a16", x, codes, sf).startswith("cublas"), nk.kernel_name("gemm_w4a16", x, codes, sf)
        out = poisoned((m, n), "cuda", torch.bfloat16)
        nk.gemm_w4a16(x, codes, sf, alpha=alpha, bias=bias, out=out)
        outs.append(out)
    assert_matches(outs[0], reference.gemm_w4a16(x, b.data, b.sf, -1.5, bias), "cublas bytes",
                   slack=w4a16_slack(x, b.data, b.sf, -1.5))
    for o in outs[1:]:
        assert torch.equal(o.view(torch.int16), outs[0].view(torch.int16))
    xh = x.half()
    assert nk.kernel_name("gemm_w4a16", xh, b.data, b.sf).startswith("cublas")
    assert_matches(nk.gemm_w4a16(xh, b.data, b.sf, alpha=0.25), reference.gemm_w4a16(xh, b.data, b.sf, 0.25),
                   "cublas fp16", slack=w4a16_slack(xh, b.data, b.sf, 0.25))
    # W4A4: x quantized to the values its codes stand for, then this route
    assert nk.kernel_name("gemm_w4a4", x, b.data, b.sf).startswith("cublas")
    got = nk.gemm_w4a4(x, b.data, b.sf, global_scale=0.5, alpha=2.0, bias=bias)
    assert_matches(got, reference.gemm_w4a4(x, b.data, b.sf, 0.5, 2.0, bias), "cublas w4a4")
    # a dual stays on the wgmma kernel; a bias of another type than the output's has no cuBLASLt algorithm here
    assert not nk.kernel_name("dual_gemm_w4a16", x, b.data, b.data, b.sf, b.sf).startswith("cublas")
    out = poisoned((m, n), "cuda", torch.bfloat16)
    nk.gemm_w4a16(x, b.data, b.sf, bias=bias.float(), out=out)
    assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf, None, bias.float()), "fp32 bias",
                   slack=w4a16_slack(x, b.data, b.sf))


def by_tile_route(m, n, k, dual=False):
    """The kernel name of m rows against n x k weights laid out by tile (no data: zeros)."""
    codes = nk.pack_bf16_pairs(torch.zeros(n, k // 2, dtype=torch.uint8, device="cuda"))
    b = nk.layouts.to_expert_tiles(codes[None], torch.zeros(1, n, k // 16, dtype=torch.float8_e4m3fn, device="cuda"))
    x = torch.zeros(m, k, dtype=torch.bfloat16, device="cuda")
    return nk.kernel_name("dual_gemm_w4a16", x, b[0], b[0], b[1], b[1]) if dual else nk.kernel_name("gemm_w4a16", x, *b)


@pytest.mark.parametrize("m", [9, 16])
def test_dense_by_tile_rows_9_to_16(device, gen, m):
    """9 to 16 rows of weights laid out by tile (plan.cu by_tile_wgmma_pays, w4a16.cu config_of): w4a16.cu's 16-row
    tiles where each CTA takes a long share of K, else on Hopper the wgmma kernel's 32-row tile; the GEMV where it
    fills its CTA slots. The exact reference on a short K (a gemm and a dual)."""
    n, k = 16384, 256
    b, b2 = (random_operand(None, n, k, gen=gen, device=device) for _ in range(2))
    (t, ts), (t2, ts2) = tiled(b), tiled(b2)
    x = activations((m, k), torch.bfloat16, gen, device)
    bias = bias_of(n, torch.float32, gen, device)
    if device == "cuda" and not FORCED:
        for dual in (False, True):
            assert "16x64 tiles" in by_tile_route(m, n, 8192, dual), (m, dual)  # 2731 or more K a CTA
            name = by_tile_route(m, n, k, dual)  # split K, 256 a CTA
            assert name.startswith("wgmma") if wgmma_built() else "16x64 tiles" in name, (name, dual)
        if wgmma_built() and torch.cuda.get_device_properties(0).multi_processor_count == 132:  # H100 SXM, H200
            assert "GEMV" in by_tile_route(m, 4096, 8192)  # 256 GEMV CTAs for 264 slots
            assert by_tile_route(m, 5120, 8192).startswith("wgmma")  # 320: a second wave
    out = poisoned((m, n), device, torch.bfloat16)
    nk.gemm_w4a16(x, t, ts, alpha=-1.5, bias=bias, out=out)
    assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf, -1.5, bias, torch.bfloat16), f"by tile {m}x{n}x{k}",
                   slack=w4a16_slack(x, b.data, b.sf, -1.5))
    out = poisoned((m, n), device, torch.bfloat16)
    nk.dual_gemm_w4a16(x, t, t2, ts, ts2, alpha1=0.5, alpha2=-2.0, out=out)
    assert_matches(out, reference.dual_gemm_w4a16(x, b.data, b2.data, b.sf, b2.sf, 0.5, -2.0),
                   f"dual by tile {m}x{n}x{k}", slack=w4a16_slack(x, b.data, b.sf, 0.5, b2.data, b2.sf, -2.0))


def test_dense_by_tile_bad_arguments(device, gen):
    b = random_operand(None, 128, 256, gen=gen, device=device)
    t, ts = tiled(b)
    x = torch.zeros(3, 256, dtype=torch.bfloat16, device=device)
    cases = [
        (lambda: nk.gemm_w4a16(x.half(), t, ts), TypeError, "need bfloat16 x"),
        (lambda: nk.gemm_w4a16(torch.zeros(3, 512, dtype=torch.bfloat16, device=device), t, ts), ValueError,
         r"ceil\(K/256\)=2"),
        (lambda: nk.gemm_w4a16(x, torch.cat([t, t]), torch.cat([ts, ts])), ValueError, r"must be \[1, N/128"),
        (lambda: nk.gemm_w4a16(x, t, ts[..., :1024]), ValueError, "sfb laid out by tile must be"),
        (lambda: nk.gemm_w4a16(x, t, b.sf), ValueError, "sfb laid out by tile must be"),
        (lambda: nk.dual_gemm_w4a16(x, t, nk.pack_bf16_pairs(b.data), ts, b.sf), ValueError, "b2 has shape"),
        (lambda: nk.gemm_w4a4(x, t, ts, global_scale=1.0), TypeError, "repacked for bf16 .* are for gemm_w4a16"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()


def test_pairs_nan_scale(device, gen):
    b = random_operand(None, 8, 128, gen=gen, device=device)
    b.sf.view(torch.uint8)[3, 5] = 0x7F  # an e4m3 NaN: row 3's outputs are NaN
    w = nk.pack_bf16_pairs(b.data)
    for m in (4, 64):
        x = activations((m, 128), torch.bfloat16, gen, device)
        got = nk.gemm_w4a16(x, w, b.sf)
        assert torch.isnan(got[:, 3]).all() and not torch.isnan(torch.cat([got[:, :3], got[:, 4:]], 1)).any()
        assert_matches(got, reference.gemm_w4a16(x, b.data, b.sf), f"pairs NaN scale M = {m}")


def test_pairs_bad_arguments(gen):
    b = random_operand(None, 5, 32, gen=gen)
    w = nk.pack_bf16_pairs(b.data)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="repacked for bf16 .* need bfloat16 x"):
        nk.gemm_w4a16(x.half(), w, b.sf)
    with pytest.raises(TypeError, match="both be repacked"):
        nk.dual_gemm_w4a16(x, w, b.data, b.sf, b.sf)
    with pytest.raises(TypeError, match="both be repacked"):
        nk.dual_gemm_w4a16(x, b.data, w, b.sf, b.sf)
    with pytest.raises(ValueError, match="K/8=4 but x has K=48"):
        nk.gemm_w4a16(torch.zeros(3, 48, dtype=torch.bfloat16), w, b.sf)
    with pytest.raises(ValueError, match="contiguous along K"):
        nk.gemm_w4a16(x, torch.zeros(4, 5, dtype=torch.int32).t(), b.sf)
    with pytest.raises(TypeError, match="must be float4_e2m1fn_x2 or uint8"):
        nk.gemm(b.data, w, b.sf, b.sf)  # W4A4 takes no repacked weights
    with pytest.raises(TypeError, match="repacked for bf16 .* need bfloat16 x"):
        nk.grouped_mm(x.half(), w.unsqueeze(0), b.sf.unsqueeze(0), torch.tensor([3], dtype=torch.int32))
    with pytest.raises(TypeError, match="must be float4_e2m1fn_x2 or uint8"):
        nk.pack_bf16_pairs(w)
    with pytest.raises(ValueError, match="K a multiple of 16"):
        nk.pack_bf16_pairs(torch.zeros(3, 12, dtype=torch.uint8))
    with pytest.raises(TypeError, match="must be int32"):
        nk.unpack_bf16_pairs(b.data)
    with pytest.raises(ValueError, match="K a multiple of 16"):
        nk.unpack_bf16_pairs(torch.zeros(3, 3, dtype=torch.int32))


def test_pairs_cuda_graph(gen):
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        pytest.skip("needs a CUDA device and the CUDA build")
    b = random_operand(None, 300, 4096, gen=gen, device="cuda")
    w = nk.pack_bf16_pairs(b.data)
    x = activations((1, 4096), torch.bfloat16, gen, "cuda")
    out = torch.empty(1, 300, dtype=torch.bfloat16, device="cuda")
    nk.gemm_w4a16(x, w, b.sf, out=out)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        nk.gemm_w4a16(x, w, b.sf, out=out)
    x.copy_(activations((1, 4096), torch.bfloat16, gen, "cuda"))
    out.fill_(float("nan"))
    g.replay()
    assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf), "pairs graph replay",
                   slack=w4a16_slack(x, b.data, b.sf))


def test_layer_laid_out_by_tile(device, gen):
    """A w4a16 bf16 NVFP4Linear of N % 128 == 0 on a GPU holds its weight repacked and laid out by tile with its
    scales (here forced on the CPU too): loading, state_dict, the codes' and scales' accessors, sharding, fp16 x
    and moves see the checkpoint's tensors, and its outputs are bit for bit those of the repacked layout."""
    from helpers import random_layer

    def tiled(layer):
        if device == "cpu":
            layer._relayout(to_int32=True, to_tiles=True)
        assert layer.weight.dim() == 4 and layer.weight.dtype == torch.int32 and layer.weight_scale.dim() == 4
        return layer

    src = random_layer(256, 192, True, "w4a16", gen)
    codes, scales = src.weight, src.weight_scale
    layer = tiled(nk.nn.NVFP4Linear(192, 256, True, mode="w4a16", device=device))
    layer.load_state_dict(src.state_dict())
    flat = nk.nn.NVFP4Linear(192, 256, True, mode="w4a16", device=device)
    flat.load_state_dict(src.state_dict())
    flat._relayout(to_int32=True, to_tiles=False)
    assert layer.weight.dim() == 4 and flat.weight.dim() == 2
    assert torch.equal(layer.weight_codes().cpu(), codes)
    assert torch.equal(layer.weight_scales().cpu().view(torch.uint8), scales.view(torch.uint8))
    sd = layer.state_dict()
    assert torch.equal(sd["weight"].cpu(), codes) and torch.equal(sd["weight_scale"].cpu().view(torch.uint8),
                                                                 scales.view(torch.uint8))
    x = activations((2, 5, 192), torch.bfloat16, gen, device)
    assert torch.equal(layer(x).view(torch.int16), flat(x).view(torch.int16))
    other = random_layer(256, 192, True, "w4a16", gen)  # set_weight_*: in place, in the layer's layout
    layer.set_weight_codes(other.weight.to(device))
    layer.set_weight_scales(other.weight_scale.to(device))
    flat.set_weight_codes(other.weight.to(device))
    flat.set_weight_scales(other.weight_scale.to(device))
    assert layer.weight.dim() == 4 and torch.equal(layer.weight_codes().cpu(), other.weight)
    assert torch.equal(layer(x).view(torch.int16), flat(x).view(torch.int16))
    for dim in (0, 1):
        part, want = nk.nn.shard(layer, 1, 2, dim=dim), nk.nn.shard(flat, 1, 2, dim=dim)
        assert torch.equal(part.weight_codes(), want.weight_codes()), dim
        assert torch.equal(part.weight_scales().view(torch.uint8), want.weight_scales().view(torch.uint8)), dim
        xr = x if dim == 0 else x[..., 96:]
        assert torch.equal(part(xr).view(torch.int16), want(xr).view(torch.int16)), dim
    built = nk.nn.NVFP4Linear.from_linear(torch.nn.Linear(192, 256, dtype=torch.bfloat16, device=device),
                                          mode="w4a16")
    assert (built.weight.dim() == 4) == (device == "cuda")
    assert torch.equal(layer(x.half()).float(), flat(x.half()).float())  # fp16 x: the checkpoint's bytes
    assert layer.weight.dim() == 2 and layer.weight.dtype == torch.uint8
    back = tiled(layer.to(device)).to("cpu")
    assert back.weight.dim() == 2 and back.weight.dtype == torch.uint8 and torch.equal(back.weight, other.weight)


def test_layer_holds_repacked_weights(gen):
    """A w4a16 bf16 NVFP4Linear on a GPU keeps its weight repacked; state_dict, loading, sharding, moves and casts
    see the checkpoint's bytes, and its outputs are the reference's."""
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        pytest.skip("needs a CUDA device and the CUDA build")
    from helpers import random_layer
    from test_nn import fake_quantized

    cpu = random_layer(96, 256, True, "w4a16", gen)
    codes = cpu.weight.clone()
    assert codes.dtype == torch.uint8  # on the host: the checkpoint's bytes
    layer = nk.nn.NVFP4Linear(256, 96, True, mode="w4a16", device="cuda")
    assert layer.weight.dtype == torch.int32 and layer.weight.shape == (96, 32)
    layer.load_state_dict(cpu.state_dict())
    assert torch.equal(layer.weight, nk.pack_bf16_pairs(codes).cuda())
    assert torch.equal(layer.weight_codes().cpu(), codes)
    sd = layer.state_dict()
    assert sd["weight"].dtype == torch.uint8 and torch.equal(sd["weight"].cpu(), codes)
    x = activations((5, 256), torch.bfloat16, gen, "cuda")
    assert_matches(layer(x), fake_quantized(layer, x), "repacked layer", slack=w4a16_slack(x, codes.cuda(),
                                                                                            layer.weight_scale))
    moved = cpu.to("cuda")  # packed on the host before the move
    assert moved.weight.dtype == torch.int32 and torch.equal(moved.weight, layer.weight)
    assert torch.equal(moved(x), layer(x))
    half = nk.nn.NVFP4Linear(256, 96, True, mode="w4a16", device="cuda")
    half.load_state_dict(cpu.state_dict())
    half.half()
    assert half.weight.dtype == torch.uint8 and torch.equal(half.weight.cpu(), codes)
    assert_matches(half(x.half()), fake_quantized(half, x.half()), "cast to fp16",
                   slack=w4a16_slack(x.half(), codes.cuda(), half.weight_scale))
    half.bfloat16()
    assert half.weight.dtype == torch.int32 and torch.equal(half.weight, layer.weight)
    once = nk.nn.NVFP4Linear(256, 96, True, mode="w4a16", device="cuda")
    once.load_state_dict(cpu.state_dict())
    assert_matches(once(x.half()), fake_quantized(once, x.half()), "fp16 x on a bf16 layer",
                   slack=w4a16_slack(x.half(), codes.cuda(), once.weight_scale))
    assert once.weight.dtype == torch.uint8  # fp16 x: the checkpoint's bytes from then on
    assert_matches(once(x), fake_quantized(once, x), "bf16 x after", slack=w4a16_slack(x, codes.cuda(),
                                                                                       once.weight_scale))
    back = layer.to("cpu")  # the host's layer reads the checkpoint's bytes
    assert back.weight.dtype == torch.uint8 and torch.equal(back.weight, codes)
    layer = back.to("cuda")
    for dim, cut in ((0, lambda t, r: t[r * 48:(r + 1) * 48]), (1, lambda t, r: t[:, r * 64:(r + 1) * 64])):
        for r in range(2):  # each shard's weight: its slice of the checkpoint's bytes, repacked
            part = nk.nn.shard(layer, r, 2, dim=dim)
            assert part.weight.dtype == torch.int32 and torch.equal(part.weight_codes().cpu(), cut(codes, r))
            xr = x if dim == 0 else x[:, r * 128:(r + 1) * 128]
            assert_matches(part(xr), fake_quantized(part, xr), f"shard dim {dim} rank {r}",
                           slack=w4a16_slack(xr, part.weight_codes(), part.weight_scale))
