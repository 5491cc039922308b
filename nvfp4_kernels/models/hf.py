"""transformers causal LMs from local NVFP4 checkpoints (transformers is imported here, lazily).

    model = from_pretrained("path/to/checkpoint", device="cuda")    # ModelOpt or compressed-tensors
    out = model.generate(input_ids, max_new_tokens=32)

from_pretrained builds the architecture from the checkpoint's config.json with its parameters on
the meta device (no memory, no random initialisation; buffers such as rotary tables are made as
usual), then ``load_checkpoint`` puts the checkpoint's tensors in: NVFP4 layers for the quantized
linears, plain tensors in ``dtype`` for the rest. Nothing is downloaded: ``path`` is a directory.

The NVFP4 layers run custom ops with fake (meta) implementations: torch.compile traces them
without graph breaks, and CUDA graphs capture them.
"""

from __future__ import annotations

import contextlib
import os
from typing import Optional

import torch

from .loading import LoadReport, load_checkpoint
from .moe import swap_moe_blocks


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("nvfp4_kernels.models.hf needs transformers: pip install transformers") from e
    return transformers


@contextlib.contextmanager
def _parameters_on_meta():
    """Every nn.Parameter registered inside goes to the meta device (buffers do not): modules are
    built without memory for their weights, and their initialisers run on nothing."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def from_pretrained(path, *, mode: Optional[str] = None, dtype: torch.dtype = torch.bfloat16, device="cpu",
                    fused: Optional[dict] = None, return_report: bool = False):
    """The transformers causal LM of the local NVFP4 checkpoint directory ``path``, in eval mode.

    mode, dtype, fused: as load_checkpoint takes them (mode None: W4A4 where the checkpoint has
    input scales, W4A16 where not). device: where the whole model goes. Sparse MoE blocks whose
    experts loaded as NVFP4 layers become one NVFP4MoE each (``moe.swap_moe_blocks``; their names
    in the report's moe_blocks). With return_report, returns (model, LoadReport).
    """
    tf = _transformers()
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"from_pretrained: {path!r} is not a directory (only local checkpoints are read)")
    config = tf.AutoConfig.from_pretrained(path, local_files_only=True)
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    with _parameters_on_meta():
        model = tf.AutoModelForCausalLM.from_config(config, **{dtype_kw: dtype})
    report = load_checkpoint(model, path, mode=mode, dtype=dtype, device=device, fused=fused)
    report.moe_blocks = swap_moe_blocks(model)
    model.to(device)  # the buffers built above (the layers' tensors are there already)
    if os.path.exists(os.path.join(path, "generation_config.json")):
        model.generation_config = tf.GenerationConfig.from_pretrained(path, local_files_only=True)
    model.eval()
    return (model, report) if return_report else model


__all__ = ["from_pretrained", "LoadReport"]
