"""Bad input: a clear TypeError/ValueError naming the argument, before any launch.

Runs on the CPU (and on the GPU where there is one): validation is the same
code for every device.
"""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels.layouts import to_blocked
from helpers import gemm_problem, gemv_problem


@pytest.fixture
def mm(device, gen):
    a, b = gemm_problem(2, 8, 6, 64, gen, device)
    return a, b


def test_wrong_dtypes(mm):
    a, b = mm
    with pytest.raises(TypeError, match=r"nvfp4\.gemm: a must be float4_e2m1fn_x2 or uint8"):
        nk.gemm(a.data.view(torch.uint8).float(), b.data, a.sf, b.sf)
    with pytest.raises(TypeError, match=r"\bb must be"):
        nk.gemm(a.data, b.data.view(torch.int8), a.sf, b.sf)
    with pytest.raises(TypeError, match=r"sfa must be float8_e4m3fn or uint8"):
        nk.gemm(a.data, b.data, a.sf.view(torch.uint8).half(), b.sf)
    with pytest.raises(TypeError, match=r"sfb must be float8_e4m3fn"):
        nk.gemm(a.data, b.data, a.sf, b.sf.view(torch.float8_e5m2))
    with pytest.raises(TypeError, match=r"out must be float16"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out=torch.empty(2, 8, 6, device=a.data.device))
    with pytest.raises(TypeError, match=r"alpha must be a float32 tensor"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=torch.tensor(1.0, dtype=torch.float64))


def test_wrong_ranks(mm):
    a, b = mm
    with pytest.raises(ValueError, match=r"a must be \[M, K/2\] or \[L, M, K/2\]"):
        nk.gemm(a.data.unsqueeze(0), b.data, a.sf, b.sf)
    with pytest.raises(ValueError, match=r"b must have 3 dims"):
        nk.gemm(a.data, b.data[0], a.sf, b.sf)
    with pytest.raises(ValueError, match=r"b must have 2 dims"):  # gemv wants a vector per batch
        nk.gemv(a.data, b.data, a.sf, b.sf)
    with pytest.raises(ValueError, match=r"sfa must be .* \(linear\) or .* \(blocked"):
        nk.gemm(a.data, b.data, a.sf.unsqueeze(0), b.sf)
    # validation holds up to 8 dims per tensor in place (no heap): more is refused, not read past
    deep = a.data.reshape((1,) * 7 + tuple(a.data.shape))
    with pytest.raises(ValueError, match=r"tensors of more than 8 dims are not supported"):
        nk.gemm(deep, b.data, a.sf, b.sf)


def test_disagreeing_sizes(mm, gen, device):
    a, b = mm
    a2, b2 = gemm_problem(3, 8, 6, 64, gen, device)
    with pytest.raises(ValueError, match=r"b has L=3 but a has L=2"):
        nk.gemm(a.data, b2.data, a.sf, b2.sf)
    a3, b3 = gemm_problem(2, 8, 6, 96, gen, device)
    with pytest.raises(ValueError, match=r"b has K/2=48 but a has K/2=32"):
        nk.gemm(a.data, b3.data, a.sf, b3.sf)
    with pytest.raises(ValueError, match=r"sfa has shape .* needs \[2, 8, 4\]"):
        nk.gemm(a.data, b.data, a3.sf, b.sf)
    with pytest.raises(ValueError, match=r"sfb has shape"):
        nk.gemm(a.data, b.data, a.sf, b.sf[:, :5])


def test_k_not_multiple_of_16(device):
    a = torch.zeros(4, 4, dtype=torch.uint8, device=device)  # K = 8
    sf = torch.zeros(4, 0, dtype=torch.uint8, device=device)
    with pytest.raises(ValueError, match=r"K \(= 2 \* a.shape\[-1\] = 8\) must be a positive multiple of 16"):
        nk.gemm(a, a, sf, sf)
    with pytest.raises(ValueError, match=r"positive multiple of 16"):
        nk.gemv(a, a[0], sf, sf[0])


