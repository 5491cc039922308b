"""NVFP4 checkpoints: nvfp4_kernels.models against hand-written checkpoints of both formats, its own
exporter, the producers' own export code where it is installed, and malformed checkpoints.

Hand-written checkpoints use each format's exact names, with codes and scales from
nvfp4_kernels.conventions (the libraries' quantizers, byte for byte). A loaded layer must hold the
checkpoint's bytes and compute what nvfp4_kernels.reference computes from them.
"""

import copy
import json
import os
from fractions import Fraction

import pytest
import torch

from helpers import run_example

pytest.importorskip("safetensors", reason="nvfp4_kernels.models reads and writes safetensors (pip install safetensors)")
from safetensors.torch import load_file, save_file  # noqa: E402

from conftest import assert_matches  # noqa: E402
from nvfp4_kernels import conventions, reference  # noqa: E402
from nvfp4_kernels.layouts import as_bytes  # noqa: E402
from nvfp4_kernels.models import (CompressedTensorsNVFP4Linear, NVFP4SplitLinear, load_checkpoint,  # noqa: E402
                                  quantize_model, read_quant_config, save_modelopt)
from nvfp4_kernels.models.layers import nearest_f32  # noqa: E402
from nvfp4_kernels.nn import NVFP4Linear  # noqa: E402

BF16 = torch.bfloat16
H, I, V = 64, 96, 128  # hidden, intermediate, vocab of the toy models


