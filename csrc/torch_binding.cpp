/*
 * torch_binding.cpp - the torch face of the C kernels: op schemas, input
 * validation, output allocation, device and stream selection.
 *
 * Every op runs the same validation before anything is launched, and every
 * failure is a TypeError (dtype) or ValueError (everything else) that names the
 * op and the argument. After validation a call is one C struct (nvfp4.h) per
 * problem handed to nvfp4_matmul_cpu / nvfp4_matmul_cuda.
 *
 * Operand shapes (batched form; drop the leading L for unbatched calls):
 *   fp4 data   [L, R, K/2]  float4_e2m1fn_x2 or uint8, last dim contiguous
 *   scales     linear  [L, R, K/16]                         e4m3fn or uint8
 *              blocked [L, ceil(R/128), ceil(K/64), 32, 4, 4]  (nvfp4.h)
 *   gemv's b   [L, K/2] with scales [L, K/16] or [L, 1, ceil(K/64), 32, 4, 4]
 *   W4A16's x  [L, M, K] (or [..., M, K] with an unbatched weight) fp16 / bf16
 *   output     fp16 or bf16 [L, M, N] (gemv: [L, M]), last dim contiguous
 *   alpha      a one-element float32 tensor (CPU: read on the host; else on
 *              the operands' device, read by the kernel); group_gemm's alphas
 *              one per group, [G]
 *   bias       [N] float32, float16 or bfloat16 on the operands' device
 */
#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "numerics.h" /* nvfp4.h, and the scale grid of the quantize op's outputs */

#ifdef NVFP4_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using at::Tensor;

/* An op's name in error messages: "nvfp4.gemm", or with the group of a
 * grouped call, "nvfp4.group_gemm (group 3)". Formatted only when a check
 * fails: validation allocates nothing on the way to a launch. */
struct OpName {
  const char *op;
  int64_t group = -1;
};
std::ostream &operator<<(std::ostream &os, const OpName &n) {
  os << n.op;
  if (n.group >= 0) os << " (group " << n.group << ")";
  return os;
}

/* What validation reads of a tensor argument: dtype, device, data pointer,
 * sizes and strides, either as the tensor has them or through a permutation
 * of its dims, some of them dropped at index 0. The competition ops read the
 * harness's batch-last tensors in place this way: view tensors cost ~2.6 us
 * of a gemv call's 12.6 us of host time (H200), and any aten op that
 * launches a kernel ~7-8 us. */
struct Arg {
  static constexpr int MAX_DIMS = 8;
  at::ScalarType dtype;
  at::Device device{at::kCPU};
  void *ptr;
  int64_t ndim;
  int64_t sz[MAX_DIMS], st[MAX_DIMS];

  /* an output is `writable`: its pointer is the mutable one */
  Arg(const Tensor &t, bool writable = false)
      : dtype(t.scalar_type()), device(t.device()),
        ptr(writable ? t.data_ptr() : const_cast<void *>(t.const_data_ptr())), ndim(t.dim()) {
    TORCH_CHECK_VALUE(ndim <= MAX_DIMS, "nvfp4: tensors of more than ", MAX_DIMS, " dims are not supported, got ",
                      t.sizes());
    for (int64_t d = 0; d < ndim; d++) sz[d] = t.size(d), st[d] = t.stride(d);
  }
  /* dim d of the result is t's dim perm[d] (t must have perm.size() dims, which
   * the caller checks first) */
  Arg(const Tensor &t, std::initializer_list<int> perm, bool writable = false) : Arg(t, writable) {
    int64_t s[MAX_DIMS], r[MAX_DIMS], d = 0;
    for (int p : perm) s[d] = sz[p], r[d] = st[p], d++;
    for (d = 0; d < ndim; d++) sz[d] = s[d], st[d] = r[d];
  }
  /* int32 words (weights repacked for bf16, nvfp4.h) as the bytes they hold: the last dim 4x as long */
  Arg word_bytes() const {
    Arg a = *this;
    a.dtype = at::kByte;
    for (int64_t d = 0; d < ndim; d++) a.st[d] = d + 1 == ndim && (st[d] == 1 || sz[d] == 1) ? 1 : 4 * st[d];
    if (ndim) a.sz[ndim - 1] = 4 * sz[ndim - 1];
    return a;
  }
  /* index 0 of dim d, which goes (Tensor::select(d, 0), without a tensor) */
  Arg select0(int64_t d) const {
    Arg a = *this;
    for (int64_t i = d; i + 1 < ndim; i++) a.sz[i] = sz[i + 1], a.st[i] = st[i + 1];
    a.ndim--;
    return a;
  }
  int64_t dim() const { return ndim; }
  int64_t size(int64_t d) const { return sz[d < 0 ? d + ndim : d]; }
  int64_t stride(int64_t d) const { return st[d < 0 ? d + ndim : d]; }
  at::IntArrayRef sizes() const { return at::IntArrayRef(sz, (size_t)ndim); }
  at::IntArrayRef strides() const { return at::IntArrayRef(st, (size_t)ndim); }
};

/* Up to 3 output dims ([L,] M [, N]) without a heap vector. */
struct Shape {
  int64_t v[3];
  size_t n = 0;
  void push_back(int64_t x) { v[n++] = x; }
  at::IntArrayRef ref() const { return at::IntArrayRef(v, n); }
};

/* Everything validation learns about one problem. */
struct Problem {
  nvfp4_matmul p{};
  at::Device device{at::kCPU};
  Shape out_shape;
};

bool is_fp4(at::ScalarType t) { return t == at::kFloat4_e2m1fn_x2 || t == at::kByte; }
bool is_e4m3(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kByte; }

/* An operand's data and scales: rows x K values in batches of L. `rows_dim`
 * is false for gemv's vector, which has no rows dimension (one row). */
nvfp4_operand make_operand(const OpName &op, const Arg &data, const char *sf_name, const Arg &sf, bool batched,
                           int64_t L, int64_t rows, int64_t K, bool rows_dim) {
  nvfp4_operand o{};
  const int64_t k_blocks = K / 16, base_rank = (batched ? 1 : 0) + (rows_dim ? 1 : 0);
  TORCH_CHECK_TYPE(is_e4m3(sf.dtype), op, ": ", sf_name, " must be float8_e4m3fn or uint8 (e4m3 bytes), got ",
                   sf.dtype);
  o.data = static_cast<const uint8_t *>(data.ptr);
  o.row_stride = rows_dim ? data.stride(-2) : 0;
  o.batch_stride = batched ? data.stride(0) : 0;
  o.sf = static_cast<const uint8_t *>(sf.ptr);
  o.sf_batch_stride = batched ? sf.stride(0) : 0;

  /* the two layouts' shapes, and their names for the messages */
  auto linear = [&] { return std::string("[") + (batched ? "L, " : "") + (rows_dim ? "rows, " : "") + "K/16]"; };
  auto blocked = [&] { return std::string("[") + (batched ? "L, " : "") + "ceil(rows/128), ceil(K/64), 32, 4, 4]"; };
  Shape want_linear;
  int64_t want_blocked[6];
  size_t nb = 0;
  if (batched) want_linear.push_back(L), want_blocked[nb++] = L;
  if (rows_dim) want_linear.push_back(rows);
  want_linear.push_back(k_blocks);
  for (int64_t d : {(rows + 127) / 128, (k_blocks + 3) / 4, (int64_t)32, (int64_t)4, (int64_t)4}) want_blocked[nb++] = d;
  const at::IntArrayRef blocked_shape(want_blocked, nb);

  if (sf.dim() == base_rank + 1) {
    TORCH_CHECK_VALUE(sf.sizes() == want_linear.ref(), op, ": ", sf_name, " has shape ", sf.sizes(),
                      "; the linear layout ", linear(), " needs ", want_linear.ref(), " (rows=", rows, ", K=", K, ")");
    TORCH_CHECK_VALUE(sf.stride(-1) == 1 || k_blocks == 1, op, ": ", sf_name,
                      " must be contiguous along K/16 (stride ", sf.stride(-1), ")");
    o.sf_layout = NVFP4_SF_LINEAR;
    o.sf_row_stride = rows_dim ? sf.stride(-2) : 0;
  } else if (sf.dim() == (batched ? 6 : 5)) {
    TORCH_CHECK_VALUE(sf.sizes() == blocked_shape, op, ": ", sf_name, " has shape ", sf.sizes(),
                      "; the blocked layout ", blocked(), " needs ", blocked_shape, " (rows=", rows, ", K=", K, ")");
    // The atoms of one batch must be one contiguous array; dims of size 1 may have any stride
    // (and an empty grid, of an empty problem, any strides: nothing is read).
    int64_t expect = 1, count = 1;
    for (int64_t d = 0; d < sf.dim(); d++) count *= sf.size(d);
    for (int64_t d = sf.dim() - 1; count && d >= (batched ? 1 : 0); d--) {
      TORCH_CHECK_VALUE(sf.size(d) == 1 || sf.stride(d) == expect, op, ": ", sf_name,
                        " (blocked layout) must be contiguous within each batch; strides are ", sf.strides());
      expect *= sf.size(d);
    }
    o.sf_layout = NVFP4_SF_BLOCKED;
    o.sf_row_stride = 0;
  } else {
    TORCH_CHECK_VALUE(false, op, ": ", sf_name, " must be ", linear(), " (linear) or ", blocked(),
                      " (blocked, 128x4 atoms); got ", sf.dim(), " dims ", sf.sizes());
  }
  return o;
}

void check_fp4_tensor(const OpName &op, const char *name, const Arg &t) {
  TORCH_CHECK_TYPE(is_fp4(t.dtype), op, ": ", name, " must be float4_e2m1fn_x2 or uint8 (two e2m1 codes per byte), got ",
                   t.dtype);
  TORCH_CHECK_VALUE(t.dim() >= 1, op, ": ", name, " must have a dim of K/2 bytes, got a 0-dim tensor");
  TORCH_CHECK_VALUE(t.stride(-1) == 1 || t.size(-1) == 1, op, ": ", name,
                    " must be contiguous along K (last-dim stride 1), got strides ", t.strides());
}

/* An out= tensor the op may write as torch.mm would: no two elements at one
 * address (an expanded or stride-0 view), and no memory shared with an
 * input (`inputs`: name and tensor; undefined ones skipped). */
void check_writable(const OpName &op, const char *name, const Tensor &out,
                    std::initializer_list<std::pair<const char *, const Tensor *>> inputs) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(out) != at::MemOverlap::Yes, op, ": ", name,
                    " has elements that share memory (an expanded or stride-0 view); give it memory of its own");
  for (const auto &[in_name, in] : inputs) {
    if (!in || !in->defined()) continue;
    const at::MemOverlapStatus st = at::get_overlap_status(out, *in);
    TORCH_CHECK_VALUE(st != at::MemOverlapStatus::Full && st != at::MemOverlapStatus::Partial, op, ": ", name,
                      " shares memory with ", in_name, "; give it memory of its own");
  }
}

/* A one-element float32 scalar argument (alpha, alpha1, alpha2): its value
 * when on the CPU (host memory: no synchronisation), else its address on the
 * operands' device. */
void set_scalar(const OpName &op, const char *name, const Tensor &t, const at::Device &device, float &value,
                const float *&ptr) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, op, ": ", name, " must be a float32 tensor, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.numel() == 1, op, ": ", name, " must hold one value, got shape ", t.sizes());
  if (t.device().is_cpu()) {
    value = t.item<float>();
  } else {
    TORCH_CHECK_VALUE(t.device() == device, op, ": ", name, " is on ", t.device(), " but a is on ", device);
    ptr = t.const_data_ptr<float>();
  }
}

/* K's runs of 4 K steps of 64 in a tile (the third dim of weights laid out by tile). */
int64_t tile_groups(int64_t K) { return (K + 4 * 64 - 1) / (4 * 64); }

/* Scales w_sf of weights w laid out by tile (layouts.to_expert_tiles, nvfp4.h): [E, tiles, ceil(K/256) = groups,
 * 2048], w [E, tiles, groups, 16384 bytes] (as bytes), both contiguous within each tile. */
void check_tile_scales(const OpName &op, const char *name, const char *sf_name, const Arg &w, const Arg &w_sf,
                       int64_t E, int64_t groups) {
  TORCH_CHECK_TYPE(is_e4m3(w_sf.dtype), op, ": ", sf_name, " must be float8_e4m3fn or uint8 (e4m3 bytes), got ",
                   w_sf.dtype);
  TORCH_CHECK_VALUE(w_sf.dim() == 4 && w_sf.size(0) == E && w_sf.size(1) == w.size(1) && w_sf.size(2) == groups &&
                        w_sf.size(3) == NVFP4_TILE_SF_GROUP,
                    op, ": ", sf_name, " laid out by tile must be [E, tiles, ceil(K/256), ", NVFP4_TILE_SF_GROUP,
                    "] = [", E, ", ", w.size(1), ", ", groups, ", ", NVFP4_TILE_SF_GROUP, "], got shape ",
                    w_sf.sizes());
  TORCH_CHECK_VALUE((w.stride(3) == 1 && w.stride(2) == 4 * NVFP4_TILE_STEP) &&
                        (w_sf.stride(3) == 1 && w_sf.stride(2) == NVFP4_TILE_SF_GROUP),
                    op, ": ", name, " and ", sf_name,
                    " laid out by tile must be contiguous within each tile, got strides ", w.strides(), " and ",
                    w_sf.strides());
}

/* The operand of weights laid out by tile (w as bytes, checked by check_tile_scales): the rows at places
 * `place` .. `place` + tile_rows - 1 of each tile (a gated expert's W3: from 64). */
nvfp4_operand tile_operand(const Arg &w, const Arg &w_sf, int place, int tile_rows) {
  nvfp4_operand o{};
  o.data = static_cast<const uint8_t *>(w.ptr) + place * 32;
  o.batch_stride = w.stride(0), o.row_stride = w.stride(1);
  o.sf = static_cast<const uint8_t *>(w_sf.ptr) + place * 16;
  o.sf_batch_stride = w_sf.stride(0), o.sf_row_stride = w_sf.stride(1);
  o.tile_rows = tile_rows;
  return o;
}

/* Weights laid out by tile for a dense problem: [1, N/128, ceil(K/256), 16384] bytes (of weights repacked for
 * bf16, int32 [1, N/128, ceil(K/256), 4096]) and their scales, checked. */
