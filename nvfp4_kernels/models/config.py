"""The quantization config of an NVFP4 checkpoint, read from either producer's files.

Two producers write the NVFP4 checkpoints in circulation, each with its own config:

* NVIDIA ModelOpt: ``hf_quant_config.json`` (``{"producer", "quantization": {"quant_algo",
  "group_size", "exclude_modules", "kv_cache_quant_algo"}}``) and the same facts in
  ``config.json``'s ``quantization_config`` (``quant_method: "modelopt"``, ``quant_algo``,
  ``ignore``, ``config_groups``), as ModelOpt's export writes them. ``quant_algo`` "NVFP4"
  is W4A4, "W4A16_NVFP4" weight-only; "MIXED_PRECISION" names each quantized layer in
  ``quantized_layers``. ``exclude_modules`` are shell-style patterns ("lm_head",
  "model.layers.0.mlp*") matched against whole module names.
* llm-compressor's compressed-tensors: ``config.json``'s ``quantization_config``
  (``quant_method: "compressed-tensors"``, ``format: "nvfp4-pack-quantized"``,
  ``config_groups`` of schemes with ``targets``, ``ignore``). A target or ignore entry is a
  module name, a ``"re:"`` regular expression matched from the name's start, or a class
  name ("Linear"); a module takes the scheme of its most specific match (name, then
  regex, then class). A scheme with ``input_activations`` is W4A4 (NVFP4), without it
  weight-only (NVFP4A16).

``QuantConfig`` holds what the loader needs from either: which modules are quantized and
how (``layer_algo``), the group size, and the KV-cache setting.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

import torch

MODELOPT = "modelopt"
COMPRESSED_TENSORS = "compressed-tensors"
W4A4, W4A16 = "W4A4", "W4A16"
GROUP_SIZE = 16

# ModelOpt's quant_algo names of the two NVFP4 schemes
_MODELOPT_ALGOS = {"NVFP4": W4A4, "W4A16_NVFP4": W4A16}
_CT_FORMAT = "nvfp4-pack-quantized"
_CT_MIXED = "mixed-precision"
# compressed-tensors presets a config group may name instead of spelling out its scheme
_CT_PRESETS = {"NVFP4": W4A4, "NVFP4A16": W4A16}


@dataclass(frozen=True)
class QuantConfig:
    """An NVFP4 checkpoint's quantization config.

    format: "modelopt" or "compressed-tensors". quant_algo: the checkpoint's own name for it
    (ModelOpt: "NVFP4", "W4A16_NVFP4", "MIXED_PRECISION"; compressed-tensors: "NVFP4",
    "NVFP4A16", or "MIXED" for groups of both). algo: "W4A4", "W4A16" or "MIXED".
    exclude: ModelOpt's exclude_modules or compressed-tensors' ignore, as written.
    kv_cache: the KV-cache quantization the checkpoint declares (None if none); this package
    keeps the KV cache in the model's dtype, and the loader skips the cache's scales.
    source: the file the config was read from.
    """

    format: str
    quant_algo: str
    algo: str
    group_size: int
    exclude: tuple
    kv_cache: Optional[str]
    source: str
    producer: Optional[dict] = None
    # ModelOpt MIXED_PRECISION: name -> algo; compressed-tensors: ((targets, algo), ...) per group
    layers: dict = field(default_factory=dict)
    groups: tuple = ()

    def layer_algo(self, name: str, module: Optional[torch.nn.Module] = None) -> Optional[str]:
        """"W4A4" or "W4A16" if the checkpoint quantizes the linear layer ``name``, else None."""
        if self.format == MODELOPT:
            if self.quant_algo == "MIXED_PRECISION":
                return self.layers.get(name)
            if any(fnmatch.fnmatchcase(name, p) for p in self.exclude):
                return None
            return self.algo
        if any(_ct_match(name, module, t) for t in self.exclude):
            return None
        best = None  # (specificity, algo): exact name 0, regex 1, class 2
        for targets, algo in self.groups:
            for t in targets:
                rank = _ct_rank(name, module, t)
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, algo)
        return None if best is None else best[1]


def _ct_rank(name: str, module, target: str) -> Optional[int]:
    if target.startswith("re:"):
        return 1 if re.match(target[3:], name) else None
    if target == name:
        return 0
    if module is not None and any(c.__name__ == target for c in type(module).__mro__):
        return 2
    return None


def _ct_match(name: str, module, target: str) -> bool:
    return _ct_rank(name, module, target) is not None


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _group_size(value, where: str) -> int:
    if value is None:
        return GROUP_SIZE
    if value != GROUP_SIZE:
        raise ValueError(f"{where}: group_size {value!r} is not NVFP4's {GROUP_SIZE} (one e4m3 scale per 16 values)")
    return GROUP_SIZE


def _str_list(value, where: str) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _modelopt_algo(quant_algo, where: str) -> str:
    if quant_algo not in _MODELOPT_ALGOS:
        raise ValueError(f"{where}: quant_algo {quant_algo!r} is not one this loader reads "
                         f"({', '.join(_MODELOPT_ALGOS)}, or MIXED_PRECISION of those)")
    return _MODELOPT_ALGOS[quant_algo]


def _modelopt_config(q: dict, source: str, producer=None) -> QuantConfig:
    """From hf_quant_config.json's "quantization" or config.json's quantization_config (either form)."""
    quant_algo = q.get("quant_algo")
    kv = q.get("kv_cache_quant_algo")
    if kv is None and isinstance(q.get("kv_cache_scheme"), (dict, str)):
        kv = q["kv_cache_scheme"] if isinstance(q["kv_cache_scheme"], str) else "FP8"
    exclude = _str_list(q.get("exclude_modules", q.get("ignore")), f"{source}: exclude_modules")
    producer = producer if producer is not None else q.get("producer")
    if quant_algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers")
        if not isinstance(layers, dict) or not layers:
            raise ValueError(f"{source}: quant_algo MIXED_PRECISION needs a non-empty quantized_layers object")
        algos = {}
        for name, cfg in layers.items():
            where = f"{source}: quantized_layers[{name!r}]"
            if not isinstance(cfg, dict):
                raise ValueError(f"{where}: expected an object, got {cfg!r}")
            algos[name] = _modelopt_algo(cfg.get("quant_algo"), where)
            _group_size(cfg.get("group_size"), where)
        kinds = set(algos.values())
        return QuantConfig(MODELOPT, quant_algo, kinds.pop() if len(kinds) == 1 else "MIXED", GROUP_SIZE, exclude,
                           kv, source, producer, layers=algos)
    algo = _modelopt_algo(quant_algo, source)
    gs = q.get("group_size")
    if gs is None:  # config.json's converted form keeps it in the config group
        groups = q.get("config_groups") or {}
        gs = next((g.get("weights", {}).get("group_size") for g in groups.values() if isinstance(g, dict)), None)
    return QuantConfig(MODELOPT, quant_algo, algo, _group_size(gs, source), exclude, kv, source, producer)


def _ct_args(args, where: str, *, activations: bool) -> None:
    """A compressed-tensors QuantizationArgs object: NVFP4's, or a ValueError naming the field."""
    if not isinstance(args, dict):
        raise ValueError(f"{where}: expected an object, got {args!r}")
    expected = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": GROUP_SIZE}
    for key, want in expected.items():
        if args.get(key) != want:
            raise ValueError(f"{where}.{key}: {args.get(key)!r} is not NVFP4's {want!r}")
    if args.get("symmetric", True) is not True:
        raise ValueError(f"{where}.symmetric: NVFP4 is symmetric, got {args.get('symmetric')!r}")
    sd = args.get("scale_dtype")
    if sd not in (None, "torch.float8_e4m3fn", "float8_e4m3fn"):
        raise ValueError(f"{where}.scale_dtype: {sd!r} is not float8_e4m3fn")
    dyn = args.get("dynamic", False)
    if activations and dyn not in ("local", False):
        # "local": block scales computed per input, the global scale calibrated (the NVFP4 preset)
        raise ValueError(f"{where}.dynamic: {dyn!r}; NVFP4 activations take a calibrated global scale "
                         "(dynamic 'local')")
    if not activations and dyn is not False:
        raise ValueError(f"{where}.dynamic: weights must be static, got {dyn!r}")


