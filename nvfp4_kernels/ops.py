"""Python entry points and fake (meta) implementations of torch.ops.nvfp4.*.

The wrappers only route to the out= or the allocating op; all validation lives
in csrc/torch_binding.cpp, so calling torch.ops.nvfp4.* directly is as safe.
The fake implementations give torch.compile the output shapes.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Union

import torch

Alpha = Union[None, float, torch.Tensor]

_FP32_MAX = 3.4028234663852886e38
_FP32_TINY = 1.401298464324817e-45  # the smallest float32 subnormal


def _scalar(op: str, name: str, value: Alpha, positive: bool = False) -> Optional[torch.Tensor]:
    """A Python number as a one-element float32 CPU tensor (read on the host: no sync); a tensor as
    it is (the op checks it); anything else, or a number float32 cannot hold, a clear error."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"nvfp4.{op}: {name} must be a number or a one-element float32 tensor, "
                        f"got {type(value).__name__} {value!r}")
    f = float(value)
    if not math.isfinite(f) or abs(f) > _FP32_MAX:
        raise ValueError(f"nvfp4.{op}: {name}={value!r} is outside float32's range")
    if positive and not f >= _FP32_TINY:
        raise ValueError(f"nvfp4.{op}: {name}={value!r} must be positive and at least {_FP32_TINY:.3g} "
                         "(float32's smallest)")
    return torch.tensor(f, dtype=torch.float32)


def gemv(a, b, sfa, sfb, *, out: Optional[torch.Tensor] = None, alpha: Alpha = None) -> torch.Tensor:
    """c[l, m] = alpha * sum_k A[l, m, k] b[l, k] in fp32, returned as fp16.

    a [L, M, K/2] or [M, K/2] and b [L, K/2] or [K/2]: float4_e2m1fn_x2 or uint8.
    sfa/sfb: e4m3 scales, linear [L, M, K/16] / [L, K/16] or blocked 128x4
    [L, ceil(M/128), ceil(K/64), 32, 4, 4] / [L, 1, ceil(K/64), 32, 4, 4].
    alpha: None, a float, or a one-element float32 tensor (on the device: no sync).
    """
    if out is None:
        return torch.ops.nvfp4.gemv(a, b, sfa, sfb, _scalar("gemv", "alpha", alpha))
    torch.ops.nvfp4.gemv_out(a, b, sfa, sfb, _scalar("gemv", "alpha", alpha), out)
    return out


def gemm(a, b, sfa, sfb, *, out: Optional[torch.Tensor] = None, alpha: Alpha = None) -> torch.Tensor:
    """C = alpha * A @ B^T (both K-major, like F.linear's weight), fp32 accumulation, fp16 result.

    a [L, M, K/2] or [M, K/2], b [L, N, K/2] or [N, K/2]; scales as for gemv.
    """
    if out is None:
        return torch.ops.nvfp4.gemm(a, b, sfa, sfb, _scalar("gemm", "alpha", alpha))
    torch.ops.nvfp4.gemm_out(a, b, sfa, sfb, _scalar("gemm", "alpha", alpha), out)
    return out


