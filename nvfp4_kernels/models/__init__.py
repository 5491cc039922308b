"""NVFP4 checkpoints: load ModelOpt and compressed-tensors checkpoints into a model, quantize a model,
save it in ModelOpt's format.

    read_quant_config(path)                     -> QuantConfig (either producer's config files)
    load_checkpoint(model, path, *, mode=None)  the checkpoint's NVFP4 layers into model's nn.Linears
    quantize_model(model, *, mode, exclude, calibration)   nn.Linear -> NVFP4Linear, as ModelOpt does
    save_modelopt(model, path)                  safetensors + hf_quant_config.json + config.json
    swap_moe_blocks(model)                      transformers sparse MoE blocks -> one NVFP4MoE each

``hf`` builds transformers causal LMs from such a checkpoint (``hf.from_pretrained``); transformers
is needed only there. Reading and writing checkpoints needs ``safetensors``.
"""

from .config import QuantConfig, read_quant_config
from .export import quantize_model, save_modelopt
from .layers import CompressedTensorsNVFP4Linear, NVFP4SplitLinear
from .loading import DEFAULT_FUSED, LoadReport, load_checkpoint
from .moe import NVFP4MoEBlock, swap_moe_blocks

__all__ = ["QuantConfig", "read_quant_config", "load_checkpoint", "LoadReport", "quantize_model", "save_modelopt",
           "CompressedTensorsNVFP4Linear", "NVFP4SplitLinear", "DEFAULT_FUSED", "NVFP4MoEBlock", "swap_moe_blocks"]
