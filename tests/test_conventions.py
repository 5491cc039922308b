"""nvfp4_kernels.conventions against the three libraries themselves: codes and e4m3 scales equal byte
for byte, and the global scale bit for bit, on CPU and (where there is one) CUDA.

Each oracle is the function that library's checkpoint export runs:
  modelopt            NVFP4QTensor.get_weights_scaling_factor + NVFP4QTensor.quantize (to_quantized_weight)
  torchao             nvfp4_quantize (NVFP4Tensor.to_nvfp4; its swizzled scales for the blocked layout)
  compressed_tensors  the weight observer's statistics -> generate_gparam + calculate_qparams (NVFP4 preset),
                      then NVFP4PackedCompressor.compress (its triton kernel on CUDA, torch on CPU)
The oracles are test-only packages (requirements-oracles.txt, installed with --no-deps); a test whose
library is missing skips and names the package.

Not compared, because the library does not define them: the codes of a block holding a NaN in torchao
(they come from the NaN's payload bits) and compressed-tensors (a float-to-int cast of NaN); their
scales and every other block are compared. torchao rejects float16 input: those cases skip.
compressed-tensors quantizes 2-D weights: a 3-D batch goes to it as [B*R, K] with the same global scale.
"""

import pytest
import torch

from nvfp4_kernels.conventions import CONVENTIONS, global_scale, quantize

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
E2M1_TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)  # the round-to-nearest boundaries
INSTALL = "pip install --no-deps -r requirements-oracles.txt"


def _import(module: str, package: str):
    return pytest.importorskip(module, reason=f"needs the oracle package {package} ({INSTALL})")


# ---- the libraries' own quantizers and global scales


def _modelopt_quantize(x, g):
    q = _import("modelopt.torch.quantization.qtensor.nvfp4_tensor", "nvidia-modelopt").NVFP4QTensor
    scales, _ = q.get_weights_scaling_factor(x, 16, g)
    return q.quantize(x, 16, scales, g)[0]._quantized_data, scales


def _torchao_quantize(x, g):
    if x.dtype == torch.float16:
        pytest.skip("torchao's nvfp4_quantize accepts float32 and bfloat16 only")
    mod = _import("torchao.prototype.mx_formats.nvfp4_tensor", "torchao")
    scales, codes = mod.nvfp4_quantize(x.contiguous(), 16, g)
    return codes, scales.reshape(*x.shape[:-1], -1)


def _ct_statistics(x):
    """The weight observer's statistics: per-group min and max in the weight's dtype."""
    groups = x.unflatten(-1, (-1, 16))
    return groups.amin(-1), groups.amax(-1)


def _ct_quantize(x, g):
    _import("compressed_tensors", "compressed-tensors")
    from compressed_tensors.compressors.nvfp4 import NVFP4PackedCompressor
    from compressed_tensors.quantization.quant_scheme import NVFP4, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    args = NVFP4["weights"]
    w = x.reshape(-1, x.shape[-1]).contiguous()
    lo, hi = _ct_statistics(w)
    g1 = g.reshape(1)
    scale, _ = calculate_qparams(lo, hi, args, global_scale=g1)
    # the model's weight_scale parameter has the weight's dtype; the compressor casts it to e4m3
    state = {"weight": w, "weight_scale": scale.to(x.dtype), "weight_global_scale": g1}
    out = NVFP4PackedCompressor.compress(state, QuantizationScheme(targets=["Linear"], weights=args))
    lead = x.shape[:-1]
    return out["weight_packed"].reshape(*lead, -1), out["weight_scale"].reshape(*lead, -1)


def _library_global(x, convention):
    if convention == "modelopt":
        q = _import("modelopt.torch.quantization.qtensor.nvfp4_tensor", "nvidia-modelopt").NVFP4QTensor
        return q.get_weights_scaling_factor_2(x)
    if convention == "torchao":
        mod = _import("torchao.prototype.mx_formats.nvfp4_tensor", "torchao")
        return mod.per_tensor_amax_to_scale(torch.max(torch.abs(x)))
    _import("compressed_tensors", "compressed-tensors")
    from compressed_tensors.quantization.utils import generate_gparam

    lo, hi = _ct_statistics(x)
    absmax = torch.max(hi.max(), -lo.min())  # as the observer reduces its statistics
    return generate_gparam(-absmax.reshape(1), absmax.reshape(1))


