"""quantize_model and save_modelopt: a model's nn.Linears to NVFP4, and the result as a ModelOpt checkpoint.

quantize_model follows NVIDIA ModelOpt's NVFP4 export, so that a checkpoint written from it has
the tensors ModelOpt's ``export_hf_checkpoint`` writes for the same weights and calibration:

* weights: ModelOpt's quantizer (``NVFP4Linear.from_linear``, i.e. conventions "modelopt");
  weight_scale_2 = amax(|W|) / (6 * 448);
* activations (W4A4): input_scale = amax(|x|) / (6 * 448), amax over the calibration batches
  of each layer's input, as ModelOpt's max calibration finds it;
* layers that read the same input tensor (q/k/v, gate/up) share one weight_scale_2 (the largest)
  and one input_scale, and their weights are quantized with the shared scale, as ModelOpt's export
  does so that serving engines can fuse them into one gemm. The groups are found during the
  calibration forward passes (for W4A16 without calibration, during one pass over a transformers
  model's ``dummy_inputs``; a model without them keeps a scale per layer).

save_modelopt writes model.safetensors (or shards with model.safetensors.index.json),
hf_quant_config.json, and config.json with ModelOpt's ``quantization_config`` (the layout of its
``convert_hf_quant_config_format``); the weights keep their names, the NVFP4 layers carry
``weight``, ``weight_scale``, ``weight_scale_2`` and ``input_scale`` (0-dim, as ModelOpt writes).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import weakref
from typing import Iterable, Optional, Sequence

import torch

from .. import conventions, ops
from ..nn import MODES, NVFP4Linear
from .config import W4A4, W4A16, modelopt_hf_quant_config, modelopt_quantization_config
from .layers import CompressedTensorsNVFP4Linear, NVFP4SplitLinear
from .loading import RENAMES
from .moe import refuse_experts, unfuse_experts

_AMAX_TO_SCALE = 6.0 * 448.0


def _excluded(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _run(model, batch) -> None:
    if isinstance(batch, dict):
        model(**batch)
    elif isinstance(batch, (tuple, list)):
        model(*batch)
    else:
        model(batch)


class _Calibrator:
    """Forward hooks on the layers to quantize: the amax of each one's input, and which layers read
    the same input tensor (union-find over the names)."""

    def __init__(self, modules: dict):
        self.amax, self.parent, self._seen, self._handles = {}, {n: n for n in modules}, {}, []
        for name, mod in modules.items():
            self._handles.append(mod.register_forward_pre_hook(self._hook(name), with_kwargs=True))

    def _hook(self, name):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs.get("input")
            if not isinstance(x, torch.Tensor):
                return
            a = x.detach().abs().amax().float()
            self.amax[name] = a if name not in self.amax else torch.maximum(self.amax[name], a)
            seen = self._seen.get(id(x))
            if seen is not None and seen[0]() is x:  # the same tensor object, not a reused id
                self._union(seen[1], name)
            else:
                self._seen[id(x)] = (weakref.ref(x), name)
        return hook

    def _find(self, n):
        while self.parent[n] != n:
            self.parent[n] = self.parent[self.parent[n]]
            n = self.parent[n]
        return n

    def _union(self, a, b):
        self.parent[self._find(a)] = self._find(b)

    def run(self, model, batches: Iterable) -> int:
        count = 0
        with torch.no_grad():
            for batch in batches:
                _run(model, batch)
                self._seen.clear()
                count += 1
        return count

    def groups(self):
        out = {}
        for n in self.parent:
            out.setdefault(self._find(n), []).append(n)
        return [g for g in out.values() if len(g) > 1]

    def remove(self):
        for h in self._handles:
            h.remove()


# ModelOpt's default exclusions of a linear layer: the output head and mixture-of-experts routers
DEFAULT_EXCLUDE = ("lm_head", "*.lm_head", "*.mlp.gate", "*.block_sparse_moe.gate", "*router*",
                   "*.mlp.shared_expert_gate")


def quantize_model(model: torch.nn.Module, *, mode: str = "w4a4", exclude: Sequence[str] = DEFAULT_EXCLUDE,
                   calibration: Optional[Iterable] = None, fuse_shared_inputs: bool = True) -> torch.nn.Module:
    """Replace the model's nn.Linear layers by NVFP4Linear (ModelOpt's quantization), in place.

    exclude: shell-style patterns of module names left as they are (default: ModelOpt's, the
    output head and MoE routers).
    calibration (needed for w4a4): an iterable of batches, each passed to the model as
    ``model(**batch)`` (dict), ``model(*batch)`` (tuple / list) or ``model(batch)``; each layer's
    input_scale comes from the largest |x| it sees (for w4a16 the batches only show which layers
    share inputs). fuse_shared_inputs: give layers that read the same input (q/k/v, gate/up) one
    weight_scale_2 and input_scale, as ModelOpt's export does.
    Every layer to quantize needs in_features % 16 == 0 and a weight of its own (not tied).
    Returns the model. Nothing is replaced if anything fails.
    """
    if mode not in MODES:
        raise ValueError(f"quantize_model: mode must be one of {MODES}, got {mode!r}")
    if isinstance(exclude, str):
        exclude = (exclude,)
    unfused = unfuse_experts(model)  # transformers 5's fused experts as per-expert nn.Linear layers
    try:
        _quantize_model(model, mode, exclude, calibration, fuse_shared_inputs)
    except BaseException:
        refuse_experts(model, unfused)
        raise
    refuse_experts(model, unfused, plain_only=True)  # experts left unquantized: fused again
    return model


def _quantize_model(model, mode, exclude, calibration, fuse_shared_inputs):
    owners = {}
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append(f"{mname}.{pname}" if mname else pname)
    targets = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear) or _excluded(name, exclude):
            continue
        if mod.in_features % 16:
            raise ValueError(f"quantize_model: {name} has in_features {mod.in_features}, not a multiple of 16; "
                             "exclude it")
        tied = [o for o in owners[id(mod.weight)] if o != f"{name}.weight"]
        if tied:
            raise ValueError(f"quantize_model: {name}.weight is tied to {', '.join(tied)}; exclude {name}")
        if mod.weight.device.type == "meta":
            raise ValueError(f"quantize_model: {name}.weight is on the meta device (no values to quantize)")
        targets[name] = mod
    if not targets:
        raise ValueError("quantize_model: no nn.Linear layer to quantize (all excluded, or none)")
    if mode == "w4a4" and calibration is None:
        raise ValueError("quantize_model: mode 'w4a4' quantizes activations with a scale calibrated on example "
                         "inputs: give calibration (an iterable of batches), or use mode 'w4a16'")

    groups = []
    amax = {}
    batches = calibration
    if batches is None and fuse_shared_inputs and hasattr(model, "dummy_inputs"):
        dev = next(iter(targets.values())).weight.device
        dummy = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in model.dummy_inputs.items()}
        batches = [dummy]  # only to find the layers that share inputs
    if batches is not None:
        cal = _Calibrator(targets)
        try:
            if cal.run(model, batches) == 0:
                raise ValueError("quantize_model: calibration has no batches")
        finally:
            cal.remove()
        amax = cal.amax
        groups = cal.groups() if fuse_shared_inputs else []
        if mode == "w4a4":
            unseen = [n for n in targets if n not in amax]
            if unseen:
                raise ValueError(f"quantize_model: calibration never ran {', '.join(unseen[:5])}"
                                 f"{' ...' if len(unseen) > 5 else ''}; exclude them or calibrate with inputs that "
                                 "reach them")
            zero = [n for n in targets if not float(amax[n]) > 0 or not torch.isfinite(amax[n])]
            if zero:
                raise ValueError(f"quantize_model: the calibration inputs of {', '.join(zero[:5])} have amax "
                                 f"{[float(amax[n]) for n in zero[:5]]}: no input_scale can be derived")

    with torch.no_grad():
        ws2 = {n: conventions.global_scale(m.weight.detach(), "modelopt") for n, m in targets.items()}
        in_scale = {n: amax[n] / _AMAX_TO_SCALE for n in targets} if mode == "w4a4" else {}
        for g in groups:
            shared_w = torch.stack([ws2[n] for n in g]).max()
            for n in g:
                ws2[n] = shared_w
            if mode == "w4a4":
                shared_x = torch.stack([in_scale[n] for n in g]).max()
                for n in g:
                    in_scale[n] = shared_x
        layers = {}
        for name, mod in targets.items():
            w = mod.weight.detach()
            if torch.equal(ws2[name], conventions.global_scale(w, "modelopt")):  # its own scale
                layers[name] = NVFP4Linear.from_linear(mod, mode=mode, input_scale=in_scale.get(name))
                continue
            # a group's shared scale: the same quantizer, with that scale
            bias = mod.bias
            layer = NVFP4Linear(mod.in_features, mod.out_features, bias is not None, mode=mode,
                                dtype=bias.dtype if bias is not None else w.dtype, device=w.device)
            codes, scales = ops.quantize(w, global_scale=ws2[name], convention="modelopt")
            layer.set_weight_codes(codes)
            layer.set_weight_scales(scales)
            layer.weight_scale_2.copy_(ws2[name])
            if mode == "w4a4":
                layer.input_scale.copy_(in_scale[name])
            if bias is not None:
                layer.bias.copy_(bias.detach())
            layer.update_derived_scales()
            layers[name] = layer
    for name, layer in layers.items():
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, layer)
    return model


# ---- writing -------------------------------------------------------------------------------------
def _producer() -> dict:
    try:
        from importlib.metadata import version

        v = version("nvfp4-kernels")
    except Exception:  # running from a source tree that is not installed
        v = "unknown"
    return {"name": "nvfp4_kernels", "version": v}


def _shard_bytes(size) -> int:
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B\s*", str(size), re.IGNORECASE)
    if not m:
        raise ValueError(f"max_shard_size: {size!r} is not a byte count like 5000000000 or '5GB'")
    return int(float(m.group(1)) * {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2).upper()])


def _checkpoint_name(model: torch.nn.Module):
    """name -> its name in the checkpoint: the module names transformers 5 changed (loading.RENAMES)
    written as before, as transformers 5 writes them."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    pairs = [(f".{new}.", f".{old}.") for old, new, types in RENAMES if model_type in types]
    modules = {n for n, _ in model.named_modules()}
    pairs = [(new, old) for new, old in pairs if not any(old in f".{n}." for n in modules)]

    def rename(name: str) -> str:
        for new, old in pairs:
            name = f".{name}.".replace(new, old)[1:-1]
        return name
    return rename


