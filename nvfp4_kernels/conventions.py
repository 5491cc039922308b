"""NVFP4 quantization as the three checkpoint producers write it, byte for byte.

``reference.quantize`` is this package's exact quantizer. Checkpoints published
in NVFP4 come from three libraries whose quantizers differ from it, and from
each other, in small ways: where a tie of the e2m1 rounding falls (each forms
the quotient x / scale in float32 its own way), which scale a zero or tiny
block gets, and what the per-tensor "global" scale means. ``quantize`` here
reproduces each one's codes and e4m3 scales exactly, for float32, float16 and
bfloat16 inputs, on any device, with the same torch operations the library
runs (torch rounds some of them differently on CPU and CUDA, e.g. a division by
a Python number multiplies by its float32 reciprocal on CUDA; using the same
ops keeps every device's result equal to that library's on the same device).

Per 16 values along K: a = amax(|x|) of the block, g = the global scale in the
library's own form, s = the block's e4m3 scale, f32(.) / dt(.) = rounding to
float32 / to x's dtype, e4m3(.) = torch's float8_e4m3fn cast (nearest even).
Every code is the e2m1 value nearest (ties to even, saturating at 6) of the
float32 quotient named below.

modelopt        nvidia-modelopt 0.47.0, modelopt.torch.quantization.qtensor.nvfp4_tensor:
                NVFP4QTensor.get_weights_scaling_factor + .quantize (its HF export's
                to_quantized_weight runs them)
  block scale   s = e4m3(clamp(f32(a) / f32(6 g), 2^-9, 448)), a quotient of 0 set to 1 first
  code of       f32(x / f32(s g)); sign bit where < 0 (-0.0 -> 0); NaN -> 7
  zero block    s = 1.0
  global scale  divisor: weight_scale_2 = f32(amax) / 2688 (get_weights_scaling_factor_2)
torchao         torchao 0.18.0, torchao.prototype.mx_formats.nvfp4_tensor.nvfp4_quantize
                (NVFP4Tensor.to_nvfp4 runs it)
  block scale   s = e4m3(clamp(f32(f32(a) / 6) / g, 2^-6, 448))
  code of       clamp(f32(x * f32(f32(1 / g) / s)), -6, 6): times a reciprocal, not a
                division; the sign bit kept (-0.0 -> 8)
  zero block    s = 2^-6
  global scale  divisor: per_tensor_scale = f32(amax) / 2688 (per_tensor_amax_to_scale)
compressed_tensors  compressed-tensors 0.20.1: quantization.utils.helpers.generate_gparam
                + calculate_qparams (the NVFP4 preset: TENSOR_GROUP, group 16, e4m3 scales),
                then compressors.nvfp4.NVFP4PackedCompressor.compress
  block scale   s = e4m3(clamp(f32(g * dt(a / 6)), -448, 448)), 0 set to 0.125
  code of       clamp(f32(x / f32(s / g)), -6, 6); sign bit where < 0 (-0.0 -> 0)
  zero block    s = 0.125
  global scale  multiplier: weight_global_scale = f32(dt(dt(1 / a') * 2688)), a' = amax
                raised to the dtype's smallest normal; 1.0 where that is not finite

A block holding a NaN gets a NaN scale in all three (its sign bit as the
library's own reductions leave it: the same ops run here). Its codes are
defined by ModelOpt alone (7, from its bound search). torchao derives them from
the NaN's payload bits and compressed-tensors from a float-to-int cast of NaN,
both differing between CPU and CUDA; here they are 7 (torchao, with the sign
bit) and 0 (compressed_tensors). torchao accepts only float32 and bfloat16
input; its first step is a float32 cast, so a float16 input here gets what
torchao gives for ``x.float()``. Validating a tensor global scale reads its
value (one device sync on CUDA).
"""

from __future__ import annotations

import torch

from .layouts import pack_fp4, to_blocked
from .reference import e2m1_magnitude

CONVENTIONS = ("modelopt", "torchao", "compressed_tensors")

_BLOCK = 16
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_AMAX_TO_GLOBAL = 6.0 * 448.0  # e2m1 max times e4m3 max: 2688


def _check_convention(convention) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention: {convention!r} is not one of {CONVENTIONS}")


