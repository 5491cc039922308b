"""Python entry points and fake (meta) implementations of torch.ops.nvfp4.*.

The wrappers only route to the out= or the allocating op; all validation lives
in csrc/torch_binding.cpp, so calling torch.ops.nvfp4.* directly is as safe.
The fake implementations give torch.compile the output shapes.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Union

import torch

from . import layouts

Alpha = Union[None, float, torch.Tensor]

_FP32_MAX = 3.4028234663852886e38
_FP32_TINY = 1.401298464324817e-45  # the smallest float32 subnormal


def _scalar(op: str, name: str, value: Alpha, positive: bool = False) -> Optional[torch.Tensor]:
    """A Python number as a one-element float32 CPU tensor (read on the host: no sync); a tensor as
    it is (the op checks it); anything else, or a number float32 cannot hold, a clear error."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"nvfp4.{op}: {name} must be a number or a one-element float32 tensor, "
                        f"got {type(value).__name__} {value!r}")
    f = float(value)
    if not math.isfinite(f) or abs(f) > _FP32_MAX:
        raise ValueError(f"nvfp4.{op}: {name}={value!r} is outside float32's range")
    if positive and not f >= _FP32_TINY:
        raise ValueError(f"nvfp4.{op}: {name}={value!r} must be positive and at least {_FP32_TINY:.3g} "
                         "(float32's smallest)")
    return torch.tensor(f, dtype=torch.float32)


OutDtype = Optional[torch.dtype]


def gemv(a, b, sfa, sfb, *, out: Optional[torch.Tensor] = None, alpha: Alpha = None,
         out_dtype: OutDtype = None) -> torch.Tensor:
    """c[l, m] = alpha * sum_k A[l, m, k] b[l, k] in fp32, returned as fp16 (or out_dtype: bf16).

    a [L, M, K/2] or [M, K/2] and b [L, K/2] or [K/2]: float4_e2m1fn_x2 or uint8.
    sfa/sfb: e4m3 scales, linear [L, M, K/16] / [L, K/16] or blocked 128x4
    [L, ceil(M/128), ceil(K/64), 32, 4, 4] / [L, 1, ceil(K/64), 32, 4, 4].
    alpha: None, a float, or a one-element float32 tensor (on the device: no sync).
    out: fp16 or bf16 (its dtype is the result's); out_dtype: the allocated result's.
    """
    if out is None:
        return torch.ops.nvfp4.gemv(a, b, sfa, sfb, _scalar("gemv", "alpha", alpha), out_dtype)
    torch.ops.nvfp4.gemv_out(a, b, sfa, sfb, _scalar("gemv", "alpha", alpha), out)
    return out


def gemm(a, b, sfa, sfb, *, out: Optional[torch.Tensor] = None, alpha: Alpha = None,
         bias: Optional[torch.Tensor] = None, out_dtype: OutDtype = None) -> torch.Tensor:
    """C = alpha * A @ B^T + bias (both K-major, like F.linear's weight), fp32 accumulation and
    epilogue, fp16 result (or out_dtype / out's dtype: bf16).

    a [L, M, K/2] or [M, K/2], b [L, N, K/2] or [N, K/2]; scales as for gemv. bias: [N] float32,
    float16 or bfloat16, added in fp32 after alpha.
    """
    al = _scalar("gemm", "alpha", alpha)
    if out is None:
        return torch.ops.nvfp4.gemm(a, b, sfa, sfb, al, bias, out_dtype)
    torch.ops.nvfp4.gemm_out(a, b, sfa, sfb, al, bias, out)
    return out