def _state_dict(model: torch.nn.Module):
    """The checkpoint's tensors and quantized layers: {name: tensor}, {layer name: "W4A4" | "W4A16"},
    the plain nn.Linear names. Tied parameters are written once (under their first name)."""
    out, algos, plain = _model_state_dict(model)
    rename = _checkpoint_name(model)
    return ({rename(k): t for k, t in out.items()}, {rename(k): a for k, a in algos.items()},
            [rename(n) for n in plain])


def _model_state_dict(model: torch.nn.Module):
    renames, algos, plain = {}, {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, CompressedTensorsNVFP4Linear):
            raise ValueError(f"save_modelopt: {name} holds compressed-tensors scales (multipliers), which ModelOpt's "
                             "divisors cannot represent exactly; save it in its own format or requantize")
        if isinstance(mod, NVFP4Linear):
            if type(mod) is not NVFP4Linear:
                raise ValueError(f"save_modelopt: {name} is a {type(mod).__name__} (a shard); save the whole layer")
            algos[name] = W4A4 if mod.mode == "w4a4" else W4A16
        elif isinstance(mod, NVFP4SplitLinear):
            parent = name.rpartition(".")[0]
            for part_name, part in mod.parts.items():
                if type(part) is not NVFP4Linear:
                    raise ValueError(f"save_modelopt: {name}.parts.{part_name} is a {type(part).__name__}")
                own = f"{parent}.{part_name}" if parent else part_name
                renames[f"{name}.parts.{part_name}."] = own + "."
                algos[own] = W4A4 if part.mode == "w4a4" else W4A16
        elif isinstance(mod, torch.nn.Linear):
            plain.append(name)
    if not algos:
        raise ValueError("save_modelopt: the model has no NVFP4 layers (quantize_model or load_checkpoint first)")
    out, seen_objects, seen_storage = {}, set(), set()
    for key, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen_objects:  # a tied parameter's second name
            continue
        seen_objects.add(id(t))
        for old, new in renames.items():
            if key.startswith(old):
                key = new + key[len(old):]
        t = t.detach()
        if t.device.type == "meta":
            raise ValueError(f"save_modelopt: {key} is on the meta device")
        ptr = (t.untyped_storage().data_ptr(), t.device)
        if ptr in seen_storage or not t.is_contiguous():
            t = t.contiguous().clone()  # safetensors writes each storage once
        seen_storage.add(ptr)
        out[key] = t.cpu()
    return out, algos, plain


