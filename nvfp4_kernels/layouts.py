"""Packing and scale-layout helpers, each with its inverse (tests round-trip them).

Layouts (the C side reads the same definitions in csrc/numerics.h):

* fp4 data: [..., K/2] bytes, two e2m1 codes per byte, the LOW nibble holds the
  even k (torch.float4_e2m1fn_x2 or uint8).
* linear scales: [..., R, K/16], one e4m3 byte per 16 values of a row.
* blocked scales (cuBLAS/CUTLASS "128x4"): [..., ceil(R/128), ceil(K/64), 32, 4, 4].
  Atom (rb, kb4) covers rows 128*rb .. +127 and scale columns 4*kb4 .. +3; row
  r = 128*rb + 32*i4 + i32 and column j = 4*kb4 + j4 sit at [rb, kb4, i32, i4, j4].
  Rows and columns past R and K/16 are padding: kernels never read them.
* competition ("GPU MODE") tensors are batch-last views of batch-first memory:
  data (R, K/2, L) over [L, R, K/2]; permuted scales (32, 4, RB, 4, KB4, L) over
  the blocked [L, RB, KB4, 32, 4, 4].
"""

from __future__ import annotations

import torch


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The same memory viewed as uint8 (fp4x2 and e4m3 tensors are one byte per element)."""
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., K] (each 0..15) -> packed bytes [..., K/2], low nibble first."""
    assert codes.shape[-1] % 2 == 0, "K must be even"
    c = codes.to(torch.uint8)
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """packed [..., K/2] -> uint8 codes [..., K]; inverse of pack_fp4."""
    p = as_bytes(packed)
    return torch.stack((p & 0xF, p >> 4), dim=-1).flatten(-2)


def to_blocked(sf: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """Linear scales [..., R, KB] -> blocked [..., ceil(R/128), ceil(KB/4), 32, 4, 4] (contiguous).

    Padding rows/columns are filled with byte `pad` (tests use NaN codes there to
    prove that kernels ignore them).
    """
    b = as_bytes(sf)
    *lead, rows, kb = b.shape
    rb, kb4 = -(-rows // 128), -(-kb // 4)
    full = b.new_full((*lead, rb * 128, kb4 * 4), pad)
    full[..., :rows, :kb] = b
    # [..., rb, i4, i32, kb4, j4] -> [..., rb, kb4, i32, i4, j4]
    t = full.view(*lead, rb, 4, 32, kb4, 4)
    n = len(lead)
    t = t.permute(*range(n), n, n + 3, n + 2, n + 1, n + 4).contiguous()
    return t.view(sf.dtype) if sf.dtype != torch.uint8 else t


def from_blocked(sf: torch.Tensor, rows: int, k_blocks: int) -> torch.Tensor:
    """Blocked [..., RB, KB4, 32, 4, 4] -> linear [..., rows, k_blocks]; inverse of to_blocked."""
    b = as_bytes(sf)
    *lead, rb, kb4, _, _, _ = b.shape
    n = len(lead)
    t = b.permute(*range(n), n, n + 3, n + 2, n + 1, n + 4)  # [..., rb, i4, i32, kb4, j4]
    t = t.reshape(*lead, rb * 128, kb4 * 4)[..., :rows, :k_blocks]
    return t.view(sf.dtype) if sf.dtype != torch.uint8 else t


def batch_last(t: torch.Tensor) -> torch.Tensor:
    """[L, R, C] -> the competition's (R, C, L) view of the same memory."""
    return t.permute(1, 2, 0)


def batch_first(t: torch.Tensor) -> torch.Tensor:
    """(R, C, L) competition view -> [L, R, C]; inverse of batch_last (zero-copy)."""
    return t.permute(2, 0, 1)


def blocked_to_competition(sf: torch.Tensor) -> torch.Tensor:
    """Blocked [L, RB, KB4, 32, 4, 4] -> the competition's permuted (32, 4, RB, 4, KB4, L) view."""
    return sf.permute(3, 4, 1, 5, 2, 0)


def competition_to_blocked(sf: torch.Tensor) -> torch.Tensor:
    """Competition (32, 4, RB, 4, KB4, L) -> blocked [L, RB, KB4, 32, 4, 4]; zero-copy inverse."""
    return sf.permute(5, 2, 4, 0, 1, 3)
