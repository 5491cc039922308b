"""The ops' epilogue and W4A16 against the exact reference: output dtype (fp16, bf16), alpha
(a dual's two, a group's per problem), bias, and the W4A16 ops (16-bit activations times NVFP4
weights), on odd shapes, both scale layouts, into poisoned outputs, and their bad arguments."""

import itertools

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand
from conftest import assert_matches
from helpers import FORCED, gemm_problem, gemv_problem, layouts_for, w4a16_slack, wgmma_built

DTYPES = (torch.float16, torch.bfloat16)
SHAPES = [(m, n, k) for m, n, k in itertools.product((1, 7, 129), (1, 7, 129), (16, 48, 1040))
          if not (m == 129 and n == 129 and k == 1040)]


def poisoned(shape, device, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def activations(shape, dtype, gen, device):
    """16-bit activations over several binades, some exact zeros and negative zeros. (Wider ranges
    make fp32 sums of cancelling terms differ from the exact ones by more than the outputs' ulp.)"""
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-3, 4, shape, generator=gen).float())
    x[torch.rand(shape, generator=gen) < 0.05] = 0.0
    x[torch.rand(shape, generator=gen) < 0.02] = -0.0
    return x.to(dtype).to(device)


def bias_of(n, dtype, gen, device):
    return None if dtype is None else (torch.randn(n, generator=gen) * 4).to(dtype).to(device)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_dtype_alpha_bias(device, gen, m, n, k):
    layouts = layouts_for(m, n, k)
    a, b = gemm_problem(None, m, n, k, gen, device, layouts)
    for out_dtype, bias_dtype in ((torch.float16, None), (torch.bfloat16, torch.float32),
                                  (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16)):
        bias = bias_of(n, bias_dtype, gen, device)
        want = reference.gemm(a.data, b.data, a.sf, b.sf, 0.75, bias, out_dtype)
        got = nk.gemm(a.data, b.data, a.sf, b.sf, alpha=0.75, bias=bias, out_dtype=out_dtype)
        assert_matches(got, want, f"gemm {m}x{n}x{k} {layouts} -> {out_dtype}, bias {bias_dtype}")
        out = poisoned((m, n), device, out_dtype)
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=torch.tensor(0.75, device=device), bias=bias, out=out)
        assert_matches(out, want, f"gemm out= {m}x{n}x{k} {out_dtype}")


@pytest.mark.parametrize("m,n,k", [(1, 7, 48), (7, 129, 1040), (129, 1, 16), (129, 7, 48), (3, 4, 2048)])
def test_dual_gemm_alphas(device, gen, m, n, k):
    layouts = layouts_for(m, n, k)
    a, b1 = gemm_problem(2, m, n, k, gen, device, layouts)
    b2 = random_operand(2, n, k, gen=gen, device=device, layout=layouts[1])
    args = (a.data, b1.data, b2.data, a.sf, b1.sf, b2.sf)
    for out_dtype in DTYPES:
        want = reference.dual_gemm(*args, 2.0, 0.375, out_dtype)
        assert_matches(nk.dual_gemm(*args, alpha1=2.0, alpha2=0.375, out_dtype=out_dtype), want,
                       f"dual {m}x{n}x{k} -> {out_dtype}")
        out = poisoned((2, m, n), device, out_dtype)
        nk.dual_gemm(*args, alpha1=torch.tensor(2.0, device=device), alpha2=torch.tensor(0.375), out=out)
        assert_matches(out, want, f"dual out= {m}x{n}x{k} -> {out_dtype}")
    # each alpha acts on its own branch, before the SiLU: swapped, they give another result (unless
    # every output is 0, as when N = 1 draws a zero weight row), which the kernels match too
    swapped = reference.dual_gemm(*args, 0.375, 2.0)
    assert_matches(nk.dual_gemm(*args, alpha1=0.375, alpha2=2.0), swapped, f"dual {m}x{n}x{k}, alphas swapped")
    want = reference.dual_gemm(*args, 2.0, 0.375).nan_to_num()
    assert not want.any() or not torch.equal(swapped.nan_to_num(), want)


def test_gemv_out_dtype(device, gen):
    a, b = gemv_problem(3, 129, 1040, gen, device, ("blocked", "linear"))
    for out_dtype in DTYPES:
        want = reference.gemv(a.data, b.data, a.sf, b.sf, -0.5, out_dtype)
        assert_matches(nk.gemv(a.data, b.data, a.sf, b.sf, alpha=-0.5, out_dtype=out_dtype), want, f"gemv {out_dtype}")


