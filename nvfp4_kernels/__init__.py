"""NVFP4 matrix kernels for PyTorch.

NVFP4: 4-bit e2m1 values, two per byte (low nibble first), with one fp8 e4m3
scale per 16 consecutive values along K. Four ops, registered as torch custom
ops in the namespace ``nvfp4`` (eager, torch.compile, CUDA graphs):

    gemv(a, b, sfa, sfb, *, out=None, alpha=None)        c[l, m]    = a[l, m] . b[l]
    gemm(a, b, sfa, sfb, *, out=None, alpha=None)        c[l, m, n] = a[l, m] . b[l, n]
    dual_gemm(a, b1, b2, sfa, sfb1, sfb2, *, out=None)   silu(a b1^T) * (a b2^T)
    group_gemm(as_, bs, sfas, sfbs, *, outs=None)        a list of independent gemms
    gemm_w4a16(x, b, sfb, *, out=None)                   x fp16 / bf16 values times NVFP4 weights
    dual_gemm_w4a16(x, b1, b2, sfb1, sfb2, *, out=None)  the dual of those
    gemm_w4a4(x, b, sfb, *, global_scale=None)           x quantized to NVFP4 in the call, times B
    dual_gemm_w4a4(x, b1, b2, sfb1, sfb2, *, ...)        the dual of those
    grouped_mm(x, w, w_sf, offs, *, row_index=None, ...) x's rows by expert (MoE): offs on the device
    quantize(x, *, global_scale=None, sf_layout="linear") -> (codes, scales) of x * global_scale
    quantized_values(x, *, global_scale=None, ...)       the values those codes and scales stand for
    moe_route(logits, top_k, *, scoring="softmax")       an MoE's top_k experts and weights per token
    moe_sort(ids, num_experts)                           an MoE's token-expert pairs as rows by expert
    moe_combine(y, row_of_pair, weights)                 those rows' weighted sum back per token
    kernel_name(op, *args)                               which kernel op(*args) runs, and how
    pack_bf16_pairs(b), unpack_bf16_pairs(w)             W4A16 weights in the layout bf16 decodes fastest

The matmul ops take alphas (per-tensor scales), gemm a bias, and return fp16
or bf16 (out_dtype). ``nn`` holds NVFP4Linear, the layer a model is made of, and
NVFP4MoE, a mixture of experts;
``models`` loads and saves NVFP4 checkpoints (ModelOpt, compressed-tensors).

``reference`` holds the exact definition (the test oracle), ``layouts`` the
scale-layout helpers, ``testing`` the input generators shared by tests and
benchmarks.
"""

import torch  # noqa: F401  (loads the libraries _C links against)

from . import _C  # noqa: F401  (loading it registers torch.ops.nvfp4.*)
from . import layouts, nn, reference
from .ops import (dual_gemm, dual_gemm_w4a4, dual_gemm_w4a16, gemm, gemm_w4a4, gemm_w4a16, gemv, group_gemm,
                  grouped_mm, kernel_name, moe_combine, moe_route, moe_sort, pack_bf16_pairs, quantize,
                  quantized_values, unpack_bf16_pairs)

WITH_CUDA = bool(_C.with_cuda)

__all__ = ["gemv", "gemm", "dual_gemm", "group_gemm", "gemm_w4a16", "dual_gemm_w4a16", "gemm_w4a4", "dual_gemm_w4a4",
           "grouped_mm", "quantize",
           "quantized_values", "moe_route", "moe_sort", "moe_combine", "kernel_name", "pack_bf16_pairs",
           "unpack_bf16_pairs",
           "reference", "layouts", "nn", "WITH_CUDA"]