# ---- a toy model: the names of a Llama checkpoint, torch only ---------------------------------
class Block(torch.nn.Module):
    def __init__(self, fused_qkv=False, bias=False, experts=0):
        super().__init__()
        self.input_layernorm = torch.nn.LayerNorm(H)
        self.self_attn = torch.nn.Module()
        if fused_qkv:
            self.self_attn.qkv_proj = torch.nn.Linear(H, 2 * H, bias=bias)
        else:
            self.self_attn.q_proj = torch.nn.Linear(H, H, bias=bias)
            self.self_attn.k_proj = torch.nn.Linear(H, H // 2, bias=bias)
            self.self_attn.v_proj = torch.nn.Linear(H, H // 2, bias=bias)
        self.self_attn.o_proj = torch.nn.Linear(H, H, bias=bias)
        self.mlp = torch.nn.Module()
        if experts:
            self.mlp.experts = torch.nn.ModuleList()
            for _ in range(experts):
                e = torch.nn.Module()
                e.gate_proj = torch.nn.Linear(H, I, bias=False)
                e.up_proj = torch.nn.Linear(H, I, bias=False)
                e.down_proj = torch.nn.Linear(I, H, bias=False)
                self.mlp.experts.append(e)
        else:
            self.mlp.gate_proj = torch.nn.Linear(H, I, bias=bias)
            self.mlp.up_proj = torch.nn.Linear(H, I, bias=bias)
            self.mlp.down_proj = torch.nn.Linear(I, H, bias=bias)

    def forward(self, x):
        h = self.input_layernorm(x)
        a = self.self_attn
        qkv = a.qkv_proj(h) if hasattr(a, "qkv_proj") else torch.cat([a.q_proj(h), a.k_proj(h), a.v_proj(h)], -1)
        q, kv = qkv[..., :H], qkv[..., H:]
        x = x + a.o_proj(torch.nn.functional.silu(q) * kv)
        experts = self.mlp.experts if hasattr(self.mlp, "experts") else [self.mlp]
        for e in experts:
            x = x + e.down_proj(torch.nn.functional.silu(e.gate_proj(h)) * e.up_proj(h))
        return x


class Toy(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(V, H)
        self.model.layers = torch.nn.ModuleList([Block(**kw) for _ in range(2)])
        self.model.norm = torch.nn.LayerNorm(H)
        self.lm_head = torch.nn.Linear(H, V, bias=False)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for b in self.model.layers:
            x = b(x)
        return self.lm_head(self.model.norm(x))


def toy(gen, **kw):
    m = Toy(**kw)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return m.to(BF16).eval()


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, [type(m) for m in model.modules()]


def unchanged(model, snap):
    sd, types = snap
    now = model.state_dict()
    return [type(m) for m in model.modules()] == types and now.keys() == sd.keys() and all(
        torch.equal(as_bytes(now[k]) if now[k].element_size() == 1 else now[k],
                    as_bytes(sd[k]) if sd[k].element_size() == 1 else sd[k]) for k in sd)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(as_bytes(a) if a.element_size() == 1 else a,
                                                                      as_bytes(b) if b.element_size() == 1 else b)


# ---- hand-written checkpoints ------------------------------------------------------------------------
def linears(model, exclude=("lm_head",)):
    return {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in exclude}


def write(folder, tensors, config=None, hf_quant=None):
    os.makedirs(folder, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    if config is not None:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
    if hf_quant is not None:
        with open(os.path.join(folder, "hf_quant_config.json"), "w") as f:
            json.dump(hf_quant, f)


def modelopt_tensors(model, gen, *, w4a4=True, exclude=("lm_head",), scalar_shape=()):
    """The model's tensors as a ModelOpt NVFP4 export names them."""
    q = linears(model, exclude)
    out = {k: v.detach().clone() for k, v in model.state_dict().items()
           if k.rsplit(".", 1)[0] not in q or k.endswith(".bias")}
    for name, lin in q.items():
        w = lin.weight.detach()
        ws2 = conventions.global_scale(w, "modelopt")
        codes, sf = conventions.quantize(w, ws2, "modelopt")
        out[f"{name}.weight"], out[f"{name}.weight_scale"] = codes, sf
        out[f"{name}.weight_scale_2"] = ws2.reshape(scalar_shape)
        if w4a4:
            out[f"{name}.input_scale"] = (torch.rand((), generator=gen) * 3 + 0.5).div(2688).reshape(scalar_shape)
    return out


def modelopt_config(w4a4=True, exclude=("lm_head",)):
    algo = "NVFP4" if w4a4 else "W4A16_NVFP4"
    return {"producer": {"name": "modelopt", "version": "0.47.0"},
            "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None, "group_size": 16,
                             "exclude_modules": list(exclude)}}


def ct_tensors(model, gen, *, w4a4=True, exclude=("lm_head",)):
    """The model's tensors as compressed-tensors' nvfp4-pack-quantized format names them."""
    q = linears(model, exclude)
    out = {k: v.detach().clone() for k, v in model.state_dict().items()
           if k.rsplit(".", 1)[0] not in q or k.endswith(".bias")}
    for name, lin in q.items():
        w = lin.weight.detach()
        g = conventions.global_scale(w, "compressed_tensors")
        codes, sf = conventions.quantize(w, g, "compressed_tensors")
        out[f"{name}.weight_packed"], out[f"{name}.weight_scale"] = codes, sf
        out[f"{name}.weight_global_scale"] = g.reshape(1)
        if w4a4:  # 2688 / amax, an amax between 0.5 and 3.5 (any float32 value: not a bfloat16 one)
            out[f"{name}.input_global_scale"] = (2688 / (torch.rand(1, generator=gen) * 3 + 0.5)).float()
    return out


def ct_config(w4a4=True, ignore=("lm_head",), fmt="nvfp4-pack-quantized"):
    args = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True,
            "dynamic": False, "scale_dtype": "torch.float8_e4m3fn"}
    scheme = {"targets": ["Linear"], "weights": dict(args), "format": fmt,
              "input_activations": dict(args, dynamic="local", observer="static_minmax") if w4a4 else None}
    return {"model_type": "llama", "quantization_config": {
        "quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": scheme},
        "ignore": list(ignore), "quantization_status": "compressed", "kv_cache_scheme": None}}


def check_layer(layer, x, *, fmt, w4a4):
    """layer(x) against the reference computed from its buffers and the format's meaning of them."""
    if fmt == "modelopt":
        ws2 = layer.weight_scale_2
        alpha_w4a16 = ws2
        g = (1.0 / layer.input_scale) if w4a4 else None  # float32, as NVFP4Linear derives it
        alpha = (layer.input_scale * ws2) if w4a4 else None
    else:
        g_w = Fraction(float(layer.weight_global_scale))
        alpha_w4a16 = torch.tensor(nearest_f32(1 / g_w))
        g = layer.input_global_scale.reshape(()) if w4a4 else None
        alpha = torch.tensor(nearest_f32(1 / (g_w * Fraction(float(g))))) if w4a4 else None
    if w4a4:
        xq, sx = reference.quantize(x, g)
        want = reference.gemm(xq, layer.weight, sx, layer.weight_scale, alpha, layer.bias, out_dtype=x.dtype)
    else:
        want = reference.gemm_w4a16(x, layer.weight_codes(), layer.weight_scales(), alpha_w4a16, layer.bias)
    assert_matches(layer(x), want, f"{fmt} layer, w4a4={w4a4}")


# ---- hand-written checkpoints load ---------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["modelopt", "compressed_tensors"])
@pytest.mark.parametrize("w4a4", [True, False], ids=["w4a4", "w4a16"])
def test_hand_written_checkpoint(tmp_path, gen, fmt, w4a4):
    src = toy(gen, bias=fmt == "modelopt")
    if fmt == "modelopt":
        tensors = modelopt_tensors(src, gen, w4a4=w4a4, scalar_shape=(1,) if w4a4 else ())
        write(tmp_path, tensors, hf_quant=modelopt_config(w4a4))
        names = ("weight", "weight_scale", "weight_scale_2", "input_scale")
    else:
        tensors = ct_tensors(src, gen, w4a4=w4a4)
        write(tmp_path, tensors, config=ct_config(w4a4))
        names = ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale")
    cfg = read_quant_config(tmp_path)
    assert cfg.format == ("modelopt" if fmt == "modelopt" else "compressed-tensors")
    assert cfg.algo == ("W4A4" if w4a4 else "W4A16")

    model = toy(gen, bias=fmt == "modelopt")
    report = load_checkpoint(model, tmp_path)
    quantized = linears(src)
    assert set(report.layers) == set(quantized)
    assert set(report.layers.values()) == {"w4a4" if w4a4 else "w4a16"}
    x = torch.randn(3, 5, H, generator=gen).to(BF16)
    for name in quantized:
        layer = model.get_submodule(name)
        assert type(layer) is (NVFP4Linear if fmt == "modelopt" else CompressedTensorsNVFP4Linear)
        sd = layer.state_dict()
        for leaf in names if w4a4 else names[:3]:
            got, want = sd[leaf], tensors[f"{name}.{leaf}"]
            assert same(got.reshape(want.shape), want), f"{name}.{leaf}"
        if layer.bias is not None:
            assert torch.equal(layer.bias, tensors[f"{name}.bias"])
        xk = x if layer.in_features == H else torch.randn(4, layer.in_features, generator=gen).to(BF16)
        check_layer(layer, xk, fmt=fmt, w4a4=w4a4)
    # the excluded lm_head and the other tensors, plain and equal
    assert type(model.lm_head) is torch.nn.Linear and torch.equal(model.lm_head.weight, src.lm_head.weight)
    assert torch.equal(model.model.embed_tokens.weight, src.model.embed_tokens.weight)
    with torch.no_grad():
        assert torch.isfinite(model(torch.randint(0, V, (2, 7), generator=gen)).float()).all()
    # state_dict round trip: the layer's tensors under the checkpoint's names
    for k, v in model.state_dict().items():
        assert k in tensors and same(v.reshape(tensors[k].shape), tensors[k]), k
    if fmt != "modelopt":  # ModelOpt's divisors cannot hold compressed-tensors' multipliers exactly
        with pytest.raises(ValueError, match="compressed-tensors"):
            save_modelopt(model, tmp_path / "resaved")
    # mode="w4a16" on a W4A4 checkpoint: the input scales are unused
    if w4a4:
        m2 = toy(gen, bias=fmt == "modelopt")
        assert set(load_checkpoint(m2, tmp_path, mode="w4a16").layers.values()) == {"w4a16"}
        check_layer(m2.model.layers[1].mlp.down_proj, torch.randn(2, I, generator=gen).to(BF16), fmt=fmt, w4a4=False)


def test_compressed_tensors_scales_stay_exact(tmp_path, gen):
    """Global scales g whose float32 reciprocal does not invert back: kept as written, the
    activations quantized with g itself, alpha = the float32 nearest to 1 / (g_w g_x)."""
    inexact = []
    while len(inexact) < 2:
        g = torch.tensor(2688.0, dtype=torch.float32) / (torch.rand((), generator=gen) * 3 + 0.5)
        if (1.0 / (1.0 / g)) != g:
            inexact.append(g.reshape(1))
    src = toy(gen)
    tensors = ct_tensors(src, gen)
    name = "model.layers.0.self_attn.q_proj"
    tensors[f"{name}.input_global_scale"], tensors[f"{name}.weight_global_scale"] = inexact
    tensors[f"{name}.weight_packed"], tensors[f"{name}.weight_scale"] = conventions.quantize(
        src.get_submodule(name).weight.detach(), inexact[1], "compressed_tensors")
    write(tmp_path, tensors, config=ct_config())
    model = toy(gen)
    load_checkpoint(model, tmp_path)
    layer = model.get_submodule(name)
    assert torch.equal(layer.input_global_scale, inexact[0]) and torch.equal(layer.weight_global_scale, inexact[1])
    assert torch.equal(layer._input_global_scale, inexact[0].reshape(()))
    exact = 1 / (Fraction(float(inexact[0])) * Fraction(float(inexact[1])))
    assert float(layer._alpha) == nearest_f32(exact)
    # the nearest: no float32 number is closer
    a = float(layer._alpha)
    for n in (torch.nextafter(torch.tensor(a), torch.tensor(0.0)), torch.nextafter(torch.tensor(a), torch.tensor(1.0))):
        assert abs(Fraction(float(n)) - exact) >= abs(Fraction(a) - exact)
    check_layer(layer, torch.randn(6, H, generator=gen).to(BF16), fmt="compressed_tensors", w4a4=True)
    assert torch.equal(model.state_dict()[f"{name}.input_global_scale"], inexact[0])


def test_nearest_f32():
    for q in (Fraction(1, 3), Fraction(2, 3), Fraction(10, 7), Fraction(1, 2688), Fraction(3, 2) ** 40):
        f = nearest_f32(q)
        assert f == torch.tensor(float(q), dtype=torch.float64).float().item() or \
            abs(Fraction(f) - q) <= abs(Fraction(torch.tensor(float(q)).float().item()) - q)
    # a tie between two float32 neighbours goes to the even one
    lo = Fraction(1)
    hi = Fraction(torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)).item())
    assert nearest_f32((lo + hi) / 2) == 1.0
    with pytest.raises(ValueError):
        nearest_f32(Fraction(2) ** 200)


