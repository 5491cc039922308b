"""Mixture-of-experts blocks of transformers models as one NVFP4MoE each.

A transformers sparse MoE block (Qwen3-MoE's ``Qwen3MoeSparseMoeBlock``, Mixtral's
``MixtralSparseMoeBlock``, DeepSeek-V3's ``DeepseekV3MoE``) loops over its experts in Python and
finds which tokens chose each on the host: a host sync per block, one small launch per expert and
projection. Once ``load_checkpoint`` has made every expert's projections NVFP4Linear,
``swap_moe_blocks(model)`` replaces each such block by an ``NVFP4MoEBlock``: the same router, the
experts stacked as one ``nn.NVFP4MoE`` (two grouped launches, no host sync, capturable), the
block's shared experts as they are, the same out. Routing as the block's: softmax top-k,
renormalised where it renormalises (Mixtral always, Qwen3-MoE by its norm_topk_prob); DeepSeek-V3's
sigmoid over fp32 logits, its correction bias, groups and scaling factor (experts of the groups
not kept masked with -inf, as DeepSeek's code and transformers 5 do; transformers 4.x masks them
with 0, which picks differently only where corrected scores fall below 0). The numbers differ from
the block's loop in rounding only: the routing weights and the combine stay float32, silu(g) * u is
rounded once. Blocks of other classes, or whose experts are not all NVFP4Linear (or all
compressed-tensors' CompressedTensorsNVFP4Linear, whose exact scales the MoE keeps), stay as they are.
For inference: ``save_modelopt`` writes per-expert layers, so save before swapping.

transformers 5 keeps a block's experts fused (``Qwen3MoeExperts`` and the like: 3-D
``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I] parameters), while checkpoints name them
per expert (``experts.{e}.gate_proj.weight``), as 4.x modelled them. ``unfuse_experts`` turns such
a module into an ``ExpertList`` of per-expert nn.Linear modules (views of the fused parameters),
named as the checkpoint names them and called as the fused module was: ``load_checkpoint`` and
``quantize_model`` call it first, so both versions quantize, save and load alike.
"""

from __future__ import annotations

import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from ..nn import NVFP4Linear, NVFP4MoE
from .layers import CompressedTensorsNVFP4Linear

# block class -> (an expert's gate, up and down projections, its routing: "softmax" (renormalised by
# the block's or router's norm_topk_prob), "softmax, renormalised", "deepseek" (the router's
# grouped sigmoid with a correction bias, fp32 logits; the block adds its shared experts))
BLOCKS = {"Qwen3MoeSparseMoeBlock": (("gate_proj", "up_proj", "down_proj"), "softmax"),
          "MixtralSparseMoeBlock": (("w1", "w3", "w2"), "softmax, renormalised"),
          "DeepseekV3MoE": (("gate_proj", "up_proj", "down_proj"), "deepseek")}
# transformers 5's fused experts class -> its experts' projection names in checkpoints
FUSED_EXPERTS = {"Qwen3MoeExperts": ("gate_proj", "up_proj", "down_proj"), "MixtralExperts": ("w1", "w3", "w2"),
                 "DeepseekV3Experts": ("gate_proj", "up_proj", "down_proj")}


class Expert(torch.nn.Module):
    """One expert of an ExpertList: three projections under the checkpoint's names;
    forward(x) = down(act(gate(x)) * up(x))."""

    def __init__(self, names: Tuple[str, str, str], gate, up, down, act_fn):
        super().__init__()
        self.names, self.act_fn = names, act_fn
        for name, layer in zip(names, (gate, up, down)):
            setattr(self, name, layer)

    def forward(self, x):
        gate, up, down = (getattr(self, n) for n in self.names)
        return down(self.act_fn(gate(x)) * up(x))


class ExpertList(torch.nn.ModuleList):
    """A transformers 5 fused experts module as per-expert modules, called as it was:
    forward(hidden_states [T, H], top_k_index [T, k], top_k_weights [T, k]) -> [T, H], each token's
    experts' outputs times its weights, summed in the input's dtype (the fused module's loop)."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e, expert in enumerate(self):
            token, pos = torch.where(top_k_index == e)
            if token.numel():
                y = expert(hidden_states[token]) * top_k_weights[token, pos, None]
                out.index_add_(0, token, y.to(out.dtype))
        return out


def _linear(weight: torch.Tensor) -> torch.nn.Linear:
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta", dtype=weight.dtype)
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    return layer


def unfuse_experts(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """Replace each transformers 5 fused experts module (FUSED_EXPERTS) by an ExpertList, in place;
    the per-expert weights are views of the fused ones (meta stays meta). Returns [(name, the fused
    module)], which ``refuse_experts`` puts back."""
    done = []
    for name, mod in list(model.named_modules()):
        names = FUSED_EXPERTS.get(type(mod).__name__)
        w13, w2 = getattr(mod, "gate_up_proj", None), getattr(mod, "down_proj", None)
        if names is None or not isinstance(w13, torch.Tensor) or not isinstance(w2, torch.Tensor) or w13.dim() != 3:
            continue
        i = w13.shape[1] // 2
        experts = ExpertList(Expert(names, _linear(w13.data[e, :i]), _linear(w13.data[e, i:]), _linear(w2.data[e]),
                                    mod.act_fn) for e in range(w13.shape[0]))
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, experts)
        done.append((name, mod))
    return done


def refuse_experts(model: torch.nn.Module, unfused: List[Tuple[str, torch.nn.Module]], *,
                   plain_only: bool = False) -> None:
    """Undo unfuse_experts: the fused modules back in their places. plain_only (after a load or a
    quantization): only where the ExpertList holds no NVFP4 layer, its experts' weights (new ones,
    or still the views) stacked back into the fused module's parameters."""
    for name, mod in unfused:
        if plain_only:
            experts = model.get_submodule(name)
            if not isinstance(experts, ExpertList) or any(isinstance(m, NVFP4Linear) for m in experts.modules()):
                continue
            with torch.no_grad():
                gate, up, down = ([getattr(ex, n).weight for ex in experts] for n in experts[0].names)
                views = all(w.untyped_storage().data_ptr() == mod.gate_up_proj.untyped_storage().data_ptr()
                            for w in gate + up) and all(
                    w.untyped_storage().data_ptr() == mod.down_proj.untyped_storage().data_ptr() for w in down)
                if not views:  # loaded anew: stack them
                    grad = mod.gate_up_proj.requires_grad and gate[0].requires_grad
                    mod.gate_up_proj = torch.nn.Parameter(torch.stack([torch.cat(gu) for gu in zip(gate, up)]),
                                                          requires_grad=grad)
                    mod.down_proj = torch.nn.Parameter(torch.stack(down), requires_grad=grad)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, mod)