def test_group_gemm_alphas(device, gen):
    probs = [gemm_problem(None, m, n, k, gen, device, layouts_for(m, n, k)) for m, n, k in
             ((7, 129, 48), (129, 1, 1040), (1, 7, 16))]
    lists = ([a.data for a, _ in probs], [b.data for _, b in probs], [a.sf for a, _ in probs],
             [b.sf for _, b in probs])
    alphas = [0.5, -3.0, 1e-3]
    for out_dtype in DTYPES:
        want = reference.group_gemm(*lists, alphas, out_dtype)
        for given in (alphas, torch.tensor(alphas), torch.tensor(alphas, device=device)):
            got = nk.group_gemm(*lists, alphas=given, out_dtype=out_dtype)
            for g, (x, y) in enumerate(zip(got, want)):
                assert_matches(x, y, f"group {g} -> {out_dtype} alphas {type(given).__name__}")
        outs = [poisoned(w.shape, device, out_dtype) for w in want]
        nk.group_gemm(*lists, alphas=torch.tensor(alphas, device=device), outs=outs)
        for g, (x, y) in enumerate(zip(outs, want)):
            assert_matches(x, y, f"group outs= {g} -> {out_dtype}")


@pytest.mark.parametrize("m,n,k", SHAPES[::2])
def test_gemm_w4a16(device, gen, m, n, k):
    layout = layouts_for(m, n, k)[1]
    b = random_operand(None, n, k, gen=gen, device=device, layout=layout)
    for x_dtype, bias_dtype in ((torch.bfloat16, None), (torch.float16, torch.float32), (torch.bfloat16, torch.bfloat16)):
        x = activations((m, k), x_dtype, gen, device)
        bias = bias_of(n, bias_dtype, gen, device)
        want = reference.gemm_w4a16(x, b.data, b.sf, 0.5, bias)
        assert want.dtype == x_dtype
        got = nk.gemm_w4a16(x, b.data, b.sf, alpha=0.5, bias=bias)
        assert_matches(got, want, f"w4a16 {m}x{n}x{k} {x_dtype} {layout} bias {bias_dtype}")
        out = poisoned((m, n), device, torch.float16)
        nk.gemm_w4a16(x, b.data, b.sf, alpha=0.5, bias=bias, out=out)
        assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf, 0.5, bias, torch.float16), "w4a16 out=")


def test_w4a16_leading_dims_batches_and_strides(device, gen):
    """x [..., K] with a [N, K/2] weight (as F.linear), x [L, M, K] with [L, N, K/2]; rows of x
    that are not contiguous with each other (a slice of a wider tensor)."""
    b = random_operand(None, 33, 96, gen=gen, device=device, layout="blocked")
    x = activations((2, 3, 5, 96), torch.bfloat16, gen, device)
    assert_matches(nk.gemm_w4a16(x, b.data, b.sf), reference.gemm_w4a16(x, b.data, b.sf), "w4a16 4-d x")
    wide = activations((7, 160), torch.float16, gen, device)
    x = wide[:, 16:112]  # rows 160 apart
    assert_matches(nk.gemm_w4a16(x, b.data, b.sf), reference.gemm_w4a16(x, b.data, b.sf), "w4a16 strided x")
    x1 = activations((96,), torch.float16, gen, device)
    assert_matches(nk.gemm_w4a16(x1, b.data, b.sf), reference.gemm_w4a16(x1, b.data, b.sf), "w4a16 1-d x")
    bl = random_operand(3, 20, 64, gen=gen, device=device)
    xl = activations((3, 9, 64), torch.bfloat16, gen, device)
    out = poisoned((3, 9, 20), device, torch.bfloat16)
    nk.gemm_w4a16(xl, bl.data, bl.sf, out=out)
    assert_matches(out, reference.gemm_w4a16(xl, bl.data, bl.sf), "w4a16 batched out=")