def test_excluded_patterns_and_ignore_regex(tmp_path, gen):
    src = toy(gen)
    # ModelOpt: shell patterns; compressed-tensors: names and "re:" regexes
    excl = ("lm_head", "model.layers.1.mlp*")
    write(tmp_path / "mo", modelopt_tensors(src, gen, exclude=excl_names(src, excl)), hf_quant=modelopt_config(
        exclude=excl))
    m = toy(gen)
    rep = load_checkpoint(m, tmp_path / "mo")
    assert all(type(m.model.layers[1].mlp.get_submodule(n)) is torch.nn.Linear for n in ("gate_proj", "up_proj",
                                                                                          "down_proj"))
    assert "model.layers.1.self_attn.q_proj" in rep.layers and "model.layers.1.mlp.up_proj" not in rep.layers
    ign = ["lm_head", "re:.*layers\\.0\\.self_attn\\.[kv]_proj$"]
    write(tmp_path / "ct", ct_tensors(src, gen, exclude=excl_names(src, ign)), config=ct_config(ignore=ign))
    m = toy(gen)
    rep = load_checkpoint(m, tmp_path / "ct")
    assert type(m.model.layers[0].self_attn.k_proj) is torch.nn.Linear
    assert torch.equal(m.model.layers[0].self_attn.v_proj.weight, src.model.layers[0].self_attn.v_proj.weight)
    assert type(m.model.layers[0].self_attn.q_proj) is CompressedTensorsNVFP4Linear
    assert type(m.model.layers[1].self_attn.k_proj) is CompressedTensorsNVFP4Linear


def excl_names(model, patterns):
    import fnmatch
    import re

    def hit(n, p):
        return re.match(p[3:], n) is not None if p.startswith("re:") else fnmatch.fnmatchcase(n, p)

    return tuple(n for n in linears(model, ()) if any(hit(n, p) for p in patterns))


def test_config_forms(tmp_path, gen):
    """ModelOpt's config.json alone (the converted form vLLM reads), MIXED_PRECISION, a
    compressed-tensors preset named by its group, and KV-cache scales (skipped, with a warning)."""
    from nvfp4_kernels.models.config import modelopt_quantization_config

    src = toy(gen)
    t = modelopt_tensors(src, gen)
    write(tmp_path / "converted", t, config={"model_type": "llama",
                                             "quantization_config": modelopt_quantization_config(modelopt_config())})
    cfg = read_quant_config(tmp_path / "converted")
    assert (cfg.format, cfg.quant_algo, cfg.algo, cfg.exclude) == ("modelopt", "NVFP4", "W4A4", ("lm_head",))
    assert len(load_checkpoint(toy(gen), tmp_path / "converted").layers) == 14

    names = sorted(linears(src))
    weight_only = names[::3]
    mixed = {"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
        "quantized_layers": {n: {"quant_algo": "W4A16_NVFP4" if n in weight_only else "NVFP4", "group_size": 16}
                             for n in names}}}
    t2 = dict(t)
    for n in weight_only:
        del t2[f"{n}.input_scale"]
    for n in names[:2]:  # KV-cache scales as ModelOpt writes them beside k_proj / v_proj
        t2[f"{n}.k_scale"] = torch.tensor(0.5)
    write(tmp_path / "mixed", t2, hf_quant=mixed)
    m = toy(gen)
    with pytest.warns(UserWarning, match="KV cache"):
        rep = load_checkpoint(m, tmp_path / "mixed")
    assert {n for n, mode in rep.layers.items() if mode == "w4a16"} == set(weight_only)
    assert rep.skipped == sorted(f"{n}.k_scale" for n in names[:2])
    assert type(m.lm_head) is torch.nn.Linear
    save_modelopt(m, tmp_path / "mixed_resaved")  # written back as MIXED_PRECISION
    assert read_quant_config(tmp_path / "mixed_resaved").quant_algo == "MIXED_PRECISION"
    m2 = toy(gen)
    assert load_checkpoint(m2, tmp_path / "mixed_resaved").layers == rep.layers
    probe = torch.randint(0, V, (2, 5), generator=gen)
    with torch.no_grad():
        assert torch.equal(m(probe), m2(probe))

    c = ct_config(w4a4=False)
    c["quantization_config"]["config_groups"] = {"NVFP4A16": ["Linear"]}
    write(tmp_path / "preset", ct_tensors(src, gen, w4a4=False), config=c)
    cfg = read_quant_config(tmp_path / "preset")
    assert (cfg.quant_algo, cfg.algo) == ("NVFP4A16", "W4A16")
    assert set(load_checkpoint(toy(gen), tmp_path / "preset").layers.values()) == {"w4a16"}


