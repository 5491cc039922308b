"""The exact reference: what every kernel must compute (the oracle of all tests).

Plain torch on any device. Values are decoded by table (exact), products and
sums are formed in float64 (exact for any K a test uses: products have at most
10 significant bits), then the result is rounded once:

    value(r, k) = E2M1[code(r, k)] * e4m3(scale(r, k // 16))
    gemm        = out(fp32(alpha * A @ B^T) + bias)             (the add in fp32, where a bias is given)
    dual_gemm   = out(silu(fp32(alpha1 * A @ B1^T)) * fp32(alpha2 * A @ B2^T))   (silu, product in fp32)
    W4A16       = the same with A plain fp16 / bf16 values
    quantize    = per 16 values: scale = e4m3(amax * g / 6), code = e2m1(x * g / scale)  (see quantize)

out() rounds to the output dtype, fp16 unless said (bf16).

A kernel that accumulates in fp32 differs from this only by its fp32 rounding;
tests bound that (see tests/conftest.py). Format background: NVIDIA's block
scaling in the cuBLAS docs, "1D Block Scaling Factors Layout", and
https://docs.nvidia.com/cuda/parallel-thread-execution/#alternate-floating-point-data-formats
"""

from __future__ import annotations

from typing import Sequence

import torch

from .layouts import as_bytes, from_blocked, pack_fp4, to_blocked, unpack_fp4