nvfp4_operand dense_tiles(const OpName &op, const char *name, const char *sf_name, const Arg &w, const Arg &w_sf,
                          int64_t K) {
  const int64_t groups = tile_groups(K);
  TORCH_CHECK_VALUE(w.size(0) == 1 && w.size(2) == groups && w.size(3) == 4 * NVFP4_TILE_STEP, op, ": ", name,
                    " laid out by tile must be [1, N/128, ceil(K/256)=", groups, ", ", 4 * NVFP4_TILE_STEP,
                    "] bytes (int32 words: ", NVFP4_TILE_STEP, ") for x's K=", K, ", got (as bytes) ", w.sizes());
  check_tile_scales(op, name, sf_name, w, w_sf, 1, groups);
  return tile_operand(w, w_sf, 0, NVFP4_TILE_ROWS);
}

/* Validate one gemm-like problem (gemv when `vector`, dual when b2 is given).
 * sfa == nullptr: W4A16, a holds fp16 or bf16 values [L?, M, K]. */
Problem make_problem(const OpName &op, const Arg &a, const Arg &b_in, const Arg *b2_in, const Arg *sfa, const Arg &sfb,
                     const Arg *sfb2, const std::optional<Tensor> &alpha, bool vector) {
  Problem pr;
  const bool w4a16 = sfa == nullptr;
  const char *a_name = w4a16 ? "x" : "a";
  if (w4a16) {
    TORCH_CHECK_TYPE(a.dtype == at::kHalf || a.dtype == at::kBFloat16, op, ": x must be float16 or bfloat16, got ",
                     a.dtype);
    TORCH_CHECK_VALUE(a.dim() >= 1 && (a.stride(-1) == 1 || a.size(-1) == 1), op,
                      ": x must be contiguous along K (last-dim stride 1), got strides ", a.strides());
  } else {
    check_fp4_tensor(op, "a", a);
  }
  /* W4A16 weights repacked for bf16 (ops.pack_bf16_pairs: int32 words, nvfp4.h's NVFP4_CODES_BF16_PAIRS), read
   * as their bytes */
  const bool pairs = w4a16 && b_in.dtype == at::kInt;
  if (w4a16 && (pairs || (b2_in && b2_in->dtype == at::kInt))) {
    TORCH_CHECK_TYPE(a.dtype == at::kBFloat16, op, ": weights repacked for bf16 (int32, ops.pack_bf16_pairs) need ",
                     "bfloat16 x, got ", a.dtype);
    TORCH_CHECK_TYPE(!b2_in || b2_in->dtype == b_in.dtype, op, ": b1 and b2 must both be repacked (int32) or neither, ",
                     "got ", b_in.dtype, " and ", b2_in->dtype);
  }
  const Arg b = pairs ? b_in.word_bytes() : b_in, b2_bytes = pairs && b2_in ? b2_in->word_bytes() : b_in;
  const Arg *b2 = pairs && b2_in ? &b2_bytes : b2_in;
  check_fp4_tensor(op, b2 ? "b1" : "b", b);
  if (b2) check_fp4_tensor(op, "b2", *b2);
  TORCH_CHECK_VALUE(a.dim() == 2 || a.dim() == 3, op, ": ", a_name, " must be [M, ", w4a16 ? "K" : "K/2", "] or [L, M, ",
                    w4a16 ? "K" : "K/2", "], got shape ", a.sizes());
  const bool batched = a.dim() == 3;
  const int64_t b_rank = a.dim() - (vector ? 1 : 0);
  const char *bname = b2 ? "b1" : "b";
  /* W4A16 (and W4A4 ops') weights laid out by tile (4 dims, dense_tiles): as [N, K/2] ones, x [M, K]
   * (w4a16_rows) */
  const bool tiled = w4a16 && b.dim() == 4 && !batched;
  if (!tiled)
    TORCH_CHECK_VALUE(b.dim() == b_rank, op, ": ", bname, " must have ", b_rank, " dims to match a (",
                      vector ? (batched ? "[L, K/2]" : "[K/2]") : (batched ? "[L, N, K/2]" : "[N, K/2]"),
                      w4a16 && !batched ? " or laid out by tile: [1, N/128, ceil(K/256), 16384] bytes" : "",
                      "), got shape ", b_in.sizes());
  if (b2)
    TORCH_CHECK_VALUE(b2->sizes() == b.sizes(), op, ": b2 has shape ", b2_in->sizes(), " but b1 has ", b_in.sizes());
  const int64_t K = w4a16 ? a.size(-1) : 2 * a.size(-1);
  if (w4a16 && !tiled) {
    TORCH_CHECK_VALUE(2 * b.size(-1) == K, op, ": ", bname, pairs ? " (int32 words) has K/8=" : " has K/2=",
                      pairs ? b_in.size(-1) : b.size(-1), " but x has K=", K);
  } else if (!w4a16) {
    TORCH_CHECK_VALUE(b.size(-1) == a.size(-1), op, ": ", bname, " has K/2=", b.size(-1), " but a has K/2=",
                      a.size(-1));
  }
  TORCH_CHECK_VALUE(K > 0 && K % 16 == 0, op, ": K (= ", w4a16 ? "x.shape[-1]" : "2 * a.shape[-1]", " = ", K,
                    ") must be a positive multiple of 16 (one e4m3 scale per 16 values)");
  const int64_t L = batched ? a.size(0) : 1;
  if (batched)
    TORCH_CHECK_VALUE(b.size(0) == L, op, ": ", bname, " has L=", b.size(0), " but ", a_name, " has L=", a.size(0));
  const int64_t M = a.size(-2), N = vector ? 1 : tiled ? b.size(1) * NVFP4_TILE_ROWS : b.size(-2);

  pr.device = a.device;
  auto same_device = [&](const char *name, const at::Device &d) {
    TORCH_CHECK_VALUE(d == pr.device, op, ": ", name, " is on ", d, " but a is on ", pr.device);
  };
  same_device(bname, b.device);
  if (sfa) same_device("sfa", sfa->device);
  same_device(b2 ? "sfb1" : "sfb", sfb.device);
  if (b2) same_device("b2", b2->device), same_device("sfb2", sfb2->device);
  TORCH_CHECK_VALUE(pr.device.is_cpu() || pr.device.is_cuda(), op, ": tensors on ", pr.device,
                    " are not supported (CPU or CUDA)");

  nvfp4_matmul &p = pr.p;
  p.m = M, p.n = N, p.k = K, p.batch = L;
  if (w4a16) {
    p.a.data = static_cast<const uint8_t *>(a.ptr);
    p.a.row_stride = a.stride(-2) * 2, p.a.batch_stride = batched ? a.stride(0) * 2 : 0;
    p.a_type = a.dtype == at::kHalf ? NVFP4_F16 : NVFP4_BF16;
  } else {
    p.a = make_operand(op, a, "sfa", *sfa, batched, L, M, K, true);
    p.a_type = NVFP4_E2M1;
  }
  if (tiled) {
    p.b = dense_tiles(op, bname, b2 ? "sfb1" : "sfb", b, sfb, K);
    if (b2) p.b2 = dense_tiles(op, "b2", "sfb2", *b2, *sfb2, K);
  } else {
    p.b = make_operand(op, b, b2 ? "sfb1" : "sfb", sfb, batched, L, N, K, !vector);
    if (b2) p.b2 = make_operand(op, *b2, "sfb2", *sfb2, batched, L, N, K, true);
  }
  if (pairs) p.b.codes = p.b2.codes = NVFP4_CODES_BF16_PAIRS;
  p.alpha = p.alpha2 = 1.0f;
  p.c_type = NVFP4_F16;
  if (alpha) set_scalar(op, b2 ? "alpha1" : "alpha", *alpha, pr.device, p.alpha, p.alpha_ptr);
  if (batched) pr.out_shape.push_back(L);
  pr.out_shape.push_back(M);
  if (!vector) pr.out_shape.push_back(N);
  return pr;
}

/* Point the problem at `out` (an Arg made writable) after checking it. */
void bind_out(const OpName &op, Problem &pr, const Arg &out, bool vector) {
  TORCH_CHECK_TYPE(out.dtype == at::kHalf || out.dtype == at::kBFloat16, op, ": out must be float16 or bfloat16, got ",
                   out.dtype);
  TORCH_CHECK_VALUE(out.device == pr.device, op, ": out is on ", out.device, " but a is on ", pr.device);
  TORCH_CHECK_VALUE(out.sizes() == pr.out_shape.ref(), op, ": out has shape ", out.sizes(), ", expected ",
                    pr.out_shape.ref());
  const bool batched = pr.out_shape.n == (vector ? 2u : 3u);
  if (!vector)
    TORCH_CHECK_VALUE(out.stride(-1) == 1 || out.size(-1) <= 1, op,
                      ": out must be contiguous along N (last-dim stride 1), got strides ", out.strides());
  nvfp4_matmul &p = pr.p;
  p.c = out.ptr;
  p.c_type = out.dtype == at::kHalf ? NVFP4_F16 : NVFP4_BF16;
  p.c_row_stride = vector ? out.stride(-1) : out.stride(-2);
  p.c_batch_stride = batched ? out.stride(0) : 0;
}

/* A float32 / float16 / bfloat16 tensor's nvfp4_type. */
int32_t float_type_of(at::ScalarType t) {
  return t == at::kFloat ? NVFP4_F32 : t == at::kHalf ? NVFP4_F16 : NVFP4_BF16;
}

const char *status_text(nvfp4_status s) {
  switch (s) {
    case NVFP4_OK: return "ok";
    case NVFP4_ERR_INVALID: return "invalid problem";
    case NVFP4_ERR_CUDA: return "CUDA error";
    case NVFP4_ERR_NO_MEMORY: return "out of host memory";
  }
  return "unknown status";
}

void run_cpu(const OpName &op, const nvfp4_matmul &p) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
#ifdef NVFP4_NO_CPU
  TORCH_CHECK_VALUE(false, op, ": this build has no CPU kernels (a CUDA-only bundle): pass CUDA tensors");
#else
  std::atomic<int> status{NVFP4_OK};
  // Split the larger of M and N over torch's thread pool.
  const bool split_m = p.m >= p.n || p.m >= 4 * at::get_num_threads();
  const int64_t extent = split_m ? p.m : p.n;
  at::parallel_for(0, extent, split_m ? 2 : 16, [&](int64_t begin, int64_t end) {
    nvfp4_status s = split_m ? nvfp4_matmul_cpu(&p, begin, end, 0, p.n) : nvfp4_matmul_cpu(&p, 0, p.m, begin, end);
    if (s != NVFP4_OK) status = s;
  });
  TORCH_CHECK(status == NVFP4_OK, op, ": CPU kernel failed: ", status_text((nvfp4_status)status.load()));
#endif
}

/* problems[0, count), validated, all on `device` */
void run(const OpName &op, const nvfp4_matmul *problems, size_t count, const at::Device &device) {
  if (device.is_cpu()) {
    for (size_t g = 0; g < count; g++) run_cpu(op, problems[g]);
    return;
  }
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(device);
  // Scratch for the launches that ask (stream-K partials), from torch's caching
  // allocator: stream-ordered, valid under CUDA-graph capture, alive until the
  // launches are queued. A failed allocation runs the launch without it.
  struct Scratch {
    at::Device device;
    c10::SmallVector<Tensor, 1> tensors;
  } scratch{device, {}};
  auto workspace = [](size_t bytes, void *ctx) -> void * {
    auto &sc = *static_cast<Scratch *>(ctx);
    try {
      sc.tensors.push_back(at::empty({(int64_t)bytes}, at::TensorOptions().dtype(at::kByte).device(sc.device)));
    } catch (const c10::Error &) {
      return nullptr;
    }
    return sc.tensors.back().data_ptr();
  };
  nvfp4_status s = nvfp4_matmul_cuda_ws(problems, (int)count, workspace, &scratch,
                                        c10::cuda::getCurrentCUDAStream(device.index()).stream());
  TORCH_CHECK(s == NVFP4_OK, op, ": CUDA launch failed: ", status_text(s),
              s == NVFP4_ERR_CUDA ? std::string(" (") + cudaGetErrorString(cudaGetLastError()) + ")" : "",
              " for M=", problems[0].m, " N=", problems[0].n, " K=", problems[0].k, " L=", problems[0].batch);
#else
  TORCH_CHECK_VALUE(false, op, ": this build of nvfp4_kernels has no CUDA kernels (built CPU-only)");
#endif
}

/* The output dtype an allocating op was asked for: float16 (default) or bfloat16. */
at::ScalarType out_type(const OpName &op, const std::optional<at::ScalarType> &out_dtype,
                        at::ScalarType fallback = at::kHalf) {
  const at::ScalarType t = out_dtype.value_or(fallback);
  TORCH_CHECK_TYPE(t == at::kHalf || t == at::kBFloat16, op, ": out_dtype must be torch.float16 or torch.bfloat16, got ",
                   t);
  return t;
}

Tensor alloc_out(const Problem &pr, const Tensor &like, at::ScalarType type) {
  return at::empty(pr.out_shape.ref(), like.options().dtype(type));
}

/* The epilogue's optional tensors of a call: alpha (alpha1 of a dual), a
 * dual's alpha2, a gemm's bias [N]. */
struct Epi {
  const std::optional<Tensor> &alpha, &alpha2, &bias;
};
const std::optional<Tensor> NONE;
const Epi NO_EPI{NONE, NONE, NONE};

/* alpha2 and the bias, after make_problem (which takes alpha). */
void set_epilogue(const OpName &op, Problem &pr, const Epi &e) {
  nvfp4_matmul &p = pr.p;
  if (e.alpha2) set_scalar(op, "alpha2", *e.alpha2, pr.device, p.alpha2, p.alpha2_ptr);
  if (!e.bias) return;
  const Tensor &t = *e.bias;
  const at::ScalarType type = t.scalar_type();
  TORCH_CHECK_TYPE(type == at::kFloat || type == at::kHalf || type == at::kBFloat16, op,
                   ": bias must be float32, float16 or bfloat16, got ", type);
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == p.n, op, ": bias must be [N] = [", p.n, "], got shape ", t.sizes());
  TORCH_CHECK_VALUE(t.device() == pr.device, op, ": bias is on ", t.device(), " but the operands are on ", pr.device);
  TORCH_CHECK_VALUE(t.stride(0) == 1 || t.size(0) <= 1, op, ": bias must be contiguous, got stride ", t.stride(0));
  p.bias = t.const_data_ptr();
  p.bias_type = float_type_of(type);
}

