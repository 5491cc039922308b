"""Mixture-of-experts blocks of transformers models as one NVFP4MoE each.

A transformers sparse MoE block (Qwen3-MoE's ``Qwen3MoeSparseMoeBlock``, Mixtral's
``MixtralSparseMoeBlock``) loops over its experts in Python and finds which tokens chose each
on the host: a host sync per block, one small launch per expert and projection. Once
``load_checkpoint`` has made every expert's projections NVFP4Linear, ``swap_moe_blocks(model)``
replaces each such block by an ``NVFP4MoEBlock``: the same router (its nn.Linear), the experts
stacked as one ``nn.NVFP4MoE`` (two grouped launches, no host sync, capturable), the same
``(hidden_states, router_logits)`` out. Routing as the block's: softmax top-k, renormalised where
it renormalises (Mixtral always, Qwen3-MoE by its norm_topk_prob). The numbers differ from the
block's loop in rounding only: the routing weights and the combine stay float32, silu(g) * u is
rounded once. Blocks of other classes, or whose experts are not all NVFP4Linear, stay as they are.
For inference: ``save_modelopt`` writes per-expert layers, so save before swapping.

transformers 5 keeps a block's experts fused (``Qwen3MoeExperts``, ``MixtralExperts``: 3-D
``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I] parameters), while checkpoints name them
per expert (``experts.{e}.gate_proj.weight``), as 4.x modelled them. ``unfuse_experts`` turns such
a module into an ``ExpertList`` of per-expert nn.Linear modules (views of the fused parameters),
named as the checkpoint names them and called as the fused module was: ``load_checkpoint`` and
``quantize_model`` call it first, so both versions quantize, save and load alike.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F

from ..nn import NVFP4Linear, NVFP4MoE

# block class -> (an expert's gate, up and down projections, renormalise: True / None = the block's
# or its router's norm_topk_prob)
BLOCKS = {"Qwen3MoeSparseMoeBlock": (("gate_proj", "up_proj", "down_proj"), None),
          "MixtralSparseMoeBlock": (("w1", "w3", "w2"), True)}
# transformers 5's fused experts class -> its experts' projection names in checkpoints
FUSED_EXPERTS = {"Qwen3MoeExperts": ("gate_proj", "up_proj", "down_proj"), "MixtralExperts": ("w1", "w3", "w2")}


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


def refuse_experts(model: torch.nn.Module, unfused: List[Tuple[str, torch.nn.Module]]) -> None:
    """Undo unfuse_experts: the fused modules back in their places."""
    for name, mod in unfused:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, mod)


class NVFP4MoEBlock(torch.nn.Module):
    """A sparse MoE block: router ``gate`` (its ``weight`` [E, H]: an nn.Linear in transformers 4.x,
    a top-k router module in 5), ``experts`` (NVFP4MoE). forward(hidden_states [..., H]) -> as the
    block it replaces: (out [..., H], router_logits [tokens, E]) where ``returns_logits`` (4.x), out
    alone where not (5)."""

    def __init__(self, gate: torch.nn.Module, experts: NVFP4MoE, returns_logits: bool = True):
        super().__init__()
        self.gate, self.experts, self.returns_logits = gate, experts, returns_logits

    def forward(self, hidden_states: torch.Tensor):
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        router_logits = F.linear(x, self.gate.weight, getattr(self.gate, "bias", None))
        out = self.experts(x, router_logits).reshape(hidden_states.shape)
        return (out, router_logits) if self.returns_logits else out


def swap_moe_blocks(model: torch.nn.Module) -> List[str]:
    """Replace the model's known sparse MoE blocks whose experts are NVFP4Linear by NVFP4MoEBlock, in
    place; returns their names."""
    swapped = []
    for name, block in list(model.named_modules()):
        spec = BLOCKS.get(type(block).__name__)
        experts = getattr(block, "experts", None)
        if spec is None or not isinstance(experts, torch.nn.ModuleList) or not len(experts):
            continue
        projections, renormalise = spec
        layers = [[getattr(ex, p, None) for ex in experts] for p in projections]
        if not all(type(layer) is NVFP4Linear and layer.bias is None for column in layers for layer in column):
            continue
        router = block.gate
        if renormalise is None:
            renormalise = getattr(block, "norm_topk_prob", getattr(router, "norm_topk_prob", True))
        top_k = getattr(block, "top_k", None) or router.top_k
        moe = NVFP4MoE.from_linears(*layers, top_k, norm_topk_prob=bool(renormalise))
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf,
                NVFP4MoEBlock(router, moe, returns_logits=not isinstance(experts, ExpertList)))
        swapped.append(name)
    return swapped