ORACLES = {"modelopt": _modelopt_quantize, "torchao": _torchao_quantize, "compressed_tensors": _ct_quantize}


# ---- inputs (drawn on the CPU from the test's generator, then moved)


def _rows(gen, shape, lo_exp, hi_exp):
    """Normal values, each row scaled by 10^u, u uniform in [lo_exp, hi_exp]."""
    u = torch.empty(*shape[:-1], 1, dtype=torch.float64).uniform_(lo_exp, hi_exp, generator=gen)
    return torch.randn(shape, generator=gen, dtype=torch.float64) * 10.0**u


def _fit(v, dtype):
    """float64 -> dtype, inside float16's finite range."""
    if dtype == torch.float16:
        v = v.clamp(-60000.0, 60000.0)
    return v.to(dtype)


def _e4m3_values(gen, n, lo_exp, hi_exp):
    """n random normal e4m3 values (1 + m/8) * 2^e."""
    e = torch.randint(lo_exp, hi_exp + 1, (n,), generator=gen).double()
    m = torch.randint(0, 8, (n,), generator=gen).double()
    return (1 + m / 8) * 2.0**e


def _tie_blocks(gen, rows, kb, dtype, convention, pow2):
    """Blocks whose quotients x / (scale * global) sit on e2m1 rounding boundaries, or one ulp (of
    dtype) either side: each block has one element +-6 * S * G (its amax: block scale S), the rest
    t * S * G, t a boundary. With a power-of-two global scale G every quotient is exact; with any
    other the libraries' float32 roundings of scale * G and of the quotient decide the ties."""
    g_exp = 0 if dtype == torch.float16 else int(torch.randint(-6, 7, (1,), generator=gen))
    g = 2.0**g_exp
    if not pow2:
        g = float(torch.tensor(g * (1 + torch.rand(1, generator=gen, dtype=torch.float64).item())).float())
    unit = g if convention != "compressed_tensors" else 1.0 / g  # the divisor's value times G
    s = _e4m3_values(gen, rows * kb, -6, 6).reshape(rows, kb, 1)
    t = torch.tensor(E2M1_TIES, dtype=torch.float64)[torch.randint(0, 7, (rows, kb, 16), generator=gen)]
    sign = torch.where(torch.rand(rows, kb, 16, generator=gen) < 0.5, -1.0, 1.0).double()
    v = (sign * t * s * unit).to(dtype)
    nudge = torch.randint(-1, 2, (rows, kb, 16), generator=gen)  # -1, 0, +1 ulp
    v = torch.where(nudge > 0, torch.nextafter(v, v.new_tensor(float("inf"))), v)
    v = torch.where(nudge < 0, torch.nextafter(v, v.new_tensor(float("-inf"))), v)
    pos = torch.randint(0, 16, (rows, kb, 1), generator=gen)
    v.scatter_(-1, pos, (6 * s * unit).to(dtype) * torch.where(torch.rand(rows, kb, 1, generator=gen) < 0.5, -1, 1))
    return v.reshape(rows, kb * 16), torch.tensor(g, dtype=torch.float32)