// ---- ops -------------------------------------------------------------------

/* One gemv / gemm / dual problem: validate, bind the output, run. b2 and sfb2
 * are given for dual; sfa == nullptr for W4A16 (a holds 16-bit values). */
void matmul_out(const char *op, bool vector, const Arg &a, const Arg &b, const Arg *b2, const Arg *sfa,
                const Arg &sfb, const Arg *sfb2, const Epi &e, const Arg &out) {
  Problem pr = make_problem({op}, a, b, b2, sfa, sfb, sfb2, e.alpha, vector);
  set_epilogue({op}, pr, e);
  bind_out({op}, pr, out, vector);
  run({op}, &pr.p, 1, pr.device);
}

/* The same, the output allocated (of `type`). */
Tensor matmul_alloc(const char *op, bool vector, const Tensor &a, const Tensor &b, const Tensor *b2, const Tensor *sfa,
                    const Tensor &sfb, const Tensor *sfb2, const Epi &e, at::ScalarType type) {
  const Arg a_(a), b_(b), sfb_(sfb);
  const std::optional<Arg> sfa_ = sfa ? std::optional<Arg>(*sfa) : std::nullopt;
  const std::optional<Arg> b2_ = b2 ? std::optional<Arg>(*b2) : std::nullopt;
  const std::optional<Arg> sfb2_ = sfb2 ? std::optional<Arg>(*sfb2) : std::nullopt;
  Problem pr = make_problem({op}, a_, b_, b2 ? &*b2_ : nullptr, sfa ? &*sfa_ : nullptr, sfb_,
                            sfb2 ? &*sfb2_ : nullptr, e.alpha, vector);
  set_epilogue({op}, pr, e);
  Tensor out = alloc_out(pr, a, type);
  bind_out({op}, pr, Arg(out, true), vector);
  run({op}, &pr.p, 1, pr.device);
  return out;
}

void gemv_out(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
              const std::optional<Tensor> &alpha, const Tensor &out) {
  check_writable({"nvfp4.gemv"}, "out", out, {{"a", &a}, {"b", &b}, {"sfa", &sfa}, {"sfb", &sfb}, {"alpha", alpha ? &*alpha : nullptr}});
  const Arg sfa_(sfa);
  matmul_out("nvfp4.gemv", true, a, b, nullptr, &sfa_, sfb, nullptr, {alpha, NONE, NONE}, Arg(out, true));
}

Tensor gemv(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
            const std::optional<Tensor> &alpha, std::optional<at::ScalarType> out_dtype) {
  return matmul_alloc("nvfp4.gemv", true, a, b, nullptr, &sfa, sfb, nullptr, {alpha, NONE, NONE},
                      out_type({"nvfp4.gemv"}, out_dtype));
}

void gemm_out(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
              const std::optional<Tensor> &alpha, const std::optional<Tensor> &bias, const Tensor &out) {
  check_writable({"nvfp4.gemm"}, "out", out, {{"a", &a}, {"b", &b}, {"sfa", &sfa}, {"sfb", &sfb}, {"alpha", alpha ? &*alpha : nullptr},
                                             {"bias", bias ? &*bias : nullptr}});
  const Arg sfa_(sfa);
  matmul_out("nvfp4.gemm", false, a, b, nullptr, &sfa_, sfb, nullptr, {alpha, NONE, bias}, Arg(out, true));
}

Tensor gemm(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
            const std::optional<Tensor> &alpha, const std::optional<Tensor> &bias,
            std::optional<at::ScalarType> out_dtype) {
  return matmul_alloc("nvfp4.gemm", false, a, b, nullptr, &sfa, sfb, nullptr, {alpha, NONE, bias},
                      out_type({"nvfp4.gemm"}, out_dtype));
}

void dual_gemm_out(const Tensor &a, const Tensor &b1, const Tensor &b2, const Tensor &sfa, const Tensor &sfb1,
                   const Tensor &sfb2, const std::optional<Tensor> &alpha1, const std::optional<Tensor> &alpha2,
                   const Tensor &out) {
  check_writable({"nvfp4.dual_gemm"}, "out", out,
                 {{"a", &a}, {"b1", &b1}, {"b2", &b2}, {"sfa", &sfa}, {"sfb1", &sfb1}, {"sfb2", &sfb2},
                  {"alpha1", alpha1 ? &*alpha1 : nullptr}, {"alpha2", alpha2 ? &*alpha2 : nullptr}});
  const Arg b2_(b2), sfb2_(sfb2), sfa_(sfa);
  matmul_out("nvfp4.dual_gemm", false, a, b1, &b2_, &sfa_, sfb1, &sfb2_, {alpha1, alpha2, NONE}, Arg(out, true));
}

Tensor dual_gemm(const Tensor &a, const Tensor &b1, const Tensor &b2, const Tensor &sfa, const Tensor &sfb1,
                 const Tensor &sfb2, const std::optional<Tensor> &alpha1, const std::optional<Tensor> &alpha2,
                 std::optional<at::ScalarType> out_dtype) {
  return matmul_alloc("nvfp4.dual_gemm", false, a, b1, &b2, &sfa, sfb1, &sfb2, {alpha1, alpha2, NONE},
                      out_type({"nvfp4.dual_gemm"}, out_dtype));
}

/* A W4A16 op's one weight matrix: [N, K/2] (or int32 [N, K/8]), or laid out by tile ([1, N/128, ..]), against
 * batched [L, N, K/2]; and its N. */
bool one_matrix(const Tensor &b) { return b.dim() == 2 || b.dim() == 4; }
int64_t weight_rows(const Tensor &b) { return b.dim() == 4 ? b.size(1) * NVFP4_TILE_ROWS : b.size(-2); }

/* W4A16: x [..., M, K] fp16 / bf16 against NVFP4 weights. With an unbatched
 * weight [N, K/2] (or one laid out by tile) any leading dims of x are rows (as
 * F.linear takes them): x is read as [rows, K] (a copy only where its dims
 * cannot be flattened), the output is [..., N] (out= must flatten likewise).
 * A batched weight [L, N, K/2] takes x [L, M, K]. */
Tensor w4a16_rows(const char *op, const Tensor &x, const Tensor &b) {
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": x must have a dim of K values, got a 0-dim tensor");
  if (!one_matrix(b) || x.dim() == 2) return x;
  return x.reshape({-1, x.size(-1)});  /* a view where the strides allow */
}

std::vector<int64_t> w4a16_out_shape(const Tensor &x, int64_t n) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = n;
  return shape;
}

/* out [..., N] (its shape checked) as the [rows, N] the problem writes, without a copy. */
Tensor w4a16_out_rows(const char *op, const Tensor &out, int64_t rows) {
  const int64_t n = out.size(-1);
  const int64_t shape[2] = {rows, n};
  const auto strides = at::detail::computeStride(out.sizes(), out.strides(), at::IntArrayRef(shape, 2));
  TORCH_CHECK_VALUE(strides.has_value(), op,
                    ": out's leading dims must flatten into one (as a contiguous tensor's do), got strides ",
                    out.strides());
  return out.view({rows, n});
}

void quantize_input(const char *op, nvfp4_quantize &q, const Tensor &x, const std::optional<Tensor> &global_scale,
                    bool rows_ok);
void quantize_run(const char *op, nvfp4_quantize &q, const Tensor &x);

/* p's activations as the codes and linear scales w4a4_run quantizes them to: contiguous [L?, M, K/2] and
 * [L?, M, K/16] at data and sf. */
void set_codes(nvfp4_matmul &p, const uint8_t *data, const uint8_t *sf, bool batched) {
  p.a = nvfp4_operand{data, batched ? p.m * (p.k / 2) : 0, p.k / 2, sf, batched ? p.m * (p.k / 16) : 0, p.k / 16,
                      NVFP4_SF_LINEAR, NVFP4_CODES_BYTES};
  p.a_type = NVFP4_E2M1;
}

#ifdef NVFP4_WITH_CUDA
/* Where a problem is planned before w4a4_run allocates its quantized activation: a stand-in address of an
 * allocation's alignment (planning reads no memory). */
const uint8_t *const UNALLOCATED = reinterpret_cast<const uint8_t *>(uintptr_t{256});

/* Whether w4a4_run quantizes p's activations (p: as 16-bit values, on a CUDA device) to their values rather than
 * to codes: plan.cu's choice between p and its codes twin. */
bool quantizes_to_values(const nvfp4_matmul &p, const at::Device &device, bool batched) {
  c10::cuda::CUDAGuard guard(device);
  nvfp4_matmul codes = p;
  set_codes(codes, UNALLOCATED, UNALLOCATED, batched);
  return nvfp4_matmul_cuda_prefers_values(&p, &codes) != 0;
}

/* Whether the kernel quantizes p's activations itself with the global scale at `scale` (in the kernel's memory;
 * planning reads none of it): then w4a4_run launches no quantize kernel. */
bool quantizes_in_kernel(const nvfp4_matmul &p, const float *scale, const at::Device &device) {
  c10::cuda::CUDAGuard guard(device);
  nvfp4_matmul f = p;
  f.a_global = scale;
  return nvfp4_matmul_cuda_quantizes_in_kernel(&f) != 0;
}
#endif

/* The W4A4 ops take the checkpoint's bytes, as they are or laid out by tile; not weights repacked for bf16
 * (which only the W4A16 kernels read). */
void check_w4a4_weights(const char *op, const Arg &b1, const Arg *b2) {
  TORCH_CHECK_TYPE(b1.dtype != at::kInt && (!b2 || b2->dtype != at::kInt), op,
                   ": weights repacked for bf16 (int32) are for gemm_w4a16; give the checkpoint's bytes ",
                   "(ops.unpack_bf16_pairs)");
}

/* W4A4 with the activations quantized in the call (the gemm_w4a4 ops): x2 (as w4a16_rows gives it, fp16 / bf16)
 * quantized per 16 values with one global scale (as the quantize op), times the NVFP4 weights. Validated in full
 * first; then x2 is quantized to codes and linear scales for the W4A4 kernels, or to the values they stand for
 * for the W4A16 kernels, whichever plan.cu says runs faster (the same products), into a tensor of the caching
 * allocator (stream-ordered, valid under CUDA-graph capture), and the problem runs. out2: the output as the
 * problem writes it, or null: allocated of `type`. */
Tensor w4a4_run(const char *op, const Tensor &x2, const Tensor &b1, const Tensor *b2, const Tensor &sfb1,
                const Tensor *sfb2, const std::optional<Tensor> &global_scale, const Epi &e, const Tensor *out2,
                at::ScalarType type) {
  const Arg x_(x2), b_(b1), sfb_(sfb1), b2_ = b2 ? Arg(*b2) : Arg(b1), sfb2_ = sfb2 ? Arg(*sfb2) : Arg(sfb1);
  check_w4a4_weights(op, b_, b2 ? &b2_ : nullptr);
  Problem pr = make_problem({op}, x_, b_, b2 ? &b2_ : nullptr, nullptr, sfb_, sfb2 ? &sfb2_ : nullptr, e.alpha, false);
  set_epilogue({op}, pr, e);
  nvfp4_quantize q{};
  quantize_input(op, q, x2, global_scale, false);
  q.early_trigger = 1;  /* the problem's kernel follows at once */
  const Tensor out = out2 ? *out2 : alloc_out(pr, x2, type);
  bind_out({op}, pr, Arg(out, true), false);
  nvfp4_matmul &p = pr.p;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return out;
  const int64_t M = p.m, K = p.k, L = p.batch;
  const bool batched = x2.dim() == 3;
  bool values = false;
#ifdef NVFP4_WITH_CUDA
  if (pr.device.is_cuda() && q.scale_ptr && quantizes_in_kernel(p, q.scale_ptr, pr.device)) {
    p.a_global = q.scale_ptr; /* a global scale given as a tensor: the kernel quantizes x itself */
    run({op}, &p, 1, pr.device);
    return out;
  }
  if (pr.device.is_cuda()) values = quantizes_to_values(p, pr.device, batched);
#endif
  Tensor quantized, scales;  // alive until the problem's launch is queued
  if (values) {
    quantized = at::empty(x2.sizes(), x2.options().memory_format(at::MemoryFormat::Contiguous));
    q.values = quantized.data_ptr();
    q.values_type = p.a_type;
    q.values_row_stride = K, q.values_batch_stride = M * K;
    quantize_run(op, q, x2);
    p.a.data = static_cast<const uint8_t *>(quantized.const_data_ptr());
    p.a.row_stride = 2 * K, p.a.batch_stride = batched ? 2 * M * K : 0;
  } else {
    const int64_t rows = L * M;
    quantized = at::empty({rows, K / 2}, x2.options().dtype(at::kByte));
    scales = at::empty({rows, K / 16}, x2.options().dtype(at::kFloat8_e4m3fn));
    q.data = quantized.mutable_data_ptr<uint8_t>();
    q.data_row_stride = K / 2, q.data_batch_stride = M * (K / 2);
    q.sf = static_cast<uint8_t *>(scales.data_ptr());
    q.sf_layout = NVFP4_SF_LINEAR;
    q.sf_row_stride = K / 16, q.sf_batch_stride = M * (K / 16);
    quantize_run(op, q, x2);
    set_codes(p, q.data, q.sf, batched);
  }
  run({op}, &p, 1, pr.device);
  return out;
}

/* gemm_w4a16 and the W4A4 ops (global_scale given: w4a4_run) alike: x [..., K] rows (see w4a16_rows). */
Tensor w4a16_alloc(const char *op, const Tensor &x, const Tensor &b1, const Tensor *b2, const Tensor &sfb1,
                   const Tensor *sfb2, const Epi &e, std::optional<at::ScalarType> out_dtype,
                   const std::optional<Tensor> *global_scale = nullptr) {
  const Tensor x2 = w4a16_rows(op, x, b1);
  const at::ScalarType type = out_type({op}, out_dtype, x.scalar_type() == at::kBFloat16 ? at::kBFloat16 : at::kHalf);
  Tensor out2 = global_scale ? w4a4_run(op, x2, b1, b2, sfb1, sfb2, *global_scale, e, nullptr, type)
                             : matmul_alloc(op, false, x2, b1, b2, nullptr, sfb1, sfb2, e, type);
  return one_matrix(b1) && x.dim() != 2 ? out2.view(w4a16_out_shape(x, weight_rows(b1))) : out2;
}