# ---- fused projections ---------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["modelopt", "compressed_tensors"])
def test_fused_qkv_from_slices(tmp_path, gen, fmt):
    """A model with qkv_proj, a checkpoint with q_proj, k_proj, v_proj: rows stacked into one layer
    where the slices share their scales, one layer per slice where they do not; exact either way."""
    src = toy(gen)
    make = modelopt_tensors if fmt == "modelopt" else ct_tensors
    tensors = make(src, gen)
    conf = dict(hf_quant=modelopt_config()) if fmt == "modelopt" else dict(config=ct_config())
    w2, x2 = ("weight_scale_2", "input_scale") if fmt == "modelopt" else ("weight_global_scale", "input_global_scale")
    conv = "modelopt" if fmt == "modelopt" else "compressed_tensors"
    # layer 0: the slices share their scales (requantized with the shared one, as the producers export them)
    p = "model.layers.0.self_attn"
    ws = [src.get_submodule(f"{p}.{s}").weight.detach() for s in ("q_proj", "k_proj", "v_proj")]
    shared = conventions.global_scale(torch.cat(ws), conv)
    for s, w in zip(("q_proj", "k_proj", "v_proj"), ws):
        codes, sf = conventions.quantize(w, shared, conv)
        tensors[f"{p}.{s}.weight" if fmt == "modelopt" else f"{p}.{s}.weight_packed"] = codes
        tensors[f"{p}.{s}.weight_scale"] = sf
        tensors[f"{p}.{s}.{w2}"] = shared.reshape(tensors[f"{p}.{s}.{w2}"].shape)
        tensors[f"{p}.{s}.{x2}"] = tensors[f"{p}.q_proj.{x2}"]
    write(tmp_path, tensors, **conf)
    model = toy(gen, fused_qkv=True)
    report = load_checkpoint(model, tmp_path)
    assert report.fused == {"model.layers.0.self_attn.qkv_proj": "merged", "model.layers.1.self_attn.qkv_proj": "split"}
    x = torch.randn(7, H, generator=gen).to(BF16)
    merged = model.model.layers[0].self_attn.qkv_proj
    assert isinstance(merged, NVFP4Linear) and merged.out_features == 2 * H
    codes_key = "weight" if fmt == "modelopt" else "weight_packed"
    assert same(merged.state_dict()[codes_key], torch.cat([tensors[f"{p}.{s}.{codes_key}"] for s in ("q_proj", "k_proj",
                                                                                                      "v_proj")]))
    check_layer(merged, x, fmt=fmt, w4a4=True)
    split = model.model.layers[1].self_attn.qkv_proj
    assert isinstance(split, NVFP4SplitLinear) and list(split.parts) == ["q_proj", "k_proj", "v_proj"]
    for s, part in split.parts.items():
        assert same(part.state_dict()[codes_key], tensors[f"model.layers.1.self_attn.{s}.{codes_key}"])
        check_layer(part, x, fmt=fmt, w4a4=True)
    assert torch.equal(split(x), torch.cat([part(x) for part in split.parts.values()], -1))
    # the fused model computes what the sliced one does
    sliced = toy(gen)
    load_checkpoint(sliced, tmp_path)
    ids = torch.randint(0, V, (2, 5), generator=gen)
    with torch.no_grad():
        assert torch.equal(model(ids), sliced(ids))


def test_fused_qkv_from_plain_slices(tmp_path, gen):
    """Excluded slices of a fused projection: their bf16 weights stacked into the plain fused layer."""
    src = toy(gen)
    excl = ("lm_head", "model.layers.0.self_attn.[qkv]_proj")
    write(tmp_path, modelopt_tensors(src, gen, exclude=excl_names(src, excl)), hf_quant=modelopt_config(exclude=excl))
    model = toy(gen, fused_qkv=True)
    report = load_checkpoint(model, tmp_path)
    fused = model.model.layers[0].self_attn.qkv_proj
    assert report.fused["model.layers.0.self_attn.qkv_proj"] == "plain" and type(fused) is torch.nn.Linear
    a = src.model.layers[0].self_attn
    assert torch.equal(fused.weight, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
    assert isinstance(model.model.layers[1].self_attn.qkv_proj, (NVFP4Linear, NVFP4SplitLinear))


# ---- MoE -------------------------------------------------------------------------------------------
def test_moe_experts_as_linears(tmp_path, gen):
    src = toy(gen, experts=3)
    write(tmp_path, modelopt_tensors(src, gen), hf_quant=modelopt_config())
    model = toy(gen, experts=3)
    report = load_checkpoint(model, tmp_path)
    assert "model.layers.1.mlp.experts.2.down_proj" in report.layers
    check_layer(model.model.layers[1].mlp.experts[2].gate_proj, torch.randn(3, H, generator=gen).to(BF16),
                fmt="modelopt", w4a4=True)


class FusedExperts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.zeros(3, H, 2 * I))
        self.down_proj = torch.nn.Parameter(torch.zeros(3, I, H))