def _check_x(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise ValueError(f"x: dtype {x.dtype} is not float32, float16 or bfloat16")


def _global_tensor(global_scale, device) -> torch.Tensor:
    """global_scale (a number or a one-element float32 tensor) -> float32 0-dim tensor on device."""
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1 or global_scale.dtype != torch.float32:
            raise ValueError(
                f"global_scale: expected a one-element float32 tensor, got dtype {global_scale.dtype}, "
                f"shape {tuple(global_scale.shape)}"
            )
        g = global_scale.detach().reshape(()).to(device)
    elif isinstance(global_scale, (int, float)) and not isinstance(global_scale, bool):
        g = torch.tensor(float(global_scale), dtype=torch.float32, device=device)
    else:
        raise TypeError(f"global_scale: expected a float or a one-element float32 tensor, got {global_scale!r}")
    if not bool(torch.isfinite(g) & (g > 0)):
        raise ValueError(f"global_scale: must be positive and finite, got {g.item()}")
    return g


def global_scale(x: torch.Tensor, convention: str) -> torch.Tensor:
    """The per-tensor scale that library computes from x (a float32 0-dim tensor on x's device), in the
    library's OWN form: modelopt and torchao a divisor (amax / (6*448), ModelOpt's weight_scale_2 /
    torchao's per_tensor_scale), compressed_tensors a multiplier ((6*448) / amax, its weight_global_scale),
    exactly as the library computes it (dtype steps included)."""
    _check_convention(convention)
    _check_x(x)
    # amax in x's dtype (exact), each reduced with the library's own ops, which also decide the bits of
    # a NaN; then fp32(amax) divided by the Python number 2688 (modelopt, torchao)
    if convention == "modelopt":
        return torch.maximum(torch.max(x).abs(), torch.min(x).abs()).float() / _AMAX_TO_GLOBAL
    if convention == "torchao":
        return torch.max(torch.abs(x)).float() / _AMAX_TO_GLOBAL
    # compressed_tensors computes 2688 / amax in x's dtype as reciprocal(amax) * 2688 (torch's
    # number / tensor), after raising amax to the dtype's smallest normal; a NaN or infinite result
    # (NaN input, an overflow in float16 or bfloat16) becomes 1.0
    a = x.abs().amax().clamp(min=torch.finfo(x.dtype).tiny)
    g = a.reciprocal() * _AMAX_TO_GLOBAL
    g = torch.nan_to_num(g, nan=1.0, posinf=1.0, neginf=1.0)
    return g.to(torch.float32)


def _modelopt(blocks: torch.Tensor, g: torch.Tensor):
    amax = torch.maximum(blocks.amax(-1).abs(), blocks.amin(-1).abs()).float()
    s = amax / (6.0 * g)
    s = torch.where(s == 0, torch.ones_like(s), s)  # an all-zero block gets scale 1
    sf = s.clamp(min=2.0**-9, max=448.0).to(torch.float8_e4m3fn)
    q = blocks / (sf.to(torch.float32) * g).unsqueeze(-1)  # x's dtype / float32 -> float32 quotient
    m = e2m1_magnitude(q.abs())
    m = torch.where(torch.isnan(q), 7, m)  # its bound search places NaN above every bound
    return m | ((q < 0).to(torch.uint8) << 3), sf


def _torchao(blocks: torch.Tensor, g: torch.Tensor):
    xf = blocks.float()
    amax = xf.abs().amax(-1)
    s = (amax / 6.0) / g
    sf = s.clamp(min=2.0**-6, max=448.0).to(torch.float8_e4m3fn)
    # one multiplier per block, (1/g) / s, then x times it (it matches torchao's triton kernel)
    r = (1.0 / g) / sf.to(torch.float32)
    y = (xf * r.unsqueeze(-1)).clamp(-6.0, 6.0)
    m = e2m1_magnitude(y.abs())
    m = torch.where(torch.isnan(y), 7, m)
    return m | (torch.signbit(y).to(torch.uint8) << 3), sf


def _compressed_tensors(blocks: torch.Tensor, g: torch.Tensor):
    g1 = g.reshape(1)  # its global scale has shape [1]: float32 wins the type promotion below
    lo, hi = blocks.amin(-1), blocks.amax(-1)  # the weight observer's statistics, in x's dtype
    amax = torch.max(torch.min(lo, torch.zeros_like(lo)).abs(), torch.max(hi, torch.zeros_like(hi)).abs())
    six = torch.tensor(12.0, device=blocks.device).to(blocks.dtype) / 2  # its (max - min) / 2, in x's dtype
    s = g1 * (amax / six)  # amax / 6 rounded to x's dtype, then times g in float32
    s = s.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)
    s = torch.where(s == 0, torch.tensor(0.125, dtype=torch.float32, device=s.device), s)
    # the model holds the scale in x's dtype (exact for e4m3 values) until the compressor casts it
    s_param = s.to(blocks.dtype)
    q = blocks / (s_param / g1).unsqueeze(-1)  # float32: x / f32(s / g)
    q = q.clamp(-6.0, 6.0)
    m = e2m1_magnitude(q.abs())  # NaN -> 0
    return m | ((q < 0).to(torch.uint8) << 3), s_param.to(torch.float8_e4m3fn)


_QUANTIZERS = {"modelopt": _modelopt, "torchao": _torchao, "compressed_tensors": _compressed_tensors}


def quantize(x, global_scale, convention, sf_layout="linear"):
    """x [..., K] (K % 16 == 0; float32/float16/bfloat16) -> (codes uint8 [..., K/2] low nibble first,
    scales float8_e4m3fn [..., K/16] linear, or blocked via layouts.to_blocked(pad=0) as reference.quantize does),
    exactly as `convention`'s own quantizer writes them for that global scale (in the library's own form, see
    global_scale). global_scale: a float or a one-element float32 tensor."""
    _check_convention(convention)
    _check_x(x)
    if x.dim() == 0 or x.shape[-1] % _BLOCK != 0 or x.shape[-1] == 0:
        raise ValueError(f"x: K (the last dimension) must be a positive multiple of 16, got shape {tuple(x.shape)}")
    if sf_layout not in ("linear", "blocked"):
        raise ValueError(f"sf_layout: {sf_layout!r} is not 'linear' or 'blocked'")
    g = _global_tensor(global_scale, x.device)
    k = x.shape[-1]
    blocks = x.reshape(*x.shape[:-1], k // _BLOCK, _BLOCK)
    codes, sf = _QUANTIZERS[convention](blocks, g)
    data = pack_fp4(codes.reshape(*x.shape[:-1], k))
    if sf_layout == "blocked":  # a vector [K] is one row
        sf = to_blocked(sf if x.dim() >= 2 else sf.unsqueeze(0), pad=0)
    return data, sf