def dual_gemm(a, b1, b2, sfa, sfb1, sfb2, *, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """silu(A @ B1^T) * (A @ B2^T), silu and product in fp32, fp16 result."""
    if out is None:
        return torch.ops.nvfp4.dual_gemm(a, b1, b2, sfa, sfb1, sfb2)
    torch.ops.nvfp4.dual_gemm_out(a, b1, b2, sfa, sfb1, sfb2, out)
    return out


def group_gemm(
    as_: Sequence[torch.Tensor],
    bs: Sequence[torch.Tensor],
    sfas: Sequence[torch.Tensor],
    sfbs: Sequence[torch.Tensor],
    *,
    outs: Optional[Sequence[torch.Tensor]] = None,
) -> list:
    """Independent gemms (each its own M, N, K) in one call; returns the list of fp16 results."""
    if len(as_) == 0:  # the dispatcher cannot route a call without tensors: say why here
        raise ValueError("nvfp4.group_gemm: the lists are empty; give at least one problem")
    if outs is None:
        return torch.ops.nvfp4.group_gemm(list(as_), list(bs), list(sfas), list(sfbs))
    torch.ops.nvfp4.group_gemm_out(list(as_), list(bs), list(sfas), list(sfbs), list(outs))
    return list(outs)


def quantize(x, *, global_scale: Alpha = None, sf_layout: str = "linear"):
    """x (float32 / float16 / bfloat16, [K], [R, K] or [L, R, K], K a multiple of 16 and
    contiguous) -> (codes, scales) of x * global_scale, as the ops above take them.

    Per 16 values along K: scale = e4m3(amax * global_scale / 6), codes = e2m1(x * global_scale /
    scale), each rounded to nearest even and saturated (reference.quantize is the definition).
    codes: uint8 [..., K/2] (low nibble first; .view(torch.float4_e2m1fn_x2) if wanted); scales:
    float8_e4m3fn, linear [..., K/16] or, with sf_layout="blocked", [L?, ceil(R/128), ceil(K/64),
    32, 4, 4] with zero padding. global_scale: None (1), a positive float, or a one-element
    float32 tensor (on the device: no sync). A gemm of two quantized operands takes
    alpha = 1 / (global_scale_a * global_scale_b). A NaN makes its block's scale NaN (the block
    decodes to NaN); +-inf saturates to +-6 times a scale of 448.
    """
    if sf_layout not in ("linear", "blocked"):
        raise ValueError(f'nvfp4.quantize: sf_layout must be "linear" or "blocked", got {sf_layout!r}')
    return torch.ops.nvfp4.quantize(x, _scalar("quantize", "global_scale", global_scale, positive=True),
                                    sf_layout == "blocked")


def kernel_name(op: str, *args) -> str:
    """Which kernel ``op(*args)`` would run on these tensors' device, and how it is configured:
    e.g. "wgmma (128-row tiles, split-K 2)", "gemv_dp4a", "gemv_mma (roles swapped)", "cpu".

    op: "gemv", "gemm", "dual_gemm" or "group_gemm"; args as that op takes them (group_gemm: its
    four lists). The choice is made by one ordered table of rules, csrc/cuda/plan.cu.
    """
    tensors = [t for lst in args for t in lst] if op == "group_gemm" else list(args)
    if not tensors:
        raise ValueError(f"nvfp4.kernel_name: no tensors given for {op!r}")
    return torch.ops.nvfp4.kernel_name(op, tensors)


# ---- fake implementations (shapes only) --------------------------------------
# A call that mixes meta tensors with real ones lands here too, so the one check
# that cannot wait for the real kernel is made here as well: one device.


def _one_device(op, tensors, scalars=()):
    """Every tensor on one device; each scalar (alpha, global_scale) there too, or a CPU scalar."""
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"nvfp4.{op}: all tensors must be on one device, got {sorted(map(str, devices))}")
    for name, t in scalars:
        if isinstance(t, torch.Tensor) and devices and t.device not in devices and t.device.type != "cpu":
            raise ValueError(f"nvfp4.{op}: {name} is on {t.device} but the operands are on {devices.pop()} "
                             "(a device tensor must be on theirs; a CPU scalar may go with any)")


def _mm_shape(a, b, vector):
    return (*a.shape[:-1],) if vector else (*a.shape[:-1], b.shape[-2])


@torch.library.register_fake("nvfp4::gemv")
def _(a, b, sfa, sfb, alpha=None):
    _one_device("gemv", (a, b, sfa, sfb), [("alpha", alpha)])
    return a.new_empty(_mm_shape(a, b, True), dtype=torch.float16)


@torch.library.register_fake("nvfp4::gemm")
def _(a, b, sfa, sfb, alpha=None):
    _one_device("gemm", (a, b, sfa, sfb), [("alpha", alpha)])
    return a.new_empty(_mm_shape(a, b, False), dtype=torch.float16)


@torch.library.register_fake("nvfp4::dual_gemm")
def _(a, b1, b2, sfa, sfb1, sfb2):
    _one_device("dual_gemm", (a, b1, b2, sfa, sfb1, sfb2))
    return a.new_empty(_mm_shape(a, b1, False), dtype=torch.float16)


@torch.library.register_fake("nvfp4::group_gemm")
def _(as_, bs, sfas, sfbs):
    _one_device("group_gemm", (*as_, *bs, *sfas, *sfbs))
    return [a.new_empty(_mm_shape(a, b, False), dtype=torch.float16) for a, b in zip(as_, bs)]


@torch.library.register_fake("nvfp4::quantize")
def _(x, global_scale=None, blocked=False):
    _one_device("quantize", (x,), [("global_scale", global_scale)])
    k = x.shape[-1]
    data = x.new_empty((*x.shape[:-1], k // 2), dtype=torch.uint8)
    if not blocked:
        return data, x.new_empty((*x.shape[:-1], k // 16), dtype=torch.float8_e4m3fn)
    rows = x.shape[-2] if x.dim() >= 2 else 1
    lead = (x.shape[0],) if x.dim() == 3 else ()
    return data, x.new_empty((*lead, -(-rows // 128), -(-k // 64), 32, 4, 4), dtype=torch.float8_e4m3fn)


def _register_out_fake(name):
    @torch.library.register_fake(f"nvfp4::{name}")
    def _(*args):
        flat = [t for arg in args for t in (arg if isinstance(arg, (list, tuple)) else (arg,))]
        # alpha (the only float32 argument) may be a CPU scalar next to device tensors
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        _one_device(name, [t for t in tensors if t.dtype != torch.float32],
                    [("alpha", t) for t in tensors if t.dtype == torch.float32])
        return None


for _name in ("gemv_out", "gemm_out", "dual_gemm_out", "group_gemm_out", "competition_group_gemm", "competition_gemm",
              "competition_dual_gemm"):
    _register_out_fake(_name)