def test_moe_fused_experts_not_yet(tmp_path, gen):
    src = toy(gen, experts=3)
    tensors = modelopt_tensors(src, gen)
    write(tmp_path / "per_expert", tensors, hf_quant=modelopt_config())
    model = toy(gen)
    for b in model.model.layers:  # experts as 3-D tensors, as some transformers MoE models hold them
        b.mlp = torch.nn.Module()
        b.mlp.experts = FusedExperts()
    snap = snapshot(model)
    with pytest.raises(NotImplementedError, match=r"NVFP4 MoE experts: not yet.*model\.layers\.0\.mlp\.experts\.0\."):
        load_checkpoint(model, tmp_path / "per_expert")
    assert unchanged(model, snap)
    # a 3-D quantized tensor in the checkpoint
    t3 = {k: v for k, v in tensors.items() if ".experts." not in k}
    t3["model.layers.0.mlp.experts.gate_up_proj"] = torch.zeros(3, 2 * I, H // 2, dtype=torch.uint8)
    t3["model.layers.0.mlp.experts.gate_up_proj_weight_scale"] = torch.zeros(3, 2 * I, H // 16).to(torch.float8_e4m3fn)
    write(tmp_path / "fused", t3, hf_quant=modelopt_config())
    with pytest.raises(NotImplementedError, match=r"model\.layers\.0\.mlp\.experts\.gate_up_proj"):
        load_checkpoint(model, tmp_path / "fused")
    assert unchanged(model, snap)


class Qwen3MoeExperts(torch.nn.Module):
    """transformers 5's fused experts, as its Qwen3MoeExperts holds them (the class name is what
    moe.unfuse_experts knows): gate and up stacked [E, 2I, H], down [E, H, I]; the same loop."""

    def __init__(self, n, gen):
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.randn(n, 2 * I, H, generator=gen) * 0.1)
        self.down_proj = torch.nn.Parameter(torch.randn(n, H, I, generator=gen) * 0.1)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x, top_k_index, top_k_weights):
        out = torch.zeros_like(x)
        for e in range(self.gate_up_proj.shape[0]):
            token, pos = torch.where(top_k_index == e)
            gate, up = torch.nn.functional.linear(x[token], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e]) * top_k_weights[token, pos, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out


def test_moe_transformers_5_fused_experts(tmp_path, gen):
    """A model whose experts are fused as transformers 5 holds them loads a per-expert checkpoint
    (the names every NVFP4 MoE checkpoint uses): unfuse_experts makes the module an ExpertList of
    per-expert layers (views of the fused weights) called as the fused module was, and the loader
    fills it with NVFP4 layers, from tensors under the block's older name too; a checkpoint that
    does not fit leaves the fused module in place."""
    from nvfp4_kernels.models.moe import ExpertList, refuse_experts, unfuse_experts

    fused = Qwen3MoeExperts(3, gen).to(BF16)
    holder = torch.nn.Module()
    holder.experts = fused
    x = torch.randn(9, H, generator=gen).to(BF16)
    idx = torch.stack([torch.randperm(3, generator=gen)[:2] for _ in range(9)])
    w = torch.rand(9, 2, generator=gen).to(BF16)
    want = fused(x, idx, w)
    unfused = unfuse_experts(holder)
    experts = holder.experts
    assert unfused == [("experts", fused)] and type(experts) is ExpertList and len(experts) == 3
    assert experts[2].up_proj.weight.data_ptr() == fused.gate_up_proj[2, I:].data_ptr()  # views, no copy
    assert torch.allclose(experts(x, idx, w).float(), want.float(), rtol=1e-2, atol=1e-3)
    refuse_experts(holder, unfused)
    assert holder.experts is fused

    src = toy(gen, experts=3)
    # under Mixtral's 4.x name of the block, which transformers 5 calls mlp
    renamed = {k.replace(".mlp.", ".block_sparse_moe."): v for k, v in modelopt_tensors(src, gen).items()}
    write(tmp_path / "ok", renamed, hf_quant=modelopt_config())
    model = toy(gen)
    for b in model.model.layers:
        b.mlp = torch.nn.Module()
        b.mlp.experts = Qwen3MoeExperts(3, gen).to(BF16)
    originals = [b.mlp.experts for b in model.model.layers]
    snap = snapshot(model)
    tensors = modelopt_tensors(src, gen)
    del tensors["model.layers.1.mlp.experts.2.down_proj.weight_scale"]
    write(tmp_path / "bad", tensors, hf_quant=modelopt_config())
    with pytest.raises(ValueError, match=r"experts\.2\.down_proj\.weight_scale"):
        load_checkpoint(model, tmp_path / "bad")
    assert [b.mlp.experts for b in model.model.layers] == originals and unchanged(model, snap)
    report = load_checkpoint(model, tmp_path / "ok")
    assert "model.layers.1.mlp.experts.2.down_proj" in report.layers
    assert all(type(b.mlp.experts) is ExpertList for b in model.model.layers)
    check_layer(model.model.layers[1].mlp.experts[2].gate_proj, torch.randn(3, H, generator=gen).to(BF16),
                fmt="modelopt", w4a4=True)


def test_moe_transformers_5_partly_quantized_experts(tmp_path, gen):
    """The config's exclusions name layers as the checkpoint does (Mixtral's block_sparse_moe, the
    model's mlp): an excluded expert loads as a plain layer beside NVFP4 ones; where a block's
    experts are all excluded, its fused module comes back, holding the checkpoint's weights; so
    does quantize_model's when it quantizes none of them."""
    from nvfp4_kernels.models.moe import ExpertList

    src = toy(gen, experts=3)
    layer0 = tuple(f"model.layers.0.mlp.experts.{e}.{p}" for e in range(3)
                   for p in ("gate_proj", "up_proj", "down_proj"))
    exclude = ("lm_head", "model.layers.1.mlp.experts.0.down_proj") + layer0
    old = {k.replace(".mlp.", ".block_sparse_moe."): v for k, v in modelopt_tensors(src, gen, exclude=exclude).items()}
    write(tmp_path, old, hf_quant=modelopt_config(exclude=[n.replace(".mlp.", ".block_sparse_moe.") for n in exclude]))
    model = toy(gen)
    fused0 = None
    for b in model.model.layers:
        b.mlp = torch.nn.Module()
        b.mlp.experts = Qwen3MoeExperts(3, gen).to(BF16)
        fused0 = fused0 or b.mlp.experts
    report = load_checkpoint(model, tmp_path)
    experts1 = model.model.layers[1].mlp.experts
    assert type(experts1) is ExpertList and "model.layers.1.mlp.experts.0.down_proj" not in report.layers
    assert type(experts1[0].down_proj) is torch.nn.Linear and type(experts1[0].up_proj) is NVFP4Linear
    assert model.model.layers[0].mlp.experts is fused0  # all plain: fused again, with the checkpoint's weights
    for e in range(3):
        gate, up = (old[f"model.layers.0.block_sparse_moe.experts.{e}.{p}.weight"] for p in ("gate_proj", "up_proj"))
        assert torch.equal(fused0.gate_up_proj[e], torch.cat([gate, up]))
        assert torch.equal(fused0.down_proj[e], old[f"model.layers.0.block_sparse_moe.experts.{e}.down_proj.weight"])
    # quantize_model leaving every expert alone: the same fused module, its own weights
    model = toy(gen)
    model.model.layers[0].mlp = torch.nn.Module()
    model.model.layers[0].mlp.experts = fused = Qwen3MoeExperts(3, gen).to(BF16)
    before = fused.gate_up_proj.detach().clone()
    quantize_model(model, mode="w4a16", exclude=("lm_head", "*experts*"))
    assert model.model.layers[0].mlp.experts is fused and torch.equal(fused.gate_up_proj, before)
    # saved per expert, as checkpoints hold experts, and loaded back fused
    save_modelopt(model, tmp_path / "saved")
    assert "model.layers.0.mlp.experts.2.up_proj.weight" in load_file(tmp_path / "saved" / "model.safetensors")
    assert model.model.layers[0].mlp.experts is fused
    again = toy(gen)
    again.model.layers[0].mlp = torch.nn.Module()
    again.model.layers[0].mlp.experts = fused2 = Qwen3MoeExperts(3, gen).to(BF16)
    load_checkpoint(again, tmp_path / "saved")
    assert again.model.layers[0].mlp.experts is fused2 and torch.equal(fused2.gate_up_proj, before)


# ---- malformed checkpoints -------------------------------------------------------------------------
Q = "model.layers.0.self_attn.q_proj"


def _mo_break(case, t, hq):
    if case == "missing weight_scale":
        del t[f"{Q}.weight_scale"]
        return f"{Q}.weight_scale"
    if case == "missing input_scale":
        del t[f"{Q}.input_scale"]
        return f"{Q}.input_scale"
    if case == "missing plain tensor":
        del t["model.norm.weight"]
        return "model.norm.weight"
    if case == "codes dtype":
        t[f"{Q}.weight"] = t[f"{Q}.weight"].view(torch.int8)
        return f"{Q}.weight.*dtype"
    if case == "scales dtype":
        t[f"{Q}.weight_scale"] = t[f"{Q}.weight_scale"].view(torch.uint8)
        return f"{Q}.weight_scale.*dtype"
    if case == "scalar dtype":
        t[f"{Q}.weight_scale_2"] = t[f"{Q}.weight_scale_2"].to(BF16)
        return f"{Q}.weight_scale_2.*dtype"
    if case == "codes shape":
        t[f"{Q}.weight"] = t[f"{Q}.weight"][:, :-1]
        return f"{Q}.weight.*shape"
    if case == "scale count":
        t[f"{Q}.weight_scale"] = t[f"{Q}.weight_scale"][:, :-1]
        return f"{Q}.weight_scale.*K/16"
    if case == "scalar shape":
        t[f"{Q}.input_scale"] = torch.ones(2) / 2688
        return f"{Q}.input_scale.*shape"
    if case == "scalar value":
        t[f"{Q}.weight_scale_2"] = torch.tensor(-1.0)
        return f"{Q}.weight_scale_2"
    if case == "plain shape":
        t["model.norm.weight"] = t["model.norm.weight"][:-1]
        return "model.norm.weight.*shape"
    if case == "unexpected quantized tensor":
        t["lm_head.weight_scale"] = torch.ones(V, H // 16).to(torch.float8_e4m3fn)
        return "lm_head.weight_scale"
    if case == "unexpected scale in a quantized layer":
        t[f"{Q}.pre_quant_scale"] = torch.ones(H, dtype=BF16)
        return f"{Q}.pre_quant_scale"
    if case == "unexpected tensor":
        t["model.extra.weight"] = torch.ones(3)
        return "model.extra.weight"
    if case == "unknown quant_algo":
        hq["quantization"]["quant_algo"] = "FP8"
        return "quant_algo 'FP8'"
    if case == "group size":
        hq["quantization"]["group_size"] = 32
        return "group_size 32"
    raise AssertionError(case)


MO_CASES = ["missing weight_scale", "missing input_scale", "missing plain tensor", "codes dtype", "scales dtype",
            "scalar dtype", "codes shape", "scale count", "scalar shape", "scalar value", "plain shape",
            "unexpected quantized tensor", "unexpected scale in a quantized layer", "unexpected tensor",
            "unknown quant_algo", "group size"]


@pytest.mark.parametrize("case", MO_CASES)
def test_malformed_modelopt(tmp_path, gen, case):
    src = toy(gen)
    t, hq = modelopt_tensors(src, gen), modelopt_config()
    match = _mo_break(case, t, hq)
    write(tmp_path, t, hf_quant=hq)
    model = toy(gen)
    snap = snapshot(model)
    with pytest.raises(ValueError, match=match):
        load_checkpoint(model, tmp_path)
    assert unchanged(model, snap)


def _ct_break(case, t, c):
    qc = c["quantization_config"]
    if case == "missing weight_global_scale":
        del t[f"{Q}.weight_global_scale"]
        return f"{Q}.weight_global_scale"
    if case == "ModelOpt's name for the codes":
        t[f"{Q}.weight"] = t.pop(f"{Q}.weight_packed")
        return f"{Q}.weight_packed"
    if case == "scale count":
        t[f"{Q}.weight_scale"] = torch.cat([t[f"{Q}.weight_scale"]] * 2, 1)
        return f"{Q}.weight_scale.*K/16"
    if case == "unknown format":
        qc["format"] = "float-quantized"
        return "format 'float-quantized'"
    if case == "unknown method":
        qc["quant_method"] = "gptq"
        return "quant_method 'gptq'"
    if case == "int4 weights":
        qc["config_groups"]["group_0"]["weights"]["type"] = "int"
        return "weights.type"
    if case == "mode w4a4 on weight-only":
        del qc["config_groups"]["group_0"]["input_activations"]
        for k in [k for k in t if k.endswith("input_global_scale")]:
            del t[k]
        return "mode='w4a4'"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing weight_global_scale", "ModelOpt's name for the codes", "scale count",
                                  "unknown format", "unknown method", "int4 weights", "mode w4a4 on weight-only"])
