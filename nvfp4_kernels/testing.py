"""Input generators shared by the tests, the benchmarks and submission checks.

`random_operand` draws inputs that exercise everything the format allows: all
16 e2m1 codes (uniform random bytes) and e4m3 scales spread over many binades
down into the subnormals, with exact zeros and negative scales mixed in. The
top of the scale range shrinks with K (`default_scale_exp`) so that dot
products stay O(1): then the exact result rounded to fp16 and an fp32-
accumulated one must agree within 1e-3 + 1e-3 |ref| everywhere, and any
wrong product, scale or index shows. Extreme scales (up to 448, NaN) are
covered by dedicated tests on small K.

The GPU MODE harness's tuples are built from such operands in
nvfp4_kernels.gpumode.harness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from .layouts import pack_fp4, to_blocked

FP4 = torch.float4_e2m1fn_x2
E4M3 = torch.float8_e4m3fn

TOL = 1e-3  # the competition's judgement (docs/competition.md): |out - ref| <= TOL + TOL |ref|


def within_tolerance(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Elementwise (on the CPU, in fp64): out is within the competition's
    tolerance of ref; NaN exactly where ref is NaN, an infinity only equal to
    itself (as torch.isclose)."""
    o, r = out.detach().double().cpu(), ref.detach().double().cpu()
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    near = torch.isfinite(r) & ((o - r).abs() <= TOL + TOL * r.abs())
    return (nan_o == nan_r) & (nan_r | (o == r) | near)


def default_scale_exp(k: int) -> int:
    """Largest binade of the scales for reduction length k: keeps |dot products| ~ 1."""
    return int(math.floor(0.25 - 0.25 * math.log2(k)))


def random_scale_codes(shape, *, max_exp: int, gen: torch.Generator, zero_frac=0.05, neg_frac=0.1) -> torch.Tensor:
    """e4m3 bytes whose magnitudes are uniform over the codes with exponent <= max_exp
    (biased exponent field 0..7+max_exp: field 0 is the subnormals and zero), plus
    exact zeros and negative scales. Drawn on the generator's device."""
    dev = gen.device
    max_field = max(0, min(15, 7 + max_exp))
    field = torch.randint(0, max_field + 1, shape, generator=gen, device=dev, dtype=torch.int32)
    mant = torch.randint(0, 8, shape, generator=gen, device=dev, dtype=torch.int32)
    if max_field == 15:  # 0x7F is NaN: keep mantissa < 7 in the top binade
        mant = torch.where(field == 15, mant % 7, mant)
    codes = (field << 3) | mant
    codes = torch.where(torch.rand(shape, generator=gen, device=dev) < zero_frac, torch.zeros_like(codes), codes)
    codes = torch.where(torch.rand(shape, generator=gen, device=dev) < neg_frac, codes | 0x80, codes)
    return codes.to(torch.uint8)


@dataclass
class Operand:
    data: torch.Tensor  # fp4x2 [L, R, K/2] (or as requested)
    sf: torch.Tensor  # e4m3 linear [L, R, K/16] or blocked


def random_operand(
    L: Optional[int],
    rows: int,
    k: int,
    *,
    gen: torch.Generator,
    device="cpu",
    layout: str = "linear",
    max_exp: Optional[int] = None,
    dtype=FP4,
    sf_dtype=E4M3,
    pad_byte: int = 0x7F,
) -> Operand:
    """A random NVFP4 operand: `rows` x `k` values per batch (L=None: unbatched).

    Drawn on the generator's device, then moved to `device`. layout: "linear" or
    "blocked" (the blocked padding is filled with `pad_byte`, NaN by default, so a
    kernel that reads padding fails loudly).
    """
    lead = () if L is None else (L,)
    codes = torch.randint(0, 16, (*lead, rows, k), generator=gen, device=gen.device, dtype=torch.uint8)
    data = pack_fp4(codes)
    max_exp = default_scale_exp(k) if max_exp is None else max_exp
    sf = random_scale_codes((*lead, rows, k // 16), max_exp=max_exp, gen=gen)
    if layout == "blocked":
        sf = to_blocked(sf, pad=pad_byte)
    elif layout != "linear":
        raise ValueError(f"layout must be 'linear' or 'blocked', got {layout!r}")
    data = data.view(dtype) if dtype != torch.uint8 else data
    sf = sf.view(sf_dtype) if sf_dtype != torch.uint8 else sf
    return Operand(data.to(device), sf.to(device))


def vector_operand(op: Operand) -> Operand:
    """An operand with one row, as gemv's b: data [L, K/2], linear scales [L, K/16]."""
    sf = op.sf if op.sf.dim() >= 5 else op.sf.squeeze(-2)
    return Operand(op.data.squeeze(-2), sf)