def dual_gemm(a, b1, b2, sfa, sfb1, sfb2, *, out: Optional[torch.Tensor] = None, alpha1: Alpha = None,
              alpha2: Alpha = None, out_dtype: OutDtype = None) -> torch.Tensor:
    """silu(alpha1 * A @ B1^T) * (alpha2 * A @ B2^T), alphas, silu and product in fp32, fp16 result
    (or out_dtype / out's dtype: bf16). The alphas are a checkpoint's per-tensor scales of each
    branch, applied before the SiLU."""
    a1, a2 = _scalar("dual_gemm", "alpha1", alpha1), _scalar("dual_gemm", "alpha2", alpha2)
    if out is None:
        return torch.ops.nvfp4.dual_gemm(a, b1, b2, sfa, sfb1, sfb2, a1, a2, out_dtype)
    torch.ops.nvfp4.dual_gemm_out(a, b1, b2, sfa, sfb1, sfb2, a1, a2, out)
    return out


def _alphas(alphas) -> Optional[torch.Tensor]:
    """group_gemm's alphas: a float32 tensor [G] as it is (the op checks it), or numbers."""
    if alphas is None or isinstance(alphas, torch.Tensor):
        return alphas
    if isinstance(alphas, (str, bytes)) or not isinstance(alphas, Sequence):
        raise TypeError(f"nvfp4.group_gemm: alphas must be a float32 tensor [G] or a sequence of numbers, "
                        f"got {type(alphas).__name__}")
    return torch.stack([_scalar("group_gemm", f"alphas[{g}]", x) for g, x in enumerate(alphas)]) \
        if len(alphas) else torch.zeros(0)


def group_gemm(
    as_: Sequence[torch.Tensor],
    bs: Sequence[torch.Tensor],
    sfas: Sequence[torch.Tensor],
    sfbs: Sequence[torch.Tensor],
    *,
    outs: Optional[Sequence[torch.Tensor]] = None,
    alphas=None,
    out_dtype: OutDtype = None,
) -> list:
    """Independent gemms (each its own M, N, K) in one call; returns the list of results.

    alphas: None, a float32 tensor [G] (on the device: no sync), or G numbers: group g's alpha.
    """
    if len(as_) == 0:  # the dispatcher cannot route a call without tensors: say why here
        raise ValueError("nvfp4.group_gemm: the lists are empty; give at least one problem")
    al = _alphas(alphas)
    if outs is None:
        return torch.ops.nvfp4.group_gemm(list(as_), list(bs), list(sfas), list(sfbs), al, out_dtype)
    torch.ops.nvfp4.group_gemm_out(list(as_), list(bs), list(sfas), list(sfbs), al, list(outs))
    return list(outs)


def gemm_w4a16(x, b, sfb, *, out: Optional[torch.Tensor] = None, alpha: Alpha = None,
               bias: Optional[torch.Tensor] = None, out_dtype: OutDtype = None) -> torch.Tensor:
    """W4A16: alpha * x @ B^T + bias, with x plain fp16 or bf16 activations and B NVFP4 weights.

    x [..., K] with b [N, K/2] (any leading dims, as F.linear takes them), or x [L, M, K] with b
    [L, N, K/2]; sfb as for gemm. Products are exact (an NVFP4 weight value has at most 6
    significant bits), sums in fp32; the result has x's dtype unless out_dtype (or out) says.
    The weight is decoded in the kernel, or (prefill gemms on Hopper, csrc/cuda/plan.cu) per call into
    scratch of at most 288 MiB for cuBLASLt's GEMM: no dequantized copy is kept. With bf16 x, b may also be
    ``pack_bf16_pairs(b)`` (int32 [..., K/8]): the same weights in a layout the GPU decodes faster.
    An unbatched b (bytes, or words with bf16 x) may be laid out by tile with sfb,
    ``layouts.to_expert_tiles(b[None], sfb[None])`` (N a multiple of 128: uint8 [1, N/128, ceil(K/256),
    16384], int32 [..., 4096], and sfb [1, N/128, ceil(K/256), 2048]), which the GPU copies in long runs.
    """
    al = _scalar("gemm_w4a16", "alpha", alpha)
    if out is None:
        return torch.ops.nvfp4.gemm_w4a16(x, b, sfb, al, bias, out_dtype)
    torch.ops.nvfp4.gemm_w4a16_out(x, b, sfb, al, bias, out)
    return out