@pytest.mark.parametrize("m,n,k", [(1, 7, 48), (7, 129, 1040), (129, 7, 16), (16, 64, 256)])
def test_dual_gemm_w4a16(device, gen, m, n, k):
    layout = layouts_for(m, n, k)[0]
    b1 = random_operand(None, n, k, gen=gen, device=device, layout=layout)
    b2 = random_operand(None, n, k, gen=gen, device=device, layout=layout)
    for x_dtype in DTYPES:
        x = activations((2, m, k), x_dtype, gen, device)
        want = reference.dual_gemm_w4a16(x, b1.data, b2.data, b1.sf, b2.sf, 0.25, 4.0)
        got = nk.dual_gemm_w4a16(x, b1.data, b2.data, b1.sf, b2.sf, alpha1=0.25, alpha2=4.0)
        assert_matches(got, want, f"dual w4a16 {m}x{n}x{k} {x_dtype}")
        out = poisoned((2, m, n), device, torch.bfloat16)
        nk.dual_gemm_w4a16(x, b1.data, b2.data, b1.sf, b2.sf, alpha1=0.25, alpha2=4.0, out=out)
        assert_matches(out, reference.dual_gemm_w4a16(x, b1.data, b2.data, b1.sf, b2.sf, 0.25, 4.0, torch.bfloat16),
                       "dual w4a16 out=")


# M > 16, K % 64 == 0, rows 16-byte aligned: the wgmma kernel's W4A16 on Hopper (csrc/cuda/plan.cu), w4a16.cu's
# larger tiles elsewhere. M = 40: a 64-row tile with rows past M.
WIDE_SHAPES = [(64, 7, 64), (65, 129, 128), (129, 300, 1024), (200, 64, 2048), (300, 136, 576), (40, 33, 192)]


@pytest.mark.parametrize("m,n,k", WIDE_SHAPES)
def test_w4a16_wide(device, gen, m, n, k):
    """Prefill-sized W4A16: both activation types into both output types, a bias, a negative alpha,
    the dual on a batch; sums of K fp32 terms within helpers.w4a16_slack of the exact ones."""
    layout = layouts_for(m, n, k)[1]
    b1 = random_operand(None, n, k, gen=gen, device=device, layout=layout)
    b2 = random_operand(None, n, k, gen=gen, device=device, layout=layout)
    bias = bias_of(n, torch.float32, gen, device)
    for x_dtype in DTYPES:
        x = activations((m, k), x_dtype, gen, device)
        slack = w4a16_slack(x, b1.data, b1.sf, -0.75)
        for out_dtype in DTYPES:
            out = poisoned((m, n), device, out_dtype)
            nk.gemm_w4a16(x, b1.data, b1.sf, alpha=-0.75, bias=bias, out=out)
            want = reference.gemm_w4a16(x, b1.data, b1.sf, -0.75, bias, out_dtype)
            assert_matches(out, want, f"w4a16 {m}x{n}x{k} {x_dtype} -> {out_dtype}", slack=slack)
        xl = activations((2, m, k), x_dtype, gen, device)
        got = nk.dual_gemm_w4a16(xl, b1.data, b2.data, b1.sf, b2.sf, alpha1=0.5, alpha2=3.0)
        want = reference.dual_gemm_w4a16(xl, b1.data, b2.data, b1.sf, b2.sf, 0.5, 3.0)
        assert_matches(got, want, f"dual w4a16 2 x {m}x{n}x{k} {x_dtype}",
                       slack=w4a16_slack(xl, b1.data, b1.sf, 0.5, b2.data, b2.sf, 3.0))


def test_w4a16_nan_scale_and_empty(device, gen):
    b = random_operand(None, 8, 32, gen=gen, device=device)
    b.sf.view(torch.uint8)[3, 1] = 0x7F  # an e4m3 NaN: row 3's outputs are NaN
    x = activations((4, 32), torch.bfloat16, gen, device)
    got = nk.gemm_w4a16(x, b.data, b.sf)
    assert torch.isnan(got[:, 3]).all() and not torch.isnan(torch.cat([got[:, :3], got[:, 4:]], 1)).any()
    assert_matches(got, reference.gemm_w4a16(x, b.data, b.sf), "w4a16 NaN scale")
    assert nk.gemm_w4a16(x[:0], b.data, b.sf).shape == (0, 8)
    assert nk.gemm_w4a16(x, b.data[:0], b.sf[:0]).shape == (4, 0)
    b = random_operand(None, 8, 64, gen=gen, device=device)  # M = 64, K = 64: wgmma's tile on Hopper
    b.sf.view(torch.uint8)[5, 2] = 0xFF
    x = activations((64, 64), torch.float16, gen, device)
    got = nk.gemm_w4a16(x, b.data, b.sf)
    assert torch.isnan(got[:, 5]).all() and not torch.isnan(torch.cat([got[:, :5], got[:, 6:]], 1)).any()
    assert_matches(got, reference.gemm_w4a16(x, b.data, b.sf), "w4a16 NaN scale, M = 64")


