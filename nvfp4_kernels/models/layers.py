"""Layers the checkpoint loader builds besides ``nn.NVFP4Linear``.

``CompressedTensorsNVFP4Linear`` keeps a compressed-tensors layer's per-tensor scales as that
library writes them: MULTIPLIERS (``weight_global_scale`` = 6*448 / amax, ``input_global_scale``
likewise), where ModelOpt's (and NVFP4Linear's) are divisors. 1/g is rarely a float32 number, and
float32(1 / float32(1 / g)) != g for about one g in eight, so storing divisors would change the
activations' quantization and lose the checkpoint's values. Here the activations are quantized
with g_x itself (as compressed-tensors and vLLM do), and the gemm's alpha, which multiplies the
float32 sum of the exact products, is the float32 nearest to the exact 1 / (g_w * g_x) (W4A4) or
1 / g_w (W4A16): one rounding, the best a float32 alpha can do. The product g_w * g_x of two
float32 numbers is computed exactly (as a fraction), not in float32 as vLLM computes it.

``NVFP4SplitLinear`` stands for a fused projection of the model (say ``qkv_proj``) whose
checkpoint slices (``q_proj``, ``k_proj``, ``v_proj``) carry different per-tensor scales: a single
gemm has one alpha, so each slice keeps its own layer and the outputs are concatenated. That is
exact (each slice computes what it would alone), at one gemm per slice.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from typing import Dict

import torch

from ..nn import NVFP4Linear

_F32_MAX = Fraction(struct.unpack("<f", b"\xff\xff\x7f\x7f")[0])
_F32_MIN_NORMAL = Fraction(2) ** -126


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f32_from_bits(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def nearest_f32(q: Fraction) -> float:
    """The float32 number nearest to the exact positive rational q (ties to even mantissa).

    float(q) rounds once to float64 and packing to float32 rounds again; the two roundings can
    land one unit away from the nearest, so the neighbours are compared exactly."""
    if not 0 < q <= _F32_MAX:
        raise ValueError(f"{float(q)!r} is outside float32's positive range")
    b = _f32_bits(float(q))
    best = None
    for c in (b - 1, b, b + 1):
        if c <= 0 or c >= 0x7F800000:
            continue
        d = abs(Fraction(_f32_from_bits(c)) - q)
        if best is None or d < best[0] or (d == best[0] and c % 2 == 0):
            best = (d, c)
    return _f32_from_bits(best[1])


def _positive(t: torch.Tensor, name: str) -> Fraction:
    v = float(t.reshape(-1)[0])
    if not (v > 0 and v != float("inf")):
        raise ValueError(f"{name} must be positive and finite, got {v}")
    return Fraction(v)


class CompressedTensorsNVFP4Linear(NVFP4Linear):
    """NVFP4Linear whose per-tensor scales are compressed-tensors' multipliers (see the module
    docstring). Its state_dict holds the library's names: ``weight_packed`` (uint8 [N, K/2]),
    ``weight_scale`` (e4m3 [N, K/16]), ``weight_global_scale`` (float32 [1]),
    ``input_global_scale`` (float32 [1], w4a4 only) and ``bias``, so it round-trips the checkpoint.
    ``weight_scale_2`` and ``input_scale`` are derived (1/g rounded once), non-persistent.
    Deriving reads the two scalars on the host (one sync, at loading)."""

    _GLOBALS = ("weight_global_scale", "input_global_scale")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, mode: str = "w4a4",
                 dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__(in_features, out_features, bias, mode=mode, dtype=dtype, device=device)
        self.register_buffer("weight_global_scale", torch.ones(1, dtype=torch.float32, device=device))
        if mode == "w4a4":
            self.register_buffer("input_global_scale", torch.ones(1, dtype=torch.float32, device=device))
        for name in ("weight_scale_2", "input_scale"):  # derived from the multipliers: not saved
            if name in self._buffers:
                self._non_persistent_buffers_set.add(name)
        self.update_derived_scales()

    @torch.no_grad()
    def update_derived_scales(self) -> None:
        if "weight_global_scale" not in self._buffers:  # the base's __init__, before ours runs
            return super().update_derived_scales()
        g_w = _positive(self.weight_global_scale, "weight_global_scale")
        self.weight_scale_2.fill_(nearest_f32(1 / g_w))  # the W4A16 gemm's alpha
        if self.mode == "w4a4":
            g_x = _positive(self.input_global_scale, "input_global_scale")
            self.input_scale.fill_(nearest_f32(1 / g_x))
            dev = self.input_global_scale.device
            self._set_derived("_input_global_scale", self.input_global_scale.detach().reshape(()).clone())
            self._set_derived("_alpha", torch.tensor(nearest_f32(1 / (g_w * g_x)), dtype=torch.float32, device=dev))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        if prefix + "weight_packed" in state_dict:
            state_dict[prefix + "weight"] = state_dict.pop(prefix + "weight_packed")
        elif prefix + "weight" in state_dict:  # the codes under ModelOpt's name: not this layer's
            unexpected_keys.append(prefix + "weight")
            state_dict.pop(prefix + "weight")
            missing_keys.append(prefix + "weight_packed")
        for name in self._GLOBALS:  # [1] as the library writes it; a 0-dim one is taken too
            v = state_dict.get(prefix + name)
            if isinstance(v, torch.Tensor) and v.dim() == 0:
                state_dict[prefix + name] = v.reshape(1)
        if self.mode == "w4a16":
            state_dict.pop(prefix + "input_global_scale", None)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        own = [k for k in destination if k.startswith(prefix) and k[len(prefix):] in self._buffers]
        for k in own:  # re-inserted in order, the codes under the library's name
            t = destination.pop(k)
            destination[prefix + "weight_packed" if k == prefix + "weight" else k] = t

    def _apply(self, fn, recurse=True):
        keep = {k: self._buffers[k] for k in self._GLOBALS if self._buffers.get(k) is not None}
        super()._apply(fn, recurse)
        for k, old in keep.items():
            if self._buffers[k].dtype != old.dtype:  # a dtype cast: take only the device move
                self._buffers[k] = old.to(self._buffers[k].device)
        return self

    def extra_repr(self) -> str:
        return super().extra_repr() + ", scales=compressed-tensors multipliers"


class NVFP4SplitLinear(torch.nn.Module):
    """A fused projection held as one NVFP4 layer per checkpoint slice; the output is their outputs
    concatenated in order (see the module docstring). ``parts`` maps each slice's own module name
    (e.g. "q_proj") to its layer."""

    def __init__(self, parts: Dict[str, NVFP4Linear]):
        super().__init__()
        if not parts:
            raise ValueError("NVFP4SplitLinear: no parts")
        ks = {p.in_features for p in parts.values()}
        if len(ks) != 1:
            raise ValueError(f"NVFP4SplitLinear: the parts' in_features differ: {sorted(ks)}")
        self.parts = torch.nn.ModuleDict(parts)
        self.in_features = ks.pop()
        self.out_features = sum(p.out_features for p in parts.values())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([p(x) for p in self.parts.values()], dim=-1)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, slices={list(self.parts)}"