void w4a16_out(const char *op, const Tensor &x, const Tensor &b1, const Tensor *b2, const Tensor &sfb1,
               const Tensor *sfb2, const Epi &e, const Tensor &out, const std::optional<Tensor> *global_scale = nullptr) {
  check_writable({op}, "out", out,
                 {{"x", &x}, {b2 ? "b1" : "b", &b1}, {"b2", b2}, {b2 ? "sfb1" : "sfb", &sfb1}, {"sfb2", sfb2},
                  {"alpha", e.alpha ? &*e.alpha : nullptr}, {"alpha2", e.alpha2 ? &*e.alpha2 : nullptr},
                  {"bias", e.bias ? &*e.bias : nullptr},
                  {"global_scale", global_scale && *global_scale ? &**global_scale : nullptr}});
  const Tensor x2 = w4a16_rows(op, x, b1);
  const bool flat = one_matrix(b1) && x.dim() != 2;
  if (flat)
    TORCH_CHECK_VALUE(out.dim() == x.dim() && out.size(-1) == weight_rows(b1) &&
                          std::equal(out.sizes().begin(), out.sizes().end() - 1, x.sizes().begin()),
                      op, ": out has shape ", out.sizes(), ", expected ",
                      at::IntArrayRef(w4a16_out_shape(x, weight_rows(b1))));
  const Tensor out2 = flat ? w4a16_out_rows(op, out, x2.size(0)) : out;
  if (global_scale) {
    w4a4_run(op, x2, b1, b2, sfb1, sfb2, *global_scale, e, &out2, out2.scalar_type());
    return;
  }
  const Arg b2_ = b2 ? Arg(*b2) : Arg(b1), sfb2_ = sfb2 ? Arg(*sfb2) : Arg(sfb1);
  matmul_out(op, false, x2, b1, b2 ? &b2_ : nullptr, nullptr, sfb1, sfb2 ? &sfb2_ : nullptr, e, Arg(out2, true));
}

Tensor gemm_w4a16(const Tensor &x, const Tensor &b, const Tensor &sfb, const std::optional<Tensor> &alpha,
                  const std::optional<Tensor> &bias, std::optional<at::ScalarType> out_dtype) {
  return w4a16_alloc("nvfp4.gemm_w4a16", x, b, nullptr, sfb, nullptr, {alpha, NONE, bias}, out_dtype);
}

void gemm_w4a16_out(const Tensor &x, const Tensor &b, const Tensor &sfb, const std::optional<Tensor> &alpha,
                    const std::optional<Tensor> &bias, const Tensor &out) {
  w4a16_out("nvfp4.gemm_w4a16", x, b, nullptr, sfb, nullptr, {alpha, NONE, bias}, out);
}

Tensor dual_gemm_w4a16(const Tensor &x, const Tensor &b1, const Tensor &b2, const Tensor &sfb1, const Tensor &sfb2,
                       const std::optional<Tensor> &alpha1, const std::optional<Tensor> &alpha2,
                       std::optional<at::ScalarType> out_dtype) {
  return w4a16_alloc("nvfp4.dual_gemm_w4a16", x, b1, &b2, sfb1, &sfb2, {alpha1, alpha2, NONE}, out_dtype);
}

void dual_gemm_w4a16_out(const Tensor &x, const Tensor &b1, const Tensor &b2, const Tensor &sfb1, const Tensor &sfb2,
                         const std::optional<Tensor> &alpha1, const std::optional<Tensor> &alpha2, const Tensor &out) {
  w4a16_out("nvfp4.dual_gemm_w4a16", x, b1, &b2, sfb1, &sfb2, {alpha1, alpha2, NONE}, out);
}

/* W4A4 as a model's layer runs it: x quantized with global_scale (as quantize), then the gemm of it (w4a4_run). */
Tensor gemm_w4a4(const Tensor &x, const Tensor &b, const Tensor &sfb, const std::optional<Tensor> &global_scale,
                 const std::optional<Tensor> &alpha, const std::optional<Tensor> &bias,
                 std::optional<at::ScalarType> out_dtype) {
  return w4a16_alloc("nvfp4.gemm_w4a4", x, b, nullptr, sfb, nullptr, {alpha, NONE, bias}, out_dtype, &global_scale);
}

void gemm_w4a4_out(const Tensor &x, const Tensor &b, const Tensor &sfb, const std::optional<Tensor> &global_scale,
                   const std::optional<Tensor> &alpha, const std::optional<Tensor> &bias, const Tensor &out) {
  w4a16_out("nvfp4.gemm_w4a4", x, b, nullptr, sfb, nullptr, {alpha, NONE, bias}, out, &global_scale);
}

Tensor dual_gemm_w4a4(const Tensor &x, const Tensor &b1, const Tensor &b2, const Tensor &sfb1, const Tensor &sfb2,
                      const std::optional<Tensor> &global_scale, const std::optional<Tensor> &alpha1,
                      const std::optional<Tensor> &alpha2, std::optional<at::ScalarType> out_dtype) {
  return w4a16_alloc("nvfp4.dual_gemm_w4a4", x, b1, &b2, sfb1, &sfb2, {alpha1, alpha2, NONE}, out_dtype,
                     &global_scale);
}

void dual_gemm_w4a4_out(const Tensor &x, const Tensor &b1, const Tensor &b2, const Tensor &sfb1, const Tensor &sfb2,
                        const std::optional<Tensor> &global_scale, const std::optional<Tensor> &alpha1,
                        const std::optional<Tensor> &alpha2, const Tensor &out) {
  w4a16_out("nvfp4.dual_gemm_w4a4", x, b1, &b2, sfb1, &sfb2, {alpha1, alpha2, NONE}, out, &global_scale);
}

/* NVFP4_CHECK_OFFS=1 (debugging): grouped_mm reads a GPU's offs (and row_index) back to check them, except
 * while the device's current stream is being captured (a copy there would break the capture). */
bool check_offs_on_host(const at::Device &device) {
  static const bool asked = [] {
    const char *e = std::getenv("NVFP4_CHECK_OFFS");
    return e && e[0] && e[0] != '0';
  }();
  if (!asked) return false;
#ifdef NVFP4_WITH_CUDA
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device.index()).stream(), &status) != cudaSuccess) {
    cudaGetLastError(); /* not the op's error to report: no check */
    return false;
  }
  return status == cudaStreamCaptureStatusNone;
#else
  (void)device;
  return false;
#endif
}

/* Rows grouped by expert (a mixture of experts, nvfp4.h): x [T, K] fp16 /
 * bf16, rows sorted by expert (or row_index int32 [R] on x's device: row r
 * is x's row row_index[r], nvfp4.h's a_index); w [E, N, K/2] and w_sf
 * (linear [E, N, K/16] or blocked); offs int32 [E], the experts' cumulative
 * row ends, on x's device; alphas (alphas2) float32 [E] there, or none.
 * gated: w holds W1 then W3 ([E, 2N, K/2]; blocked scales need N % 128 == 0)
 * and the output is silu(x W1^T alphas) * (x W3^T alphas2). Output [T (R),
 * N]; rows past offs[E - 1] are not written. With bf16 x, w may be int32
 * [E, N, K/8] (ops.pack_bf16_pairs). global_scale float32 [E] on x's device
 * (nvfp4.h's a_global): W4A4, each row quantized with its expert's first. */
Problem make_grouped(const OpName &op, const Tensor &x, const Tensor &w, const Tensor &w_sf, const Tensor &offs,
                     const std::optional<Tensor> &alphas, const std::optional<Tensor> &alphas2, bool gated,
                     const std::optional<Tensor> &row_index, const std::optional<Tensor> &global_scale) {
  TORCH_CHECK_TYPE(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op,
                   ": x must be float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK_VALUE(x.dim() == 2 && (x.stride(1) == 1 || x.size(1) == 1), op,
                    ": x must be [T, K], contiguous along K, got shape ", x.sizes(), " strides ", x.strides());
  /* weights repacked for bf16 (ops.pack_bf16_pairs: int32 words, nvfp4.h's NVFP4_CODES_BF16_PAIRS), read as their
   * bytes */
  const bool pairs = w.scalar_type() == at::kInt;
  TORCH_CHECK_TYPE(!pairs || x.scalar_type() == at::kBFloat16, op, ": weights repacked for bf16 (int32, ",
                   "ops.pack_bf16_pairs) need bfloat16 x, got ", x.scalar_type());
  const auto bytes = [&](const Tensor &t) { return pairs ? Arg(t).word_bytes() : Arg(t); };
  const Arg w_ = bytes(w);
  check_fp4_tensor(op, "w", w_);
  /* laid out by tile (layouts.to_expert_tiles, nvfp4.h): [E, tiles, ceil(K/256), 16384 bytes] codes, [E, tiles,
   * ceil(K/256), 2048] scales; a tile 128 rows, or a gated expert's 64 of W1 and 64 of W3 */
  const bool tiled = w.dim() == 4;
  TORCH_CHECK_VALUE(w.dim() == 3 || tiled, op, ": w must be [E, N, ", pairs ? "K/8" : "K/2", "]",
                    gated ? " (W1 then W3: 2N rows)" : "", " or laid out by tile (layouts.to_expert_tiles), got shape ",
                    w.sizes());
  const int64_t X = x.size(0), T = row_index ? row_index->size(0) : X, K = x.size(1), E = w.size(0),
                rows = tiled ? w.size(1) * NVFP4_TILE_ROWS : w.size(1), N = gated ? rows / 2 : rows;
  if (row_index) {
    TORCH_CHECK_TYPE(row_index->scalar_type() == at::kInt, op, ": row_index must be int32, got ",
                     row_index->scalar_type());
    TORCH_CHECK_VALUE(row_index->dim() == 1 && (row_index->stride(0) == 1 || T <= 1), op,
                      ": row_index must be a contiguous 1-D tensor (x's row of each row), got shape ",
                      row_index->sizes());
    TORCH_CHECK_VALUE(row_index->device() == x.device(), op, ": row_index is on ", row_index->device(),
                      " but x is on ", x.device());
    TORCH_CHECK_VALUE(X > 0 || T == 0, op, ": row_index has ", T, " rows but x has none to index");
  }
  const int64_t groups = tile_groups(K);
  TORCH_CHECK_VALUE(tiled || 2 * w_.size(2) == K, op, ": w ", pairs ? "(int32 words) has K/8=" : "has K/2=",
                    w.size(2), " but x has K=", K);
  TORCH_CHECK_VALUE(!tiled || (w_.size(2) == groups && w_.size(3) == 4 * NVFP4_TILE_STEP), op,
                    ": w laid out by tile must be [E, tiles, ceil(K/256)=", groups, ", ", 4 * NVFP4_TILE_STEP,
                    pairs ? " / 4 words" : " bytes", "] for x's K=", K, ", got shape ", w.sizes());
  TORCH_CHECK_VALUE(K > 0 && K % 16 == 0, op, ": K (= x.shape[1] = ", K,
                    ") must be a positive multiple of 16 (one e4m3 scale per 16 values)");
  TORCH_CHECK_VALUE(!gated || tiled || w.size(1) % 2 == 0, op, ": a gated w must have 2N rows (W1 then W3), got ",
                    w.size(1));
  TORCH_CHECK_TYPE(offs.scalar_type() == at::kInt, op, ": offs must be int32, got ", offs.scalar_type());
  TORCH_CHECK_VALUE(offs.dim() == 1 && offs.size(0) == E && (offs.stride(0) == 1 || E <= 1), op,
                    ": offs must be a contiguous [E] = [", E, "] tensor (one cumulative row end per expert), got shape ",
                    offs.sizes());
  Problem pr;
  pr.device = x.device();
  for (const auto &[name, t] : {std::pair<const char *, const Tensor *>{"w", &w}, {"w_sf", &w_sf}, {"offs", &offs}})
    TORCH_CHECK_VALUE(t->device() == pr.device, op, ": ", name, " is on ", t->device(), " but x is on ", pr.device);
  TORCH_CHECK_VALUE(pr.device.is_cpu() || pr.device.is_cuda(), op, ": tensors on ", pr.device,
                    " are not supported (CPU or CUDA)");
  /* the precondition on offs: checked for free in host memory; on a GPU where NVFP4_CHECK_OFFS asks (a copy to
   * the host and a sync a call, not while the stream is being captured into a CUDA graph) */
  const Tensor offs_host = pr.device.is_cpu() ? offs : check_offs_on_host(pr.device) ? offs.cpu() : Tensor();
  if (offs_host.defined()) {
    const int32_t *o = offs_host.const_data_ptr<int32_t>();
    for (int64_t e = 0; e < E; e++)
      TORCH_CHECK_VALUE(o[e] >= (e ? o[e - 1] : 0) && o[e] <= T, op, ": offs must be non-decreasing from 0 and at most ",
                        row_index ? "R=" : "T=", T, "; offs[", e, "] = ", o[e],
                        e ? " after " + std::to_string(o[e - 1]) : std::string());
    if (row_index) { /* the same precondition on the indices (the rows the experts take) */
      const Tensor ri = row_index->cpu();
      const int32_t *r = ri.const_data_ptr<int32_t>();
      for (int64_t i = 0; i < (E ? o[E - 1] : 0); i++)
        TORCH_CHECK_VALUE(r[i] >= 0 && r[i] < X, op, ": row_index must lie in [0, ", X, ") (x's rows), got ", r[i],
                          " at ", i);
    }
  }
  nvfp4_matmul &p = pr.p;
  p.m = T, p.n = N, p.k = K, p.batch = E;
  p.a.data = static_cast<const uint8_t *>(x.const_data_ptr());
  p.a.row_stride = x.stride(0) * 2;
  p.a_type = x.scalar_type() == at::kHalf ? NVFP4_F16 : NVFP4_BF16;
  if (tiled) {
    const Arg sf_(w_sf);
    check_tile_scales(op, "w", "w_sf", w_, sf_, E, groups);
    /* a gated tile: W1's rows at places 0..63, W3's at 64..127 */
    p.b = tile_operand(w_, sf_, 0, gated ? 64 : NVFP4_TILE_ROWS);
    if (gated) p.b2 = tile_operand(w_, sf_, 64, 64);
  } else if (gated) {
    const bool blocked = w_sf.dim() == 6;
    TORCH_CHECK_VALUE(!blocked || N % 128 == 0, op, ": blocked scales of a gated w need N % 128 == 0 (W1 and W3 "
                      "in whole 128-row atoms), got N=", N);
    make_operand(op, w_, "w_sf", Arg(w_sf), true, E, 2 * N, K, true);  // the whole of w_sf checked first
    const int64_t sf_rows = blocked ? N / 128 : N;
    const auto half = [&](const Tensor &t, int64_t i, int64_t rows) { return t.dim() >= 2 ? t.narrow(1, i * rows, rows) : t; };
    p.b = make_operand(op, bytes(half(w, 0, N)), "w_sf", Arg(half(w_sf, 0, sf_rows)), true, E, N, K, true);
    p.b2 = make_operand(op, bytes(half(w, 1, N)), "w_sf", Arg(half(w_sf, 1, sf_rows)), true, E, N, K, true);
  } else {
    p.b = make_operand(op, w_, "w_sf", Arg(w_sf), true, E, N, K, true);
  }
  if (pairs) p.b.codes = p.b2.codes = NVFP4_CODES_BF16_PAIRS;
  p.offs = offs.const_data_ptr<int32_t>();
  if (row_index) p.a_index = row_index->const_data_ptr<int32_t>(), p.a_rows = X;
  p.alpha = p.alpha2 = 1.0f;
  p.c_type = NVFP4_F16;
  auto per_expert = [&](const char *name, const std::optional<Tensor> &t, const float *&ptr) {
    if (!t) return;
    TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, op, ": ", name, " must be float32, got ", t->scalar_type());
    TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == E && (t->stride(0) == 1 || E <= 1), op, ": ", name,
                      " must be a contiguous [E] = [", E, "] tensor, got shape ", t->sizes());
    TORCH_CHECK_VALUE(t->device() == pr.device, op, ": ", name, " is on ", t->device(), " but x is on ", pr.device);
    ptr = t->const_data_ptr<float>();
  };
  per_expert(gated ? "alphas1" : "alphas", alphas, p.alpha_ptr);
  TORCH_CHECK_VALUE(gated || !alphas2, op, ": alphas2 is for a gated call");
  per_expert("alphas2", alphas2, p.alpha2_ptr);
  per_expert("global_scale", global_scale, p.a_global);
  /* host memory: checked without a sync (on a GPU, as quantize's device scales, not checked) */
  TORCH_CHECK_VALUE(!global_scale || !global_scale->device().is_cpu() ||
                        at::all(at::isfinite(*global_scale) & (*global_scale > 0)).item<bool>(),
                    op, ": global_scale must be finite and positive, got ", global_scale->min().item<float>(), " .. ",
                    global_scale->max().item<float>());
  pr.out_shape.push_back(T);
  pr.out_shape.push_back(N);
  return pr;
}