def dual_gemm_w4a16(x, b1, b2, sfb1, sfb2, *, out: Optional[torch.Tensor] = None, alpha1: Alpha = None,
                    alpha2: Alpha = None, out_dtype: OutDtype = None) -> torch.Tensor:
    """W4A16 dual: silu(alpha1 * x @ B1^T) * (alpha2 * x @ B2^T), x fp16 or bf16 (see gemm_w4a16)."""
    a1, a2 = _scalar("dual_gemm_w4a16", "alpha1", alpha1), _scalar("dual_gemm_w4a16", "alpha2", alpha2)
    if out is None:
        return torch.ops.nvfp4.dual_gemm_w4a16(x, b1, b2, sfb1, sfb2, a1, a2, out_dtype)
    torch.ops.nvfp4.dual_gemm_w4a16_out(x, b1, b2, sfb1, sfb2, a1, a2, out)
    return out


def gemm_w4a4(x, b, sfb, *, global_scale: Alpha = None, out: Optional[torch.Tensor] = None, alpha: Alpha = None,
              bias: Optional[torch.Tensor] = None, out_dtype: OutDtype = None) -> torch.Tensor:
    """W4A4 as a model's layer runs it: x fp16 / bf16 quantized to NVFP4 with global_scale (as
    quantize), then alpha * x_q @ B^T + bias, in one op (reference.gemm_w4a4).

    x and b as for gemm_w4a16 (b: the checkpoint's bytes, or those laid out by tile). The quantized
    activation goes either to the kernels of NVFP4 activations as codes and scales, or to those of
    16-bit activations as the values the codes stand for (quantized_values), whichever runs faster
    (csrc/cuda/plan.cu; weights laid out by tile: codes for the GEMV of M <= 4 rows only): the
    products are the same. A layer with input scale s passes global_scale = 1 / s and alpha =
    s * weight_scale_2. The result has x's dtype unless out_dtype (or out) says.
    """
    g, al = _scalar("gemm_w4a4", "global_scale", global_scale, positive=True), _scalar("gemm_w4a4", "alpha", alpha)
    if out is None:
        return torch.ops.nvfp4.gemm_w4a4(x, b, sfb, g, al, bias, out_dtype)
    torch.ops.nvfp4.gemm_w4a4_out(x, b, sfb, g, al, bias, out)
    return out


def dual_gemm_w4a4(x, b1, b2, sfb1, sfb2, *, global_scale: Alpha = None, out: Optional[torch.Tensor] = None,
                   alpha1: Alpha = None, alpha2: Alpha = None, out_dtype: OutDtype = None) -> torch.Tensor:
    """W4A4 dual: silu(alpha1 * x_q @ B1^T) * (alpha2 * x_q @ B2^T), x quantized once (see gemm_w4a4)."""
    op = "dual_gemm_w4a4"
    g = _scalar(op, "global_scale", global_scale, positive=True)
    a1, a2 = _scalar(op, "alpha1", alpha1), _scalar(op, "alpha2", alpha2)
    if out is None:
        return torch.ops.nvfp4.dual_gemm_w4a4(x, b1, b2, sfb1, sfb2, g, a1, a2, out_dtype)
    torch.ops.nvfp4.dual_gemm_w4a4_out(x, b1, b2, sfb1, sfb2, g, a1, a2, out)
    return out