def test_bad_epilogue_arguments(gen):
    a, b = gemm_problem(None, 3, 5, 32, gen, "cpu")
    b2 = random_operand(None, 5, 32, gen=gen)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="out_dtype"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out_dtype=torch.float32)
    with pytest.raises(TypeError, match="out must be float16 or bfloat16"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out=torch.empty(3, 5))
    with pytest.raises(ValueError, match=r"bias must be \[N\] = \[5\]"):
        nk.gemm(a.data, b.data, a.sf, b.sf, bias=torch.zeros(4))
    with pytest.raises(TypeError, match="bias must be float32, float16 or bfloat16"):
        nk.gemm(a.data, b.data, a.sf, b.sf, bias=torch.zeros(5, dtype=torch.int32))
    with pytest.raises(ValueError, match="bias must be contiguous"):
        nk.gemm(a.data, b.data, a.sf, b.sf, bias=torch.zeros(10)[::2])
    with pytest.raises(ValueError, match="meta"):
        nk.gemm(a.data, b.data, a.sf, b.sf, bias=torch.zeros(5, device="meta"))
    with pytest.raises(TypeError, match="alpha2"):
        nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf, alpha2="2")
    with pytest.raises(ValueError, match="alpha1"):
        nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf, alpha1=float("inf"))
    with pytest.raises(ValueError, match="alpha2 must hold one value"):
        nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf, alpha2=torch.ones(2))
    with pytest.raises(ValueError, match=r"alphas must be \[G\] = \[2\]"):
        nk.group_gemm([a.data, a.data], [b.data, b.data], [a.sf, a.sf], [b.sf, b.sf], alphas=[1.0])
    with pytest.raises(TypeError, match="alphas must be a float32 tensor"):
        nk.group_gemm([a.data], [b.data], [a.sf], [b.sf], alphas=torch.ones(1, dtype=torch.float64))
    with pytest.raises(TypeError, match="alphas"):
        nk.group_gemm([a.data], [b.data], [a.sf], [b.sf], alphas=2.0)
    with pytest.raises(TypeError, match="x must be float16 or bfloat16"):
        nk.gemm_w4a16(x.float(), b.data, b.sf)
    with pytest.raises(ValueError, match="has K/2=16 but x has K=48"):
        nk.gemm_w4a16(torch.zeros(3, 48, dtype=torch.bfloat16), b.data, b.sf)
    with pytest.raises(ValueError, match="x must be contiguous along K"):
        nk.gemm_w4a16(torch.zeros(32, 3, dtype=torch.bfloat16).t(), b.data, b.sf)
    with pytest.raises(ValueError, match="K .* must be a positive multiple of 16"):
        nk.gemm_w4a16(torch.zeros(3, 8, dtype=torch.bfloat16), b.data[:, :4], b.sf[:, :0])
    with pytest.raises(ValueError, match="out has shape"):
        nk.gemm_w4a16(torch.zeros(2, 3, 32, dtype=torch.bfloat16), b.data, b.sf,
                      out=torch.empty(3, 2, 5, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="shares memory with x"):
        xx = torch.zeros(3, 32, dtype=torch.bfloat16)
        nk.gemm_w4a16(xx, b.data, b.sf, out=xx.view(-1)[:15].view(3, 5))
    with pytest.raises(ValueError, match="not differentiable"):
        nk.gemm_w4a16(x.requires_grad_(), b.data, b.sf)


@pytest.mark.parametrize("m", [1, 3, 8, 9, 16, 17, 24, 32, 33])
def test_w4a16_decode(device, gen, m):
    """Decode sizes: on a GPU, M <= 32 with K % 128 == 0 takes the GEMV kernel (8 warps share K, loads
    straight into registers, one, two or four n8 tiles of rows, the warps' sums added at the end) where the
    wgmma kernel does not (Hopper: M > 16, K % 64 == 0); 33 rows, K % 128 == 64, a dual of more than 16 rows or
    whose two scale layouts differ, the tiled kernels. All against the reference into poisoned outputs, a bias
    and a negative alpha."""
    for n, k in ((300, 4096), (7, 1088), (33, 128)):
        b = random_operand(None, n, k, gen=gen, device=device, layout="linear")
        bias = bias_of(n, torch.float32, gen, device)
        for x_dtype in DTYPES:
            x = activations((m, k), x_dtype, gen, device)
            if device == "cuda" and not FORCED:
                name = nk.kernel_name("gemm_w4a16", x, b.data, b.sf)
                wgmma = wgmma_built() and m > 16 and k % 64 == 0
                assert name.startswith("wgmma") == wgmma, name
                assert ("GEMV" in name) == (not wgmma and m <= 32 and k % 128 == 0), name
            out = poisoned((m, n), device, x_dtype)
            nk.gemm_w4a16(x, b.data, b.sf, alpha=-1.5, bias=bias, out=out)
            assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf, -1.5, bias), f"w4a16 {m}x{n}x{k} {x_dtype}",
                           slack=w4a16_slack(x, b.data, b.sf, -1.5))
    # duals: two matrices in one scale layout (the GEMV where M <= 16), or in two (the tiled kernels)
    x = activations((m, 4096), torch.bfloat16, gen, device)
    b1 = random_operand(None, 300, 4096, gen=gen, device=device, layout="blocked")
    for layout in ("blocked", "linear"):
        b2 = random_operand(None, 300, 4096, gen=gen, device=device, layout=layout)
        args = (x, b1.data, b2.data, b1.sf, b2.sf)
        if device == "cuda" and not FORCED:
            name = nk.kernel_name("dual_gemm_w4a16", *args)
            assert ("GEMV" in name) == (m <= 16 and layout == "blocked"), name
        out = poisoned((m, 300), device, torch.bfloat16)
        nk.dual_gemm_w4a16(*args, alpha1=0.5, alpha2=-2.0, out=out)
        assert_matches(out, reference.dual_gemm_w4a16(*args, 0.5, -2.0), f"dual w4a16 {m} x 300 x 4096 {layout}",
                       slack=w4a16_slack(x, b1.data, b1.sf, 0.5, b2.data, b2.sf, -2.0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GEMV's two instances are CUDA's")
@pytest.mark.parametrize("m", [1, 5, 8])
def test_w4a16_decode_waves(gen, m):
    """The W4A16 GEMV of one matrix and <= 8 rows comes in two instances, 2 CTAs an SM (4 steps of weights in
    flight) and 3 (2 steps, 80 registers); the plan takes the second where its CTAs need fewer waves: 2 * SMs + 4
    column tiles (the last one 5 columns wide) take it, SMs tiles do not. Both against the reference into
    poisoned outputs, with rows past M and N in the tiles."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for tiles, three in ((2 * sms + 4, True), (sms, False)):
        n, k = 16 * (tiles - 1) + 5, 256
        for layout in ("linear", "blocked"):
            b = random_operand(None, n, k, gen=gen, device="cuda", layout=layout)
            x = activations((m, k), torch.bfloat16, gen, "cuda")
            if not FORCED:
                name = nk.kernel_name("gemm_w4a16", x, b.data, b.sf)
                assert ("3 CTAs an SM" in name) == three, name
            out = poisoned((m, n), "cuda", torch.bfloat16)
            nk.gemm_w4a16(x, b.data, b.sf, alpha=0.75, out=out)
            assert_matches(out, reference.gemm_w4a16(x, b.data, b.sf, 0.75), f"w4a16 {m}x{n}x{k} {layout}",
                           slack=w4a16_slack(x, b.data, b.sf, 0.75))


def test_kernel_name_w4a16(gen):
    b = random_operand(None, 5, 32, gen=gen)
    x = torch.randn(2, 3, 32, dtype=torch.float16)
    assert nk.kernel_name("gemm_w4a16", x, b.data, b.sf) == "cpu"
    assert nk.kernel_name("dual_gemm_w4a16", x, b.data, b.data, b.sf, b.sf) == "cpu"
    with pytest.raises(ValueError, match="takes 3 tensors"):
        nk.kernel_name("gemm_w4a16", x, b.data)