/* Rows by token or quantized first (row_index, global_scale) where the planned kernel does not take them as given
 * (nvfp4_matmul_cuda_reads_rows; the CPU kernel reads rows by token, not quantized ones): x's rows made first into a
 * scratch tensor (returned: alive until the launch is queued), gathered (nvfp4_gather_rows_cuda) or quantized to
 * their values, each with its expert's global scale (quantized_values' kernels, scale_offs), and the problem
 * pointed at them. */
Tensor prepare_rows(const OpName &op, Problem &pr, const Tensor &x) {
  nvfp4_matmul &p = pr.p;
  if (pr.device.is_cpu() ? !p.a_global : !p.a_index && !p.a_global) return Tensor();
#ifdef NVFP4_WITH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard;
  if (pr.device.is_cuda()) {
    guard.emplace(pr.device);
    if (nvfp4_matmul_cuda_reads_rows(&p)) return Tensor();
  }
#endif
  Tensor rows = at::empty({p.m, p.k}, x.options());
#ifdef NVFP4_WITH_CUDA
  if (pr.device.is_cuda() && !p.a_global) {
    const nvfp4_status st = nvfp4_gather_rows_cuda(p.a.data, p.a_rows, p.a.row_stride, 2 * p.k, p.a_index, p.m,
                                                   rows.data_ptr(), 2 * p.k,
                                                   c10::cuda::getCurrentCUDAStream(pr.device.index()).stream());
    TORCH_CHECK(st == NVFP4_OK, op, ": CUDA launch failed: ", status_text(st));
  }
#endif
  if (p.a_global && p.m) {
    nvfp4_quantize q{};
    q.rows = p.m, q.k = p.k, q.batch = 1;
    q.row_index = p.a_index, q.x_rows = x.size(0);
    q.row_scale = p.a_global, q.scale_offs = p.offs, q.scales = p.batch;
    q.sf_layout = NVFP4_SF_LINEAR;
    q.values = rows.data_ptr(), q.values_type = float_type_of(x.scalar_type());
    q.values_row_stride = p.k, q.values_batch_stride = p.m * p.k;
    quantize_run(op.op, q, x);
  }
  p.a.data = static_cast<const uint8_t *>(rows.const_data_ptr());
  p.a.row_stride = 2 * p.k;
  p.a_index = nullptr, p.a_rows = 0, p.a_global = nullptr;
  return rows;
}

Tensor grouped_mm(const Tensor &x, const Tensor &w, const Tensor &w_sf, const Tensor &offs,
                  const std::optional<Tensor> &alphas, const std::optional<Tensor> &alphas2, bool gated,
                  std::optional<at::ScalarType> out_dtype, const std::optional<Tensor> &row_index,
                  const std::optional<Tensor> &global_scale) {
  const OpName op{"nvfp4.grouped_mm"};
  Problem pr = make_grouped(op, x, w, w_sf, offs, alphas, alphas2, gated, row_index, global_scale);
  Tensor out = alloc_out(pr, x, out_type(op, out_dtype, x.scalar_type() == at::kBFloat16 ? at::kBFloat16 : at::kHalf));
  bind_out(op, pr, Arg(out, true), false);
  const Tensor rows = prepare_rows(op, pr, x);
  run(op, &pr.p, 1, pr.device);
  return out;
}

void grouped_mm_out(const Tensor &x, const Tensor &w, const Tensor &w_sf, const Tensor &offs,
                    const std::optional<Tensor> &alphas, const std::optional<Tensor> &alphas2, bool gated,
                    const Tensor &out, const std::optional<Tensor> &row_index,
                    const std::optional<Tensor> &global_scale) {
  const OpName op{"nvfp4.grouped_mm"};
  check_writable(op, "out", out,
                 {{"x", &x}, {"w", &w}, {"w_sf", &w_sf}, {"offs", &offs}, {"alphas", alphas ? &*alphas : nullptr},
                  {"alphas2", alphas2 ? &*alphas2 : nullptr}, {"row_index", row_index ? &*row_index : nullptr},
                  {"global_scale", global_scale ? &*global_scale : nullptr}});
  Problem pr = make_grouped(op, x, w, w_sf, offs, alphas, alphas2, gated, row_index, global_scale);
  bind_out(op, pr, Arg(out, true), false);
  const Tensor rows = prepare_rows(op, pr, x);
  run(op, &pr.p, 1, pr.device);
}

/* A grouped call's arguments, group g's at index g (held in place: a group
 * of 8 needs no heap memory). */
using Args = c10::SmallVector<Arg, 8>;
using Problems = c10::SmallVector<Problem, 8>;

Args args_of(const at::TensorList ts, bool writable = false) {
  Args r;
  for (const Tensor &t : ts) r.emplace_back(t, writable);
  return r;
}

void check_group_lists(size_t a, size_t b, size_t sfa, size_t sfb) {
  const char *op = "nvfp4.group_gemm";
  TORCH_CHECK_VALUE(a > 0, op, ": the lists are empty; give at least one problem");
  TORCH_CHECK_VALUE(b == a && sfa == a && sfb == a, op, ": the lists must have equal lengths, got a=", a, " b=", b,
                    " sfa=", sfa, " sfb=", sfb);
}

/* alphas: one float32 per group, [G] (on the CPU: read on the host; on the
 * groups' device: group g's alpha at alphas + g). */
Problems make_group(const Args &as, const Args &bs, const Args &sfas, const Args &sfbs,
                    const std::optional<Tensor> &alphas = std::nullopt) {
  check_group_lists(as.size(), bs.size(), sfas.size(), sfbs.size());
  Problems prs;
  for (size_t g = 0; g < as.size(); g++) {
    prs.push_back(make_problem({"nvfp4.group_gemm", (int64_t)g}, as[g], bs[g], nullptr, &sfas[g], sfbs[g], nullptr,
                               std::nullopt, false));
    TORCH_CHECK_VALUE(prs[g].device == prs[0].device, "nvfp4.group_gemm: group ", g, " is on ", prs[g].device,
                      " but group 0 is on ", prs[0].device);
  }
  if (alphas) {
    const char *op = "nvfp4.group_gemm";
    const Tensor &t = *alphas;
    TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, op, ": alphas must be a float32 tensor, got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == (int64_t)prs.size(), op, ": alphas must be [G] = [", prs.size(),
                      "] (one per group), got shape ", t.sizes());
    if (t.device().is_cpu()) {
      const Tensor c = t.contiguous();
      for (size_t g = 0; g < prs.size(); g++) prs[g].p.alpha = c.const_data_ptr<float>()[g];
    } else {
      TORCH_CHECK_VALUE(t.device() == prs[0].device, op, ": alphas is on ", t.device(), " but the groups are on ",
                        prs[0].device);
      for (size_t g = 0; g < prs.size(); g++) prs[g].p.alpha_ptr = t.const_data_ptr<float>() + g * t.stride(0);
    }
  }
  return prs;
}

void run_group(Problems &prs) {
  c10::SmallVector<nvfp4_matmul, 8> ps;
  for (const Problem &pr : prs) ps.push_back(pr.p);
  run({"nvfp4.group_gemm"}, ps.data(), ps.size(), prs[0].device);
}

/* outs: writable Args */
void group_out(const Args &as, const Args &bs, const Args &sfas, const Args &sfbs, const Args &outs,
               const std::optional<Tensor> &alphas = std::nullopt) {
  Problems prs = make_group(as, bs, sfas, sfbs, alphas);
  TORCH_CHECK_VALUE(outs.size() == as.size(), "nvfp4.group_gemm: out has ", outs.size(), " tensors for ", as.size(),
                    " problems");
  for (size_t g = 0; g < prs.size(); g++) bind_out({"nvfp4.group_gemm", (int64_t)g}, prs[g], outs[g], false);
  run_group(prs);
}

void group_gemm_out(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                    const at::TensorList sfbs, const std::optional<Tensor> &alphas, const at::TensorList outs) {
  // each out against its own group's inputs, and against the outs next to it in memory (sorted by address:
  // two that overlap have an overlapping pair among neighbours), not every pair of a large group
  c10::SmallVector<size_t, 8> order;
  for (size_t g = 0; g < outs.size(); g++) {
    const OpName op{"nvfp4.group_gemm", (int64_t)g};
    if (g < as.size() && g < bs.size() && g < sfas.size() && g < sfbs.size())
      check_writable(op, "out", outs[g], {{"a", &as[g]}, {"b", &bs[g]}, {"sfa", &sfas[g]}, {"sfb", &sfbs[g]},
                                          {"alphas", alphas ? &*alphas : nullptr}});
    order.push_back(g);
  }
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return (uintptr_t)outs[x].const_data_ptr() < (uintptr_t)outs[y].const_data_ptr();
  });
  for (size_t i = 1; i < order.size(); i++)
    check_writable({"nvfp4.group_gemm", (int64_t)order[i]}, "out", outs[order[i]],
                   {{"the out of another group", &outs[order[i - 1]]}});
  group_out(args_of(as), args_of(bs), args_of(sfas), args_of(sfbs), args_of(outs, true), alphas);
}

std::vector<Tensor> group_gemm(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                               const at::TensorList sfbs, const std::optional<Tensor> &alphas,
                               std::optional<at::ScalarType> out_dtype) {
  const at::ScalarType type = out_type({"nvfp4.group_gemm"}, out_dtype);
  Problems prs = make_group(args_of(as), args_of(bs), args_of(sfas), args_of(sfbs), alphas);
  std::vector<Tensor> outs;
  for (size_t g = 0; g < prs.size(); g++) {
    outs.push_back(alloc_out(prs[g], as[g], type));
    bind_out({"nvfp4.group_gemm", (int64_t)g}, prs[g], Arg(outs[g], true), false);
  }
  run_group(prs);
  return outs;
}

/* The GPU MODE harness's tensors (docs/competition.md): a, b, c as (R, C, L) views of
 * [L, R, C] memory; the permuted scales (32, 4, RB, 4, KB4, L) of
 * [L, RB, KB4, 32, 4, 4] memory. The competition_* ops below take them as
 * they come and read them through permuted Args, with no view tensors: host
 * time per call is what the harness's back-to-back loop pays for. */
std::string group_index(int64_t g) { return g < 0 ? std::string() : "[" + std::to_string(g) + "]"; }

/* `name` (with [g] for a group's tensor, g >= 0) appears only in the error. */
Arg harness_rows(const char *op, const char *name, const Tensor &t, int64_t g = -1, bool writable = false) {
  TORCH_CHECK_VALUE(t.dim() == 3, op, ": ", name, group_index(g), " must be (R, C, L), got ", t.dim(), " dims");
  return Arg(t, {2, 0, 1}, writable);
}

Arg harness_blocked(const char *op, const char *name, const Tensor &t, int64_t g = -1) {
  TORCH_CHECK_VALUE(t.dim() == 6, op, ": ", name, group_index(g),
                    " must be permuted scales (32, 4, RB, 4, KB4, L), got ", t.dim(), " dims");
  return Arg(t, {5, 2, 4, 0, 1, 3});
}

/* The group gemm's lists (a, b, c and the permuted scales of each group). */
void competition_group_gemm(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                            const at::TensorList sfbs, const at::TensorList cs) {
  const char *op = "nvfp4.competition_group_gemm";
  TORCH_CHECK_VALUE(bs.size() == as.size() && sfas.size() == as.size() && sfbs.size() == as.size() &&
                        cs.size() == as.size(),
                    op, ": the lists must have equal lengths, got a=", as.size(), " b=", bs.size(),
                    " sfa=", sfas.size(), " sfb=", sfbs.size(), " c=", cs.size());
  Args a2, b2, sfa2, sfb2, c2;
  for (size_t g = 0; g < as.size(); g++) {
    a2.push_back(harness_rows(op, "a", as[g], g));
    b2.push_back(harness_rows(op, "b", bs[g], g));
    c2.push_back(harness_rows(op, "c", cs[g], g, true));
    sfa2.push_back(harness_blocked(op, "sfa", sfas[g], g));
    sfb2.push_back(harness_blocked(op, "sfb", sfbs[g], g));
  }
  group_out(a2, b2, sfa2, sfb2, c2);
}