def grouped_mm(x, w, w_sf, offs, *, alphas: Optional[torch.Tensor] = None, alphas2: Optional[torch.Tensor] = None,
               gated: bool = False, out: Optional[torch.Tensor] = None, out_dtype: OutDtype = None,
               row_index: Optional[torch.Tensor] = None, global_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Rows grouped by expert (a mixture of experts), as torch._grouped_mm takes them: x [T, K]
    fp16 / bf16 holds every expert's rows, sorted by expert; expert e takes rows offs[e - 1] ..
    offs[e] (offs[-1] = 0) times its NVFP4 weights w[e] ([E, N, K/2], scales w_sf linear [E, N,
    K/16] or blocked) scaled by alphas[e]. offs: int32 [E] on x's device, the cumulative row ends
    (non-decreasing, at most T: read on the GPU, never on the host, so a CUDA graph can replay new
    routings; a CUDA kernel cannot check it, and counts an entry below its predecessor as an empty
    expert; NVFP4_CHECK_OFFS=1 has every call read it back and check it, outside a graph capture).
    gated: w holds W1 then W3 of each expert ([E, 2N, K/2]) and the result is silu(alphas * x W1^T)
    * (alphas2 * x W3^T), in one pass. Out [T, N] in x's dtype (or out_dtype);
    rows past offs[E - 1] are not written (use out= to keep what is there). With bf16 x, w may be
    pack_bf16_pairs(w) (int32 [E, N, K/8]), which the kernels decode in fewer instructions. w and
    w_sf may be laid out by tile (layouts.to_expert_tiles: N a multiple of 128, gated N of 64), which
    CUDA kernels copy in long runs (the layout an MoE layer holds on a GPU).
    row_index: None, or int32 [R] on x's device: the rows are x[row_index] ([R, K], R rows grouped by
    expert, offs at most R; out [R, N]), read where they lie, not gathered first (an MoE's token of
    each pair: moe_sort's token_of_row). An index outside [0, T) is an error on the CPU (and under
    NVFP4_CHECK_OFFS=1); a CUDA kernel reads such a row as zeros.
    global_scale: None, or float32 [E] on x's device (finite, positive; checked on the CPU only):
    W4A4, each row quantized to NVFP4 with its expert's global scale first, the product taken on
    the values its codes and scales stand for (with row_index: exactly grouped_mm(quantized_values(
    x, global_scale=global_scale, row_index=row_index, scale_index=expert of each row), ...), a CUDA
    kernel's row outside x NaN as there); the alphas carry 1 / global_scale. Where the kernel can,
    in the pass that lays the rows out for it, else by a quantized_values kernel first.
    """
    if out is None:
        return torch.ops.nvfp4.grouped_mm(x, w, w_sf, offs, alphas, alphas2, gated, out_dtype, row_index,
                                          global_scale)
    torch.ops.nvfp4.grouped_mm_out(x, w, w_sf, offs, alphas, alphas2, gated, out, row_index, global_scale)
    return out


def quantize(x, *, global_scale: Alpha = None, sf_layout: str = "linear", convention: Optional[str] = None):
    """x (float32 / float16 / bfloat16, [K], [R, K] or [L, R, K], K a multiple of 16 and
    contiguous) -> (codes, scales) of x * global_scale, as the ops above take them.

    Per 16 values along K: scale = e4m3(amax * global_scale / 6), codes = e2m1(x * global_scale /
    scale), each rounded to nearest even and saturated (reference.quantize is the definition).
    codes: uint8 [..., K/2] (low nibble first; .view(torch.float4_e2m1fn_x2) if wanted); scales:
    float8_e4m3fn, linear [..., K/16] or, with sf_layout="blocked", [L?, ceil(R/128), ceil(K/64),
    32, 4, 4] with zero padding. global_scale: None (1), a positive float, or a one-element
    float32 tensor (on the device: no sync). A gemm of two quantized operands takes
    alpha = 1 / (global_scale_a * global_scale_b). A NaN makes its block's scale NaN (the block
    decodes to NaN); +-inf saturates to +-6 times a scale of 448.

    convention: None (the above), or "modelopt", "torchao", "compressed_tensors": the codes and
    scales that library writes, byte for byte, with global_scale in that library's own form
    (nvfp4_kernels.conventions says which; conventions.global_scale computes it as the library
    does). For exporting checkpoints; plain torch ops, not a fused kernel.
    """
    if sf_layout not in ("linear", "blocked"):
        raise ValueError(f'nvfp4.quantize: sf_layout must be "linear" or "blocked", got {sf_layout!r}')
    if convention is not None:
        from . import conventions

        if global_scale is None:
            global_scale = conventions.global_scale(x, convention)
        return conventions.quantize(x, global_scale, convention, sf_layout)
    return torch.ops.nvfp4.quantize(x, _scalar("quantize", "global_scale", global_scale, positive=True),
                                    sf_layout == "blocked")


def quantized_values(x, *, global_scale: Alpha = None, row_index: Optional[torch.Tensor] = None,
                     scale_index: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The values quantize(x, global_scale=global_scale)'s codes and scales stand for, before the
    global scale is divided out: per 16 values, each code's e2m1 value times the block's e4m3
    scale; in x's dtype (exact: at most 6 significant bits), contiguous, x's shape. One kernel.

    A W4A4 activation as a 16-bit operand: gemm_w4a16 / grouped_mm of these values with alpha
    divided by global_scale gives exactly what a gemm of the codes and scales gives.
    global_scale: as quantize's, or a float32 tensor of one value per row (x.shape[:-1], on x's
    device; finite and positive, which is checked on the CPU only): each row quantized with its own
    (a mixture of experts' rows, each with its expert's).
    row_index (int32 [R], x [rows, K]): the result is [R, K], row r quantized from x[row_index[r]].
    scale_index (int32, one per result row): global_scale is a float32 table [G] and row r takes
    global_scale[scale_index[r]]. Both on x's device: a mixture of experts' rows, each its token's
    activation with its expert's global scale, in one pass. An index outside its range is an error
    on the CPU; on CUDA (checking would sync) that row's values are NaN.
    reference.quantized_values(x[row_index], global_scale[scale_index]) is the definition.
    """
    if scale_index is not None:
        if not isinstance(global_scale, torch.Tensor):
            raise ValueError("nvfp4.quantized_values: scale_index needs a global_scale table (a float32 tensor), "
                             f"got {type(global_scale).__name__}")
        return torch.ops.nvfp4.quantized_values(x, global_scale, row_index, scale_index)
    return torch.ops.nvfp4.quantized_values(x, _scalar("quantized_values", "global_scale", global_scale,
                                                       positive=True), row_index)


