"""Packing and scale-layout helpers, each with its inverse (tests round-trip them).

Layouts (the C side reads the same definitions in csrc/numerics.h):

* fp4 data: [..., K/2] bytes, two e2m1 codes per byte, the LOW nibble holds the
  even k (torch.float4_e2m1fn_x2 or uint8).
* linear scales: [..., R, K/16], one e4m3 byte per 16 values of a row.
* blocked scales (cuBLAS/CUTLASS "128x4"): [..., ceil(R/128), ceil(K/64), 32, 4, 4].
  Atom (rb, kb4) covers rows 128*rb .. +127 and scale columns 4*kb4 .. +3; row
  r = 128*rb + 32*i4 + i32 and column j = 4*kb4 + j4 sit at [rb, kb4, i32, i4, j4].
  Rows and columns past R and K/16 are padding: kernels never read them.
* experts laid out by tile (grouped_mm's weights, csrc/nvfp4.h): codes [E, N/128, ceil(K/256), 16384]
  and scales [E, N/128, ceil(K/256), 2048]. Tile t, run g: 4 K steps of 64 values of 128 rows,
  step s of row place p at 4096 s + 32 p (32 code bytes), and the rows' 16 scales of the run at
  16 p. A tile holds rows 128 t .. +127, or of a gated expert ([2N] rows: W1 then W3) W1's rows
  64 t .. +63 then W3's. K is padded with zero codes and scales.
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


TILE_ROWS, TILE_RUN = 128, 256  # a tile's rows; the K values of a run (4 steps of 64)


def _tile_rows(t: torch.Tensor, gated: bool) -> torch.Tensor:
    """[E, R, C] -> [E, R/128, 128, C]: a tile's rows (gated: W1's 64 then W3's 64)."""
    e, rows, c = t.shape
    if not gated:
        return t.reshape(e, rows // TILE_ROWS, TILE_ROWS, c)
    n = rows // 2
    return torch.cat([t[:, :n].reshape(e, n // 64, 64, c), t[:, n:].reshape(e, n // 64, 64, c)], dim=2)


def _untile_rows(t: torch.Tensor, gated: bool) -> torch.Tensor:
    """Inverse of _tile_rows: [E, tiles, 128, C] -> [E, R, C]."""
    e, tiles, _, c = t.shape
    if not gated:
        return t.reshape(e, tiles * TILE_ROWS, c)
    return torch.cat([t[:, :, :64].reshape(e, tiles * 64, c), t[:, :, 64:].reshape(e, tiles * 64, c)], dim=1)


def to_expert_tiles(w: torch.Tensor, w_sf: torch.Tensor, gated: bool = False):
    """Experts' codes w [E, R, K/2] (uint8 or float4_e2m1fn_x2; or int32 [E, R, K/8], pack_bf16_pairs'
    words) and linear scales w_sf [E, R, K/16] -> (codes, scales) laid out by tile (above), in w's
    and w_sf's dtypes, on their device. R a multiple of 128; gated (W1 then W3): of 128 too."""
    if w.dim() != 3 or w_sf.dim() != 3 or w.shape[:2] != w_sf.shape[:2]:
        raise ValueError(f"to_expert_tiles: w [E, R, K/2] and w_sf [E, R, K/16] needed, got {tuple(w.shape)} and "
                         f"{tuple(w_sf.shape)}")
    codes = w.contiguous().view(torch.uint8) if w.dtype == torch.int32 else as_bytes(w)
    e, rows, half_k = codes.shape
    if rows % TILE_ROWS or w_sf.shape[2] * 8 != half_k:
        raise ValueError(f"to_expert_tiles: R={rows} must be a multiple of {TILE_ROWS} and w_sf [E, R, K/16], got "
                         f"w {tuple(w.shape)}, w_sf {tuple(w_sf.shape)}")
    runs = -(-2 * half_k // TILE_RUN)
    tiles = rows // TILE_ROWS
    c = torch.nn.functional.pad(_tile_rows(codes, gated), (0, runs * TILE_RUN // 2 - half_k))
    c = c.reshape(e, tiles, TILE_ROWS, 4 * runs, 32).permute(0, 1, 3, 2, 4).reshape(e, tiles, runs, 4 * 4096)
    s = torch.nn.functional.pad(_tile_rows(as_bytes(w_sf), gated), (0, 16 * runs - w_sf.shape[2]))
    s = s.reshape(e, tiles, TILE_ROWS, runs, 16).permute(0, 1, 3, 2, 4).reshape(e, tiles, runs, 16 * TILE_ROWS)
    return c.view(w.dtype), s.view(w_sf.dtype)


def from_expert_tiles(w: torch.Tensor, w_sf: torch.Tensor, k: int, gated: bool = False):
    """Inverse of to_expert_tiles: (codes [E, R, K/2] (int32 [E, R, K/8] for words), scales [E, R, K/16])."""
    codes = w.contiguous().view(torch.uint8) if w.dtype == torch.int32 else as_bytes(w)
    e, tiles, runs, _ = codes.shape
    c = codes.reshape(e, tiles, 4 * runs, TILE_ROWS, 32).permute(0, 1, 3, 2, 4).reshape(e, tiles, TILE_ROWS, -1)
    c = _untile_rows(c[..., :k // 2], gated).contiguous()
    s = as_bytes(w_sf).reshape(e, tiles, runs, TILE_ROWS, 16).permute(0, 1, 3, 2, 4).reshape(e, tiles, TILE_ROWS, -1)
    s = _untile_rows(s[..., :k // 16], gated).contiguous()
    return c.view(w.dtype), s.view(w_sf.dtype)


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
