"""Exhaustive decoding: every e4m3 byte and every e2m1 code (in both nibble
positions) through the kernels on every device, and the fp16 rounding of
results across the whole fp16 range (subnormals, overflow). Results here are
exact, so they are compared bit for bit.

gemv (N = 1) and gemm with N > 1 take different kernels on the GPU, so both are run.
"""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference

ONE_E4M3 = 0x38  # 1.0
ONE_PAIR = 0x22  # two e2m1 codes of 1.0


def _bits_equal(out, want, what):
    """Bitwise equality, except that the sign of a zero is not compared (it
    depends on the summation order, which the format does not fix)."""
    o, w = out.cpu() + 0.0, want.cpu() + 0.0  # -0 + 0 = +0
    nan_o, nan_w = torch.isnan(o.float()), torch.isnan(w.float())
    assert torch.equal(nan_o, nan_w), f"{what}: NaN positions differ"
    eq = o.view(torch.int16)[~nan_o] == w.view(torch.int16)[~nan_w]
    if not bool(eq.all()):
        i = int((~eq).nonzero()[0])
        raise AssertionError(f"{what}: {int((~eq).sum())} differ, e.g. got {o[~nan_o][i]} want {w[~nan_w][i]}")


def _run(device, a_bytes, sfa, b_bytes, sfb, alpha=None):
    """gemm of the given bytes (N = b rows) and gemv against b row 0."""
    t = lambda x: x.to(device)  # noqa: E731
    mm = nk.gemm(t(a_bytes), t(b_bytes), t(sfa), t(sfb), alpha=alpha)
    mv = nk.gemv(t(a_bytes), t(b_bytes[0]), t(sfa), t(sfb[0]), alpha=alpha)
    return mm, mv


@pytest.mark.parametrize("k", [16, 64])
def test_every_e4m3_scale(device, k):
    """Row r scaled by byte r: out[r] = k * e4m3(r), NaN for 0x7F and 0xFF."""
    a = torch.full((256, k // 2), ONE_PAIR, dtype=torch.uint8)
    sfa = torch.arange(256, dtype=torch.uint8).view(256, 1).repeat(1, k // 16)
    b = torch.full((3, k // 2), ONE_PAIR, dtype=torch.uint8)
    sfb = torch.full((3, k // 16), ONE_E4M3, dtype=torch.uint8)
    want = (k * reference.decode_e4m3(torch.arange(256, dtype=torch.uint8))).to(torch.float16)
    mm, mv = _run(device, a, sfa, b, sfb)
    for col in range(3):
        _bits_equal(mm[:, col], want, f"gemm e4m3 decode on {device}")
    _bits_equal(mv, want, f"gemv e4m3 decode on {device}")
    # and the scale on the vector side
    mm, mv = _run(device, b.repeat(86, 1)[:256], sfb.repeat(86, 1)[:256], a[:5], sfa[[0, 1, 8, 0x7F, 0xB3]])
    want_b = (k * reference.decode_e4m3(torch.tensor([0, 1, 8, 0x7F, 0xB3], dtype=torch.uint8))).to(torch.float16)
    for row in range(256):
        _bits_equal(mm[row], want_b, f"gemm e4m3 decode (b side) on {device}")
    _bits_equal(mv, want_b[0].expand(256), f"gemv e4m3 decode (b side) on {device}")


def test_every_e2m1_code_in_both_nibbles(device):
    """Row r of A holds byte r everywhere; b row 0 selects the low nibbles, row 1 the high."""
    k = 32
    a = torch.arange(256, dtype=torch.uint8).view(256, 1).repeat(1, k // 2)
    sfa = torch.full((256, k // 16), ONE_E4M3, dtype=torch.uint8)
    b = torch.tensor([[0x02] * (k // 2), [0x20] * (k // 2), [0x22] * (k // 2)], dtype=torch.uint8)
    sfb = torch.full((3, k // 16), ONE_E4M3, dtype=torch.uint8)
    codes = torch.arange(256, dtype=torch.uint8)
    lo, hi = reference.decode_e2m1(codes & 15), reference.decode_e2m1(codes >> 4)
    want = torch.stack([(k / 2) * lo, (k / 2) * hi, (k / 2) * (lo + hi)], dim=1).to(torch.float16)
    mm, mv = _run(device, a, sfa, b, sfb)
    _bits_equal(mm, want, f"gemm e2m1 decode on {device}")
    _bits_equal(mv, want[:, 0], f"gemv e2m1 decode on {device}")
    # the codes on the vector side: a row of 1.0s against each byte pattern
    mm, mv = _run(device, torch.full((4, k // 2), ONE_PAIR, dtype=torch.uint8), sfa[:4], a, sfa)
    _bits_equal(mm[0], (k / 2) * (lo + hi).to(torch.float16), f"gemm e2m1 decode (b side) on {device}")


@pytest.mark.parametrize("exp", range(-34, 14, 3))
def test_fp16_rounding_of_results(device, exp):
    """alpha = 2^exp moves exact results over the fp16 range: subnormal, normal, overflow."""
    k = 16
    a = torch.full((256, k // 2), ONE_PAIR, dtype=torch.uint8)
    sfa = torch.arange(256, dtype=torch.uint8).view(256, 1)
    b = torch.full((2, k // 2), 0x55, dtype=torch.uint8)  # 3.0 everywhere
    sfb = torch.full((2, 1), 0x3B, dtype=torch.uint8)  # 1.375
    alpha = 2.0**exp
    want = (k * 3.0 * 1.375 * alpha * reference.decode_e4m3(torch.arange(256, dtype=torch.uint8))).to(torch.float16)
    mm, mv = _run(device, a, sfa, b, sfb, alpha=alpha)
    _bits_equal(mm[:, 1], want, f"gemm fp16 rounding alpha=2^{exp} on {device}")
    _bits_equal(mv, want, f"gemv fp16 rounding alpha=2^{exp} on {device}")


def test_reference_decodes_in_every_dtype(gen):
    """reference.decode_e2m1 gives E2M1_VALUES (signed zero too) in each dtype, and dequantize is
    exact in float32, bfloat16 and float16 (what the W4A4 MoE rows are multiplied as)."""
    codes = torch.arange(16, dtype=torch.uint8)
    table = torch.tensor(reference.E2M1_VALUES, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        v = reference.decode_e2m1(codes, dtype).double()
        assert torch.equal(v, table) and torch.equal(torch.signbit(v), torch.signbit(table)), dtype
    data = torch.randint(0, 256, (5, 32), generator=gen, dtype=torch.uint8)
    sf = torch.randint(0, 0x7F, (5, 4), generator=gen, dtype=torch.uint8)  # every finite e4m3, subnormals too
    exact = reference.dequantize(data, sf)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert torch.equal(reference.dequantize(data, sf, dtype).double(), exact), dtype