ROUTER_CALLS = ("logits", "first", "fp32")


class NVFP4MoEBlock(torch.nn.Module):
    """A sparse MoE block: router ``gate``, ``experts`` (NVFP4MoE), ``shared_experts`` (None, or a
    module added to every token's output, as DeepSeek-V3's). forward(hidden_states [..., H]) -> as
    the block it replaces: (out [..., H], router_logits [tokens, E]) where ``returns_logits``, out
    alone where not. ``router_call``, how the logits come from the router: "logits", gate(x) (an
    nn.Linear, transformers 4.x); "first", gate(x) (transformers 5's routers, which return the
    logits, the top-k weights and expert ids: the experts take the latter as they are, so routing
    runs once, and calling the router keeps its hooks, which record the logits for the auxiliary loss);
    "fp32", x and the router's weight in float32 (DeepSeek-V3's router in transformers 4.x, which
    returns no logits). (transformers 4.x records router logits by the block's class, which this is
    not: there output_router_logits yields no auxiliary loss, a training matter.)"""

    def __init__(self, gate: torch.nn.Module, experts: NVFP4MoE, returns_logits: bool = True,
                 shared_experts: Optional[torch.nn.Module] = None, router_call: str = "logits"):
        super().__init__()
        if router_call not in ROUTER_CALLS:
            raise ValueError(f"NVFP4MoEBlock: router_call must be one of {ROUTER_CALLS}, got {router_call!r}")
        self.gate, self.experts, self.shared_experts = gate, experts, shared_experts
        self.returns_logits, self.router_call = returns_logits, router_call

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.router_call == "fp32":
            return F.linear(x.float(), self.gate.weight.float())
        return self.gate(x)[0] if self.router_call == "first" else self.gate(x)

    def forward(self, hidden_states: torch.Tensor):
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        routed = self.gate(x) if self.router_call == "first" else None
        if isinstance(routed, tuple) and len(routed) == 3:  # transformers 5: logits, top-k weights and ids
            logits = routed[0]
            out = self.experts(x, topk=routed[1:])  # routed once, as the block this replaces uses them
        else:
            logits = routed[0] if routed is not None else self.router_logits(x)
            out = self.experts(x, logits)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        out = out.reshape(hidden_states.shape)
        return (out, logits) if self.returns_logits else out


def _routing(kind: str, block: torch.nn.Module, router: torch.nn.Module) -> dict:
    """NVFP4MoE's routing arguments for a block of BLOCKS."""
    if kind == "deepseek":
        return dict(routing="sigmoid", norm_topk_prob=bool(router.norm_topk_prob), topk_group=int(router.topk_group),
                    n_group=int(getattr(router, "n_group", getattr(router, "num_group", 1))),
                    routed_scaling_factor=float(router.routed_scaling_factor), correction_bias=True)
    norm = True if kind == "softmax, renormalised" else \
        getattr(block, "norm_topk_prob", getattr(router, "norm_topk_prob", True))
    return dict(norm_topk_prob=bool(norm))


def swap_moe_blocks(model: torch.nn.Module) -> List[str]:
    """Replace the model's known sparse MoE blocks whose experts are NVFP4Linear by NVFP4MoEBlock, in
    place; returns their names."""
    swapped = []
    for name, block in list(model.named_modules()):
        spec = BLOCKS.get(type(block).__name__)
        experts = getattr(block, "experts", None)
        if spec is None or not isinstance(experts, torch.nn.ModuleList) or not len(experts):
            continue
        projections, kind = spec
        layers = [[getattr(ex, p, None) for ex in experts] for p in projections]
        kinds = {type(layer) for column in layers for layer in column}
        if len(kinds) != 1 or not kinds <= {NVFP4Linear, CompressedTensorsNVFP4Linear} or \
                any(layer.bias is not None for column in layers for layer in column):
            continue
        router = block.gate
        top_k = getattr(block, "top_k", None) or router.top_k
        try:
            moe = NVFP4MoE.from_linears(*layers, top_k, **_routing(kind, block, router))
        except ValueError as e:  # say, an expert's gate and up quantize their input differently
            warnings.warn(f"swap_moe_blocks: {name} stays as it is: {e}", stacklevel=2)
            continue
        if kind == "deepseek":
            moe.e_score_correction_bias.copy_(router.e_score_correction_bias)
        # transformers 4.x's Qwen3-MoE and Mixtral blocks return (out, logits); 5's and DeepSeek's out
        v5 = isinstance(experts, ExpertList)
        returns_logits = kind != "deepseek" and not v5
        call = "first" if v5 else "fp32" if kind == "deepseek" else "logits"
        new = NVFP4MoEBlock(router, moe, returns_logits, getattr(block, "shared_experts", None), call)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, new)
        swapped.append(name)
    return swapped
