"""load_checkpoint: an NVFP4 checkpoint (ModelOpt or compressed-tensors) into a model's nn.Linears.

The model supplies the architecture (module names as in the checkpoint, e.g. a transformers
model built from the checkpoint's config); the checkpoint supplies every tensor. Each linear
layer the checkpoint's config quantizes becomes an ``NVFP4Linear`` (compressed-tensors layers a
``CompressedTensorsNVFP4Linear``, which keeps that library's multipliers exact); everything else
(embeddings, norms, excluded layers) is loaded as plain weights in ``dtype``.

Everything is checked before the model is touched, from the safetensors headers and the
per-tensor scalars: a missing or unexpected tensor, a wrong dtype or shape, a scale count that
is not K/16, an unknown algorithm raise a ValueError naming the tensor or field, and the model is
left as it was. Then all new layers and tensors are built, and only then swapped in.

Mapping of one quantized layer ``p`` (N = out_features, K = in_features):

    ModelOpt             p.weight uint8 [N, K/2], p.weight_scale e4m3 [N, K/16],
                         p.weight_scale_2 f32 [] or [1], p.input_scale f32 [] or [1] (W4A4)
                         -> NVFP4Linear, tensor for tensor
    compressed-tensors   p.weight_packed uint8 [N, K/2] (low nibble = even k, as here),
                         p.weight_scale e4m3 [N, K/16], p.weight_global_scale f32 [1],
                         p.input_global_scale f32 [1] (W4A4)
                         -> CompressedTensorsNVFP4Linear (multipliers kept as written)

Fused projections: a model whose linear ``qkv_proj`` (or ``gate_up_proj``; see ``fused``) has no
tensors in the checkpoint while ``q_proj``, ``k_proj``, ``v_proj`` do gets their rows stacked.
Where the slices share their per-tensor scales (ModelOpt's and llm-compressor's exports make them
share) that is one NVFP4 layer, exactly equal to the slices; where they differ, an
``NVFP4SplitLinear`` (one gemm per slice, still exact).

MoE: experts that are nn.Linear modules (``mlp.experts.{e}.gate_proj``) load like any layer
(``moe.swap_moe_blocks`` then stacks a block's experts into one NVFP4MoE); transformers 5's fused
experts modules are made such first (``moe.unfuse_experts``; put back if the load fails, or,
holding the loaded weights, where the checkpoint quantizes none of a block's experts), and
Mixtral's ``block_sparse_moe`` tensors load into its transformers 5 name, ``mlp`` (``RENAMES``).
Fused expert tensors in the checkpoint (3-D, or per-expert tensors whose model counterpart is not
an nn.Linear) raise NotImplementedError. KV-cache scales (``k_scale``, ``v_scale``) of a checkpoint
that declares KV-cache quantization are skipped: the cache stays in the model's dtype.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from ..nn import MODES, NVFP4Linear
from .config import COMPRESSED_TENSORS, MODELOPT, W4A4, W4A16, QuantConfig, read_quant_config
from .layers import CompressedTensorsNVFP4Linear, NVFP4SplitLinear
from .moe import refuse_experts, unfuse_experts

DEFAULT_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}

_ST_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
_FLOAT_ST = ("F16", "BF16", "F32", "F64")
# module names transformers 5 changed: (checkpoint's, model's, the model types); Mixtral's sparse
# MoE block. Loading renames where the checkpoint has the old name and the model the new one;
# save_modelopt writes the old name for those model types, as transformers 5 saves them.
RENAMES = (("block_sparse_moe", "mlp", ("mixtral",)),)
# the tensor names of a quantized layer, by format: codes, block scales, weight scalar, input scalar
_NAMES = {MODELOPT: ("weight", "weight_scale", "weight_scale_2", "input_scale"),
          COMPRESSED_TENSORS: ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale")}
# names that only quantized layers carry (either format, and quantization schemes this loader does not read)
_QUANT_LEAVES = {"weight_scale", "weight_scale_2", "input_scale", "weight_packed", "weight_global_scale",
                 "input_global_scale", "weight_zero_point", "pre_quant_scale", "weight_shape", "input_scale_inv"}
_KV_LEAVES = {"k_scale", "v_scale", "k_bias", "v_bias"}


@dataclass
class LoadReport:
    """What load_checkpoint did. layers: linear name -> "w4a4" / "w4a16"; fused: model linear name
    -> "merged" or "split" (and its checkpoint slices in ``slices``); plain: checkpoint tensors
    loaded as plain weights; skipped: checkpoint tensors not used (KV-cache scales, the model's
    non-persistent buffers)."""

    config: QuantConfig
    layers: Dict[str, str] = field(default_factory=dict)
    fused: Dict[str, str] = field(default_factory=dict)
    slices: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    plain: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    moe_blocks: List[str] = field(default_factory=list)  # hf.from_pretrained: blocks swapped for NVFP4MoE


# ---- the checkpoint's tensors ------------------------------------------------------------------
class _Checkpoint:
    """The safetensors files of a checkpoint directory: names, dtypes and shapes from the headers;
    data read on demand."""

    def __init__(self, folder: str):
        try:
            from safetensors import safe_open
        except ImportError as e:
            raise ImportError("nvfp4_kernels.models reads checkpoints with safetensors: pip install safetensors") from e
        self._safe_open = safe_open
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index}: no weight_map object")
            files = sorted(set(weight_map.values()))
        elif os.path.exists(os.path.join(folder, "model.safetensors")):
            files, weight_map = ["model.safetensors"], None
        else:
            files, weight_map = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")), None
            if not files:
                raise ValueError(f"{folder}: no safetensors files (model.safetensors, or shards with "
                                 "model.safetensors.index.json)")
        self.folder, self.meta = folder, {}  # name -> (file, safetensors dtype, shape)
        self._handles = {}
        for fname in files:
            path = os.path.join(folder, fname)
            if not os.path.exists(path):
                raise ValueError(f"{index}: names {fname}, which does not exist")
            try:
                with safe_open(path, "pt") as f:
                    header = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}
            except Exception as e:  # safetensors' own error type: say which file
                raise ValueError(f"{path}: not a readable safetensors file ({e})") from e
            for k, (st, shape) in header.items():
                if k in self.meta:
                    raise ValueError(f"tensor {k} is in both {self.meta[k][0]} and {fname}")
                self.meta[k] = (fname, st, shape)
        if weight_map is not None:
            for k, fname in weight_map.items():
                if k not in self.meta or self.meta[k][0] != fname:
                    raise ValueError(f"{index}: tensor {k} is mapped to {fname} but is not there")

        self._stored = {}  # a renamed tensor's name -> its name in the files
        self._renamed = []  # RENAMES' (old, new) applied

    def rename(self, model: torch.nn.Module) -> None:
        """Read the tensors under the names transformers 5 gives their modules (RENAMES), where the
        checkpoint uses the older name and the model the newer one."""
        modules = {n for n, _ in model.named_modules()}
        for old, new, _ in RENAMES:
            if any(f".{old}." in f".{n}." for n in modules) or not any(f".{old}." in k for k in self.meta):
                continue
            for k in [k for k in self.meta if f".{old}." in k]:
                renamed = k.replace(f".{old}.", f".{new}.")
                if renamed in self.meta:
                    raise ValueError(f"the checkpoint holds both {k} and {renamed}")
                self.meta[renamed] = self.meta.pop(k)
                self._stored[renamed] = self._stored.pop(k, k)
            self._renamed.append((old, new))

    def stored_name(self, name: str) -> str:
        """A module's name as the checkpoint (and its config's layer lists) names it."""
        name = f".{name}."
        for old, new in self._renamed:
            name = name.replace(f".{new}.", f".{old}.")
        return name[1:-1]

    def __contains__(self, name: str) -> bool:
        return name in self.meta

    def dtype(self, name: str) -> str:
        return self.meta[name][1]

    def shape(self, name: str) -> tuple:
        return self.meta[name][2]

    def get(self, name: str) -> torch.Tensor:
        fname = self.meta[name][0]
        if fname not in self._handles:
            self._handles[fname] = self._safe_open(os.path.join(self.folder, fname), "pt").__enter__()
        return self._handles[fname].get_tensor(self._stored.get(name, name))

    def close(self) -> None:
        for h in self._handles.values():
            h.__exit__(None, None, None)
        self._handles.clear()


def _dtype_name(st: str) -> str:
    t = _ST_DTYPES.get(st)
    return str(t).replace("torch.", "") if t is not None else st


def _parent(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _is_experts(name: str) -> bool:
    return any(part in ("experts", "expert") for part in name.split("."))


def _moe_error(key: str, ckpt: _Checkpoint, why: str) -> NotImplementedError:
    return NotImplementedError(f"NVFP4 MoE experts: not yet: checkpoint tensor {key} "
                               f"({_dtype_name(ckpt.dtype(key))} {list(ckpt.shape(key))}) {why}")


# ---- validation ------------------------------------------------------------------------------
@dataclass
class _Layer:
    """A validated quantized layer: the checkpoint prefix(es) it is read from and how."""

    name: str  # the model's module name
    prefixes: Tuple[str, ...]  # checkpoint module names (one, or the slices of a fused projection)
    mode: str  # "w4a4" / "w4a16"
    in_features: int
    rows: Tuple[int, ...]  # out_features of each prefix
    bias: bool
    device: torch.device
    split: bool = False


class _Validator:
    def __init__(self, model, ckpt: _Checkpoint, cfg: QuantConfig, mode: Optional[str], fused: dict):
        self.model, self.ckpt, self.cfg, self.mode, self.fused = model, ckpt, cfg, mode, fused
        self.names = _NAMES[cfg.format]
        self.consumed = set()
        self.scalars: Dict[str, torch.Tensor] = {}
        self.ckpt_modules = {}
        for k in ckpt.meta:
            self.ckpt_modules.setdefault(_parent(k), []).append(k)

    # one checkpoint layer ``p`` standing for (part of) the model's linear of in_features k
    def quantized(self, p: str, k: int, rows: Optional[int], bias: bool, algo: str) -> Tuple[int, str]:
        ck, (codes, scales, w2, inp) = self.ckpt, self.names
        for leaf in (codes, scales, w2):
            if f"{p}.{leaf}" not in ck:
                raise ValueError(f"missing tensor {p}.{leaf} (the checkpoint's config quantizes {p}: "
                                 f"{self.cfg.quant_algo}, {self.cfg.format})")
        key = f"{p}.{codes}"
        if ck.dtype(key) != "U8":
            raise ValueError(f"tensor {key}: dtype {_dtype_name(ck.dtype(key))}, expected uint8 (two e2m1 codes a "
                             "byte)")
        shape = ck.shape(key)
        if len(shape) == 3 and _is_experts(p):
            raise _moe_error(key, ck, "holds fused experts")
        if len(shape) != 2 or shape[1] * 2 != k or (rows is not None and shape[0] != rows):
            want = f"[{rows if rows is not None else 'N'}, {k // 2}]"
            raise ValueError(f"tensor {key}: shape {list(shape)}, expected {want} (in_features K={k}: K/2 bytes a row)")
        n = shape[0]
        key = f"{p}.{scales}"
        if ck.dtype(key) != "F8_E4M3":
            raise ValueError(f"tensor {key}: dtype {_dtype_name(ck.dtype(key))}, expected float8_e4m3fn")
        sshape = ck.shape(key)
        if len(sshape) != 2 or sshape[0] != n:
            raise ValueError(f"tensor {key}: shape {list(sshape)}, expected [{n}, {k // 16}]")
        if sshape[1] != k // 16:
            raise ValueError(f"tensor {key}: {sshape[1]} scales a row, expected K/16 = {k // 16} (K={k}, one e4m3 "
                             "scale per 16 values)")
        self.scalar(f"{p}.{w2}")
        mode = "w4a16" if algo == W4A16 or self.mode == "w4a16" else "w4a4"
        if algo == W4A16 and self.mode == "w4a4":
            raise ValueError(f"mode='w4a4' quantizes activations with the checkpoint's input scales, but {p} is "
                             f"weight-only ({self.cfg.quant_algo}): it has no {inp}")
        if algo == W4A4:
            if f"{p}.{inp}" not in ck:
                raise ValueError(f"missing tensor {p}.{inp} (the config quantizes {p}'s activations: "
                                 f"{self.cfg.quant_algo})")
            self.scalar(f"{p}.{inp}")
        elif f"{p}.{inp}" in ck:
            raise ValueError(f"unexpected tensor {p}.{inp}: the config makes {p} weight-only ({self.cfg.quant_algo})")
        self.consumed.update(f"{p}.{x}" for x in (codes, scales, w2, inp) if f"{p}.{x}" in ck)
        self.bias(p, n, bias)
        self.leftovers(p)
        return n, mode

    def scalar(self, key: str) -> None:
        ck = self.ckpt
        if ck.dtype(key) != "F32":
            raise ValueError(f"tensor {key}: dtype {_dtype_name(ck.dtype(key))}, expected float32")
        if ck.shape(key) not in ((), (1,)):
            raise ValueError(f"tensor {key}: shape {list(ck.shape(key))}, expected [] or [1] (one per-tensor scale)")
        v = ck.get(key).reshape(())
        if not bool(torch.isfinite(v) & (v > 0)):
            raise ValueError(f"tensor {key}: {v.item()} is not a positive finite scale")
        self.scalars[key] = v

    def bias(self, p: str, n: int, has_bias: bool) -> None:
        key, ck = f"{p}.bias", self.ckpt
        if not has_bias:
            if key in ck:
                raise ValueError(f"unexpected tensor {key}: the model's layer has no bias")
            return
        if key not in ck:
            raise ValueError(f"missing tensor {key} (the model's layer has a bias)")
        if ck.dtype(key) not in _FLOAT_ST:
            raise ValueError(f"tensor {key}: dtype {_dtype_name(ck.dtype(key))}, expected a floating-point bias")
        if ck.shape(key) != (n,):
            raise ValueError(f"tensor {key}: shape {list(ck.shape(key))}, expected [{n}]")
        self.consumed.add(key)

    def leftovers(self, p: str) -> None:
        """Tensors of a quantized layer that are none of its own."""
        for key in self.ckpt_modules.get(p, ()):
            if key in self.consumed or (_leaf(key) in _KV_LEAVES and self.cfg.kv_cache):
                continue
            raise ValueError(f"unexpected tensor {key} in quantized layer {p} ({self.cfg.format} names its "
                             f"tensors {', '.join(self.names)}, bias)")

    def check_unquantized(self, p: str) -> None:
        for key in self.ckpt_modules.get(p, ()):
            if _leaf(key) in _QUANT_LEAVES or self.ckpt.dtype(key) in ("U8", "F8_E4M3"):
                raise ValueError(f"unexpected quantized tensor {key}: the checkpoint's config does not quantize {p} "
                                 f"(excluded or ignored), so its weights should be plain")


def _device_of(module: torch.nn.Module, device) -> torch.device:
    if device is not None:
        return torch.device(device)
    t = next(iter(module.parameters(recurse=False)), None)
    return torch.device("cpu") if t is None or t.device.type == "meta" else t.device


def _validate(model, ckpt, cfg, mode, fused, device):
    v = _Validator(model, ckpt, cfg, mode, fused)
    layers: List[_Layer] = []
    plain_fused: Dict[str, Tuple[str, ...]] = {}
    covered = set()  # model modules whose tensors the quantized / fused plans load
    for name, mod in model.named_modules():
        if isinstance(mod, NVFP4Linear) or isinstance(mod, NVFP4SplitLinear):
            raise ValueError(f"the model already holds NVFP4 layers ({name}); give a model with nn.Linear layers")
        if not isinstance(mod, torch.nn.Linear):
            continue
        k, n, has_bias = mod.in_features, mod.out_features, mod.bias is not None
        dev = _device_of(mod, device)
        if name in v.ckpt_modules or _leaf(name) not in fused:
            algo = cfg.layer_algo(ckpt.stored_name(name), mod)
            if algo is None:
                v.check_unquantized(name)
                continue
            if k % 16:
                raise ValueError(f"the config quantizes {name}, whose in_features {k} is not a multiple of 16")
            if name not in v.ckpt_modules:
                raise ValueError(f"missing tensor {name}.{v.names[0]} (the checkpoint's config quantizes {name})")
            _, m = v.quantized(name, k, n, has_bias, algo)
            layers.append(_Layer(name, (name,), m, k, (n,), has_bias, dev))
            covered.add(name)
            continue
        # a fused projection of the model, its slices in the checkpoint
        parent = _parent(name)
        slices = tuple(f"{parent}.{s}" if parent else s for s in fused[_leaf(name)])
        missing = [s for s in slices if s not in v.ckpt_modules]
        if missing:
            if len(missing) == len(slices):  # neither fused nor sliced: report the fused name's tensor
                algo = cfg.layer_algo(ckpt.stored_name(name), mod)
                raise ValueError(f"missing tensor {name}.{v.names[0] if algo else 'weight'}")
            raise ValueError(f"the model's fused {name} needs the checkpoint's {', '.join(slices)}; missing "
                             f"{', '.join(missing)}")
        algos = {s: cfg.layer_algo(ckpt.stored_name(s), mod) for s in slices}
        if len(set(algos.values())) != 1:
            raise ValueError(f"the model's fused {name}: its checkpoint slices are quantized differently: {algos}")
        algo = algos[slices[0]]
        if algo is None:
            rows = 0
            for s in slices:
                v.check_unquantized(s)
                for leaf in ("weight",) + (("bias",) if has_bias else ()):
                    key = f"{s}.{leaf}"
                    if key not in ckpt:
                        raise ValueError(f"missing tensor {key} (a slice of the model's fused {name})")
                    if ckpt.dtype(key) not in _FLOAT_ST:
                        raise ValueError(f"tensor {key}: dtype {_dtype_name(ckpt.dtype(key))}, expected floating point")
                    shp = ckpt.shape(key)
                    if len(shp) != (2 if leaf == "weight" else 1) or (leaf == "weight" and shp[1] != k):
                        raise ValueError(f"tensor {key}: shape {list(shp)} does not fit the model's fused {name} "
                                         f"[{n}, {k}]")
                    v.consumed.add(key)
                rows += ckpt.shape(f"{s}.weight")[0]
                v.leftovers(s)
            if rows != n:
                raise ValueError(f"the model's fused {name} has {n} rows; its slices {', '.join(slices)} have {rows}")
            plain_fused[name] = slices
            covered.add(name)
            continue
        if k % 16:
            raise ValueError(f"the config quantizes {name}, whose in_features {k} is not a multiple of 16")
        rows, modes = [], set()
        for s in slices:
            r, m = v.quantized(s, k, None, has_bias, algo)
            rows.append(r)
            modes.add(m)
        if sum(rows) != n:
            raise ValueError(f"the model's fused {name} has {n} rows; its slices {', '.join(slices)} have {sum(rows)}")
        scal = [tuple(v.scalars[f"{s}.{x}"] for x in v.names[2:] if f"{s}.{x}" in v.scalars) for s in slices]
        split = any(len(a) != len(scal[0]) or not all(torch.equal(x, y) for x, y in zip(a, scal[0])) for a in scal)
        layers.append(_Layer(name, slices, modes.pop(), k, tuple(rows), has_bias, dev, split))
        covered.add(name)

    # quantized tensors no layer took: fused experts, or layers the model does not have as nn.Linear
    for key in ckpt.meta:
        if key in v.consumed:
            continue
        p, leaf = _parent(key), _leaf(key)
        quantized = leaf in _QUANT_LEAVES or ckpt.dtype(key) in ("U8", "F8_E4M3")
        if not quantized:
            continue
        if _is_experts(key):
            raise _moe_error(key, ckpt, "has no nn.Linear in the model to load into (fused expert weights)")
        try:
            target = model.get_submodule(p) if p else model
        except AttributeError:
            target = None
        what = "no such module in the model" if target is None else f"the model's {p} is a {type(target).__name__}, " \
                                                                   "not an nn.Linear"
        if target is not None and isinstance(target, torch.nn.Linear):
            what = f"{p} is a quantized layer, and {leaf} is none of its tensors"
        raise ValueError(f"unexpected quantized tensor {key}: {what}")

    # everything else: plain tensors of the model's state_dict, tied parameters loaded once
    sd = model.state_dict(keep_vars=True)
    params = {id(p_) for p_ in model.parameters()}
    by_object: Dict[int, List[str]] = {}
    for key, t in sd.items():
        by_object.setdefault(id(t), []).append(key)
    plain: Dict[str, str] = {}  # model key -> checkpoint key
    for key, t in sd.items():
        if _parent(key) in covered and _leaf(key) in ("weight", "bias"):
            continue
        if key in ckpt:
            st = ckpt.dtype(key)
            if t.is_floating_point() and st not in _FLOAT_ST:
                raise ValueError(f"tensor {key}: dtype {_dtype_name(st)}, expected floating point (the model's "
                                 f"{t.dtype})")
            if not t.is_floating_point() and _ST_DTYPES.get(st) != t.dtype:
                raise ValueError(f"tensor {key}: dtype {_dtype_name(st)}, expected {t.dtype}")
            if ckpt.shape(key) != tuple(t.shape):
                raise ValueError(f"tensor {key}: shape {list(ckpt.shape(key))}, expected {list(t.shape)}")
            plain[key] = key
            v.consumed.add(key)
        elif id(t) in params and not any(k2 in ckpt for k2 in by_object[id(t)]):
            raise ValueError(f"missing tensor {key}")
    skipped = []
    buffers = {n_ for n_, _ in model.named_buffers()}
    for key in ckpt.meta:
        if key in v.consumed:
            continue
        if (_leaf(key) in _KV_LEAVES and cfg.kv_cache) or key in buffers:
            skipped.append(key)
            continue
        raise ValueError(f"unexpected tensor {key}: the model has no such parameter or buffer")
    return layers, plain_fused, plain, by_object, skipped


# ---- building ----------------------------------------------------------------------------------
def _layer_class(cfg: QuantConfig):
    return CompressedTensorsNVFP4Linear if cfg.format == COMPRESSED_TENSORS else NVFP4Linear


def _build_one(cfg, ckpt, prefixes, plan: _Layer, rows: int, dtype) -> NVFP4Linear:
    names = _NAMES[cfg.format]
    parts = {x: [] for x in names[:2] + ("bias",)}
    for p in prefixes:
        for x in parts:
            if x != "bias" or plan.bias:
                parts[x].append(ckpt.get(f"{p}.{x}"))
    sd = {x: torch.cat(ts) if len(ts) > 1 else ts[0] for x, ts in parts.items() if ts}
    for x in names[2:]:
        key = f"{prefixes[0]}.{x}"
        if key in ckpt:
            sd[x] = ckpt.get(key)
    if "bias" in sd:
        sd["bias"] = sd["bias"].to(dtype)
    layer = _layer_class(cfg)(plan.in_features, rows, plan.bias, mode=plan.mode, dtype=dtype, device=plan.device)
    sd = {k: t.to(plan.device) for k, t in sd.items()}
    layer.load_state_dict(sd, strict=True)
    return layer


def _build(cfg, ckpt, plan: _Layer, dtype) -> torch.nn.Module:
    if not plan.split:
        return _build_one(cfg, ckpt, plan.prefixes, plan, sum(plan.rows), dtype)
    return NVFP4SplitLinear({_leaf(p): _build_one(cfg, ckpt, (p,), plan, r, dtype)
                             for p, r in zip(plan.prefixes, plan.rows)})


def load_checkpoint(model: torch.nn.Module, path, *, mode: Optional[str] = None, dtype: torch.dtype = torch.bfloat16,
                    device=None, fused: Optional[dict] = None) -> LoadReport:
    """Load the NVFP4 checkpoint at ``path`` (a directory: safetensors shards with
    model.safetensors.index.json, or model.safetensors; config.json and/or hf_quant_config.json)
    into ``model``, replacing each linear layer the checkpoint quantizes by an NVFP4 layer.

    mode: None (W4A4 for layers whose checkpoint has input scales, W4A16 for weight-only ones),
    "w4a16" (all weight-only; input scales are then unused), or "w4a4" (all W4A4: an error if
    some layer has no input scale). dtype: the plain weights' and biases' dtype. device: where the
    new tensors go (default: where each module's old parameters were; meta parameters -> CPU).
    fused: {fused linear name: its slices' names} for projections the model fuses and the
    checkpoint does not (default ``DEFAULT_FUSED``: qkv_proj, gate_up_proj).

    Returns a LoadReport. Raises ValueError (NotImplementedError for fused MoE experts) before
    changing anything if the checkpoint does not fit the model.
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be None or one of {MODES}, got {mode!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    cfg = read_quant_config(folder)
    fused = DEFAULT_FUSED if fused is None else dict(fused)
    ckpt = _Checkpoint(folder)
    unfused = unfuse_experts(model)  # transformers 5's fused experts as the checkpoint names them
    try:
        ckpt.rename(model)
        layers, plain_fused, plain, by_object, skipped = _validate(model, ckpt, cfg, mode, fused, device)
        # build everything, then swap it in
        new_layers = {plan.name: _build(cfg, ckpt, plan, dtype) for plan in layers}
        new_plain_fused = {}
        for name, slices in plain_fused.items():
            mod = model.get_submodule(name)
            dev = _device_of(mod, device)
            w = torch.cat([ckpt.get(f"{s}.weight") for s in slices]).to(dev, dtype)
            b = torch.cat([ckpt.get(f"{s}.bias") for s in slices]).to(dev, dtype) if mod.bias is not None else None
            new_plain_fused[name] = (w, b)
        sd = model.state_dict(keep_vars=True)
        # what the model keeps in float32 whatever its dtype (transformers' lists: DeepSeek-V3's
        # routing bias), by a component of the tensor's name
        keep32 = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ()) | set(
            getattr(model, "_keep_in_fp32_modules", None) or ())
        tensors = {}
        for key, ck_key in plain.items():
            old = sd[key]
            dev = torch.device(device) if device is not None else (
                torch.device("cpu") if old.device.type == "meta" else old.device)
            t = ckpt.get(ck_key)
            want = torch.float32 if keep32 & set(key.split(".")) else dtype
            tensors[key] = t.to(dev, want) if t.is_floating_point() else t.to(dev)
    except BaseException:
        refuse_experts(model, unfused)
        raise
    finally:
        ckpt.close()

    # swap: modules, then plain tensors (a tied parameter gets one new Parameter for all its names)
    for name, layer in new_layers.items():
        parent = model.get_submodule(_parent(name)) if _parent(name) else model
        setattr(parent, _leaf(name), layer)
    for name, (w, b) in new_plain_fused.items():
        mod = model.get_submodule(name)
        mod.weight = torch.nn.Parameter(w, requires_grad=False)
        if b is not None:
            mod.bias = torch.nn.Parameter(b, requires_grad=False)
    done = set()
    for key, t in tensors.items():
        old = sd[key]
        if id(old) in done:
            continue
        done.add(id(old))
        new = torch.nn.Parameter(t, requires_grad=False) if isinstance(old, torch.nn.Parameter) else t
        for k2 in by_object[id(old)]:
            owner = model.get_submodule(_parent(k2)) if _parent(k2) else model
            leaf = _leaf(k2)
            if leaf in owner._parameters:
                owner._parameters[leaf] = new
            else:
                owner._buffers[leaf] = new
    refuse_experts(model, unfused, plain_only=True)  # experts the checkpoint left unquantized: fused again
    if cfg.kv_cache:
        warnings.warn(f"the checkpoint quantizes the KV cache ({cfg.kv_cache}); it is kept in {dtype} here and its "
                      "scales are unused", stacklevel=2)
    report = LoadReport(cfg, plain=sorted(plain), skipped=sorted(skipped))
    for plan in layers:
        report.layers[plan.name] = plan.mode
        if plan.prefixes != (plan.name,):
            report.fused[plan.name] = "split" if plan.split else "merged"
            report.slices[plan.name] = plan.prefixes
    for name, slices in plain_fused.items():
        report.fused[name] = "plain"
        report.slices[name] = slices
    return report