def moe_sort(ids: torch.Tensor, num_experts: int):
    """A mixture of experts' token-expert pairs as rows grouped by expert, one kernel (no sync).
    ids [T, top_k] int64 or int32: pair p = t * top_k + j is token t's j-th expert. Returns int32
    (token_of_row [T * top_k], expert_of_row [T * top_k], row_of_pair [T, top_k], offs
    [num_experts]): rows in expert order, within an expert in pair order; offs the cumulative row
    ends, as grouped_mm takes them. An id outside [0, num_experts) is an error on the CPU; on CUDA
    (checking would sync) its pair gets no row: row_of_pair -1, and moe_combine adds nothing for it.
    num_experts: 1 .. 8192."""
    return torch.ops.nvfp4.moe_sort(ids, num_experts)


def moe_combine(y: torch.Tensor, row_of_pair: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """out[t] = sum_j weights[t, j] * y[row_of_pair[t, j]], one kernel: y [rows, hidden] float32 /
    float16 / bfloat16 (the rows moe_sort's order gave), row_of_pair [T, top_k] int32 (moe_sort's;
    -1 adds nothing), weights [T, top_k] float. fp32: each product rounded, added in j order to 0,
    the sum rounded once to y's dtype; out [T, hidden]."""
    return torch.ops.nvfp4.moe_combine(y, row_of_pair, weights)


def moe_route(logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", bias: Optional[torch.Tensor] = None,
              n_group: int = 1, topk_group: int = 1, renormalize: bool = True, scale: float = 1.0):
    """Each token's top_k experts and their weights from router logits [T, E] (float32 / float16 /
    bfloat16), in float32, one kernel: (weights float32 [T, top_k], ids int32 [T, top_k]), in rank
    order (larger first, equal values by the lower index, NaN last). scoring "softmax" (Qwen-MoE,
    Mixtral): ranked by logit, weight the softmax probability; "sigmoid" (DeepSeek-V3): s =
    sigmoid(logits), ranked by s + bias (float32 [E] or None), in n_group equal runs of experts of
    which the topk_group with the largest sums of their two best compete; weight s. renormalize:
    weights / their sum (sigmoid: + 1e-20); then times scale. E <= 2048, n_group <= 32, top_k <= 32."""
    if scoring not in ("softmax", "sigmoid"):
        raise ValueError(f"nvfp4.moe_route: scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    return torch.ops.nvfp4.moe_route(logits, top_k, scoring == "sigmoid", bias, n_group, topk_group, renormalize,
                                     float(scale))


def pack_bf16_pairs(b: torch.Tensor) -> torch.Tensor:
    """W4A16 weights b [..., K/2] (codes, uint8 or float4_e2m1fn_x2) repacked for bf16 activations:
    int32 [..., K/8], each 32-bit word's 8 codes rewritten so that the GPU kernels decode them in
    pairs of adjacent values with ~3/4 of the instructions (the layout: csrc/numerics.h,
    NVFP4_PAIR_BIT). gemm_w4a16 / dual_gemm_w4a16 take the result in place of b with bf16 x and
    the same scales. Set-up work: done on the host (a CUDA tensor goes there and back)."""
    return torch.ops.nvfp4.pack_bf16_pairs(b)


def unpack_bf16_pairs(w: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_bf16_pairs: int32 [..., K/8] -> the checkpoint's uint8 codes [..., K/2]."""
    return torch.ops.nvfp4.unpack_bf16_pairs(w)


def kernel_name(op: str, *args) -> str:
    """Which kernel ``op(*args)`` would run on these tensors' device, and how it is configured:
    e.g. "wgmma (128-row tiles, split-K 2)", "gemv_dp4a", "gemv_mma (roles swapped)", "cpu".

    op: "gemv", "gemm", "dual_gemm", "group_gemm", "gemm_w4a16", "dual_gemm_w4a16", "gemm_w4a4",
    "dual_gemm_w4a4", "grouped_mm" or "grouped_mm_gated" (grouped_mm with gated=True); its tensor
    arguments as that op takes them (group_gemm: its four lists; grouped_mm: x, w, w_sf, offs;
    the W4A4 ops: x and the weights, without global_scale). The choice is made by one ordered
    table of rules, csrc/cuda/plan.cu; a W4A4 op names the kernel of its quantized activation
    (one of 16-bit activations where it runs the quantized values).
    """
    tensors = [t for lst in args for t in lst] if op == "group_gemm" else list(args)
    if not tensors:
        raise ValueError(f"nvfp4.kernel_name: no tensors given for {op!r}")
    return torch.ops.nvfp4.kernel_name(op, tensors)


# ---- fake implementations (shapes only) --------------------------------------
# A call that mixes meta tensors with real ones lands here too, so the one check
# that cannot wait for the real kernel is made here as well: one device.


def _one_device(op, tensors, scalars=()):
    """Every tensor on one device; each scalar (alpha, global_scale) there too, or a CPU scalar."""
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"nvfp4.{op}: all tensors must be on one device, got {sorted(map(str, devices))}")
    for name, t in scalars:
        if isinstance(t, torch.Tensor) and devices and t.device not in devices and t.device.type != "cpu":
            raise ValueError(f"nvfp4.{op}: {name} is on {t.device} but the operands are on {devices.pop()} "
                             "(a device tensor must be on theirs; a CPU scalar may go with any)")


def _mm_shape(a, b, vector):
    return (*a.shape[:-1],) if vector else (*a.shape[:-1], b.shape[-2])


def _out_dtype(out_dtype, default=torch.float16):
    return default if out_dtype is None else out_dtype


@torch.library.register_fake("nvfp4::gemv")
def _(a, b, sfa, sfb, alpha=None, out_dtype=None):
    _one_device("gemv", (a, b, sfa, sfb), [("alpha", alpha)])
    return a.new_empty(_mm_shape(a, b, True), dtype=_out_dtype(out_dtype))


@torch.library.register_fake("nvfp4::gemm")
def _(a, b, sfa, sfb, alpha=None, bias=None, out_dtype=None):
    _one_device("gemm", (a, b, sfa, sfb) + ((bias,) if bias is not None else ()), [("alpha", alpha)])
    return a.new_empty(_mm_shape(a, b, False), dtype=_out_dtype(out_dtype))


@torch.library.register_fake("nvfp4::dual_gemm")
def _(a, b1, b2, sfa, sfb1, sfb2, alpha1=None, alpha2=None, out_dtype=None):
    _one_device("dual_gemm", (a, b1, b2, sfa, sfb1, sfb2), [("alpha1", alpha1), ("alpha2", alpha2)])
    return a.new_empty(_mm_shape(a, b1, False), dtype=_out_dtype(out_dtype))


@torch.library.register_fake("nvfp4::group_gemm")
def _(as_, bs, sfas, sfbs, alphas=None, out_dtype=None):
    _one_device("group_gemm", (*as_, *bs, *sfas, *sfbs), [("alphas", alphas)])
    return [a.new_empty(_mm_shape(a, b, False), dtype=_out_dtype(out_dtype)) for a, b in zip(as_, bs)]


def _w4a16_shape(x, b):
    return (*x.shape[:-1], b.shape[1] * layouts.TILE_ROWS if b.dim() == 4 else b.shape[-2])


@torch.library.register_fake("nvfp4::pack_bf16_pairs")
def _(b):
    return b.new_empty((*b.shape[:-1], b.shape[-1] // 4), dtype=torch.int32)


@torch.library.register_fake("nvfp4::unpack_bf16_pairs")
def _(w):
    return w.new_empty((*w.shape[:-1], w.shape[-1] * 4), dtype=torch.uint8)


def _w4a16_dtype(x, out_dtype):
    return _out_dtype(out_dtype, torch.bfloat16 if x.dtype == torch.bfloat16 else torch.float16)


@torch.library.register_fake("nvfp4::gemm_w4a16")
def _(x, b, sfb, alpha=None, bias=None, out_dtype=None):
    _one_device("gemm_w4a16", (x, b, sfb) + ((bias,) if bias is not None else ()), [("alpha", alpha)])
    return x.new_empty(_w4a16_shape(x, b), dtype=_w4a16_dtype(x, out_dtype))


@torch.library.register_fake("nvfp4::dual_gemm_w4a16")
def _(x, b1, b2, sfb1, sfb2, alpha1=None, alpha2=None, out_dtype=None):
    _one_device("dual_gemm_w4a16", (x, b1, b2, sfb1, sfb2), [("alpha1", alpha1), ("alpha2", alpha2)])
    return x.new_empty(_w4a16_shape(x, b1), dtype=_w4a16_dtype(x, out_dtype))


@torch.library.register_fake("nvfp4::gemm_w4a4")
def _(x, b, sfb, global_scale=None, alpha=None, bias=None, out_dtype=None):
    _one_device("gemm_w4a4", (x, b, sfb) + ((bias,) if bias is not None else ()),
                [("global_scale", global_scale), ("alpha", alpha)])
    return x.new_empty(_w4a16_shape(x, b), dtype=_w4a16_dtype(x, out_dtype))


@torch.library.register_fake("nvfp4::dual_gemm_w4a4")
def _(x, b1, b2, sfb1, sfb2, global_scale=None, alpha1=None, alpha2=None, out_dtype=None):
    _one_device("dual_gemm_w4a4", (x, b1, b2, sfb1, sfb2),
                [("global_scale", global_scale), ("alpha1", alpha1), ("alpha2", alpha2)])
    return x.new_empty(_w4a16_shape(x, b1), dtype=_w4a16_dtype(x, out_dtype))


@torch.library.register_fake("nvfp4::grouped_mm")
def _(x, w, w_sf, offs, alphas=None, alphas2=None, gated=False, out_dtype=None, row_index=None, global_scale=None):
    _one_device("grouped_mm", (x, w, w_sf, offs) + tuple(t for t in (alphas, alphas2, row_index, global_scale)
                                                         if t is not None))
    n = w.shape[1] * (128 if w.dim() == 4 else 1)  # laid out by tile: 128 rows a tile
    n = n // 2 if gated else n
    rows = x.shape[0] if row_index is None else row_index.shape[0]
    return x.new_empty((rows, n), dtype=_w4a16_dtype(x, out_dtype))


@torch.library.register_fake("nvfp4::quantize")
def _(x, global_scale=None, blocked=False):
    _one_device("quantize", (x,), [("global_scale", global_scale)])
    k = x.shape[-1]
    data = x.new_empty((*x.shape[:-1], k // 2), dtype=torch.uint8)
    if not blocked:
        return data, x.new_empty((*x.shape[:-1], k // 16), dtype=torch.float8_e4m3fn)
    rows = x.shape[-2] if x.dim() >= 2 else 1
    lead = (x.shape[0],) if x.dim() == 3 else ()
    return data, x.new_empty((*lead, -(-rows // 128), -(-k // 64), 32, 4, 4), dtype=torch.float8_e4m3fn)


@torch.library.register_fake("nvfp4::quantized_values")
def _(x, global_scale=None, row_index=None, scale_index=None):
    per_row = isinstance(global_scale, torch.Tensor) and (global_scale.numel() != 1 or scale_index is not None)
    indices = tuple(t for t in (row_index, scale_index) if t is not None)
    _one_device("quantized_values", ((x, global_scale) if per_row else (x,)) + indices,
                [] if per_row else [("global_scale", global_scale)])
    if row_index is not None:
        return x.new_empty((row_index.shape[0], x.shape[-1]))
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("nvfp4::moe_sort")
def _(ids, num_experts):
    _one_device("moe_sort", (ids,))
    n = ids.numel()
    return (ids.new_empty((n,), dtype=torch.int32), ids.new_empty((n,), dtype=torch.int32),
            ids.new_empty(ids.shape, dtype=torch.int32), ids.new_empty((num_experts,), dtype=torch.int32))


@torch.library.register_fake("nvfp4::moe_combine")
def _(y, row_of_pair, weights):
    _one_device("moe_combine", (y, row_of_pair, weights))
    return y.new_empty((row_of_pair.shape[0], y.shape[1]))


@torch.library.register_fake("nvfp4::moe_route")
def _(logits, top_k, sigmoid=False, bias=None, n_group=1, topk_group=1, renormalize=True, scale=1.0):
    _one_device("moe_route", (logits, bias))
    t = logits.shape[0]
    return logits.new_empty((t, top_k), dtype=torch.float32), logits.new_empty((t, top_k), dtype=torch.int32)


def _register_out_fake(name, scalars=()):
    """The out= ops: one device; `scalars`, the names of the arguments that may be CPU scalars."""
    schema = getattr(torch.ops.nvfp4, name).default._schema

    @torch.library.register_fake(f"nvfp4::{name}")
    def _(*args):
        named = list(zip((arg.name for arg in schema.arguments), args))
        tensors = [t for n, arg in named if n not in scalars
                   for t in (arg if isinstance(arg, (list, tuple)) else (arg,)) if isinstance(t, torch.Tensor)]
        _one_device(name, tensors, [(n, arg) for n, arg in named if n in scalars])
        return None


for _name in ("gemv_out", "gemm_out", "dual_gemm_out", "group_gemm_out", "gemm_w4a16_out", "dual_gemm_w4a16_out",
              "gemm_w4a4_out", "dual_gemm_w4a4_out", "grouped_mm_out", "competition_group_gemm", "competition_gemm",
              "competition_dual_gemm"):
    _register_out_fake(_name, ("alpha", "alpha1", "alpha2", "alphas", "global_scale"))