def test_malformed_compressed_tensors(tmp_path, gen, case):
    src = toy(gen)
    t, c = ct_tensors(src, gen), ct_config()
    match = _ct_break(case, t, c)
    write(tmp_path, t, config=c)
    model = toy(gen)
    snap = snapshot(model)
    with pytest.raises(ValueError, match=match):
        load_checkpoint(model, tmp_path, mode="w4a4" if case == "mode w4a4 on weight-only" else None)
    assert unchanged(model, snap)


def test_not_a_checkpoint(tmp_path, gen):
    model = toy(gen)
    with pytest.raises(ValueError, match="no quantization config"):
        load_checkpoint(model, tmp_path)
    write(tmp_path, modelopt_tensors(toy(gen), gen), hf_quant=modelopt_config())
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.write(b"not safetensors")
    with pytest.raises(ValueError, match="model.safetensors: not a readable safetensors file"):
        load_checkpoint(model, tmp_path)
    with pytest.raises(ValueError, match="mode"):
        load_checkpoint(model, tmp_path, mode="w8a8")


def test_quantize_model_errors(gen):
    model = toy(gen)
    snap = snapshot(model)
    with pytest.raises(ValueError, match="calibration"):
        quantize_model(model, mode="w4a4")
    with pytest.raises(ValueError, match="no batches"):
        quantize_model(model, mode="w4a4", calibration=[])
    model.model.unused = torch.nn.Linear(H, H).to(BF16)  # never called by the forward
    snap = snapshot(model)
    with pytest.raises(ValueError, match="calibration never ran model.unused"):
        quantize_model(model, mode="w4a4", calibration=[torch.zeros(1, 3, dtype=torch.long)])
    with pytest.raises(ValueError, match="not a multiple of 16"):
        bad = toy(gen)
        bad.model.layers[0].mlp.down_proj = torch.nn.Linear(I - 8, H).to(BF16)
        quantize_model(bad, mode="w4a16")
    assert unchanged(model, snap)


