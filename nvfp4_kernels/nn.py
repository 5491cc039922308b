"""NVFP4Linear: a linear layer whose weights are NVFP4, stored as an NVIDIA ModelOpt checkpoint stores them.

Tensors of a layer with N = out_features, K = in_features (K a multiple of 16), named as in the
checkpoint, so that ``state_dict()`` and ``load_state_dict()`` exchange them with it:

    weight          uint8 [N, K/2]           e2m1 codes, two per byte, low nibble = even k
    weight_scale    float8_e4m3fn [N, K/16]  one scale per 16 weights of a row (linear layout)
    weight_scale_2  float32 []               per-tensor divisor: amax(|W|) / (6 * 448)
    input_scale     float32 []               per-tensor divisor of the activations: amax(|x|) / (6 * 448),
                                             from calibration (mode "w4a4" only)
    bias            [N], the layer's dtype   (optional)

ModelOpt's export writes the two scalars 0-dim (``.squeeze()``); loading also takes them as [1].
With dequantize(codes, scales) = e2m1(code) * e4m3(scale) per element (``reference.dequantize``):

    W   = dequantize(weight, weight_scale) * weight_scale_2
    w4a4:  x_q = dequantize(quantize(x, global_scale=1 / input_scale)) * input_scale
           (x quantized per 16 values along K, as ``ops.quantize``; ``ops.gemm_w4a4``)
    w4a16: x_q = x (fp16 / bf16 values, exact)
    y   = x_q @ W^T + bias

computed as alpha * (codes' values products, summed in fp32) + bias with alpha = input_scale *
weight_scale_2 (w4a4) or weight_scale_2 (w4a16), and rounded to x's dtype. Inference only: the ops
have no backward.

A w4a16 layer of dtype bfloat16 on a GPU holds ``weight`` repacked for bf16 activations
(``ops.pack_bf16_pairs``: int32 [N, K/8], the same bits in the order its kernels decode fastest)
and, where N is a multiple of 128, laid out by tile with ``weight_scale`` (``layouts.to_expert_tiles``
of one expert: int32 [1, N/128, ceil(K/256), 4096] and [1, N/128, ceil(K/256), 2048]); a w4a4 layer
on a GPU holds the checkpoint's bytes laid out so where N is a multiple of 128 (uint8 [1, N/128,
ceil(K/256), 16384]);
``state_dict()`` gives and ``load_state_dict()`` takes the checkpoint's tensors all the same,
``weight_codes()`` and ``weight_scales()`` return them and ``set_weight_codes()`` /
``set_weight_scales()`` take them.

Tensor parallelism (``shard``, ``ColumnParallelNVFP4Linear``, ``RowParallelNVFP4Linear``) splits
the weight's rows (N) or its columns (K, in whole 16-value blocks) over ranks; the per-tensor
scalars are replicated.

``NVFP4MoE``: the experts of a mixture-of-experts block (routing, two grouped_mm stages, the
weighted combine), their tensors stacked per expert; its docstring has the numbers.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import layouts, ops

MODES = ("w4a4", "w4a16")
_AMAX_TO_SCALE = 6.0 * 448.0  # e2m1's largest value times e4m3's: the divisor's denominator
_BLOCK = 16
_ACT_DTYPES = (torch.float16, torch.bfloat16)
_BIAS_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _scalar_tensor(value, name: str, device) -> torch.Tensor:
    """A positive finite per-tensor scale (a number or a one-element tensor) as a float32 0-dim tensor.
    Reads the value to check it: for set-up (from_linear), not for forward."""
    t = torch.as_tensor(value).detach()
    if t.numel() != 1 or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"{name} must be a real number or a one-element real tensor, got {t.dtype} "
                         f"shape {tuple(t.shape)}")
    t = t.to(device=device, dtype=torch.float32).reshape(())
    if not bool(torch.isfinite(t) & (t > 0)):
        raise ValueError(f"{name} must be positive and finite, got {t.item()}")
    return t


class _NVFP4Module(torch.nn.Module):
    """What NVFP4Linear and NVFP4MoE share: derived buffers set in place, buffers that keep their
    dtype through ``.to(dtype)``, and code buffers (``_CODES``) held repacked for bf16
    (``ops.pack_bf16_pairs``) where ``_pairs`` says and, with their scales, laid out by tile
    (``layouts.to_expert_tiles``) where ``_tiles`` says, while ``state_dict()`` / ``load_state_dict()``
    exchange the checkpoint's bytes. ``dtype``: the activations' dtype the layout is for."""

    _FIXED_DTYPE: Tuple[str, ...] = ()
    _CODES: Tuple[str, ...] = ()
    _EXPERTS = True  # code buffers [E, R, K/2]; False: [R, K/2], laid out by tile as one expert's ([1, ...])
    dtype: torch.dtype

    def _set_derived(self, name: str, value: torch.Tensor) -> None:
        """In place where possible, so that a captured CUDA graph sees new values."""
        cur = self._buffers.get(name)
        if cur is not None and cur.device == value.device and cur.shape == value.shape and not cur.is_meta:
            cur.copy_(value)
        else:
            self.register_buffer(name, value, persistent=False)

    def _pairs(self, device: torch.device, dtype: torch.dtype) -> bool:
        raise NotImplementedError

    def _tiles(self, name: str, device: torch.device) -> bool:
        """Whether code buffer ``name`` and its scales are laid out by tile on ``device``."""
        return False

    def _tile_spec(self, name: str) -> Tuple[str, bool, int]:
        """Code buffer ``name``'s scales buffer, whether it is gated (W1 then W3), and its K."""
        raise NotImplementedError

    def _checkpoint(self, name: str) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Buffer ``name`` as the checkpoint holds it (uint8 [..., K/2]) and, where it is laid out by
        tile, its scales so too (else None); new tensors where they are laid out otherwise."""
        w, sf = self._buffers[name], None
        if w.dim() == 4:
            w, sf = self._untiled(name, w, self._buffers[self._tile_spec(name)[0]])
        return (ops.unpack_bf16_pairs(w) if w.dtype == torch.int32 else w), sf

    def _untiled(self, name: str, w: torch.Tensor, sf: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Codes and scales laid out by tile back to the checkpoint's rows (in w's dtype)."""
        _, gated, k = self._tile_spec(name)
        w, sf = layouts.from_expert_tiles(w, sf, k, gated)
        return (w, sf) if self._EXPERTS else (w[0], sf[0])

    def _register_codes(self, name: str, shape: Tuple[int, ...], device) -> None:
        """A zero code buffer [..., K/2] in the layout _pairs asks for (zero codes repack to zero words)."""
        if self._pairs(torch.empty(0, device=device).device, self.dtype):
            self.register_buffer(name, torch.zeros(*shape[:-1], shape[-1] // 4, dtype=torch.int32, device=device))
        else:
            self.register_buffer(name, torch.zeros(shape, dtype=torch.uint8, device=device))

    def _codes(self, name: str) -> torch.Tensor:
        """Buffer ``name`` as the checkpoint holds it: uint8 [..., K/2] (a new tensor where it is repacked)."""
        return self._checkpoint(name)[0]

    @torch.no_grad()
    def _copy_codes(self, name: str, codes: torch.Tensor, index=None) -> None:
        """Checkpoint codes (uint8 or float4_e2m1fn_x2) into buffer ``name`` (or its [index]), in its layout."""
        dst = self._buffers[name] if index is None else self._buffers[name][index]
        codes = codes.view(torch.uint8) if codes.dtype != torch.uint8 else codes
        dst.copy_(ops.pack_bf16_pairs(codes) if dst.dtype == torch.int32 else codes)

    def _laid_out(self, name: str, codes: torch.Tensor, sf: Optional[torch.Tensor], pairs: bool, tiles: bool):
        """Untiled codes (uint8, or int32 words) and, where tiles, their linear scales in the layout asked for;
        only what differs changes (repacking goes through the host)."""
        if (codes.dtype == torch.int32) != pairs:
            codes = ops.pack_bf16_pairs(codes) if pairs else ops.unpack_bf16_pairs(codes)
        if not tiles:
            return codes, sf
        if not self._EXPERTS:
            codes, sf = codes[None], sf[None]
        return layouts.to_expert_tiles(codes, sf, self._tile_spec(name)[1])

    @torch.no_grad()
    def _set_checkpoint(self, name: str, codes: Optional[torch.Tensor] = None,
                        sf: Optional[torch.Tensor] = None) -> None:
        """Checkpoint codes (uint8 or float4_e2m1fn_x2 [..., K/2]) and / or scales ([..., K/16]) into buffer
        ``name`` and its scales, in place, in their layout."""
        w, sf_name = self._buffers[name], self._tile_spec(name)[0]
        if w.dim() != 4:
            if codes is not None:
                self._copy_codes(name, codes)
            if sf is not None:
                self._buffers[sf_name].copy_(sf)
            return
        old_codes, old_sf = self._untiled(name, w, self._buffers[sf_name])  # words stay words: no repacking
        codes = old_codes if codes is None else codes.view(torch.uint8).to(w.device)
        sf = old_sf if sf is None else sf.to(device=w.device, dtype=old_sf.dtype)
        codes, sf = self._laid_out(name, codes, sf, w.dtype == torch.int32, True)
        w.copy_(codes)
        self._buffers[sf_name].copy_(sf)

    @torch.no_grad()
    def _relayout(self, to_int32: Optional[bool] = None, to_tiles: Optional[bool] = None) -> None:
        """Each code buffer (and its scales) into the layout _pairs and _tiles ask for on its device (or
        to_int32's, to_tiles')."""
        for name in self._CODES:
            w = self._buffers[name]
            pairs = self._pairs(w.device, self.dtype) if to_int32 is None else to_int32
            tiles = self._tiles(name, w.device) if to_tiles is None else to_tiles
            if (w.dtype == torch.int32) == pairs and (w.dim() == 4) == tiles:
                continue
            codes, sf, sf_name = w, None, None
            if w.dim() == 4 or tiles:
                sf_name = self._tile_spec(name)[0]
                sf = self._buffers[sf_name]
            if w.dim() == 4:
                codes, sf = self._untiled(name, w, sf)
            codes, sf = self._laid_out(name, codes, sf, pairs, tiles)
            if sf_name is not None:
                self._buffers[sf_name] = sf
            self._buffers[name] = codes

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name in self._CODES:
            w = self._buffers[name]
            if w.dtype == torch.int32 or w.dim() == 4:
                codes, sf = self._checkpoint(name)
                destination[prefix + name] = codes
                if sf is not None:
                    destination[prefix + self._tile_spec(name)[0]] = sf

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for name in self._CODES:  # the checkpoint's bytes, in this module's layout
            w, v = self._buffers[name], state_dict.get(prefix + name)
            if not (isinstance(v, torch.Tensor) and v.dtype in (torch.uint8, torch.float4_e2m1fn_x2)):
                continue
            if w.dim() == 4:  # laid out by tile: codes and scales together
                sf_name, _, k = self._tile_spec(name)
                sf = state_dict.get(prefix + sf_name)
                rows = (w.shape[0],) * self._EXPERTS + (w.shape[1] * layouts.TILE_ROWS,)
                if isinstance(sf, torch.Tensor) and v.shape == (*rows, k // 2) and sf.shape == (*rows, k // _BLOCK):
                    codes, sf = self._laid_out(name, v.to(w.device).view(torch.uint8), sf.to(w.device),
                                               w.dtype == torch.int32, True)
                    state_dict[prefix + name], state_dict[prefix + sf_name] = codes, sf
            elif w.dtype == torch.int32 and v.shape == (*w.shape[:-1], 4 * w.shape[-1]):
                state_dict[prefix + name] = ops.pack_bf16_pairs(v)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        self.update_derived_scales()

    def _apply(self, fn, recurse=True):
        # where and in what dtype fn puts a float tensor: the codes' layout follows (repacked on the
        # host before a move to a GPU)
        device = self._buffers[self._CODES[0]].device
        try:
            probe = fn(torch.empty(0, dtype=self.dtype, device=device))
        except Exception:  # noqa: BLE001  (fn fails on the buffers too, as super()._apply reports)
            probe = None
        if probe is not None and device.type == "cpu" and self._pairs(probe.device, probe.dtype):
            self._relayout(to_int32=True)
        keep = {k: self._buffers[k] for k in self._FIXED_DTYPE if self._buffers.get(k) is not None}
        super()._apply(fn, recurse)
        for k, old in keep.items():
            new = self._buffers[k]
            if new.dtype != old.dtype:  # a dtype cast: take only the device move
                self._buffers[k] = old.to(new.device)
        if probe is not None and probe.dtype.is_floating_point:
            self.dtype = probe.dtype
        self._relayout()
        return self

    def update_derived_scales(self) -> None:
        raise NotImplementedError


class NVFP4Linear(_NVFP4Module):
    """y = x @ W^T + bias with NVFP4 weights (see the module docstring for the numbers).

    mode "w4a4": activations are quantized to NVFP4 per 16 values with the layer's input_scale (a
    ModelOpt NVFP4 checkpoint's numerics), then an NVFP4 x NVFP4 gemm. mode "w4a16": the fp16 / bf16
    activations are multiplied as they are (``ops.gemm_w4a16``); a checkpoint's input_scale, if any,
    is ignored on loading. Every tensor is a buffer (nothing here is trainable); the derived scalars
    1 / input_scale and the gemm's alpha are kept as non-persistent buffers, recomputed on loading
    (call ``update_derived_scales()`` after changing a scale by hand).
    """

    # Module.to(dtype), .half(), .bfloat16() cast every floating tensor; these keep their dtype.
    _FIXED_DTYPE = ("weight_scale", "weight_scale_2", "input_scale", "_input_global_scale", "_alpha")
    _CODES = ("weight",)
    _EXPERTS = False

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, mode: str = "w4a4",
                 dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features <= 0 \
                or in_features % _BLOCK:
            raise ValueError(f"NVFP4Linear: in_features must be a positive multiple of {_BLOCK} (one e4m3 scale "
                             f"per {_BLOCK} weights), got {in_features!r}")
        if isinstance(out_features, bool) or not isinstance(out_features, int) or out_features <= 0:
            raise ValueError(f"NVFP4Linear: out_features must be a positive integer, got {out_features!r}")
        if mode not in MODES:
            raise ValueError(f"NVFP4Linear: mode must be one of {MODES}, got {mode!r}")
        if bias and dtype not in _BIAS_DTYPES:
            raise TypeError(f"NVFP4Linear: dtype (the bias's) must be float32, float16 or bfloat16, got {dtype}")
        self.in_features, self.out_features, self.mode, self.dtype = in_features, out_features, mode, dtype
        n, k = out_features, in_features
        f32 = dict(dtype=torch.float32, device=device)
        self._register_codes("weight", (n, k // 2), device)
        self.register_buffer("weight_scale", torch.zeros(n, k // _BLOCK, dtype=torch.float8_e4m3fn, device=device))
        self.register_buffer("weight_scale_2", torch.ones((), **f32))
        if mode == "w4a4":
            self.register_buffer("input_scale", torch.ones((), **f32))
        # A buffer like the others: the ops have no backward, and a buffer stays out of optimizers and
        # of requires_grad_() (an input that requires grad makes the ops refuse the call).
        self.register_buffer("bias", torch.zeros(n, dtype=dtype, device=device) if bias else None)
        self._relayout()
        self.update_derived_scales()

    # ---- scales ------------------------------------------------------------------------------
    @torch.no_grad()
    def update_derived_scales(self) -> None:
        """Recompute what forward reads besides the checkpoint's tensors: 1 / input_scale (the
        activations' global scale, a multiplier) and alpha. Tensor ops only (no host sync)."""
        if self.mode == "w4a4":
            s_in = self.input_scale.float()
            self._set_derived("_input_global_scale", 1.0 / s_in)
            self._set_derived("_alpha", s_in * self.weight_scale_2.float())

    # ---- the weight's layout ------------------------------------------------------------------
    def _pairs(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether the weight is held repacked for bf16 (w4a16, bfloat16, on a GPU: the CPU kernel
        reads the checkpoint's bytes faster)."""
        return self.mode == "w4a16" and dtype == torch.bfloat16 and device.type == "cuda"

    def _tiles(self, name: str, device: torch.device) -> bool:
        """Whether the weight and its scales are laid out by tile (on a GPU, N a multiple of 128; w4a16: the
        weight repacked): the kernels copy each tile's codes and scales in long runs (docs/PERF.md)."""
        return (self.mode == "w4a4" and device.type == "cuda" or self._pairs(device, self.dtype)) and \
            self.out_features % layouts.TILE_ROWS == 0

    def _tile_spec(self, name: str) -> Tuple[str, bool, int]:
        return "weight_scale", False, self.in_features

    def weight_codes(self) -> torch.Tensor:
        """The weight as the checkpoint holds it: uint8 [N, K/2] (a new tensor where it is laid out otherwise)."""
        return self._codes("weight")

    def weight_scales(self) -> torch.Tensor:
        """The weight's scales as the checkpoint holds them: float8_e4m3fn [N, K/16] (a new tensor where they
        are laid out by tile)."""
        if self.weight.dim() != 4:
            return self.weight_scale
        return self._untiled("weight", self.weight, self.weight_scale)[1]

    def set_weight_codes(self, codes: torch.Tensor) -> None:
        """Copy checkpoint codes (uint8 or float4_e2m1fn_x2 [N, K/2]) into the weight, in its layout."""
        self._set_checkpoint("weight", codes=codes)

    def set_weight_scales(self, scales: torch.Tensor) -> None:
        """Copy checkpoint scales (float8_e4m3fn [N, K/16]) into weight_scale, in its layout."""
        self._set_checkpoint("weight", sf=scales)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # the scalars as 0-dim whether stored [] or [1]; a w4a16 layer has no use for input_scale
        for name in ("weight_scale_2", "input_scale"):
            v = state_dict.get(prefix + name)
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.numel() == 1:
                state_dict[prefix + name] = v.reshape(())
        if self.mode == "w4a16":
            state_dict.pop(prefix + "input_scale", None)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    # ---- forward -------------------------------------------------------------------------------
    def _check_input(self, x) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"NVFP4Linear: x must be a tensor, got {type(x).__name__}")
        if x.dtype not in _ACT_DTYPES:
            raise TypeError(f"NVFP4Linear: x must be float16 or bfloat16, got {x.dtype}; cast it first, "
                            "e.g. x.to(torch.bfloat16)")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"NVFP4Linear: x must be [..., in_features={self.in_features}], got shape "
                             f"{tuple(x.shape)}")

    def _linear(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        self._check_input(x)
        if x.stride(-1) != 1:  # the ops read K contiguously
            x = x.contiguous()
        if self.mode == "w4a16":
            if self.weight.dtype == torch.int32 and x.dtype != torch.bfloat16:
                # laid out for bf16 activations: back to the checkpoint's bytes, which fp16 ones take too (once; a
                # layer meant for fp16 is built, or converted, with dtype float16)
                self._relayout(to_int32=False, to_tiles=False)
            return ops.gemm_w4a16(x, self.weight, self.weight_scale, alpha=self.weight_scale_2, bias=bias)
        return ops.gemm_w4a4(x, self.weight, self.weight_scale, global_scale=self._input_global_scale,
                             alpha=self._alpha, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] float16 or bfloat16 -> [..., out_features] in x's dtype."""
        return self._linear(x, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"mode={self.mode!r}")

    # ---- conversion ----------------------------------------------------------------------------
    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: torch.nn.Linear, *, mode: str = "w4a4",
                    input_scale: Union[None, float, torch.Tensor] = None,
                    calibration: Optional[torch.Tensor] = None) -> "NVFP4Linear":
        """Quantize ``linear.weight`` as ModelOpt does (codes, e4m3 scales and weight_scale_2 byte for
        byte equal to its export); keep the bias, its dtype and the device.

        w4a4 needs the activations' scale: ``input_scale`` (amax(|x|) / (6 * 448), a number or a
        one-element tensor) or ``calibration``, example inputs whose amax gives it.
        """
        from . import conventions

        if mode not in MODES:
            raise ValueError(f"NVFP4Linear.from_linear: mode must be one of {MODES}, got {mode!r}")
        w = linear.weight.detach()
        if mode == "w4a4":
            if (input_scale is None) == (calibration is None):
                raise ValueError("NVFP4Linear.from_linear: mode 'w4a4' quantizes activations with input_scale; give "
                                 "exactly one of input_scale (amax(|x|) / (6 * 448)) or calibration (example inputs)")
            if calibration is not None:
                input_scale = calibration.detach().abs().amax().float() / _AMAX_TO_SCALE
            s_in = _scalar_tensor(input_scale, "input_scale", w.device)
        elif input_scale is not None or calibration is not None:
            raise ValueError("NVFP4Linear.from_linear: mode 'w4a16' does not quantize activations; "
                             "input_scale and calibration are for 'w4a4'")
        n, k = w.shape
        bias = linear.bias
        layer = cls(k, n, bias is not None, mode=mode, dtype=bias.dtype if bias is not None else w.dtype,
                    device=w.device)
        ws2 = conventions.global_scale(w, "modelopt")
        codes, scales = ops.quantize(w, global_scale=ws2, convention="modelopt")
        layer.set_weight_codes(codes)
        layer.set_weight_scales(scales)
        layer.weight_scale_2.copy_(ws2)
        if mode == "w4a4":
            layer.input_scale.copy_(s_in)
        if bias is not None:
            layer.bias.copy_(bias.detach())
        layer.update_derived_scales()
        return layer


# ---- tensor parallel -----------------------------------------------------------------------------
def _shard_sizes(layer: NVFP4Linear, rank: int, world_size: int, dim: int):
    """(in_features, out_features) of one shard, after checking the split is whole."""
    if not isinstance(layer, NVFP4Linear):
        raise TypeError(f"shard: layer must be an NVFP4Linear, got {type(layer).__name__}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"shard: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    n, k = layer.out_features, layer.in_features
    if dim == 0:
        if n % world_size:
            raise ValueError(f"shard: out_features={n} does not split evenly over world_size={world_size}")
        return k, n // world_size
    if dim == 1:
        if k % (_BLOCK * world_size):
            raise ValueError(f"shard: in_features={k} does not split into world_size={world_size} pieces of whole "
                             f"{_BLOCK}-value blocks")
        return k // world_size, n
    raise ValueError(f"shard: dim must be 0 (column-parallel: split N) or 1 (row-parallel: split K), got {dim!r}")


@torch.no_grad()
def _copy_shard(dst: NVFP4Linear, src: NVFP4Linear, rank: int, dim: int) -> NVFP4Linear:
    """Rank's piece of src's tensors into dst (already of the shard's shape); bias where dst has one."""
    n, k = dst.out_features, dst.in_features
    codes, scales = src.weight_codes(), src.weight_scales()  # each layer in its own layout
    if dim == 0:
        rows = slice(rank * n, (rank + 1) * n)
        dst.set_weight_codes(codes[rows])
        dst.set_weight_scales(scales[rows])
        bias = None if src.bias is None else src.bias[rows]
    else:  # K/2 code bytes and K/16 scales of the same K range
        dst.set_weight_codes(codes[:, rank * k // 2:(rank + 1) * k // 2])
        dst.set_weight_scales(scales[:, rank * k // _BLOCK:(rank + 1) * k // _BLOCK])
        bias = src.bias
    if dst.bias is not None:
        dst.bias.copy_(bias)
    dst.weight_scale_2.copy_(src.weight_scale_2)
    if dst.mode == "w4a4":
        dst.input_scale.copy_(src.input_scale)
    dst.update_derived_scales()
    return dst


def shard(layer: NVFP4Linear, rank: int, world_size: int, dim: int) -> NVFP4Linear:
    """Rank's piece of ``layer`` as a new NVFP4Linear (copies, on the layer's device).

    dim=0, column-parallel: rows rank*N/W .. of weight, weight_scale and bias; the shard's output is
    that slice of the layer's output. dim=1, row-parallel: columns rank*K/W .. (K/W a multiple of 16),
    i.e. the matching K/(2W) code bytes and K/(16W) scales; the shard takes that slice of x and the
    sum of all shards' outputs is the layer's output, so the bias stays on rank 0 only. The
    per-tensor scales are replicated.
    """
    k, n = _shard_sizes(layer, rank, world_size, dim)
    has_bias = layer.bias is not None and (dim == 0 or rank == 0)
    dst = NVFP4Linear(k, n, has_bias, mode=layer.mode, dtype=layer.dtype, device=layer.weight.device)
    return _copy_shard(dst, layer, rank, dim)


def _rank_and_size(rank, world_size, group):
    if rank is None:
        rank = dist.get_rank(group)
    if world_size is None:
        world_size = dist.get_world_size(group)
    return rank, world_size


def _parallel_from_layer(cls, layer: NVFP4Linear, dim: int, rank, world_size, group, **kw):
    """A parallel class's shard of a whole layer along `dim` (rank and world_size default to the group's)."""
    rank, world_size = _rank_and_size(rank, world_size, group)
    _shard_sizes(layer, rank, world_size, dim)
    dst = cls(layer.in_features, layer.out_features, layer.bias is not None, rank=rank, world_size=world_size,
              group=group, mode=layer.mode, dtype=layer.dtype, device=layer.weight.device, **kw)
    return _copy_shard(dst, layer, rank, dim)


class ColumnParallelNVFP4Linear(NVFP4Linear):
    """Column-parallel NVFP4Linear: this rank holds out_features / world_size rows of the weight.

    in_features / out_features are the whole layer's; the buffers (ModelOpt's names) are this rank's
    shard. forward takes the whole x; with gather_output (default) the shards' outputs are
    all-gathered into the whole [..., out_features], else this rank's slice is returned (to feed a
    RowParallelNVFP4Linear with input_is_parallel=True).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, rank: int, world_size: int,
                 gather_output: bool = True, group=None, mode: str = "w4a4", dtype: torch.dtype = torch.bfloat16,
                 device=None):
        if world_size < 1 or not 0 <= rank < world_size or out_features % world_size:
            raise ValueError(f"ColumnParallelNVFP4Linear: out_features={out_features} must split evenly over "
                             f"world_size={world_size}, with 0 <= rank={rank} < world_size")
        super().__init__(in_features, out_features // world_size, bias, mode=mode, dtype=dtype, device=device)
        self.rank, self.world_size, self.gather_output, self.group = rank, world_size, gather_output, group

    @classmethod
    def from_layer(cls, layer: NVFP4Linear, rank: Optional[int] = None, world_size: Optional[int] = None, *,
                   gather_output: bool = True, group=None) -> "ColumnParallelNVFP4Linear":
        """This rank's shard of a whole layer (rank and world_size default to the group's)."""
        return _parallel_from_layer(cls, layer, 0, rank, world_size, group, gather_output=gather_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self._linear(x, self.bias)
        if not self.gather_output or self.world_size == 1:
            return y
        parts = [torch.empty_like(y) for _ in range(self.world_size)]
        dist.all_gather(parts, y, group=self.group)
        return torch.cat(parts, dim=-1)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()} (shard {self.rank} of {self.world_size}), "
                f"gather_output={self.gather_output}")


class RowParallelNVFP4Linear(NVFP4Linear):
    """Row-parallel NVFP4Linear: this rank holds in_features / world_size columns of the weight (whole
    16-value blocks: the matching code bytes and scales).

    in_features / out_features are the whole layer's; the buffers are this rank's shard, with the
    bias on rank 0 only (added there in the epilogue, so it enters the sum once). forward takes the
    whole x, or this rank's slice with input_is_parallel=True; the partial outputs are all-reduced
    (summed) in x's dtype, so results agree with the unsharded layer to the outputs' rounding, not
    bit for bit.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, rank: int, world_size: int,
                 input_is_parallel: bool = False, group=None, mode: str = "w4a4",
                 dtype: torch.dtype = torch.bfloat16, device=None):
        if world_size < 1 or not 0 <= rank < world_size or in_features % (_BLOCK * world_size):
            raise ValueError(f"RowParallelNVFP4Linear: in_features={in_features} must split into world_size="
                             f"{world_size} pieces of whole {_BLOCK}-value blocks, with 0 <= rank={rank} < world_size")
        super().__init__(in_features // world_size, out_features, bias and rank == 0, mode=mode, dtype=dtype,
                         device=device)
        self.rank, self.world_size, self.input_is_parallel, self.group = rank, world_size, input_is_parallel, group

    @classmethod
    def from_layer(cls, layer: NVFP4Linear, rank: Optional[int] = None, world_size: Optional[int] = None, *,
                   input_is_parallel: bool = False, group=None) -> "RowParallelNVFP4Linear":
        """This rank's shard of a whole layer (rank and world_size default to the group's)."""
        return _parallel_from_layer(cls, layer, 1, rank, world_size, group, input_is_parallel=input_is_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            k = self.in_features
            if isinstance(x, torch.Tensor) and x.dim() and x.shape[-1] != k * self.world_size:
                raise ValueError(f"RowParallelNVFP4Linear: x must be [..., in_features={k * self.world_size}] "
                                 f"(the whole input; input_is_parallel=True takes this rank's {k}), got shape "
                                 f"{tuple(x.shape)}")
            x = x[..., self.rank * k:(self.rank + 1) * k]
        y = self._linear(x, self.bias)
        if self.world_size > 1:
            dist.all_reduce(y, group=self.group)
        return y

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()} (shard {self.rank} of {self.world_size}), "
                f"input_is_parallel={self.input_is_parallel}")


# ---- mixture of experts --------------------------------------------------------------------------
ROUTINGS = ("softmax", "sigmoid")


class NVFP4MoE(_NVFP4Module):
    """The experts of a mixture-of-experts block, NVFP4, as ModelOpt quantizes them (each expert's
    gate_proj, up_proj and down_proj an NVFP4Linear without bias), stacked per expert:

        w13_weight          uint8 [E, 2I, H/2]          gate_proj's rows, then up_proj's
        w13_weight_scale    float8_e4m3fn [E, 2I, H/16]
        w13_weight_scale_2  float32 [E, 2]              gate's and up's weight_scale_2
        w13_input_scale     float32 [E]                 (w4a4) the input_scale of gate and up (equal,
                                                        as ModelOpt exports them: one activation)
        w2_weight           uint8 [E, H, I/2]           down_proj
        w2_weight_scale     float8_e4m3fn [E, H, I/16]
        w2_weight_scale_2   float32 [E]
        w2_input_scale      float32 [E]                 (w4a4)
        e_score_correction_bias float32 [E]             (sigmoid routing with a correction bias)

    forward(x [T, H], router_logits [T, E]) -> [T, H] in x's dtype:
      routing, in float32 (as transformers' routers): "softmax": p = softmax(logits), the top_k of
        p (renormalised to sum 1 where norm_topk_prob: Qwen3-MoE's flag; Mixtral's always);
        "sigmoid" (DeepSeek-V3): s = sigmoid(logits), c = s + e_score_correction_bias; experts in
        n_group groups ranked by the sum of each group's two largest c, the best topk_group kept;
        the top_k of c among them; weights s there (divided by their sum + 1e-20 where
        norm_topk_prob), times routed_scaling_factor (ops.moe_route, one kernel);
      the token-expert pairs sorted by expert on the device (ops.moe_sort, one kernel, no host
        sync: CUDA graphs replay any routing), each pair's row of x (read through row_index, no
        gathered copy) -> ops.grouped_mm with gated=True: h = silu(x W1^T) * (x W3^T) in x's dtype ->
        ops.grouped_mm: y = h W2^T;
      out[t] = sum over t's pairs of weight * y, in float32, rounded once (ops.moe_combine).
    mode "w4a4": each row is quantized to NVFP4 with its expert's input_scale (as NVFP4Linear does)
    by each grouped_mm (its global_scale), whose exact values (e2m1 x e4m3 fits bf16 and fp16) it
    multiplies, alpha = input_scale * weight_scale_2; "w4a16": the rows as they are, alpha = weight_scale_2.

    ``dtype``: the activations' dtype the experts are laid out for. A bfloat16 MoE on a GPU holds
    w13_weight and w2_weight repacked for bf16 (``ops.pack_bf16_pairs``: int32 [E, 2I, H/8] and
    [E, H, I/8]; both modes, since both multiply bf16 values); fp16 x turns them back into the
    checkpoint's bytes once. On a GPU, where I % 64 == 0 and H % 128 == 0, the experts' codes and
    scales are also laid out by tile (``layouts.to_expert_tiles``: w13_weight [E, 2I/128,
    ceil(H/256), 16384] bytes, w13_weight_scale [E, 2I/128, ceil(H/256), 2048], w2 alike), which
    the kernels copy in long runs. ``state_dict()`` and ``load_state_dict()`` exchange the
    checkpoint's tensors all the same, and ``weight_codes(name)`` / ``weight_scales(name)`` return
    them.
    """

    # Module.to(dtype) casts every floating tensor; these keep their dtype.
    _FIXED_DTYPE = ("w13_weight_scale", "w2_weight_scale", "w13_weight_scale_2", "w2_weight_scale_2",
                    "w13_input_scale", "w2_input_scale", "e_score_correction_bias", "_w13_input_global",
                    "_w2_input_global", "_alpha1", "_alpha3", "_alpha2")
    _CODES = ("w13_weight", "w2_weight")

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, top_k: int, *,
                 mode: str = "w4a4", routing: str = "softmax", norm_topk_prob: bool = True, n_group: int = 1,
                 topk_group: int = 1, routed_scaling_factor: float = 1.0, correction_bias: bool = False,
                 dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        e, h, i = num_experts, hidden_size, intermediate_size
        for name, v in (("num_experts", e), ("hidden_size", h), ("intermediate_size", i), ("top_k", top_k)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"NVFP4MoE: {name} must be a positive integer, got {v!r}")
        if h % _BLOCK or i % _BLOCK:
            raise ValueError(f"NVFP4MoE: hidden_size and intermediate_size must be multiples of {_BLOCK}, got "
                             f"{h} and {i}")
        if top_k > e or top_k > 32 or e > 2048:
            raise ValueError(f"NVFP4MoE: top_k={top_k} must be at most num_experts={e} and 32, num_experts at most "
                             f"2048 (ops.moe_route)")
        if mode not in MODES:
            raise ValueError(f"NVFP4MoE: mode must be one of {MODES}, got {mode!r}")
        if routing not in ROUTINGS:
            raise ValueError(f"NVFP4MoE: routing must be one of {ROUTINGS}, got {routing!r}")
        if e % n_group or not 1 <= topk_group <= n_group or (n_group > 1 and routing != "sigmoid"):
            raise ValueError(f"NVFP4MoE: n_group={n_group} must divide num_experts={e}, 1 <= topk_group="
                             f"{topk_group} <= n_group, and groups go with sigmoid routing")
        if dtype not in _BIAS_DTYPES:
            raise TypeError(f"NVFP4MoE: dtype must be float32, float16 or bfloat16, got {dtype}")
        self.dtype = dtype
        self.num_experts, self.hidden_size, self.intermediate_size, self.top_k = e, h, i, top_k
        self.mode, self.routing, self.norm_topk_prob = mode, routing, norm_topk_prob
        self.n_group, self.topk_group, self.routed_scaling_factor = n_group, topk_group, float(routed_scaling_factor)
        f32 = dict(dtype=torch.float32, device=device)
        self._register_codes("w13_weight", (e, 2 * i, h // 2), device)
        self.register_buffer("w13_weight_scale", torch.zeros(e, 2 * i, h // _BLOCK, dtype=torch.float8_e4m3fn,
                                                             device=device))
        self.register_buffer("w13_weight_scale_2", torch.ones(e, 2, **f32))
        self._register_codes("w2_weight", (e, h, i // 2), device)
        self.register_buffer("w2_weight_scale", torch.zeros(e, h, i // _BLOCK, dtype=torch.float8_e4m3fn,
                                                            device=device))
        self.register_buffer("w2_weight_scale_2", torch.ones(e, **f32))
        if mode == "w4a4":
            self.register_buffer("w13_input_scale", torch.ones(e, **f32))
            self.register_buffer("w2_input_scale", torch.ones(e, **f32))
        self.register_buffer("e_score_correction_bias", torch.zeros(e, **f32) if correction_bias else None)
        self._relayout()
        self.update_derived_scales()

    @torch.no_grad()
    def update_derived_scales(self) -> None:
        """The grouped_mm alphas (and w4a4's activation multipliers 1 / input_scale), in place."""
        s13, s2 = self.w13_weight_scale_2.float(), self.w2_weight_scale_2.float()
        if self.mode == "w4a4":
            i13, i2 = self.w13_input_scale.float(), self.w2_input_scale.float()
            self._set_derived("_w13_input_global", 1.0 / i13)
            self._set_derived("_w2_input_global", 1.0 / i2)
            s13, s2 = s13 * i13[:, None], s2 * i2
        self._set_derived("_alpha1", s13[:, 0].contiguous())
        self._set_derived("_alpha3", s13[:, 1].contiguous())
        self._set_derived("_alpha2", s2.contiguous())

    # ---- the weights' layout -----------------------------------------------------------------
    def _pairs(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether the experts are held repacked for bf16 (bfloat16, on a GPU: both modes run the
        grouped_mm on bf16 values; the CPU kernel reads the checkpoint's bytes faster)."""
        return dtype == torch.bfloat16 and device.type == "cuda"

    def _tiles(self, name: str, device: torch.device) -> bool:
        """Whether the experts are held laid out by tile (on a GPU, whose kernels then copy each tile's
        codes and scales in long runs; whole tiles: 2I = 2 x 64 k rows, H = 128 k rows)."""
        return device.type == "cuda" and self.intermediate_size % 64 == 0 and \
            self.hidden_size % layouts.TILE_ROWS == 0

    def _tile_spec(self, name: str) -> Tuple[str, bool, int]:
        return (name + "_scale", True, self.hidden_size) if name == "w13_weight" else \
            (name + "_scale", False, self.intermediate_size)

    def weight_codes(self, name: str) -> torch.Tensor:
        """``name`` ("w13_weight" or "w2_weight") as the checkpoint holds it: uint8 [E, N, K/2] (a new
        tensor where it is laid out otherwise)."""
        if name not in self._CODES:
            raise ValueError(f"NVFP4MoE.weight_codes: name must be one of {self._CODES}, got {name!r}")
        return self._codes(name)

    def weight_scales(self, name: str) -> torch.Tensor:
        """The scales of ``name`` ("w13_weight" or "w2_weight") as the checkpoint holds them:
        float8_e4m3fn [E, N, K/16] (a new tensor where they are laid out by tile)."""
        if name not in self._CODES:
            raise ValueError(f"NVFP4MoE.weight_scales: name must be one of {self._CODES}, got {name!r}")
        sf = self._checkpoint(name)[1]
        return self._buffers[name + "_scale"] if sf is None else sf

    # ---- forward -------------------------------------------------------------------------------
    def route(self, router_logits: torch.Tensor):
        """(weights float32 [T, top_k], expert ids int32 [T, top_k]) of router_logits [T, E], one kernel
        (ops.moe_route: the formulas of the class's docstring, experts in rank order)."""
        return ops.moe_route(router_logits, self.top_k, scoring=self.routing, bias=self.e_score_correction_bias,
                             n_group=self.n_group, topk_group=self.topk_group, renormalize=self.norm_topk_prob,
                             scale=self.routed_scaling_factor)

    def forward(self, x: torch.Tensor, router_logits: Optional[torch.Tensor] = None,
                topk: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """x [T, H] and either router_logits [T, E] (routed by ``route``) or topk = (weights [T, top_k],
        expert ids [T, top_k]) as a router has chosen them (transformers 5's routers return both)."""
        if not isinstance(x, torch.Tensor) or x.dtype not in _ACT_DTYPES or x.dim() != 2 \
                or x.shape[1] != self.hidden_size:
            raise TypeError(f"NVFP4MoE: x must be a float16 or bfloat16 [T, hidden_size={self.hidden_size}] tensor, "
                            f"got {getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
        t, k = x.shape[0], self.top_k
        if topk is None:
            if not isinstance(router_logits, torch.Tensor) or router_logits.shape != (t, self.num_experts):
                raise ValueError(f"NVFP4MoE: router_logits must be [T={t}, num_experts={self.num_experts}], "
                                 f"got {tuple(getattr(router_logits, 'shape', ()))}")
            weights, ids = self.route(router_logits)
        else:  # a router's choice: ids in [0, num_experts) (checked on the CPU; on CUDA a pair outside adds nothing)
            weights, ids = topk if isinstance(topk, (tuple, list)) and len(topk) == 2 else (None, None)
            if not (isinstance(weights, torch.Tensor) and weights.is_floating_point() and weights.shape == (t, k)
                    and isinstance(ids, torch.Tensor) and not ids.is_floating_point() and ids.shape == (t, k)
                    and weights.device == ids.device == x.device):
                got = [(getattr(v, "dtype", type(v).__name__), tuple(getattr(v, "shape", ()))) for v in (weights, ids)]
                raise ValueError(f"NVFP4MoE: topk must be (float weights, integer expert ids), each [T={t}, "
                                 f"top_k={k}] on x's device, got {got}")
        token_of_row, _, row_of_pair, offs = ops.moe_sort(ids, self.num_experts)
        if x.dtype != torch.bfloat16 and self.w13_weight.dtype == torch.int32:
            # laid out for bf16: back to the checkpoint's bytes, which fp16 values take too (once; an MoE
            # meant for fp16 is built, or converted, with dtype float16)
            self._relayout(to_int32=False)
        return ops.moe_combine(self._down(self._gate_up(x, offs, token_of_row), offs), row_of_pair, weights)

    def _gate_up(self, x: torch.Tensor, offs: torch.Tensor, token_of_row: torch.Tensor) -> torch.Tensor:
        """h = silu(x W1^T) * (x W3^T), a row per pair in expert order: the rows by token read through
        token_of_row (no gathered copy); w4a4: each quantized with its expert's global scale (1 / input_scale)
        by the grouped_mm."""
        return ops.grouped_mm(x, self.w13_weight, self.w13_weight_scale, offs, alphas=self._alpha1,
                              alphas2=self._alpha3, gated=True, row_index=token_of_row,
                              global_scale=self._w13_input_global if self.mode == "w4a4" else None)

    def _down(self, h: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        """y = h W2^T, h's rows in expert order (w4a4: quantized with the expert's global scale)."""
        return ops.grouped_mm(h, self.w2_weight, self.w2_weight_scale, offs, alphas=self._alpha2,
                              global_scale=self._w2_input_global if self.mode == "w4a4" else None)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden_size={self.hidden_size}, intermediate_size="
                f"{self.intermediate_size}, top_k={self.top_k}, mode={self.mode!r}, routing={self.routing!r}")

    # ---- conversion ----------------------------------------------------------------------------
    @classmethod
    @torch.no_grad()
    def from_linears(cls, gate, up, down, top_k: int, **routing) -> "NVFP4MoE":
        """Stack per-expert NVFP4Linear layers (as a ModelOpt checkpoint's experts.{e}.gate_proj,
        up_proj, down_proj load; lists in expert order, no bias, one mode) into an NVFP4MoE of gate[0]'s
        dtype, tensor for tensor. W4A4 needs gate's and up's input_scale equal per expert (one quantization of the
        input feeds both, as ModelOpt exports them). ``routing``: the constructor's arguments.

        compressed-tensors layers (models.CompressedTensorsNVFP4Linear, all of them) bring their
        exact activation multipliers and alphas, which the MoE takes as they are (re-deriving them
        from the stored divisors, as update_derived_scales and a state_dict load do, can differ in
        the last bit)."""
        from .models.layers import CompressedTensorsNVFP4Linear

        layers = [*gate, *up, *down]
        if not gate or not len(gate) == len(up) == len(down):
            raise ValueError(f"NVFP4MoE.from_linears: gate, up and down need one layer per expert, got {len(gate)}, "
                             f"{len(up)} and {len(down)}")
        kinds = {type(m) for m in layers}
        if len(kinds) != 1 or not kinds <= {NVFP4Linear, CompressedTensorsNVFP4Linear} or \
                any(m.bias is not None for m in layers):
            raise TypeError("NVFP4MoE.from_linears: the experts must be NVFP4Linear layers (ModelOpt's) or all "
                            "CompressedTensorsNVFP4Linear, without bias")
        exact = kinds == {CompressedTensorsNVFP4Linear}
        modes = {m.mode for m in layers}
        if len(modes) != 1:
            raise ValueError(f"NVFP4MoE.from_linears: the experts mix modes {sorted(modes)}")
        mode = modes.pop()
        h, i = gate[0].in_features, gate[0].out_features
        for e, (g, u, d) in enumerate(zip(gate, up, down)):
            if (g.in_features, g.out_features, u.in_features, u.out_features, d.in_features, d.out_features) != \
                    (h, i, h, i, i, h):
                raise ValueError(f"NVFP4MoE.from_linears: expert {e}'s shapes differ from expert 0's (gate / up "
                                 f"[{i}, {h}], down [{h}, {i}])")
            name = "input_global_scale" if exact else "input_scale"
            if mode == "w4a4" and not torch.equal(getattr(g, name), getattr(u, name)):
                raise ValueError(f"NVFP4MoE.from_linears: expert {e}'s gate and up have {name} "
                                 f"{getattr(g, name).item()} and {getattr(u, name).item()}; one quantized input feeds "
                                 "both")
        device = gate[0].weight.device
        moe = cls(len(gate), h, i, top_k, mode=mode, dtype=gate[0].dtype, device=device, **routing)
        for name, rows, k in (("w13_weight", 2 * i, h), ("w2_weight", h, i)):  # the checkpoint's layout, then moe's
            moe._buffers[name] = torch.zeros(len(gate), rows, k // 2, dtype=torch.uint8, device=device)
            moe._buffers[name + "_scale"] = torch.zeros(len(gate), rows, k // _BLOCK, dtype=torch.float8_e4m3fn,
                                                        device=device)
        for e, (g, u, d) in enumerate(zip(gate, up, down)):
            moe._copy_codes("w13_weight", torch.cat([g.weight_codes(), u.weight_codes()]), e)
            moe.w13_weight_scale[e] = torch.cat([g.weight_scales(), u.weight_scales()])
            moe.w13_weight_scale_2[e] = torch.stack([g.weight_scale_2, u.weight_scale_2])
            moe._copy_codes("w2_weight", d.weight_codes(), e)
            moe.w2_weight_scale[e], moe.w2_weight_scale_2[e] = d.weight_scales(), d.weight_scale_2
            if mode == "w4a4":
                moe.w13_input_scale[e], moe.w2_input_scale[e] = g.input_scale, d.input_scale
        moe._relayout()
        moe.update_derived_scales()
        if exact and mode == "w4a4":  # the layers' own multipliers and alphas (W4A16's are weight_scale_2)
            for name, src, attr in (("_w13_input_global", gate, "_input_global_scale"),
                                    ("_w2_input_global", down, "_input_global_scale"),
                                    ("_alpha1", gate, "_alpha"), ("_alpha3", up, "_alpha"), ("_alpha2", down, "_alpha")):
                moe._buffers[name].copy_(torch.stack([getattr(m, attr).reshape(()) for m in src]))
        return moe

    @classmethod
    @torch.no_grad()
    def from_experts(cls, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, top_k: int, *,
                     mode: str = "w4a4", input_scales: Optional[tuple] = None, **routing) -> "NVFP4MoE":
        """Quantize float experts as ModelOpt does (each projection as NVFP4Linear.from_linear):
        gate, up [E, I, H], down [E, H, I]. w4a4 takes input_scales = (w13 [E], w2 [E]) (amax(|x|) /
        (6 * 448) of each expert's inputs). ``routing``: the constructor's routing arguments."""
        if (mode == "w4a4") != (input_scales is not None):
            raise ValueError("NVFP4MoE.from_experts: w4a4 needs input_scales=(w13 [E], w2 [E]); w4a16 takes none")

        def layer(w, e, which):  # [out, in] -> a ModelOpt NVFP4Linear
            lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
            lin.weight.copy_(w)
            return NVFP4Linear.from_linear(lin, mode=mode, input_scale=None if input_scales is None else
                                           input_scales[which][e])

        e_count = gate.shape[0]
        return cls.from_linears([layer(gate[e], e, 0) for e in range(e_count)],
                                [layer(up[e], e, 0) for e in range(e_count)],
                                [layer(down[e], e, 1) for e in range(e_count)], top_k, **routing)
