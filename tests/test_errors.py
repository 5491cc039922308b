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


# ---- the op boundary: arguments that used to pass unchecked -------------------


def test_scalar_arguments(mm):
    """alpha / global_scale: a number float32 holds, or a one-element float32 tensor; anything else
    a clear error naming the argument (not a conversion error, not a silent inf or 0)."""
    a, b = mm
    with pytest.raises(TypeError, match=r"nvfp4\.gemm: alpha must be a number or a one-element float32 tensor, got str"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha="2.0")
    with pytest.raises(TypeError, match=r"alpha must be a number .* got bool"):
        nk.gemv(a.data, b.data[:, 0], a.sf, b.sf[:, 0], alpha=True)
    with pytest.raises(ValueError, match=r"alpha=1e\+39 is outside float32's range"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=1e39)
    with pytest.raises(ValueError, match=r"alpha=nan is outside"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=float("nan"))
    x = torch.randn(4, 32, device=a.data.device)
    with pytest.raises(ValueError, match=r"nvfp4\.quantize: global_scale=1e-50 must be positive and at least"):
        nk.quantize(x, global_scale=1e-50)
    with pytest.raises(ValueError, match=r"global_scale=-1.0 must be positive"):
        nk.quantize(x, global_scale=-1.0)
    with pytest.raises(TypeError, match=r"global_scale must be a number"):
        nk.quantize(x, global_scale="1")
    assert torch.equal(nk.gemm(a.data, b.data, a.sf, b.sf, alpha=2), nk.gemm(a.data, b.data, a.sf, b.sf, alpha=2.0))


def test_scalar_on_another_device(mm):
    """A device tensor as alpha or global_scale must be on the operands' device (a CPU scalar goes
    with any): a meta one next to real operands is refused, not an uninitialised result."""
    a, b = mm
    meta = torch.tensor(2.0, device="meta")
    with pytest.raises(ValueError, match=r"nvfp4\.gemm: alpha is on meta but the operands are on"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=meta)
    out = torch.full((2, 8, 6), float("nan"), dtype=torch.float16, device=a.data.device)
    with pytest.raises(ValueError, match=r"alpha is on meta"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=meta, out=out)
    with pytest.raises(ValueError, match=r"nvfp4\.quantize: global_scale is on meta"):
        nk.quantize(torch.randn(4, 32, device=a.data.device), global_scale=meta)
    # every tensor on meta: shapes only, as torch.compile's fake tensors get
    m = nk.gemm(a.data.to("meta"), b.data.to("meta"), a.sf.to("meta"), b.sf.to("meta"), alpha=meta)
    assert m.shape == (2, 8, 6) and m.device.type == "meta"
    # a CPU scalar with device operands is the documented way
    assert nk.gemm(a.data, b.data, a.sf, b.sf, alpha=torch.tensor(0.5)).shape == (2, 8, 6)


def test_out_that_overlaps(mm, gen, device):
    """out= with two elements at one address, or sharing memory with an input, is refused as
    torch.mm refuses it (the result would depend on the order of the writes)."""
    a, b = mm
    with pytest.raises(ValueError, match=r"nvfp4\.gemm: out has elements that share memory"):
        nk.gemm(a.data, b.data, a.sf, b.sf, out=torch.empty(2, 8, 1, dtype=torch.float16, device=device).expand(2, 8, 6))
    with pytest.raises(ValueError, match=r"nvfp4\.gemv: out has elements that share memory"):
        nk.gemv(a.data, b.data[:, 0], a.sf, b.sf[:, 0], out=torch.empty(1, 1, dtype=torch.float16, device=device).expand(2, 8))
    # an out whose bytes are the input's own
    a2, b2 = gemm_problem(None, 64, 64, 256, gen, device)
    alias = a2.data.view(torch.uint8).view(torch.float16)  # [64, 64] fp16 over a's 64 x 128 bytes
    with pytest.raises(ValueError, match=r"out shares memory with a"):
        nk.gemm(a2.data, b2.data, a2.sf, b2.sf, out=alias)
    c = torch.empty(3, 8, 6, dtype=torch.float16, device=device)
    a3, b3 = gemm_problem(None, 8, 6, 64, gen, device)
    with pytest.raises(ValueError, match=r"nvfp4\.group_gemm \(group 1\): out shares memory with the out of another"):
        nk.group_gemm([a3.data] * 2, [b3.data] * 2, [a3.sf] * 2, [b3.sf] * 2, outs=[c[0], c[0]])
    # distinct outs of one buffer are fine
    outs = nk.group_gemm([a3.data] * 2, [b3.data] * 2, [a3.sf] * 2, [b3.sf] * 2, outs=[c[0], c[1]])
    assert torch.equal(outs[0], outs[1])


def test_zero_dim_operand(mm):
    a, b = mm
    with pytest.raises(ValueError, match=r"nvfp4\.gemm: a must have a dim of K/2 bytes, got a 0-dim tensor"):
        nk.gemm(a.data[0, 0, 0], b.data, a.sf, b.sf)


def test_empty_problems_with_blocked_scales(device, gen):
    """Blocked scales of an empty problem, as layouts.to_blocked makes them, are accepted."""
    for L, m, n in [(None, 0, 6), (None, 8, 0), (2, 0, 0), (0, 8, 6)]:
        a, b = gemm_problem(L, m, n, 64, gen, device, ("blocked", "blocked"))
        out = nk.gemm(a.data, b.data, a.sf, b.sf)
        assert out.shape == ((L,) if L is not None else ()) + (m, n)


def test_not_differentiable(device, gen):
    """A float argument that requires grad (alpha, quantize's x) is refused under grad mode,
    rather than giving outputs whose backward does nothing; detached or under no_grad it runs."""
    a, b = gemm_problem(None, 8, 6, 64, gen, device)
    alpha = torch.tensor(1.5, requires_grad=True)
    with pytest.raises(ValueError, match=r"nvfp4\.gemm: not differentiable, but alpha requires grad"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha)
    with pytest.raises(ValueError, match=r"nvfp4\.gemm_out: not differentiable"):
        nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha, out=torch.empty(8, 6, dtype=torch.float16, device=device))
    x = torch.randn(4, 32, device=device, requires_grad=True)
    with pytest.raises(ValueError, match=r"nvfp4\.quantize: not differentiable, but x requires grad"):
        nk.quantize(x)
    with torch.no_grad():
        assert nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha).shape == (8, 6)
        nk.quantize(x)
    assert nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha.detach()).shape == (8, 6)


def test_cpu_scratch_by_the_work():
    """The CPU kernel's scratch grows with the rows it works on, not with K alone: M = N = 1 with
    K = 2^27 needs 1 GB, where 64 + 16 rows of K asked for 43 GB and failed."""
    k = 1 << 27
    a = torch.full((1, k // 2), 0x22, dtype=torch.uint8)  # every code 1.0
    sf = torch.full((1, k // 16), 0x01, dtype=torch.uint8)  # every scale 2^-9
    out = nk.gemm(a, a, sf, sf)
    assert out.item() == 512.0  # K * 2^-18, exact
