"""Layout helpers: inverse pairs round-trip, and the blocked layout puts every
scale where docs/competition.md says (an independent formula, not the helper's code)."""

import pytest
import torch

from nvfp4_kernels import layouts


@pytest.mark.parametrize("k", [2, 16, 1040])
def test_pack_unpack_roundtrip(gen, k):
    codes = torch.randint(0, 16, (3, 7, k), generator=gen, dtype=torch.uint8)
    packed = layouts.pack_fp4(codes)
    assert packed.shape == (3, 7, k // 2)
    assert torch.equal(packed[..., 0] & 0xF, codes[..., 0]), "the low nibble holds the even k"
    assert torch.equal(layouts.unpack_fp4(packed), codes)
    assert torch.equal(layouts.unpack_fp4(packed.view(torch.float4_e2m1fn_x2)), codes)


@pytest.mark.parametrize("rows,kb", [(1, 1), (7, 3), (128, 4), (129, 5), (300, 17)])
@pytest.mark.parametrize("lead", [(), (3,)])
def test_blocked_roundtrip_and_positions(gen, rows, kb, lead):
    sf = torch.randint(0, 256, (*lead, rows, kb), generator=gen, dtype=torch.uint8)
    blocked = layouts.to_blocked(sf, pad=0x7F)
    rb, kb4 = -(-rows // 128), -(-kb // 4)
    assert blocked.shape == (*lead, rb, kb4, 32, 4, 4) and blocked.is_contiguous()
    assert torch.equal(layouts.from_blocked(blocked, rows, kb), sf)
    # docs/competition.md: row r, column j at atom (r // 128, j // 4), byte 16*(r%32) + 4*((r%128)//32) + j%4
    flat = blocked.reshape(*lead, -1)
    r = torch.arange(rows).view(-1, 1)
    j = torch.arange(kb).view(1, -1)
    offset = ((r // 128) * kb4 + j // 4) * 512 + 16 * (r % 32) + 4 * ((r % 128) // 32) + j % 4
    assert torch.equal(flat[..., offset], sf)
    # everything else is padding
    mask = torch.ones(flat.shape[-1], dtype=torch.bool)
    mask[offset.flatten()] = False
    assert bool((flat[..., mask] == 0x7F).all())


def test_competition_views_roundtrip(gen):
    L, rows, kb = 2, 256, 8
    sf = torch.randint(0, 256, (L, rows, kb), generator=gen, dtype=torch.uint8)
    blocked = layouts.to_blocked(sf)
    perm = layouts.blocked_to_competition(blocked)
    assert perm.shape == (32, 4, 2, 4, 2, L)
    # the competition's indexing: perm[i32, i4, rb, j4, kb4, l] = sf[l, 128 rb + 32 i4 + i32, 4 kb4 + j4]
    assert perm[5, 2, 1, 3, 1, 1] == sf[1, 128 + 64 + 5, 4 + 3]
    back = layouts.competition_to_blocked(perm)
    assert back.data_ptr() == blocked.data_ptr() and back.is_contiguous() and torch.equal(back, blocked)
    x = torch.randint(0, 256, (L, rows, 5), generator=gen, dtype=torch.uint8)
    assert torch.equal(layouts.batch_first(layouts.batch_last(x)), x)
    assert layouts.batch_first(layouts.batch_last(x)).is_contiguous()