# ---- our exporter, round trip ----------------------------------------------------------------------
def test_quantize_model_save_load_toy(tmp_path, gen):
    """Without transformers: quantize (shared scales for q/k/v and gate/up), save, load, same bits."""
    model = toy(gen, bias=True)
    ids = [torch.randint(0, V, (2, 9), generator=gen) for _ in range(2)]
    q = quantize_model(copy.deepcopy(model), mode="w4a4", calibration=ids)
    a = q.model.layers[0].self_attn
    assert torch.equal(a.q_proj.weight_scale_2, a.k_proj.weight_scale_2)
    assert torch.equal(a.q_proj.input_scale, a.v_proj.input_scale)
    # the layers reading the block's normed input (q, k, v, gate, up) share the largest of their
    # scales, o_proj keeps its own (bf16 weights' amaxes can coincide, so the values themselves are
    # compared, not their difference)
    b = model.model.layers[0]
    readers = [b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj, b.mlp.gate_proj, b.mlp.up_proj]
    shared = torch.stack([conventions.global_scale(m.weight.detach(), "modelopt") for m in readers]).max()
    assert torch.equal(a.q_proj.weight_scale_2, shared)
    own = conventions.global_scale(b.self_attn.o_proj.weight.detach(), "modelopt")
    assert torch.equal(a.o_proj.weight_scale_2, own)
    save_modelopt(q, tmp_path, max_shard_size="20KB")
    assert os.path.exists(tmp_path / "model.safetensors.index.json")
    fresh = toy(gen, bias=True)
    load_checkpoint(fresh, tmp_path)
    probe = torch.randint(0, V, (2, 11), generator=gen)
    with torch.no_grad():
        assert torch.equal(fresh(probe), q(probe))


def test_roundtrip_llama(tmp_path, gen):
    transformers = pytest.importorskip("transformers", reason="the Llama round trip needs transformers")
    from nvfp4_kernels.models import hf

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
    torch.manual_seed(int(torch.randint(0, 2**31, (), generator=gen)))
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=BF16).eval()
    calib = [torch.randint(0, 256, (2, 16), generator=gen) for _ in range(2)]
    q = quantize_model(copy.deepcopy(model), mode="w4a4", calibration=calib)
    save_modelopt(q, tmp_path)
    assert read_quant_config(tmp_path).quant_algo == "NVFP4"
    loaded, report = hf.from_pretrained(tmp_path, return_report=True)
    assert len(report.layers) == 14 and type(loaded.lm_head) is torch.nn.Linear
    ids = torch.randint(0, 256, (2, 12), generator=gen)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, q(ids).logits)
    # each layer against the reference, on the input it gets in the model
    seen = {}

    def keep(name):
        def hook(mod, args, out):
            seen.setdefault(name, (args[0], out))
        return hook

    hooks = [m.register_forward_hook(keep(n)) for n, m in loaded.named_modules() if isinstance(m, NVFP4Linear)]
    with torch.no_grad():
        loaded(ids)
    for h in hooks:
        h.remove()
    for n, (x, out) in seen.items():
        layer = loaded.get_submodule(n)
        xq, sx = reference.quantize(x, layer._input_global_scale)
        want = reference.gemm(xq, layer.weight, sx, layer.weight_scale, layer._alpha, out_dtype=BF16)
        assert_matches(out, want, n)
    # a plain model loaded with load_checkpoint: the same tensors
    fresh = transformers.AutoModelForCausalLM.from_config(cfg, dtype=BF16).eval()
    load_checkpoint(fresh, tmp_path)
    for k, v in q.state_dict().items():
        assert same(fresh.state_dict()[k], v), k
    out = loaded.generate(ids[:1, :4], max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 10)
    w4a16 = hf.from_pretrained(tmp_path, mode="w4a16")
    with torch.no_grad():
        ref = model(ids).logits.float()
        assert ((w4a16(ids).logits.float() - ref).abs().max() / ref.abs().max()) < 0.3


# ---- the producers' own code ---------------------------------------------------------------------
def _tiny_llama(transformers, gen):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,
                                   architectures=["LlamaForCausalLM"])
    torch.manual_seed(int(torch.randint(0, 2**31, (), generator=gen)))
    return cfg, transformers.AutoModelForCausalLM.from_config(cfg, dtype=BF16).eval()