def _make(case, dtype, convention, gen):
    """-> (x on the CPU, global scale or None for the library's own from x, NaN block mask or None)."""
    g = None
    nan_blocks = None
    if case == "normal":
        x = _fit(_rows(gen, (48, 128), -2, 2), dtype)
    elif case == "magnitudes":  # rows from 1e-8 to 1e4: most blocks tiny next to the largest
        x = _fit(_rows(gen, (64, 128), -8, 4), dtype)
    elif case == "batch":
        x = _fit(_rows(gen, (3, 20, 96), -3, 3), dtype)
    elif case == "zero_blocks":
        v = _rows(gen, (32, 128), -1, 1).reshape(32, 8, 16)
        zero = torch.rand(32, 8, 1, generator=gen) < 0.35
        neg = torch.rand(32, 8, 16, generator=gen) < 0.5
        v = torch.where(zero, torch.where(neg, -0.0, 0.0).double(), v)
        x = _fit(v.reshape(32, 128), dtype)
    elif case == "tiny":
        # one block of amax 1 sets the global scale (for which block scale = 448 * amax); the others
        # get amaxes whose block scales 448 * amax span 2^-14 .. 2^-3: e4m3 subnormals and below
        v = torch.randn(32, 8, 16, generator=gen, dtype=torch.float64)
        v = v / v.abs().amax(-1, keepdim=True)
        target = 2.0 ** torch.empty(32, 8, 1, dtype=torch.float64).uniform_(-14, -3, generator=gen)
        v = v * target / 448.0
        v[0, 0] = v[0, 0] / v[0, 0].abs().max()
        x = _fit(v.reshape(32, 128), dtype)
    elif case in ("ties", "ties_any_global"):
        x, g = _tie_blocks(gen, 32, 8, dtype, convention, pow2=case == "ties")
    elif case == "saturation":  # a global scale 16x too small: block scales clamp at 448, codes at 6
        x = _fit(_rows(gen, (32, 128), -1, 1), dtype)
        lib = global_scale(x, convention)
        g = lib * 16 if convention == "compressed_tensors" else lib / 16
    elif case == "negative_zero":  # -0.0 and negatives rounding to 0 next to a positive amax
        v = torch.rand(32, 8, 16, generator=gen, dtype=torch.float64) * -0.05
        v[torch.rand(32, 8, 16, generator=gen) < 0.5] = -0.0
        v[..., 3] = 1.0 + torch.rand(32, 8, generator=gen, dtype=torch.float64)
        x = _fit(v.reshape(32, 128), dtype)
    elif case == "nan":
        v = _rows(gen, (32, 128), -1, 1).reshape(32, 8, 16)
        hit = torch.rand(32, 8, 16, generator=gen) < 0.02
        v[hit] = float("nan")
        x = _fit(v.reshape(32, 128), dtype)
        g = global_scale(torch.nan_to_num(x, nan=0.0), convention)  # the finite part's
        nan_blocks = hit.any(-1)
    else:
        raise AssertionError(case)
    return x, g, nan_blocks


def _assert_bytes(ours, theirs, what, mask=None):
    a = ours.contiguous().view(torch.uint8).cpu()
    b = theirs.contiguous().view(torch.uint8).cpu()
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != library's {tuple(b.shape)}"
    bad = a != b
    if mask is not None:
        bad &= mask
    if bool(bad.any()):
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} bytes differ; first at {idx}: "
            f"ours {int(a[idx]):#04x}, library's {int(b[idx]):#04x}"
        )