def _ct_config(q: dict, source: str) -> QuantConfig:
    fmt = q.get("format")
    if fmt not in (_CT_FORMAT, _CT_MIXED):
        raise ValueError(f"{source}: quantization_config.format {fmt!r} is not {_CT_FORMAT!r} "
                         "(the only compressed-tensors format holding NVFP4 weights)")
    for key in ("sparsity_config", "transform_config"):
        if q.get(key):
            raise ValueError(f"{source}: quantization_config.{key} is set; sparse or transformed (rotated) "
                             "checkpoints are not supported")
    groups_in = q.get("config_groups")
    if not isinstance(groups_in, dict) or not groups_in:
        raise ValueError(f"{source}: quantization_config.config_groups must be a non-empty object")
    groups = []
    for gname, scheme in groups_in.items():
        where = f"{source}: quantization_config.config_groups.{gname}"
        if isinstance(scheme, list):  # a preset named by the group, applied to these targets
            if gname not in _CT_PRESETS:
                raise ValueError(f"{where}: preset {gname!r} is not NVFP4 or NVFP4A16")
            groups.append((_str_list(scheme, where), _CT_PRESETS[gname]))
            continue
        if not isinstance(scheme, dict):
            raise ValueError(f"{where}: expected an object, got {scheme!r}")
        sfmt = scheme.get("format")
        if sfmt not in (None, _CT_FORMAT) or (sfmt is None and fmt != _CT_FORMAT):
            raise ValueError(f"{where}.format: {sfmt!r} is not {_CT_FORMAT!r}")
        if scheme.get("weights") is None:
            raise ValueError(f"{where}.weights: missing (an NVFP4 scheme quantizes weights)")
        _ct_args(scheme["weights"], f"{where}.weights", activations=False)
        if scheme.get("output_activations") is not None:
            raise ValueError(f"{where}.output_activations: output quantization is not supported")
        acts = scheme.get("input_activations")
        if acts is not None:
            _ct_args(acts, f"{where}.input_activations", activations=True)
        targets = _str_list(scheme.get("targets"), f"{where}.targets")
        if not targets:
            raise ValueError(f"{where}.targets: empty")
        groups.append((targets, W4A16 if acts is None else W4A4))
    kinds = {a for _, a in groups}
    algo = kinds.pop() if len(kinds) == 1 else "MIXED"
    quant_algo = {W4A4: "NVFP4", W4A16: "NVFP4A16"}.get(algo, "MIXED")
    kv = q.get("kv_cache_scheme")
    kv = None if kv is None else f"{kv.get('type', '?')}{kv.get('num_bits', '?')}" if isinstance(kv, dict) else str(kv)
    return QuantConfig(COMPRESSED_TENSORS, quant_algo, algo, GROUP_SIZE,
                       _str_list(q.get("ignore"), f"{source}: quantization_config.ignore"), kv, source,
                       {"name": "compressed-tensors", "version": q.get("version")}, groups=tuple(groups))


