"""Mixture-of-experts blocks of transformers models as one NVFP4MoE each.

A transformers 4.x sparse MoE block (Qwen3-MoE's ``Qwen3MoeSparseMoeBlock``, Mixtral's
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
"""

from __future__ import annotations

from typing import List

import torch

from ..nn import NVFP4Linear, NVFP4MoE

# block class -> (an expert's gate, up and down projections, renormalise: True / None = the block's
# norm_topk_prob)
BLOCKS = {"Qwen3MoeSparseMoeBlock": (("gate_proj", "up_proj", "down_proj"), None),
          "MixtralSparseMoeBlock": (("w1", "w3", "w2"), True)}


class NVFP4MoEBlock(torch.nn.Module):
    """A sparse MoE block: router ``gate`` (nn.Linear), ``experts`` (NVFP4MoE).
    forward(hidden_states [..., H]) -> (out [..., H], router_logits [tokens, E]), as the block it
    replaces."""

    def __init__(self, gate: torch.nn.Module, experts: NVFP4MoE):
        super().__init__()
        self.gate, self.experts = gate, experts

    def forward(self, hidden_states: torch.Tensor):
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        router_logits = self.gate(x)
        return self.experts(x, router_logits).reshape(hidden_states.shape), router_logits


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
        norm = bool(getattr(block, "norm_topk_prob", True)) if renormalise is None else renormalise
        moe = NVFP4MoE.from_linears(*layers, block.top_k, norm_topk_prob=norm)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, NVFP4MoEBlock(block.gate, moe))
        swapped.append(name)
    return swapped