CASES = ["normal", "magnitudes", "batch", "zero_blocks", "tiny", "ties", "ties_any_global", "saturation",
         "negative_zero", "nan"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("case", CASES)
def test_matches_library(case, convention, dtype, device, gen):
    oracle = ORACLES[convention]
    x, g, nan_blocks = _make(case, dtype, convention, gen)
    x = x.to(device)
    g = global_scale(x, convention) if g is None else g.to(device)
    theirs_codes, theirs_sf = oracle(x, g)
    codes, sf = quantize(x, g, convention)
    assert codes.dtype == torch.uint8 and sf.dtype == torch.float8_e4m3fn
    assert codes.device == x.device and sf.device == x.device
    _assert_bytes(sf, theirs_sf, f"{convention} scales ({case}, {dtype})")
    mask = None
    if nan_blocks is not None and convention != "modelopt":
        mask = ~nan_blocks.repeat_interleave(8, dim=-1)  # the bytes of finite blocks
    _assert_bytes(codes, theirs_codes, f"{convention} codes ({case}, {dtype})", mask)


@pytest.mark.parametrize("device", DEVICES)
def test_blocked_matches_torchao_swizzle(device, gen):
    """Blocked scales (rows and scale columns padded with 0) equal torchao's swizzled ones."""
    mod = _import("torchao.prototype.mx_formats.nvfp4_tensor", "torchao")
    x = _rows(gen, (200, 80), -2, 2).to(torch.bfloat16).to(device)
    g = global_scale(x, "torchao")
    t = mod.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=g, is_swizzled_scales=True)
    codes, sf = quantize(x, g, "torchao", sf_layout="blocked")
    assert tuple(sf.shape) == (2, 2, 32, 4, 4)
    _assert_bytes(codes, t.qdata, "torchao codes")
    _assert_bytes(sf.flatten(), t.scale.flatten(), "torchao blocked scales")
    linear = quantize(x, g, "torchao")[1]
    _, vector_sf = quantize(x[0], g, "torchao", sf_layout="blocked")  # a vector is one row
    assert tuple(vector_sf.shape) == (1, 2, 32, 4, 4)
    assert torch.equal(vector_sf.view(torch.uint8)[0, :, 0, 0, :].flatten()[:5], linear.view(torch.uint8)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_global_scale_matches_library(convention, dtype, device, gen):
    # float16 with an amax of 0.01 overflows compressed-tensors' 2688 / amax (in float16) to inf: 1.0
    inputs = [
        _fit(_rows(gen, (16, 64), -3, 3), dtype),
        _fit(_rows(gen, (16, 64), -8, -1), dtype),
        (torch.randn(16, 64, generator=gen) * 0.01).to(dtype),
        torch.zeros(16, 64, dtype=dtype),
        torch.tensor([float("nan")] + [1.0] * 15, dtype=dtype).reshape(1, 16),
    ]
    for x in inputs:
        x = x.to(device)
        ours = global_scale(x, convention)
        theirs = _library_global(x, convention)
        assert ours.dtype == torch.float32 and ours.shape == () and ours.device == x.device
        assert theirs.numel() == 1
        same = ours.view(torch.int32) == theirs.reshape(()).view(torch.int32)
        assert bool(same), f"{convention} {dtype}: global scale {ours.item()!r} != library's {theirs.item()!r}"


def test_errors():
    x = torch.randn(4, 32)
    for bad in ("nvidia", None, "reference"):
        with pytest.raises(ValueError, match="convention"):
            quantize(x, 1.0, bad)
        with pytest.raises(ValueError, match="convention"):
            global_scale(x, bad)
    with pytest.raises(ValueError, match="x: .*multiple of 16"):
        quantize(torch.randn(4, 40), 1.0, "modelopt")
    with pytest.raises(ValueError, match="x: .*multiple of 16"):
        quantize(torch.tensor(1.0), 1.0, "modelopt")
    for dtype in (torch.int32, torch.float64, torch.uint8):
        with pytest.raises(ValueError, match="x: dtype"):
            quantize(x.to(dtype), 1.0, "torchao")
        with pytest.raises(ValueError, match="x: dtype"):
            global_scale(x.to(dtype), "torchao")
    nan = float("nan")
    bad_values = (0.0, -1.0, float("inf"), nan, torch.tensor(0.0), torch.tensor([-2.0]), torch.tensor(nan))
    for g in bad_values + (torch.tensor([1.0, 2.0]), torch.tensor(1.0, dtype=torch.float64)):
        with pytest.raises(ValueError, match="global_scale"):
            quantize(x, g, "compressed_tensors")
    for g in ("1.0", None):
        with pytest.raises(TypeError, match="global_scale"):
            quantize(x, g, "modelopt")
    with pytest.raises(TypeError, match="x: "):
        quantize([1.0] * 16, 1.0, "modelopt")
    with pytest.raises(ValueError, match="sf_layout"):
        quantize(x, 1.0, "modelopt", sf_layout="swizzled")


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_forms(convention, gen):
    """Layouts, shapes and the accepted global-scale forms (no library needed)."""
    x = torch.randn(3, 5, 64, generator=gen).to(torch.bfloat16)
    g = global_scale(x, convention)
    codes, sf = quantize(x, g, convention)
    assert codes.shape == (3, 5, 32) and sf.shape == (3, 5, 4)
    same = quantize(x, float(g), convention)
    assert torch.equal(same[0], codes) and torch.equal(same[1].view(torch.uint8), sf.view(torch.uint8))
    one = quantize(x, g.reshape(1), convention)
    assert torch.equal(one[0], codes)
    _, blocked = quantize(x, g, convention, sf_layout="blocked")
    assert blocked.shape == (3, 1, 1, 32, 4, 4)
    assert torch.equal(blocked.view(torch.uint8)[:, 0, 0, :5, 0, :], sf.view(torch.uint8))
    # a non-contiguous x quantizes as its contiguous copy
    xt = torch.randn(64, 6, generator=gen).t()
    a = quantize(xt, 1.0, convention)
    b = quantize(xt.contiguous(), 1.0, convention)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1].view(torch.uint8), b[1].view(torch.uint8))