/* The gemv / gemm tuple (a, b, sfa, sfb, sfa_perm, sfb_perm, c). gemv (c is
 * (M, 1, L), b has the harness's 128 padded rows) reads the linear scales and
 * row 0 of b; gemm the permuted ones. */
void competition_gemm(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb, const Tensor &sfa_perm,
                      const Tensor &sfb_perm, const Tensor &c) {
  const char *op = "nvfp4.competition_gemm";
  const Arg c3 = harness_rows(op, "c", c, -1, true), b3 = harness_rows(op, "b", b);
  if (c3.size(2) == 1 && b3.size(1) == 128) {  // gemv: row 0 of b and of its scales is the vector
    const Arg sfb3 = harness_rows(op, "sfb", sfb);
    const Arg sfa3 = harness_rows(op, "sfa", sfa);
    matmul_out("nvfp4.gemv", true, harness_rows(op, "a", a), b3.select0(1), nullptr, &sfa3, sfb3.select0(1), nullptr,
               NO_EPI, c3.select0(2));
  } else {
    const Arg sfa3 = harness_blocked(op, "sfa_perm", sfa_perm);
    matmul_out("nvfp4.gemm", false, harness_rows(op, "a", a), b3, nullptr, &sfa3, harness_blocked(op, "sfb_perm", sfb_perm),
               nullptr, NO_EPI, c3);
  }
}

/* The dual gemm tuple (a, b1, b2, sfa, sfb1, sfb2, sfa_perm, sfb1_perm,
 * sfb2_perm, c): the permuted scales are read. */
void competition_dual_gemm(const Tensor &a, const Tensor &b1, const Tensor &b2, const Tensor &sfa, const Tensor &sfb1,
                           const Tensor &sfb2, const Tensor &sfa_perm, const Tensor &sfb1_perm,
                           const Tensor &sfb2_perm, const Tensor &c) {
  const char *op = "nvfp4.competition_dual_gemm";
  (void)sfa, (void)sfb1, (void)sfb2;
  const Arg b2_ = harness_rows(op, "b2", b2), sfb2_ = harness_blocked(op, "sfb2_perm", sfb2_perm);
  const Arg sfa_ = harness_blocked(op, "sfa_perm", sfa_perm);
  matmul_out("nvfp4.dual_gemm", false, harness_rows(op, "a", a), harness_rows(op, "b1", b1), &b2_, &sfa_,
             harness_blocked(op, "sfb1_perm", sfb1_perm), &sfb2_, NO_EPI, harness_rows(op, "c", c, -1, true));
}

/* W4A16 weights repacked for bf16 activations (nvfp4.h, NVFP4_CODES_BF16_PAIRS): codes [..., K/2] (uint8 or
 * float4_e2m1fn_x2) -> int32 [..., K/8], each word through nvfp4_pairs_pack (numerics.h); unpack: the inverse,
 * as uint8. Set-up work, done on the host (a CUDA tensor goes there and back). */
Tensor repack_words(const Tensor &t, bool pack) {
  const OpName op{pack ? "nvfp4.pack_bf16_pairs" : "nvfp4.unpack_bf16_pairs"};
  if (pack) {
    TORCH_CHECK_TYPE(is_fp4(t.scalar_type()), op, ": b must be float4_e2m1fn_x2 or uint8 (two e2m1 codes per byte), ",
                     "got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() >= 1 && t.size(-1) % 8 == 0, op, ": b must be [..., K/2] with K a multiple of 16, got "
                      "shape ", t.sizes());
  } else {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, op, ": w must be int32 (pack_bf16_pairs's words), got ",
                     t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() >= 1 && t.size(-1) % 2 == 0, op, ": w must be [..., K/8] with K a multiple of 16, got "
                      "shape ", t.sizes());
  }
  const Tensor src = (pack ? t.view(at::kByte) : t).to(at::kCPU).contiguous().view(at::kInt);
  Tensor out = at::empty_like(src);
  const uint32_t *in = reinterpret_cast<const uint32_t *>(src.const_data_ptr<int32_t>());
  uint32_t *dst = reinterpret_cast<uint32_t *>(out.data_ptr<int32_t>());
  at::parallel_for(0, src.numel(), 1 << 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) dst[i] = pack ? nvfp4_pairs_pack(in[i]) : nvfp4_pairs_unpack(in[i]);
  });
  return (pack ? out : out.view(at::kByte)).to(t.device());
}
Tensor pack_bf16_pairs(const Tensor &b) { return repack_words(b, true); }
Tensor unpack_bf16_pairs(const Tensor &w) { return repack_words(w, false); }

/* Which kernel, and how configured, `op` would run on these tensors (as the
 * op takes them, in order; group_gemm's four lists one after another): the
 * plan of csrc/cuda/plan.cu, or "cpu". Validates as the op does. */
std::string kernel_name(std::string op, const at::TensorList ts) {
  const OpName name{"nvfp4.kernel_name"};
  const Args args = args_of(ts);
  auto takes = [&](size_t n) {
    TORCH_CHECK_VALUE(args.size() == n, name, ": ", op, " takes ", n, " tensors, got ", args.size());
  };
  Problems prs;
  if (op == "gemv" || op == "gemm") {
    takes(4);
    prs.push_back(make_problem({op.c_str()}, args[0], args[1], nullptr, &args[2], args[3], nullptr, std::nullopt,
                               op == "gemv"));
  } else if (op == "dual_gemm") {
    takes(6);
    prs.push_back(make_problem({"nvfp4.dual_gemm"}, args[0], args[1], &args[2], &args[3], args[4], &args[5],
                               std::nullopt, false));
  } else if (op == "gemm_w4a16" || op == "dual_gemm_w4a16" || op == "gemm_w4a4" || op == "dual_gemm_w4a4") {
    const bool dual = op.rfind("dual", 0) == 0, w4a4 = op.find("w4a4") != std::string::npos; /* x, no scale */
    takes(dual ? 5 : 3);
    const Tensor xt = w4a16_rows(op.c_str(), ts[0], ts[1]);
    const Arg x(xt);
    if (w4a4) check_w4a4_weights(op.c_str(), args[1], dual ? &args[2] : nullptr);
    prs.push_back(make_problem({op.c_str()}, x, args[1], dual ? &args[2] : nullptr, nullptr, args[dual ? 3 : 2],
                               dual ? &args[4] : nullptr, std::nullopt, false));
    Problem &pr = prs[0];
    /* the output as the op allocates it: x's dtype, contiguous */
    pr.p.c_type = pr.p.a_type, pr.p.c_row_stride = pr.p.n, pr.p.c_batch_stride = xt.dim() == 3 ? pr.p.m * pr.p.n : 0;
#ifdef NVFP4_WITH_CUDA
    /* W4A4: as w4a4_run plans it for a global scale given as a tensor */
    const float *scale = reinterpret_cast<const float *>(UNALLOCATED);
    if (w4a4 && pr.device.is_cuda() && quantizes_in_kernel(pr.p, scale, pr.device))
      pr.p.a_global = scale;
    else if (w4a4 && pr.device.is_cuda() && !quantizes_to_values(pr.p, pr.device, xt.dim() == 3))
      set_codes(pr.p, UNALLOCATED, UNALLOCATED, xt.dim() == 3);
#endif
  } else if (op == "grouped_mm" || op == "grouped_mm_gated") {
    takes(4);
    prs.push_back(make_grouped({"nvfp4.grouped_mm"}, ts[0], ts[1], ts[2], ts[3], std::nullopt, std::nullopt,
                               op == "grouped_mm_gated", std::nullopt, std::nullopt));
  } else if (op == "group_gemm") {
    const size_t n = args.size() / 4;
    TORCH_CHECK_VALUE(n > 0 && args.size() % 4 == 0, name,
                      ": group_gemm takes its four lists (a, b, sfa, sfb) one after another, got ", args.size(),
                      " tensors");
    auto part = [&](size_t i) { return Args(args.begin() + i * n, args.begin() + (i + 1) * n); };
    prs = make_group(part(0), part(1), part(2), part(3));
  } else {
    TORCH_CHECK_VALUE(false, name, ": op must be \"gemv\", \"gemm\", \"dual_gemm\", \"group_gemm\", \"gemm_w4a16\", "
                      "\"dual_gemm_w4a16\", \"gemm_w4a4\", \"dual_gemm_w4a4\", \"grouped_mm\" or \"grouped_mm_gated\", "
                      "got \"", op, "\"");
  }
  if (prs[0].device.is_cpu()) return "cpu";
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(prs[0].device);
  c10::SmallVector<nvfp4_matmul, 8> ps;
  for (const Problem &pr : prs) ps.push_back(pr.p);
  char buf[160];
  const nvfp4_status st = nvfp4_matmul_cuda_describe(ps.data(), (int)ps.size(), buf, sizeof buf);
  TORCH_CHECK(st == NVFP4_OK, name, ": ", status_text(st));
  return buf;
#else
  TORCH_CHECK_VALUE(false, name, ": this build of nvfp4_kernels has no CUDA kernels (built CPU-only)");
#endif
}

/* Quantization's input x [K], [R, K] or [L, R, K] (float32, float16 or
 * bfloat16, K contiguous, any other strides) and global scale (a float32
 * tensor of one value, or, where rows_ok, one per row: x.shape[:-1]) into q. */
void quantize_input(const char *op, nvfp4_quantize &q, const Tensor &x, const std::optional<Tensor> &global_scale,
                    bool rows_ok) {
  const at::ScalarType type = x.scalar_type();
  TORCH_CHECK_TYPE(type == at::kFloat || type == at::kHalf || type == at::kBFloat16, op,
                   ": x must be float32, float16 or bfloat16, got ", type);
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.dim() <= 3, op, ": x must be [K], [R, K] or [L, R, K], got shape ", x.sizes());
  const int64_t K = x.size(-1);
  TORCH_CHECK_VALUE(K > 0 && K % 16 == 0, op, ": K (x.shape[-1] = ", K,
                    ") must be a positive multiple of 16 (one e4m3 scale per 16 values)");
  TORCH_CHECK_VALUE(x.stride(-1) == 1, op, ": x must be contiguous along K (last-dim stride 1), got strides ",
                    x.strides());
  TORCH_CHECK_VALUE(x.device().is_cpu() || x.device().is_cuda(), op, ": tensors on ", x.device(),
                    " are not supported (CPU or CUDA)");
  const bool batched = x.dim() == 3, rows_dim = x.dim() >= 2;
  q.rows = rows_dim ? x.size(-2) : 1, q.k = K, q.batch = batched ? x.size(0) : 1;
  q.scale = 1.0f;
  if (global_scale) {
    const Tensor &g = *global_scale;
    TORCH_CHECK_TYPE(g.scalar_type() == at::kFloat, op, ": global_scale must be a float32 tensor, got ",
                     g.scalar_type());
    const bool per_row = rows_ok && rows_dim && g.sizes() == x.sizes().slice(0, x.dim() - 1) && g.numel() != 1;
    TORCH_CHECK_VALUE(g.numel() == 1 || per_row, op, ": global_scale must hold one value",
                      rows_ok ? " or one per row (x.shape[:-1] = " + c10::str(x.sizes().slice(0, x.dim() - 1)) + ")"
                              : std::string(),
                      ", got shape ", g.sizes());
    if (g.device().is_cpu() && !per_row) {
      q.scale = g.item<float>();  // host memory: no synchronisation
      TORCH_CHECK_VALUE(std::isfinite(q.scale) && q.scale > 0.0f, op, ": global_scale must be finite and positive, got ",
                        q.scale);
    } else {
      TORCH_CHECK_VALUE(g.device() == x.device(), op, ": global_scale is on ", g.device(), " but x is on ", x.device());
      TORCH_CHECK_VALUE(!per_row || g.is_contiguous(), op, ": a global_scale per row must be contiguous, got strides ",
                        g.strides());
      /* host memory: checked without a sync (on the device, as one device scale, not checked) */
      TORCH_CHECK_VALUE(!g.device().is_cpu() || at::all(at::isfinite(g) & (g > 0)).item<bool>(), op,
                        ": global_scale must be finite and positive, got ", g.min().item<float>(), " .. ",
                        g.max().item<float>());
      (per_row ? q.row_scale : q.scale_ptr) = g.const_data_ptr<float>();
    }
  }
}