BLOCK = 16  # values per e4m3 scale
E2M1_MAX = 6.0
E4M3_MAX = 448.0
# code -> value; codes 8..15 are 0..7 negated (8 is -0.0)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def decode_e2m1(codes: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """uint8 codes (0..15) -> their values (E2M1_VALUES) in dtype: magnitude code m = 2e + f is f / 2
    for e = 0, else (2 + f) 2^(e - 2); bit 3 the sign (code 8 is -0.0). Device ops only (no table
    copied to the device: a CUDA graph captures it)."""
    c = codes.to(torch.int32)
    e, f = (c >> 1) & 3, (c & 1).to(dtype)
    mag = torch.where(e == 0, f * 0.5, (f + 2) * torch.exp2((e - 2).to(dtype)))
    return torch.where((c & 8) != 0, -mag, mag)


def decode_e4m3(sf: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """e4m3 bytes -> dtype (torch's own float8_e4m3fn conversion: subnormals, NaN)."""
    return as_bytes(sf).view(torch.float8_e4m3fn).to(dtype)


def linear_scales(sf: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """Scales in either layout -> linear [..., rows, k/16]."""
    k_blocks = k // BLOCK
    if sf.dim() >= 5 and tuple(sf.shape[-3:]) == (32, 4, 4):
        return from_blocked(sf, rows, k_blocks)
    return sf


def dequantize(data: torch.Tensor, sf: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """fp4 data [..., R, K/2] + scales (either layout) -> [..., R, K] in dtype: exact in float64,
    float32, bfloat16 and float16 (e2m1 x e4m3 has at most 6 significant bits, 2^-10 .. 2688)."""
    rows, k = data.shape[-2], 2 * data.shape[-1]
    vals = decode_e2m1(unpack_fp4(data), dtype)  # [..., R, K]
    scales = decode_e4m3(linear_scales(sf, rows, k), dtype)  # [..., R, K/16]
    return vals * scales.repeat_interleave(BLOCK, dim=-1)


def _alpha(alpha) -> float | torch.Tensor:
    if alpha is None:
        return 1.0
    return alpha.to(torch.float64) if isinstance(alpha, torch.Tensor) else float(alpha)


def _epilogue(c, alpha=None, bias=None, out_dtype=None) -> torch.Tensor:
    """c exact (float64) -> out(fp32(alpha * c) + bias)."""
    v = (c * _alpha(alpha)).to(torch.float32)
    if bias is not None:
        v = v + bias.to(v.device, torch.float32)
    return v.to(out_dtype or torch.float16)


def _dual(c1, c2, alpha1=None, alpha2=None, out_dtype=None) -> torch.Tensor:
    v1, v2 = (c1 * _alpha(alpha1)).to(torch.float32), (c2 * _alpha(alpha2)).to(torch.float32)
    return (torch.nn.functional.silu(v1) * v2).to(out_dtype or torch.float16)


def gemm(a, b, sfa, sfb, alpha=None, bias=None, out_dtype=None) -> torch.Tensor:
    """out(fp32(alpha * A @ B^T) + bias); a [L?, M, K/2], b [L?, N, K/2], bias [N]."""
    c = dequantize(a, sfa) @ dequantize(b, sfb).transpose(-1, -2)
    return _epilogue(c, alpha, bias, out_dtype)


def gemv(a, b, sfa, sfb, alpha=None, out_dtype=None) -> torch.Tensor:
    """out(alpha * A @ b); a [L?, M, K/2], b [L?, K/2], sfb [L?, K/16] or blocked with one row."""
    b_rows = b.unsqueeze(-2)  # [L?, 1, K/2]
    sfb_rows = sfb if sfb.dim() >= 5 else sfb.unsqueeze(-2)
    return gemm(a, b_rows, sfa, sfb_rows, alpha, out_dtype=out_dtype).squeeze(-1)


def dual_gemm(a, b1, b2, sfa, sfb1, sfb2, alpha1=None, alpha2=None, out_dtype=None) -> torch.Tensor:
    """out(silu(fp32(alpha1 * A @ B1^T)) * fp32(alpha2 * A @ B2^T)), silu and product in fp32."""
    a_val = dequantize(a, sfa)
    c1 = a_val @ dequantize(b1, sfb1).transpose(-1, -2)
    c2 = a_val @ dequantize(b2, sfb2).transpose(-1, -2)
    return _dual(c1, c2, alpha1, alpha2, out_dtype)


def group_gemm(as_: Sequence, bs: Sequence, sfas: Sequence, sfbs: Sequence, alphas=None, out_dtype=None) -> list:
    alphas = [None] * len(as_) if alphas is None else alphas
    return [gemm(a, b, sfa, sfb, al, out_dtype=out_dtype) for a, b, sfa, sfb, al in zip(as_, bs, sfas, sfbs, alphas)]


def _w4a16_weights(x, b, sfb) -> torch.Tensor:
    w = dequantize(b, sfb)  # [L?, N, K]
    return w.transpose(-1, -2)


def gemm_w4a16(x, b, sfb, alpha=None, bias=None, out_dtype=None) -> torch.Tensor:
    """W4A16: out(fp32(alpha * x @ B^T) + bias), x fp16 / bf16 [..., K] (b [N, K/2]) or [L, M, K]
    (b [L, N, K/2]); the result has x's dtype unless out_dtype says."""
    c = x.to(torch.float64) @ _w4a16_weights(x, b, sfb)
    return _epilogue(c, alpha, bias, out_dtype or x.dtype)


def dual_gemm_w4a16(x, b1, b2, sfb1, sfb2, alpha1=None, alpha2=None, out_dtype=None) -> torch.Tensor:
    """W4A16 dual: out(silu(fp32(alpha1 * x @ B1^T)) * fp32(alpha2 * x @ B2^T))."""
    xd = x.to(torch.float64)
    c1, c2 = xd @ _w4a16_weights(x, b1, sfb1), xd @ _w4a16_weights(x, b2, sfb2)
    return _dual(c1, c2, alpha1, alpha2, out_dtype or x.dtype)


def gemm_w4a4(x, b, sfb, global_scale=None, alpha=None, bias=None, out_dtype=None) -> torch.Tensor:
    """W4A4 as a layer runs it: x fp16 / bf16 quantized with global_scale (quantize), times B: the
    W4A16 product of the quantized values (exact in x's dtype) with the same alpha."""
    return gemm_w4a16(quantized_values(x, global_scale), b, sfb, alpha, bias, out_dtype)


def dual_gemm_w4a4(x, b1, b2, sfb1, sfb2, global_scale=None, alpha1=None, alpha2=None, out_dtype=None) -> torch.Tensor:
    """The dual of gemm_w4a4: one quantized x against B1 and B2."""
    return dual_gemm_w4a16(quantized_values(x, global_scale), b1, b2, sfb1, sfb2, alpha1, alpha2, out_dtype)


def grouped_mm(x, w, w_sf, offs, alphas=None, alphas2=None, gated=False, out_dtype=None, out=None,
               row_index=None) -> torch.Tensor:
    """Rows grouped by expert: rows offs[e - 1] .. offs[e] of x (fp16 / bf16 [T, K]; with row_index,
    of x[row_index]) times expert e's weights w[e] (gated: W1 = w[e, :N], W3 = w[e, N:];
    silu(alphas[e] x W1^T) * (alphas2[e] x W3^T)), each row as gemm_w4a16 / dual_gemm_w4a16 computes
    it. Rows past offs[-1] keep out's values (zeros when out is None)."""
    if row_index is not None:
        x = x.cpu()[row_index.cpu().long()]
    t, e_count = x.shape[0], w.shape[0]
    n = w.shape[1] // 2 if gated else w.shape[1]
    out = torch.zeros(t, n, dtype=out_dtype or x.dtype) if out is None else out.detach().cpu().clone()
    ends = [int(v) for v in offs.cpu()]
    start = 0
    for e in range(e_count):
        rows = slice(start, ends[e])
        start = ends[e]
        if rows.stop <= rows.start:
            continue
        a1 = None if alphas is None else alphas[e].cpu()
        xe = x[rows].cpu()
        if gated:
            a2 = None if alphas2 is None else alphas2[e].cpu()
            we, se = w[e].cpu(), w_sf[e].cpu()
            h = n // 128 if w_sf.dim() == 6 else n  # a blocked layout's halves are whole 128-row atoms
            out[rows] = dual_gemm_w4a16(xe, we[:n], we[n:], se[:h], se[h:], a1, a2, out.dtype)
        else:
            out[rows] = gemm_w4a16(xe, w[e].cpu(), w_sf[e].cpu(), a1, None, out.dtype)
    return out


# e2m1 round-to-nearest-even boundaries: |v| above (or from) each adds one to the magnitude code.
# Ties go to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
_E2M1_UP = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def e2m1_magnitude(a: torch.Tensor, scale=1.0) -> torch.Tensor:
    """uint8 magnitude codes 0..7 of a / scale (a >= 0): round to nearest even, saturate at 6, NaN
    -> 0. Each boundary times the scale is compared with a, no division: exact where the products
    are (float32 and an e4m3 scale: 4 significant bits)."""
    m = torch.zeros(a.shape, dtype=torch.uint8, device=a.device)
    for edge, inclusive in _E2M1_UP:
        m += (a >= edge * scale if inclusive else a > edge * scale).to(torch.uint8)
    return m


def encode_e2m1(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes of the exact quotients y / scale (float32, scale > 0): round to nearest
    even, saturate to +-6, y's sign bit kept (-0 -> 8)."""
    return e2m1_magnitude(y.abs(), scale) | (torch.signbit(y).to(torch.uint8) << 3)


def quantize(x: torch.Tensor, global_scale=None, sf_layout: str = "linear"):
    """The definition of ops.quantize: x [..., K] -> (codes uint8 [..., K/2], e4m3 scales).

    Per 16 values along K, with g = global_scale (default 1; or one per row, x.shape[:-1]) and
    float32 rounded to nearest:
        scale = e4m3(fp32(fp32(amax(|x|) * g) / 6))   (nearest even, saturating at 448)
        code  = e2m1(y / scale), y = fp32(x * g)      (the exact quotient to nearest even,
                                                       saturating at 6; 0 where the scale is 0)
    torch's float8_e4m3fn cast rounds to nearest even; values are clamped to 448 first, as the
    kernels saturate.
    """
    k = x.shape[-1]
    g = torch.as_tensor(1.0 if global_scale is None else global_scale, dtype=torch.float32, device=x.device)
    g = g.reshape(()) if g.numel() == 1 else g.unsqueeze(-1)  # one value, or one per row (x.shape[:-1])
    blocks = x.to(torch.float32).unflatten(-1, (k // BLOCK, BLOCK))
    amax = blocks.abs().amax(-1)
    # the division in float64, then rounded once to float32: fp32(amax * g / 6) on every device
    # (torch's CUDA division by a Python number multiplies by its float32 reciprocal instead, and
    # one block in ~10^7 of float32 input then rounds to the other e4m3 neighbour)
    sf = ((amax * g).double() / 6).float().clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    s = sf.to(torch.float32).unsqueeze(-1)
    codes = torch.where(s == 0, 0, encode_e2m1(blocks * g.unsqueeze(-1), s).to(torch.int32)).to(torch.uint8)
    data = pack_fp4(codes.flatten(-2))
    if sf_layout == "blocked":  # a vector [K] is one row
        sf = to_blocked(sf if x.dim() >= 2 else sf.unsqueeze(0), pad=0)
    return data, sf


def quantized_values(x: torch.Tensor, global_scale=None) -> torch.Tensor:
    """The definition of ops.quantized_values: dequantize(quantize(x, global_scale)) in x's dtype
    (exact), before the global scale is divided out. global_scale: one value, or one per row."""
    data, sf = quantize(x if x.dim() >= 2 else x.unsqueeze(0), global_scale)
    return dequantize(data, sf, x.dtype).reshape(x.shape)