def test_modelopt_export_hf_checkpoint_loads(tmp_path, gen):
    """ModelOpt's own export of a tiny Llama loads, and quantize_model + save_modelopt write the same
    tensors byte for byte (calibrated on the same batches)."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    mtq = pytest.importorskip("modelopt.torch.quantization", reason="needs nvidia-modelopt")
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.export.convert_hf_config import convert_hf_quant_config_format
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    for algo, mode in (("NVFP4_DEFAULT_CFG", "w4a4"), ("W4A16_NVFP4_CFG", "w4a16")):
        cfg, model = _tiny_llama(transformers, gen)
        ours = copy.deepcopy(model)
        calib = [torch.randint(0, 256, (2, 16), generator=gen) for _ in range(2)]

        def loop(m):
            for b in calib:
                m(b)

        mtq.quantize(model, getattr(mtq, algo), loop)
        export_hf_checkpoint(model, export_dir=tmp_path / f"modelopt_{mode}")
        theirs = load_file(tmp_path / f"modelopt_{mode}" / "model.safetensors")

        loaded = transformers.AutoModelForCausalLM.from_config(cfg, dtype=BF16).eval()
        report = load_checkpoint(loaded, tmp_path / f"modelopt_{mode}")
        assert set(report.layers.values()) == {mode} and len(report.layers) == 14
        for k, v in loaded.state_dict().items():
            assert same(v.reshape(theirs[k].shape), theirs[k]), k

        quantize_model(ours, mode=mode, calibration=calib if mode == "w4a4" else None)
        save_modelopt(ours, tmp_path / f"ours_{mode}")
        written = load_file(tmp_path / f"ours_{mode}" / "model.safetensors")
        assert written.keys() == theirs.keys()
        for k in theirs:
            assert same(written[k], theirs[k]), k
        ids = torch.randint(0, 256, (2, 10), generator=gen)
        with torch.no_grad():
            assert torch.equal(loaded(ids).logits, ours(ids).logits)
        # ModelOpt's config converter gives our config.json's quantization_config
        with open(tmp_path / f"ours_{mode}" / "hf_quant_config.json") as f:
            hq = json.load(f)
        with open(tmp_path / f"ours_{mode}" / "config.json") as f:
            assert json.load(f)["quantization_config"] == convert_hf_quant_config_format(hq)
        # ModelOpt's dequantization of our tensors is ours (up to its two float32 roundings)
        p = "model.layers.1.mlp.down_proj"
        qt = NVFP4QTensor((64, 128), BF16, written[f"{p}.weight"])  # down_proj: [hidden, intermediate]
        deq = qt.dequantize(torch.float32, scale=written[f"{p}.weight_scale"],
                            double_scale=written[f"{p}.weight_scale_2"], block_sizes={-1: 16})
        mine = reference.dequantize(written[f"{p}.weight"], written[f"{p}.weight_scale"]) * \
            written[f"{p}.weight_scale_2"].double()
        assert torch.allclose(deq.double(), mine, rtol=2**-22, atol=0)


def test_compressed_tensors_compressor_loads(tmp_path, gen):
    """A checkpoint compressed and saved by compressed-tensors' own ModelCompressor (NVFP4 and
    NVFP4A16 presets, scales from its own generate_gparam and calculate_qparams) loads: the codes
    and scales as written, the weights as its decompressor gives them, the activations' global
    scale a multiplier."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    pytest.importorskip("compressed_tensors", reason="needs compressed-tensors")
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationScheme, QuantizationStatus,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize
    from compressed_tensors.quantization.quant_scheme import NVFP4, NVFP4A16
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    for preset, mode in ((NVFP4, "w4a4"), (NVFP4A16, "w4a16")):
        cfg, model = _tiny_llama(transformers, gen)
        calib = torch.randint(0, 256, (2, 16), generator=gen)
        seen = {}

        def amax(name):
            def hook(mod, args):
                seen.setdefault(name, args[0].abs().amax())
            return hook

        hooks = [m.register_forward_pre_hook(amax(n)) for n, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and n != "lm_head"]
        with torch.no_grad():
            model(calib)
        for h in hooks:
            h.remove()
        qc = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], **preset)},
                                ignore=["lm_head"], quantization_status=QuantizationStatus.FROZEN)
        apply_quantization_config(model, qc, show_progress=False)
        for n, m in model.named_modules():
            if not hasattr(m, "quantization_scheme"):
                continue
            w = m.weight.data
            g = generate_gparam(w.amin(), w.amax())
            blocks = w.unflatten(-1, (-1, 16))
            s, _ = calculate_qparams(blocks.amin(-1), blocks.amax(-1), m.quantization_scheme.weights, global_scale=g)
            m.weight_global_scale.data.copy_(g)
            m.weight_scale.data.copy_(s)
            if mode == "w4a4":  # its calibrated value, rounded down to a power of two (see below)
                gx = generate_gparam(-seen[n], seen[n])
                m.input_global_scale.data.copy_(torch.exp2(torch.floor(torch.log2(gx))))
        comp = ModelCompressor.from_pretrained_model(model, "nvfp4-pack-quantized")
        comp.compress_model(model)
        folder = tmp_path / mode
        model.save_pretrained(folder)
        comp.update_config(folder)
        written = load_file(folder / "model.safetensors")

        cfg_read = read_quant_config(folder)
        assert (cfg_read.format, cfg_read.algo) == ("compressed-tensors", mode.upper())
        loaded = transformers.AutoModelForCausalLM.from_config(cfg, dtype=BF16).eval()
        report = load_checkpoint(loaded, folder)
        assert set(report.layers.values()) == {mode} and len(report.layers) == 14
        for k, v in loaded.state_dict().items():
            assert same(v.reshape(written[k].shape), written[k]), k

        comp.decompress_model(model)  # compressed-tensors' own decompression: its weights, bf16
        for n in report.layers:
            ours, theirs = loaded.get_submodule(n), model.get_submodule(n)
            w = reference.dequantize(ours.weight_codes(), ours.weight_scales()) / ours.weight_global_scale.double()
            assert_matches(w.to(BF16), theirs.weight.data, f"{n} weights", atol=0)
            if mode == "w4a4":
                # activations exactly representable with its global scale (a power of two): its
                # quantizer returns them unchanged, and our W4A4 layer multiplies them exactly
                g = ours.input_global_scale.reshape(())
                v = torch.tensor(reference.E2M1_VALUES)[torch.randint(0, 16, (4, ours.in_features), generator=gen)]
                v[:, ::16] = 6.0
                s = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0])[
                    torch.randint(0, 10, (4, ours.in_features // 16), generator=gen)]
                x = (v * s.repeat_interleave(16, -1) / g).to(BF16)
                acts = theirs.quantization_scheme.input_activations
                assert torch.equal(forward_quantize(theirs, x, "input", acts), x)
                want = x.double() @ w.T
                # (atol: the fp32 sum's rounding where the products cancel)
                assert_matches(ours(x), want.to(BF16), f"{n} W4A4 on exact activations",
                               atol=2**-16 * float((x.double().abs() @ w.abs().T).max()))
        # the whole model, weight-only, against compressed-tensors' decompressed one with its activation
        # quantization switched off
        for m in model.modules():
            if hasattr(m, "quantization_scheme"):
                m.quantization_enabled = False
        w16 = transformers.AutoModelForCausalLM.from_config(cfg, dtype=BF16).eval()
        load_checkpoint(w16, folder, mode="w4a16")
        w16.model.rotary_emb.inv_freq = model.model.rotary_emb.inv_freq.clone()
        ids = torch.randint(0, 256, (2, 10), generator=gen)
        with torch.no_grad():
            a, b = w16(ids).logits.float(), model(ids).logits.float()
        assert ((a - b).abs().max() / b.abs().max()) < 0.02  # its bf16 weights: ~0.007


# ---- the example -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_example_tiny(dtype):
    """examples/nvfp4_llama.py --tiny: both modes' logits within 1e-3 of max|logit| of the
    fake-quantized reference (the kernels' fp32 summation order is all that differs), and each
    layer on its own input within one unit in the last place of its largest output."""
    pytest.importorskip("transformers", reason="the example builds a transformers Llama")
    r = run_example("nvfp4_llama.py", "--tiny", "--dtype", dtype)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {ln.split(":", 1)[0]: ln for ln in r.stdout.splitlines()}
    for mode in ("w4a4", "w4a16"):
        assert mode in lines, r.stdout
        err = float(lines[mode].split("max error ")[1].split(" ")[0])
        per_layer = float(lines[mode].split("own input: ")[1].split(" ")[0])
        ulps = float(lines[mode].split("max|out|, ")[1].split(" ulp")[0])
        twin = float(lines[mode].split("fp32-summing twin: ")[1].split(";")[0])
        assert err <= 1e-3 and twin <= 1e-3 and per_layer < 1e-2 and ulps <= 1.0, lines[mode]
    if torch.cuda.is_available():
        assert "decode tokens/s at batch 1 (one token's forward, CUDA graph)" in r.stdout, r.stdout