/* q's kernel on x's device (x as quantize_input took it; q's outputs set). */
void quantize_run(const char *op, nvfp4_quantize &q, const Tensor &x) {
  const int64_t K = x.size(-1), R = q.rows;
  if (x.device().is_cpu()) {
#ifdef NVFP4_NO_CPU
    TORCH_CHECK_VALUE(false, op, ": this build has no CPU kernels (a CUDA-only bundle): pass CUDA tensors");
#else
    const Tensor x32 = x.to(at::kFloat).contiguous();  // the C kernel reads float32 (fp16 / bf16 convert exactly)
    q.x = x32.const_data_ptr<float>(), q.x_type = NVFP4_F32;
    q.x_row_stride = K, q.x_batch_stride = R * K;
    std::atomic<int> status{NVFP4_OK};
    at::parallel_for(0, nvfp4_sf_grid_rows(q.sf_layout, R), 16, [&](int64_t r0, int64_t r1) {
      const nvfp4_status st = nvfp4_quantize_cpu(&q, r0, r1);
      if (st != NVFP4_OK) status = st;
    });
    TORCH_CHECK(status == NVFP4_OK, op, ": CPU kernel failed: ", status_text((nvfp4_status)status.load()));
#endif
    return;
  }
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(x.device());
  const at::ScalarType type = x.scalar_type();
  q.x = x.const_data_ptr();
  q.x_type = float_type_of(type);
  q.x_row_stride = x.dim() >= 2 ? x.stride(-2) : 0, q.x_batch_stride = x.dim() == 3 ? x.stride(0) : 0;
  const nvfp4_status st = nvfp4_quantize_cuda(&q, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(st == NVFP4_OK, op, ": CUDA launch failed: ", status_text(st),
              st == NVFP4_ERR_CUDA ? std::string(" (") + cudaGetErrorString(cudaGetLastError()) + ")" : "");
#else
  TORCH_CHECK_VALUE(false, op, ": this build of nvfp4_kernels has no CUDA kernels (built CPU-only)");
#endif
}

/* Quantization: x -> (codes uint8 [..., K/2], scales float8_e4m3fn linear
 * [..., K/16] or blocked [L?, ceil(R/128), ceil(K/64), 32, 4, 4]), the shapes
 * the ops above take (x [K]: gemv's vector). Values are x * global_scale
 * (nvfp4_quantize_block in numerics.h). */
std::tuple<Tensor, Tensor> quantize(const Tensor &x, const std::optional<Tensor> &global_scale, bool blocked) {
  const char *op = "nvfp4.quantize";
  nvfp4_quantize q{};
  quantize_input(op, q, x, global_scale, false);
  const int64_t K = q.k, R = q.rows, L = q.batch, KB = K / 16;
  const int32_t layout = blocked ? NVFP4_SF_BLOCKED : NVFP4_SF_LINEAR;
  /* the scale grid written, the blocked layout's padding included */
  const int64_t grid_rows = nvfp4_sf_grid_rows(layout, R), grid_cols = nvfp4_sf_grid_cols(layout, KB);
  c10::SmallVector<int64_t, 6> data_shape(x.sizes().begin(), x.sizes().end()), sf_shape;
  data_shape.back() = K / 2;
  if (blocked) {
    if (x.dim() == 3) sf_shape.push_back(L);
    for (int64_t d : {grid_rows / 128, grid_cols / 4, (int64_t)32, (int64_t)4, (int64_t)4}) sf_shape.push_back(d);
  } else {
    sf_shape.assign(x.sizes().begin(), x.sizes().end());
    sf_shape.back() = KB;
  }
  Tensor data = at::empty(data_shape, x.options().dtype(at::kByte));
  Tensor sf = at::empty(sf_shape, x.options().dtype(at::kFloat8_e4m3fn));
  q.data = data.mutable_data_ptr<uint8_t>();
  q.data_row_stride = K / 2, q.data_batch_stride = R * (K / 2);
  q.sf = static_cast<uint8_t *>(sf.data_ptr());
  q.sf_layout = layout;
  q.sf_row_stride = blocked ? 0 : KB;
  q.sf_batch_stride = grid_rows * grid_cols;
  if (R == 0 || L == 0) return {data, sf};
  quantize_run(op, q, x);
  return {data, sf};
}

/* Quantized values (nvfp4.h): x -> a tensor like x (contiguous) of the values
 * quantize(x, global_scale)'s codes and scales stand for, exact; global_scale
 * one value or one per row. row_index (int32 [R], x [rows, K]): output row r
 * from x's row row_index[r]; scale_index (int32, one per output row):
 * global_scale is a float32 table and row r takes its entry scale_index[r]. */
Tensor quantized_values(const Tensor &x, const std::optional<Tensor> &global_scale,
                        const std::optional<Tensor> &row_index, const std::optional<Tensor> &scale_index) {
  const char *op = "nvfp4.quantized_values";
  auto index = [&](const Tensor &t, const char *name) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, op, ": ", name, " must be int32, got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() == 1 && t.is_contiguous(), op, ": ", name, " must be a contiguous 1-D tensor, got shape ",
                      t.sizes(), " and strides ", t.strides());
    TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " is on ", t.device(), " but x is on ", x.device());
    TORCH_CHECK_VALUE(t.numel() < INT32_MAX, op, ": ", name, " holds at most 2^31 - 1 rows, got ", t.numel());
  };
  /* host memory: the range checked here, without a sync (on CUDA an index outside gives NaN values) */
  auto in_range = [&](const Tensor &t, const char *name, int64_t n, const char *what) {
    TORCH_CHECK_VALUE(!t.device().is_cpu() || t.numel() == 0 || (t.min().item<int32_t>() >= 0 &&
                                                                 t.max().item<int32_t>() < n),
                      op, ": ", name, " must lie in [0, ", n, ") (", what, "), got ",
                      t.numel() ? t.min().item<int32_t>() : 0, " .. ", t.numel() ? t.max().item<int32_t>() : 0);
  };
  nvfp4_quantize q{};
  quantize_input(op, q, x, scale_index ? std::nullopt : global_scale, true);
  c10::SmallVector<int64_t, 3> shape(x.sizes().begin(), x.sizes().end());
  if (row_index) {
    index(*row_index, "row_index");
    TORCH_CHECK_VALUE(x.dim() == 2, op, ": with row_index, x must be [rows, K], got shape ", x.sizes());
    TORCH_CHECK_VALUE(scale_index || !global_scale || global_scale->numel() == 1, op,
                      ": with row_index, global_scale is one value, or a table that scale_index indexes");
    in_range(*row_index, "row_index", x.size(0), "x's rows");
    q.row_index = row_index->const_data_ptr<int32_t>();
    q.x_rows = x.size(0);
    q.rows = shape[0] = row_index->numel();
  }
  Tensor table;
  if (scale_index) {
    index(*scale_index, "scale_index");
    TORCH_CHECK_VALUE(global_scale.has_value(), op, ": scale_index needs a global_scale table");
    table = *global_scale;
    TORCH_CHECK_TYPE(table.scalar_type() == at::kFloat, op, ": global_scale must be a float32 tensor, got ",
                     table.scalar_type());
    TORCH_CHECK_VALUE(table.dim() == 1 && table.numel() >= 1 && table.is_contiguous(), op,
                      ": with scale_index, global_scale must be a contiguous 1-D table, got shape ", table.sizes());
    TORCH_CHECK_VALUE(table.device() == x.device(), op, ": global_scale is on ", table.device(), " but x is on ",
                      x.device());
    TORCH_CHECK_VALUE(scale_index->numel() == q.rows * q.batch, op, ": scale_index must hold one index per row (",
                      q.rows * q.batch, "), got ", scale_index->numel());
    /* host memory: checked without a sync (on the device, not checked) */
    TORCH_CHECK_VALUE(!table.device().is_cpu() || at::all(at::isfinite(table) & (table > 0)).item<bool>(), op,
                      ": global_scale must be finite and positive, got ", table.min().item<float>(), " .. ",
                      table.max().item<float>());
    in_range(*scale_index, "scale_index", table.numel(), "global_scale's entries");
    q.row_scale = table.const_data_ptr<float>(), q.scale_index = scale_index->const_data_ptr<int32_t>();
    q.scales = table.numel();
  }
  Tensor out = at::empty(shape, x.options().memory_format(at::MemoryFormat::Contiguous));
  if (q.rows == 0 || q.batch == 0) return out;
  const at::ScalarType type = x.scalar_type();
  q.sf_layout = NVFP4_SF_LINEAR;
  q.values = out.data_ptr();
  q.values_type = float_type_of(type);
  q.values_row_stride = q.k, q.values_batch_stride = q.rows * q.k;
  quantize_run(op, q, x);
  return out;
}

/* fn(t0, t1) over ranges of [0, n) on torch's thread pool: a failing range's status, else NVFP4_OK. */
template <typename F>
nvfp4_status cpu_ranges(int64_t n, F fn) {
  std::atomic<int> status{NVFP4_OK};
  at::parallel_for(0, n, 1, [&](int64_t t0, int64_t t1) {
    const nvfp4_status s = fn(t0, t1);
    if (s != NVFP4_OK) status = s;
  });
  return (nvfp4_status)status.load();
}

void moe_device(const char *op, const Tensor &t) {
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), op, ": tensors on ", t.device(),
                    " are not supported (CPU or CUDA)");
}

/* A mixture of experts' pairs grouped by expert (nvfp4.h, nvfp4_moe_sort):
 * ids [T, top_k] int32 / int64 -> (token_of_row [T * top_k], expert_of_row
 * [T * top_k], row_of_pair [T, top_k], offs [num_experts]), int32. */
std::tuple<Tensor, Tensor, Tensor, Tensor> moe_sort(const Tensor &ids, int64_t num_experts) {
  const char *op = "nvfp4.moe_sort";
  TORCH_CHECK_TYPE(ids.scalar_type() == at::kLong || ids.scalar_type() == at::kInt, op,
                   ": ids must be int64 or int32, got ", ids.scalar_type());
  TORCH_CHECK_VALUE(ids.dim() == 2 && ids.size(1) >= 1, op, ": ids must be [T, top_k] with top_k >= 1, got shape ",
                    ids.sizes());
  TORCH_CHECK_VALUE(num_experts >= 1 && num_experts <= NVFP4_MOE_MAX_EXPERTS, op, ": num_experts must be in [1, ",
                    NVFP4_MOE_MAX_EXPERTS, "], got ", num_experts);
  TORCH_CHECK_VALUE(ids.numel() < INT32_MAX, op, ": at most 2^31 - 1 pairs, got ", ids.numel());
  moe_device(op, ids);
  const Tensor in = ids.contiguous();
  const auto i32 = ids.options().dtype(at::kInt);
  Tensor token_of_row = at::empty({ids.numel()}, i32), expert_of_row = at::empty({ids.numel()}, i32);
  Tensor row_of_pair = at::empty(ids.sizes(), i32), offs = at::empty({num_experts}, i32);
  nvfp4_moe_sort s{};
  s.pairs = ids.numel(), s.top_k = ids.size(1), s.experts = num_experts;
  s.ids = in.const_data_ptr(), s.ids64 = ids.scalar_type() == at::kLong;
  s.token_of_row = token_of_row.mutable_data_ptr<int32_t>();
  s.expert_of_row = expert_of_row.mutable_data_ptr<int32_t>();
  s.row_of_pair = row_of_pair.mutable_data_ptr<int32_t>(), s.offs = offs.mutable_data_ptr<int32_t>();
  nvfp4_status st = NVFP4_ERR_INVALID;
  if (ids.device().is_cpu()) {
#ifdef NVFP4_NO_CPU
    TORCH_CHECK_VALUE(false, op, ": this build has no CPU kernels (a CUDA-only bundle): pass CUDA tensors");
#else
    st = nvfp4_moe_sort_cpu(&s);
    TORCH_CHECK_VALUE(st == NVFP4_OK, op, ": ids must lie in [0, num_experts = ", num_experts, "), got ",
                      ids.min().item<int64_t>(), " .. ", ids.max().item<int64_t>());
#endif
    return {token_of_row, expert_of_row, row_of_pair, offs};
  }
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(ids.device());
  /* several CTAs' counts (a prefill's pairs), from the caching allocator: no sync, capturable; none at decode */
  const int64_t scratch_ints = nvfp4_moe_sort_scratch(s.pairs, num_experts);
  Tensor scratch;
  if (scratch_ints) {
    scratch = at::empty({scratch_ints}, i32);
    s.scratch = scratch.mutable_data_ptr<int32_t>();
  }
  st = nvfp4_moe_sort_cuda(&s, c10::cuda::getCurrentCUDAStream(ids.device().index()).stream());
#endif
  TORCH_CHECK(st == NVFP4_OK, op, ": CUDA launch failed: ", status_text(st));
  return {token_of_row, expert_of_row, row_of_pair, offs};
}

/* A mixture of experts' routing (nvfp4.h, nvfp4_moe_route): logits [T, E]
 * float32 / float16 / bfloat16 -> (weights [T, top_k] float32, ids [T, top_k]
 * int32), each token's experts in rank order. */
std::tuple<Tensor, Tensor> moe_route(const Tensor &logits, int64_t top_k, bool sigmoid, const std::optional<Tensor> &bias,
                                     int64_t groups, int64_t top_groups, bool renormalize, double scale) {
  const char *op = "nvfp4.moe_route";
  const auto type = logits.scalar_type();
  TORCH_CHECK_TYPE(type == at::kFloat || type == at::kHalf || type == at::kBFloat16, op,
                   ": logits must be float32, float16 or bfloat16, got ", type);
  TORCH_CHECK_VALUE(logits.dim() == 2, op, ": logits must be [T, num_experts], got shape ", logits.sizes());
  const int64_t experts = logits.size(1);
  TORCH_CHECK_VALUE(experts >= 1 && experts <= NVFP4_MOE_ROUTE_MAX_EXPERTS, op, ": num_experts must be in [1, ",
                    NVFP4_MOE_ROUTE_MAX_EXPERTS, "], got ", experts);
  TORCH_CHECK_VALUE(groups >= 1 && groups <= 32 && experts % groups == 0 && top_groups >= 1 && top_groups <= groups,
                    op, ": n_group must divide num_experts = ", experts, " and be at most 32, 1 <= topk_group <= n_group;",
                    " got n_group ", groups, ", topk_group ", top_groups);
  TORCH_CHECK_VALUE(groups == 1 || sigmoid, op, ": expert groups go with sigmoid scoring");
  const int64_t open = groups > 1 ? top_groups * (experts / groups) : experts;
  TORCH_CHECK_VALUE(top_k >= 1 && top_k <= 32 && top_k <= open, op, ": top_k must be in [1, min(32, ", open,
                    " competing experts)], got ", top_k);
  TORCH_CHECK_VALUE(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  moe_device(op, logits);
  Tensor bc;
  if (bias.has_value()) {
    TORCH_CHECK_VALUE(sigmoid, op, ": a correction bias goes with sigmoid scoring");
    TORCH_CHECK_TYPE(bias->scalar_type() == at::kFloat, op, ": bias must be float32, got ", bias->scalar_type());
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == experts, op, ": bias must be [num_experts = ", experts,
                      "], got shape ", bias->sizes());
    TORCH_CHECK_VALUE(bias->device() == logits.device(), op, ": bias must be on logits' device ", logits.device(),
                      ", got ", bias->device());
    bc = bias->contiguous();
  }
  const Tensor lc = logits.contiguous();
  Tensor weights = at::empty({logits.size(0), top_k}, logits.options().dtype(at::kFloat));
  Tensor ids = at::empty({logits.size(0), top_k}, logits.options().dtype(at::kInt));
  nvfp4_moe_route r{};
  r.tokens = logits.size(0), r.experts = experts, r.top_k = top_k, r.groups = groups, r.top_groups = top_groups;
  r.logits = lc.const_data_ptr(), r.logits_type = float_type_of(type);
  r.sigmoid = sigmoid, r.renormalize = renormalize, r.scale = (float)scale;
  r.bias = bc.defined() ? bc.const_data_ptr<float>() : nullptr;
  r.ids = ids.mutable_data_ptr<int32_t>(), r.weights = weights.mutable_data_ptr<float>();
  if (r.tokens == 0) return {weights, ids};
  nvfp4_status st = NVFP4_ERR_INVALID;
  if (logits.device().is_cpu()) {
#ifdef NVFP4_NO_CPU
    TORCH_CHECK_VALUE(false, op, ": this build has no CPU kernels (a CUDA-only bundle): pass CUDA tensors");
#else
    st = cpu_ranges(r.tokens, [&](int64_t t0, int64_t t1) { return nvfp4_moe_route_cpu(&r, t0, t1); });
    TORCH_CHECK(st == NVFP4_OK, op, ": arguments the kernel refuses (", status_text(st), ")");
#endif
    return {weights, ids};
  }
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(logits.device());
  st = nvfp4_moe_route_cuda(&r, c10::cuda::getCurrentCUDAStream(logits.device().index()).stream());
#endif
  TORCH_CHECK(st == NVFP4_OK, op, ": CUDA launch failed: ", status_text(st));
  return {weights, ids};
}