def save_modelopt(model: torch.nn.Module, path, *, max_shard_size="5GB") -> None:
    """Write ``model`` (its NVFP4 layers as quantize_model or load_checkpoint made them) to the
    directory ``path`` as a ModelOpt NVFP4 checkpoint: safetensors (sharded above max_shard_size),
    hf_quant_config.json, config.json (the model's transformers config, if it has one, with
    ModelOpt's quantization_config) and generation_config.json where the model has one.
    Existing checkpoint files there (model*.safetensors, the index) are replaced."""
    try:
        from safetensors.torch import save_file
    except ImportError as e:
        raise ImportError("save_modelopt writes safetensors: pip install safetensors") from e
    unfused = unfuse_experts(model)  # transformers 5's fused experts: written per expert, as checkpoints hold them
    try:
        tensors, algos, plain = _state_dict(model)
    finally:
        refuse_experts(model, unfused)
    hf_quant = modelopt_hf_quant_config(algos, plain, _producer())
    config = {}
    mcfg = getattr(model, "config", None)
    if mcfg is not None and hasattr(mcfg, "to_dict"):
        config = mcfg.to_dict()
        if not config.get("architectures"):
            config["architectures"] = [type(model).__name__]
    config["quantization_config"] = modelopt_quantization_config(hf_quant)

    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    for f in os.listdir(path):
        if re.fullmatch(r"model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json", f):
            os.remove(os.path.join(path, f))
    limit = _shard_bytes(max_shard_size)
    shards, size = [[]], 0
    for key, t in tensors.items():
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > limit:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += n
    meta = {"format": "pt"}
    if len(shards) == 1:
        save_file(tensors, os.path.join(path, "model.safetensors"), metadata=meta)
    else:
        weight_map = {}
        for i, keys in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file({k: tensors[k] for k in keys}, os.path.join(path, fname), metadata=meta)
            weight_map.update({k: fname for k in keys})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(path, "hf_quant_config.json"), "w") as f:
        json.dump(hf_quant, f, indent=4)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    gen = getattr(model, "generation_config", None)
    if gen is not None and hasattr(gen, "save_pretrained"):
        gen.save_pretrained(path)