def read_quant_config(path) -> QuantConfig:
    """The quantization config of the checkpoint at ``path`` (its directory, or its config.json or
    hf_quant_config.json). ModelOpt's hf_quant_config.json is read where it exists (and checked
    against config.json's quantization_config); otherwise config.json's quantization_config.
    Unknown formats, algorithms and group sizes raise a ValueError naming the field."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    hf_quant = os.path.join(folder, "hf_quant_config.json")
    config = os.path.join(folder, "config.json")
    if not os.path.isdir(path) and os.path.basename(path) not in ("config.json", "hf_quant_config.json"):
        raise ValueError(f"{path}: give a checkpoint directory, its config.json or its hf_quant_config.json")
    qc = None
    if os.path.exists(config):
        qc = _read_json(config).get("quantization_config")
        if qc is not None and not isinstance(qc, dict):
            raise ValueError(f"{config}: quantization_config must be an object, got {qc!r}")
    if os.path.exists(hf_quant):
        data = _read_json(hf_quant)
        q = data.get("quantization")
        if not isinstance(q, dict):
            raise ValueError(f"{hf_quant}: missing the \"quantization\" object")
        cfg = _modelopt_config(q, hf_quant, data.get("producer"))
        if qc is not None:
            method = qc.get("quant_method")
            if method != MODELOPT:
                raise ValueError(f"{config}: quantization_config.quant_method {method!r} disagrees with "
                                 f"{hf_quant} (ModelOpt's)")
            if qc.get("quant_algo") not in (None, cfg.quant_algo):
                raise ValueError(f"{config}: quantization_config.quant_algo {qc.get('quant_algo')!r} disagrees "
                                 f"with {hf_quant}'s {cfg.quant_algo!r}")
        return cfg
    if qc is None:
        raise ValueError(f"{folder}: no quantization config (neither hf_quant_config.json nor a "
                         "quantization_config in config.json)")
    method = qc.get("quant_method")
    if method == MODELOPT:
        return _modelopt_config(qc.get("quantization", qc), config)
    if method == COMPRESSED_TENSORS:
        return _ct_config(qc, config)
    raise ValueError(f"{config}: quantization_config.quant_method {method!r} is not 'modelopt' or "
                     "'compressed-tensors'")


# ---- writing ModelOpt's config -------------------------------------------------------------------
def modelopt_hf_quant_config(layer_algos: dict, exclude, producer: dict) -> dict:
    """hf_quant_config.json's content for NVFP4 layers ``{name: "W4A4" | "W4A16"}``, as ModelOpt's
    export lays it out: one quant_algo with group_size and exclude_modules, or MIXED_PRECISION with
    the layers listed."""
    names = {W4A4: "NVFP4", W4A16: "W4A16_NVFP4"}
    kinds = set(layer_algos.values())
    q = {"quant_algo": None, "kv_cache_quant_algo": None}
    if len(kinds) == 1:
        q.update(quant_algo=names[kinds.pop()], group_size=GROUP_SIZE, exclude_modules=sorted(exclude))
    elif kinds:
        q.update(quant_algo="MIXED_PRECISION", quantized_layers={
            n: {"quant_algo": names[a], "group_size": GROUP_SIZE} for n, a in sorted(layer_algos.items())})
    return {"producer": dict(producer), "quantization": q}


def modelopt_quantization_config(hf_quant_config: dict) -> dict:
    """config.json's quantization_config for an hf_quant_config, in the layout of ModelOpt's
    ``convert_hf_quant_config_format`` (nvidia-modelopt 0.47.0) for NVFP4 and W4A16_NVFP4."""
    q = hf_quant_config.get("quantization", {})
    algo = q.get("quant_algo")

    def group(name, gs):
        weights = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": gs}
        if name == "NVFP4":
            return {"input_activations": dict(weights), "weights": weights}
        return {"weights": weights}

    out = {}
    if algo in ("NVFP4", "W4A16_NVFP4"):
        out["config_groups"] = {"group_0": {**group(algo, q.get("group_size", GROUP_SIZE)), "targets": ["Linear"]}}
    elif algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers", {})
        by_cfg = {}
        for name, cfg in layers.items():
            by_cfg.setdefault(tuple(sorted(cfg.items())), []).append(name)
        out["config_groups"] = {}
        for i, (key, names) in enumerate(by_cfg.items()):
            cfg = dict(key)
            out["config_groups"][f"group_{i}"] = {**group(cfg["quant_algo"], cfg.get("group_size", GROUP_SIZE)),
                                                  "targets": sorted(names)}
        out["quantized_layers"] = layers
    exclude = q.get("exclude_modules")
    out["ignore"] = exclude if exclude is not None else []
    if algo:
        out["quant_algo"] = algo
    kv = q.get("kv_cache_quant_algo")
    if kv:
        out["kv_cache_scheme"] = {"dynamic": False, "num_bits": 8, "type": "float"} if kv == "FP8" else kv
    if hf_quant_config.get("producer"):
        out["producer"] = hf_quant_config["producer"]
    out["quant_method"] = MODELOPT
    return out