/* The weighted sum of a mixture of experts' rows (nvfp4.h,
 * nvfp4_moe_combine): y [rows, H], row_of_pair [T, top_k] int32 (moe_sort's),
 * weights [T, top_k] float -> [T, H] in y's dtype. */
Tensor moe_combine(const Tensor &y, const Tensor &row_of_pair, const Tensor &weights) {
  const char *op = "nvfp4.moe_combine";
  auto floating = [](const Tensor &t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
  };
  TORCH_CHECK_TYPE(floating(y), op, ": y must be float32, float16 or bfloat16, got ", y.scalar_type());
  TORCH_CHECK_TYPE(floating(weights), op, ": weights must be float32, float16 or bfloat16, got ",
                   weights.scalar_type());
  TORCH_CHECK_TYPE(row_of_pair.scalar_type() == at::kInt, op, ": row_of_pair must be int32 (moe_sort's), got ",
                   row_of_pair.scalar_type());
  TORCH_CHECK_VALUE(y.dim() == 2, op, ": y must be [rows, hidden], got shape ", y.sizes());
  TORCH_CHECK_VALUE(row_of_pair.dim() == 2 && row_of_pair.size(1) >= 1, op,
                    ": row_of_pair must be [T, top_k] with top_k >= 1, got shape ", row_of_pair.sizes());
  TORCH_CHECK_VALUE(weights.sizes() == row_of_pair.sizes(), op, ": weights must be [T, top_k] = ",
                    row_of_pair.sizes(), ", got shape ", weights.sizes());
  moe_device(op, y);
  TORCH_CHECK_VALUE(row_of_pair.device() == y.device() && weights.device() == y.device(), op,
                    ": y, row_of_pair and weights must be on one device, got ", y.device(), ", ", row_of_pair.device(),
                    ", ", weights.device());
  const Tensor yc = y.contiguous(), rc = row_of_pair.contiguous(), wc = weights.contiguous();
  Tensor out = at::empty({row_of_pair.size(0), y.size(1)}, y.options().memory_format(at::MemoryFormat::Contiguous));
  nvfp4_moe_combine c{};
  c.tokens = row_of_pair.size(0), c.top_k = row_of_pair.size(1), c.hidden = y.size(1), c.rows = y.size(0);
  c.y = yc.const_data_ptr(), c.y_type = float_type_of(y.scalar_type());
  c.row_of_pair = rc.const_data_ptr<int32_t>();
  c.weights = wc.const_data_ptr(), c.weights_type = float_type_of(weights.scalar_type());
  c.out = out.mutable_data_ptr();
  if (out.numel() == 0) return out;
  nvfp4_status st = NVFP4_ERR_INVALID;
  if (y.device().is_cpu()) {
#ifdef NVFP4_NO_CPU
    TORCH_CHECK_VALUE(false, op, ": this build has no CPU kernels (a CUDA-only bundle): pass CUDA tensors");
#else
    st = cpu_ranges(c.tokens, [&](int64_t t0, int64_t t1) { return nvfp4_moe_combine_cpu(&c, t0, t1); });
    TORCH_CHECK_VALUE(st == NVFP4_OK, op, ": row_of_pair must hold rows of y (below ", c.rows, ") or -1");
#endif
    return out;
  }
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(y.device());
  st = nvfp4_moe_combine_cuda(&c, c10::cuda::getCurrentCUDAStream(y.device().index()).stream());
#endif
  TORCH_CHECK(st == NVFP4_OK, op, ": CUDA launch failed: ", status_text(st));
  return out;
}

/* The ops have no derivative. A call that autograd would record (grad mode
 * on, a tensor argument that requires grad: a float32 alpha or global scale,
 * quantize's x) is refused, instead of returning outputs whose backward would
 * do nothing; otherwise the call goes on below autograd. */
void refuse_autograd(const c10::OperatorHandle &op, c10::DispatchKeySet keys, torch::jit::Stack *stack) {
  const c10::FunctionSchema &schema = op.schema();
  const size_t n = schema.arguments().size();
  if (c10::GradMode::is_enabled()) {
    for (size_t i = 0; i < n; i++) {
      const c10::IValue &v = (*stack)[stack->size() - n + i];
      bool grad = v.isTensor() && v.toTensor().requires_grad();
      if (v.isTensorList())
        for (const at::Tensor &t : v.toTensorVector()) grad = grad || t.requires_grad();
      TORCH_CHECK_VALUE(!grad, "nvfp4.", schema.name().substr(schema.name().find("::") + 2), ": not differentiable, but ",
                        schema.arguments()[i].name(), " requires grad; pass it .detach()ed or call under torch.no_grad()");
    }
  }
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

}  // namespace

/* The op namespace: nvfp4, or another name for a bundle built beside an
 * installed package (python -m nvfp4_kernels.bundle). The extra macro layer
 * expands NVFP4_OP_NAMESPACE before torch pastes it into identifiers. */
#ifndef NVFP4_OP_NAMESPACE
#define NVFP4_OP_NAMESPACE nvfp4
#endif
#define NVFP4_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define NVFP4_LIBRARY_IMPL(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)

NVFP4_LIBRARY(NVFP4_OP_NAMESPACE, m) {
  m.def("gemv(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha=None, ScalarType? out_dtype=None) -> Tensor");
  m.def("gemv_out(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha, Tensor(a!) out) -> ()");
  m.def("gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha=None, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");
  m.def("gemm_out(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha, Tensor? bias, Tensor(a!) out) -> ()");
  m.def("dual_gemm(Tensor a, Tensor b1, Tensor b2, Tensor sfa, Tensor sfb1, Tensor sfb2, Tensor? alpha1=None, "
        "Tensor? alpha2=None, ScalarType? out_dtype=None) -> Tensor");
  m.def("dual_gemm_out(Tensor a, Tensor b1, Tensor b2, Tensor sfa, Tensor sfb1, Tensor sfb2, Tensor? alpha1, "
        "Tensor? alpha2, Tensor(a!) out) -> ()");
  m.def("group_gemm(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb, Tensor? alphas=None, "
        "ScalarType? out_dtype=None) -> Tensor[]");
  m.def("group_gemm_out(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb, Tensor? alphas, Tensor(a!)[] out) -> ()");
  m.def("gemm_w4a16(Tensor x, Tensor b, Tensor sfb, Tensor? alpha=None, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");
  m.def("gemm_w4a16_out(Tensor x, Tensor b, Tensor sfb, Tensor? alpha, Tensor? bias, Tensor(a!) out) -> ()");
  m.def("dual_gemm_w4a16(Tensor x, Tensor b1, Tensor b2, Tensor sfb1, Tensor sfb2, Tensor? alpha1=None, "
        "Tensor? alpha2=None, ScalarType? out_dtype=None) -> Tensor");
  m.def("dual_gemm_w4a16_out(Tensor x, Tensor b1, Tensor b2, Tensor sfb1, Tensor sfb2, Tensor? alpha1, "
        "Tensor? alpha2, Tensor(a!) out) -> ()");
  m.def("gemm_w4a4(Tensor x, Tensor b, Tensor sfb, Tensor? global_scale=None, Tensor? alpha=None, Tensor? bias=None, "
        "ScalarType? out_dtype=None) -> Tensor");
  m.def("gemm_w4a4_out(Tensor x, Tensor b, Tensor sfb, Tensor? global_scale, Tensor? alpha, Tensor? bias, "
        "Tensor(a!) out) -> ()");
  m.def("dual_gemm_w4a4(Tensor x, Tensor b1, Tensor b2, Tensor sfb1, Tensor sfb2, Tensor? global_scale=None, "
        "Tensor? alpha1=None, Tensor? alpha2=None, ScalarType? out_dtype=None) -> Tensor");
  m.def("dual_gemm_w4a4_out(Tensor x, Tensor b1, Tensor b2, Tensor sfb1, Tensor sfb2, Tensor? global_scale, "
        "Tensor? alpha1, Tensor? alpha2, Tensor(a!) out) -> ()");
  m.def("grouped_mm(Tensor x, Tensor w, Tensor w_sf, Tensor offs, Tensor? alphas=None, Tensor? alphas2=None, "
        "bool gated=False, ScalarType? out_dtype=None, Tensor? row_index=None, Tensor? global_scale=None) -> Tensor");
  m.def("grouped_mm_out(Tensor x, Tensor w, Tensor w_sf, Tensor offs, Tensor? alphas, Tensor? alphas2, bool gated, "
        "Tensor(a!) out, Tensor? row_index=None, Tensor? global_scale=None) -> ()");
  m.def("competition_group_gemm(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb, Tensor(a!)[] c) -> ()");
  m.def("competition_gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor sfa_perm, Tensor sfb_perm, "
        "Tensor(a!) c) -> ()");
  m.def("competition_dual_gemm(Tensor a, Tensor b1, Tensor b2, Tensor sfa, Tensor sfb1, Tensor sfb2, "
        "Tensor sfa_perm, Tensor sfb1_perm, Tensor sfb2_perm, Tensor(a!) c) -> ()");
  m.def("quantize(Tensor x, Tensor? global_scale=None, bool blocked=False) -> (Tensor, Tensor)");
  m.def("quantized_values(Tensor x, Tensor? global_scale=None, Tensor? row_index=None, Tensor? scale_index=None) -> Tensor");
  m.def("moe_sort(Tensor ids, int num_experts) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("moe_combine(Tensor y, Tensor row_of_pair, Tensor weights) -> Tensor");
  m.def("moe_route(Tensor logits, int top_k, bool sigmoid=False, Tensor? bias=None, int n_group=1, int topk_group=1, "
        "bool renormalize=True, float scale=1.0) -> (Tensor, Tensor)");
  m.def("kernel_name(str op, Tensor[] tensors) -> str");
  m.def("pack_bf16_pairs(Tensor b) -> Tensor");
  m.def("unpack_bf16_pairs(Tensor w) -> Tensor");
}

#define NVFP4_IMPLS(m)                        \
  m.impl("gemv", &gemv);                      \
  m.impl("gemv_out", &gemv_out);              \
  m.impl("gemm", &gemm);                      \
  m.impl("gemm_out", &gemm_out);              \
  m.impl("dual_gemm", &dual_gemm);            \
  m.impl("dual_gemm_out", &dual_gemm_out);    \
  m.impl("group_gemm", &group_gemm);          \
  m.impl("group_gemm_out", &group_gemm_out);  \
  m.impl("gemm_w4a16", &gemm_w4a16);          \
  m.impl("gemm_w4a16_out", &gemm_w4a16_out);  \
  m.impl("dual_gemm_w4a16", &dual_gemm_w4a16);          \
  m.impl("dual_gemm_w4a16_out", &dual_gemm_w4a16_out);  \
  m.impl("gemm_w4a4", &gemm_w4a4);                      \
  m.impl("gemm_w4a4_out", &gemm_w4a4_out);              \
  m.impl("dual_gemm_w4a4", &dual_gemm_w4a4);            \
  m.impl("dual_gemm_w4a4_out", &dual_gemm_w4a4_out);    \
  m.impl("grouped_mm", &grouped_mm);                    \
  m.impl("grouped_mm_out", &grouped_mm_out);            \
  m.impl("competition_group_gemm", &competition_group_gemm); \
  m.impl("competition_gemm", &competition_gemm);             \
  m.impl("competition_dual_gemm", &competition_dual_gemm);    \
  m.impl("quantize", &quantize);                             \
  m.impl("quantized_values", &quantized_values);             \
  m.impl("moe_sort", &moe_sort);                             \
  m.impl("moe_combine", &moe_combine);                       \
  m.impl("moe_route", &moe_route);                           \
  m.impl("kernel_name", &kernel_name);                       \
  m.impl("pack_bf16_pairs", &pack_bf16_pairs);               \
  m.impl("unpack_bf16_pairs", &unpack_bf16_pairs);

NVFP4_LIBRARY_IMPL(NVFP4_OP_NAMESPACE, CPU, m) { NVFP4_IMPLS(m) }
/* The ops a float tensor that requires grad can reach (the competition ops take none). */
NVFP4_LIBRARY_IMPL(NVFP4_OP_NAMESPACE, Autograd, m) {
  for (const char *op : {"gemv", "gemv_out", "gemm", "gemm_out", "dual_gemm", "dual_gemm_out", "group_gemm",
                         "group_gemm_out", "gemm_w4a16", "gemm_w4a16_out", "dual_gemm_w4a16", "dual_gemm_w4a16_out",
                         "gemm_w4a4", "gemm_w4a4_out", "dual_gemm_w4a4", "dual_gemm_w4a4_out",
                         "grouped_mm", "grouped_mm_out", "quantize", "quantized_values", "moe_combine", "moe_route"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&refuse_autograd>());
}
NVFP4_LIBRARY_IMPL(NVFP4_OP_NAMESPACE, CUDA, m) { NVFP4_IMPLS(m) }

/* An importable module whose loading runs the registrations above. */
extern "C" PyObject *PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "NVFP4 kernels (ops live in torch.ops.nvfp4)", -1,
                               nullptr};
  PyObject *mod = PyModule_Create(&module);
  if (mod) {
#ifdef NVFP4_WITH_CUDA
    PyModule_AddIntConstant(mod, "with_cuda", 1);
#else
    PyModule_AddIntConstant(mod, "with_cuda", 0);
#endif
  }
  return mod;
}