def test_blocked_scale_shapes(mm):
    a, b = mm
    blocked = to_blocked(a.sf)  # [2, 1, 1, 32, 4, 4]
    assert nk.gemm(a.data, b.data, blocked, b.sf).shape == (2, 8, 6)
    with pytest.raises(ValueError, match=r"sfa has shape .* the blocked layout"):
        nk.gemm(a.data, b.data, torch.cat([blocked, blocked], dim=2), b.sf)
    with pytest.raises(ValueError, match=r"blocked layout\) must be contiguous"):
        nk.gemm(a.data, b.data, blocked.transpose(-1, -2), b.sf)


def test_unsupported_strides(mm):
    a, b = mm
    wide = torch.zeros(2, 8, 64, dtype=torch.uint8, device=a.data.device)
    with pytest.raises(ValueError, match=r"a must be contiguous along K"):
        nk.gemm(wide[:, :, ::2], b.data, a.sf, b.sf)
    sf_wide = torch.zeros(2, 8, 8, dtype=torch.uint8, device=a.data.device)
    with pytest.raises(ValueError, match=r"sfa must be contiguous along K/16"):
        nk.gemm(a.data, b.data, sf_wide[:, :, ::2], b.sf)
    out = torch.empty(2, 8, 12, dtype=torch.float16, device=a.data.device)
    with pytest.raises(ValueError, match=r"out must be contiguous along N"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out=out[:, :, ::2])


def test_bad_out(mm, device):
    a, b = mm
    with pytest.raises(ValueError, match=r"out has shape \[2, 6, 8\], expected \[2, 8, 6\]"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out=torch.empty(2, 6, 8, dtype=torch.float16, device=device))
    with pytest.raises(ValueError, match=r"one device"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out=torch.empty(2, 8, 6, dtype=torch.float16, device="meta"))


def test_devices_differ(mm):
    a, b = mm
    with pytest.raises(ValueError, match=r"one device"):
        torch.ops.nvfp4.gemm(a.data, b.data, a.sf, b.sf.to("meta"), None)
    with pytest.raises(ValueError, match=r"alpha must hold one value"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=torch.ones(2))


def test_dual_gemm_errors(mm, gen, device):
    a, b = mm
    _, c = gemm_problem(2, 8, 7, 64, gen, device)
    with pytest.raises(ValueError, match=r"b2 has shape .* but b1 has"):
        nk.dual_gemm(a.data, b.data, c.data, a.sf, b.sf, c.sf)
    with pytest.raises(TypeError, match=r"b2 must be"):
        nk.dual_gemm(a.data, b.data, b.data.view(torch.uint8).float(), a.sf, b.sf, b.sf)


def test_group_gemm_errors(mm, gen, device):
    a, b = mm
    a0, b0 = a.data[0], b.data[0]
    with pytest.raises(ValueError, match=r"the lists are empty"):
        nk.group_gemm([], [], [], [])
    with pytest.raises(ValueError, match=r"equal lengths, got a=2 b=1"):
        nk.group_gemm([a0, a0], [b0], [a.sf[0]], [b.sf[0]])
    with pytest.raises(ValueError, match=r"group 1\).*b has K/2"):
        a1, b1 = gemm_problem(None, 8, 6, 96, gen, device)
        nk.group_gemm([a0, a0], [b0, b1.data], [a.sf[0], a.sf[0]], [b.sf[0], b1.sf])
    with pytest.raises(ValueError, match=r"out has 1 tensors for 2 problems"):
        nk.group_gemm([a0, a0], [b0, b0], [a.sf[0]] * 2, [b.sf[0]] * 2,
                      outs=[torch.empty(8, 6, dtype=torch.float16, device=device)])


def test_gemv_errors(device, gen):
    a, v = gemv_problem(2, 8, 64, gen, device)
    with pytest.raises(ValueError, match=r"sfb has shape \[2, 3\]; the linear layout"):
        nk.gemv(a.data, v.data, a.sf, v.sf[:, :3])
    with pytest.raises(ValueError, match=r"out has shape \[2, 8, 1\], expected \[2, 8\]"):
        nk.gemv(a.data, v.data, a.sf, v.sf, out=torch.empty(2, 8, 1, dtype=torch.float16, device=device))
