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
 *   output     fp16 [L, M, N] (gemv: [L, M]), last dim contiguous
 */
#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <string>
#include <vector>

#include "nvfp4.h"

#ifdef NVFP4_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using at::Tensor;

/* Everything validation learns about one problem. */
struct Problem {
  nvfp4_matmul p{};
  at::Device device{at::kCPU};
  std::vector<int64_t> out_shape;
};

bool is_fp4(const Tensor &t) { return t.scalar_type() == at::kFloat4_e2m1fn_x2 || t.scalar_type() == at::kByte; }
bool is_e4m3(const Tensor &t) { return t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kByte; }

/* An operand's data and scales: rows x K values in batches of L. `rows_dim`
 * is false for gemv's vector, which has no rows dimension (one row). */
nvfp4_operand make_operand(const std::string &op, const Tensor &data, const char *sf_name,
                           const Tensor &sf, bool batched, int64_t L, int64_t rows, int64_t K, bool rows_dim) {
  nvfp4_operand o{};
  const int64_t k_blocks = K / 16, base_rank = (batched ? 1 : 0) + (rows_dim ? 1 : 0);
  TORCH_CHECK_TYPE(is_e4m3(sf), op, ": ", sf_name, " must be float8_e4m3fn or uint8 (e4m3 bytes), got ",
                   sf.scalar_type());
  o.data = static_cast<const uint8_t *>(data.const_data_ptr());
  o.row_stride = rows_dim ? data.stride(-2) : 0;
  o.batch_stride = batched ? data.stride(0) : 0;
  o.sf = static_cast<const uint8_t *>(sf.const_data_ptr());
  o.sf_batch_stride = batched ? sf.stride(0) : 0;

  const std::string linear = std::string("[") + (batched ? "L, " : "") + (rows_dim ? "rows, " : "") + "K/16]";
  const std::string blocked = std::string("[") + (batched ? "L, " : "") + "ceil(rows/128), ceil(K/64), 32, 4, 4]";
  std::vector<int64_t> want_linear, want_blocked;
  if (batched) want_linear.push_back(L), want_blocked.push_back(L);
  if (rows_dim) want_linear.push_back(rows);
  want_linear.push_back(k_blocks);
  for (int64_t d : {(rows + 127) / 128, (k_blocks + 3) / 4, (int64_t)32, (int64_t)4, (int64_t)4}) want_blocked.push_back(d);

  if (sf.dim() == base_rank + 1) {
    TORCH_CHECK_VALUE(sf.sizes().vec() == want_linear, op, ": ", sf_name, " has shape ", sf.sizes(),
                      "; the linear layout ", linear, " needs ", at::IntArrayRef(want_linear), " (rows=", rows,
                      ", K=", K, ")");
    TORCH_CHECK_VALUE(sf.stride(-1) == 1 || k_blocks == 1, op, ": ", sf_name,
                      " must be contiguous along K/16 (stride ", sf.stride(-1), ")");
    o.sf_layout = NVFP4_SF_LINEAR;
    o.sf_row_stride = rows_dim ? sf.stride(-2) : 0;
  } else if (sf.dim() == (batched ? 6 : 5)) {
    TORCH_CHECK_VALUE(sf.sizes().vec() == want_blocked, op, ": ", sf_name, " has shape ", sf.sizes(),
                      "; the blocked layout ", blocked, " needs ", at::IntArrayRef(want_blocked), " (rows=", rows,
                      ", K=", K, ")");
    // The atoms of one batch must be one contiguous array; dims of size 1 may have any stride.
    int64_t expect = 1;
    for (int64_t d = sf.dim() - 1; d >= (batched ? 1 : 0); d--) {
      TORCH_CHECK_VALUE(sf.size(d) == 1 || sf.stride(d) == expect, op, ": ", sf_name,
                        " (blocked layout) must be contiguous within each batch; strides are ", sf.strides());
      expect *= sf.size(d);
    }
    o.sf_layout = NVFP4_SF_BLOCKED;
    o.sf_row_stride = 0;
  } else {
    TORCH_CHECK_VALUE(false, op, ": ", sf_name, " must be ", linear, " (linear) or ", blocked,
                      " (blocked, 128x4 atoms); got ", sf.dim(), " dims ", sf.sizes());
  }
  return o;
}

void check_fp4_tensor(const std::string &op, const char *name, const Tensor &t) {
  TORCH_CHECK_TYPE(is_fp4(t), op, ": ", name, " must be float4_e2m1fn_x2 or uint8 (two e2m1 codes per byte), got ",
                   t.scalar_type());
  TORCH_CHECK_VALUE(t.dim() >= 1 && (t.stride(-1) == 1 || t.size(-1) == 1), op, ": ", name,
                    " must be contiguous along K (last-dim stride 1), got strides ", t.strides());
}

/* Validate one gemm-like problem (gemv when `vector`, dual when b2 is given). */
Problem make_problem(const std::string &op, const Tensor &a, const Tensor &b, const Tensor *b2, const Tensor &sfa,
                     const Tensor &sfb, const Tensor *sfb2, const std::optional<Tensor> &alpha, bool vector) {
  Problem pr;
  check_fp4_tensor(op, "a", a);
  check_fp4_tensor(op, b2 ? "b1" : "b", b);
  if (b2) check_fp4_tensor(op, "b2", *b2);
  TORCH_CHECK_VALUE(a.dim() == 2 || a.dim() == 3, op, ": a must be [M, K/2] or [L, M, K/2], got shape ", a.sizes());
  const bool batched = a.dim() == 3;
  const int64_t b_rank = a.dim() - (vector ? 1 : 0);
  const char *bname = b2 ? "b1" : "b";
  TORCH_CHECK_VALUE(b.dim() == b_rank, op, ": ", bname, " must have ", b_rank, " dims to match a (",
                    vector ? (batched ? "[L, K/2]" : "[K/2]") : (batched ? "[L, N, K/2]" : "[N, K/2]"),
                    "), got shape ", b.sizes());
  if (b2)
    TORCH_CHECK_VALUE(b2->sizes() == b.sizes(), op, ": b2 has shape ", b2->sizes(), " but b1 has ", b.sizes());
  const int64_t K = 2 * a.size(-1);
  TORCH_CHECK_VALUE(b.size(-1) == a.size(-1), op, ": ", bname, " has K/2=", b.size(-1), " but a has K/2=",
                    a.size(-1));
  TORCH_CHECK_VALUE(K > 0 && K % 16 == 0, op, ": K (= 2 * a.shape[-1] = ", K,
                    ") must be a positive multiple of 16 (one e4m3 scale per 16 values)");
  const int64_t L = batched ? a.size(0) : 1;
  if (batched)
    TORCH_CHECK_VALUE(b.size(0) == L, op, ": ", bname, " has L=", b.size(0), " but a has L=", a.size(0));
  const int64_t M = a.size(-2), N = vector ? 1 : b.size(-2);

  pr.device = a.device();
  auto same_device = [&](const char *name, const Tensor &t) {
    TORCH_CHECK_VALUE(t.device() == pr.device, op, ": ", name, " is on ", t.device(), " but a is on ", pr.device);
  };
  same_device(bname, b);
  same_device("sfa", sfa);
  same_device(b2 ? "sfb1" : "sfb", sfb);
  if (b2) same_device("b2", *b2), same_device("sfb2", *sfb2);
  TORCH_CHECK_VALUE(pr.device.is_cpu() || pr.device.is_cuda(), op, ": tensors on ", pr.device,
                    " are not supported (CPU or CUDA)");

  nvfp4_matmul &p = pr.p;
  p.m = M, p.n = N, p.k = K, p.batch = L;
  p.a = make_operand(op, a, "sfa", sfa, batched, L, M, K, true);
  p.b = make_operand(op, b, b2 ? "sfb1" : "sfb", sfb, batched, L, N, K, !vector);
  if (b2) p.b2 = make_operand(op, *b2, "sfb2", *sfb2, batched, L, N, K, true);
  p.alpha = 1.0f;
  if (alpha) {
    const Tensor &al = *alpha;
    TORCH_CHECK_TYPE(al.scalar_type() == at::kFloat, op, ": alpha must be a float32 tensor, got ", al.scalar_type());
    TORCH_CHECK_VALUE(al.numel() == 1, op, ": alpha must hold one value, got shape ", al.sizes());
    if (al.device().is_cpu())
      p.alpha = al.item<float>();  // host memory: no synchronisation
    else {
      same_device("alpha", al);
      p.alpha_ptr = al.const_data_ptr<float>();
    }
  }
  if (batched) pr.out_shape.push_back(L);
  pr.out_shape.push_back(M);
  if (!vector) pr.out_shape.push_back(N);
  return pr;
}

/* Point the problem at `out` after checking it. */
void bind_out(const std::string &op, Problem &pr, const Tensor &out, bool vector) {
  TORCH_CHECK_TYPE(out.scalar_type() == at::kHalf, op, ": out must be float16, got ", out.scalar_type());
  TORCH_CHECK_VALUE(out.device() == pr.device, op, ": out is on ", out.device(), " but a is on ", pr.device);
  TORCH_CHECK_VALUE(out.sizes().vec() == pr.out_shape, op, ": out has shape ", out.sizes(), ", expected ",
                    at::IntArrayRef(pr.out_shape));
  const bool batched = pr.out_shape.size() == (vector ? 2u : 3u);
  if (!vector)
    TORCH_CHECK_VALUE(out.stride(-1) == 1 || out.size(-1) <= 1, op,
                      ": out must be contiguous along N (last-dim stride 1), got strides ", out.strides());
  nvfp4_matmul &p = pr.p;
  p.c = static_cast<uint16_t *>(out.data_ptr());
  p.c_row_stride = vector ? out.stride(-1) : out.stride(-2);
  p.c_batch_stride = batched ? out.stride(0) : 0;
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

void run_cpu(const std::string &op, const nvfp4_matmul &p) {
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

void run(const std::string &op, std::vector<Problem> &problems) {
  const at::Device device = problems[0].device;
  if (device.is_cpu()) {
    for (const Problem &pr : problems) run_cpu(op, pr.p);
    return;
  }
#ifdef NVFP4_WITH_CUDA
  c10::cuda::CUDAGuard guard(device);
  std::vector<nvfp4_matmul> ps;
  ps.reserve(problems.size());
  for (const Problem &pr : problems) ps.push_back(pr.p);
  nvfp4_status s = nvfp4_matmul_cuda(ps.data(), (int)ps.size(), c10::cuda::getCurrentCUDAStream(device.index()).stream());
  TORCH_CHECK(s == NVFP4_OK, op, ": CUDA launch failed: ", status_text(s),
              s == NVFP4_ERR_CUDA ? std::string(" (") + cudaGetErrorString(cudaGetLastError()) + ")" : "",
              " for M=", ps[0].m, " N=", ps[0].n, " K=", ps[0].k, " L=", ps[0].batch);
#else
  TORCH_CHECK_VALUE(false, op, ": this build of nvfp4_kernels has no CUDA kernels (built CPU-only)");
#endif
}

Tensor alloc_out(const Problem &pr, const Tensor &like) {
  return at::empty(pr.out_shape, like.options().dtype(at::kHalf));
}

// ---- ops -------------------------------------------------------------------

/* One gemv / gemm / dual problem: validate, bind (or allocate) the output, run.
 * b2 and sfb2 are given for dual; out is null for the allocating variants. */
Tensor matmul_op(const char *op, bool vector, const Tensor &a, const Tensor &b, const Tensor *b2, const Tensor &sfa,
                 const Tensor &sfb, const Tensor *sfb2, const std::optional<Tensor> &alpha, const Tensor *out) {
  std::vector<Problem> prs{make_problem(op, a, b, b2, sfa, sfb, sfb2, alpha, vector)};
  Tensor result = out ? *out : alloc_out(prs[0], a);
  bind_out(op, prs[0], result, vector);
  run(op, prs);
  return result;
}

void gemv_out(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
              const std::optional<Tensor> &alpha, const Tensor &out) {
  matmul_op("nvfp4.gemv", true, a, b, nullptr, sfa, sfb, nullptr, alpha, &out);
}

Tensor gemv(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
            const std::optional<Tensor> &alpha) {
  return matmul_op("nvfp4.gemv", true, a, b, nullptr, sfa, sfb, nullptr, alpha, nullptr);
}

void gemm_out(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
              const std::optional<Tensor> &alpha, const Tensor &out) {
  matmul_op("nvfp4.gemm", false, a, b, nullptr, sfa, sfb, nullptr, alpha, &out);
}

Tensor gemm(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb,
            const std::optional<Tensor> &alpha) {
  return matmul_op("nvfp4.gemm", false, a, b, nullptr, sfa, sfb, nullptr, alpha, nullptr);
}

void dual_gemm_out(const Tensor &a, const Tensor &b1, const Tensor &b2, const Tensor &sfa, const Tensor &sfb1,
                   const Tensor &sfb2, const Tensor &out) {
  matmul_op("nvfp4.dual_gemm", false, a, b1, &b2, sfa, sfb1, &sfb2, std::nullopt, &out);
}

Tensor dual_gemm(const Tensor &a, const Tensor &b1, const Tensor &b2, const Tensor &sfa, const Tensor &sfb1,
                 const Tensor &sfb2) {
  return matmul_op("nvfp4.dual_gemm", false, a, b1, &b2, sfa, sfb1, &sfb2, std::nullopt, nullptr);
}

std::vector<Problem> make_group(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                                const at::TensorList sfbs) {
  const std::string op = "nvfp4.group_gemm";
  TORCH_CHECK_VALUE(!as.empty(), op, ": the lists are empty; give at least one problem");
  TORCH_CHECK_VALUE(bs.size() == as.size() && sfas.size() == as.size() && sfbs.size() == as.size(), op,
                    ": the lists must have equal lengths, got a=", as.size(), " b=", bs.size(), " sfa=", sfas.size(),
                    " sfb=", sfbs.size());
  std::vector<Problem> prs;
  for (size_t g = 0; g < as.size(); g++) {
    prs.push_back(make_problem(op + " (group " + std::to_string(g) + ")", as[g], bs[g], nullptr, sfas[g], sfbs[g],
                               nullptr, std::nullopt, false));
    TORCH_CHECK_VALUE(prs[g].device == prs[0].device, op, ": group ", g, " is on ", prs[g].device,
                      " but group 0 is on ", prs[0].device);
  }
  return prs;
}

void group_gemm_out(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                    const at::TensorList sfbs, const at::TensorList outs) {
  std::vector<Problem> prs = make_group(as, bs, sfas, sfbs);
  TORCH_CHECK_VALUE(outs.size() == as.size(), "nvfp4.group_gemm: out has ", outs.size(), " tensors for ", as.size(),
                    " problems");
  for (size_t g = 0; g < prs.size(); g++)
    bind_out("nvfp4.group_gemm (group " + std::to_string(g) + ")", prs[g], outs[g], false);
  run("nvfp4.group_gemm", prs);
}

std::vector<Tensor> group_gemm(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                               const at::TensorList sfbs) {
  std::vector<Problem> prs = make_group(as, bs, sfas, sfbs);
  std::vector<Tensor> outs;
  for (size_t g = 0; g < prs.size(); g++) {
    outs.push_back(alloc_out(prs[g], as[g]));
    bind_out("nvfp4.group_gemm", prs[g], outs[g], false);
  }
  run("nvfp4.group_gemm", prs);
  return outs;
}

/* The GPU MODE harness's views (CONTRACT.md): a, b, c as (R, C, L) views of
 * [L, R, C] memory; the permuted scales (32, 4, RB, 4, KB4, L) of
 * [L, RB, KB4, 32, 4, 4] memory. The competition_* ops below take the
 * harness's tensors as they come and make these views here, not in Python:
 * host time per call is what the harness's back-to-back loop pays for. */
std::string group_index(int64_t g) { return g < 0 ? std::string() : "[" + std::to_string(g) + "]"; }

/* `name` (with [g] for a group's tensor, g >= 0) appears only in the error. */
Tensor harness_rows(const char *op, const char *name, const Tensor &t, int64_t g = -1) {
  TORCH_CHECK_VALUE(t.dim() == 3, op, ": ", name, group_index(g), " must be (R, C, L), got ", t.dim(), " dims");
  return t.permute({2, 0, 1});
}

Tensor harness_blocked(const char *op, const char *name, const Tensor &t, int64_t g = -1) {
  TORCH_CHECK_VALUE(t.dim() == 6, op, ": ", name, group_index(g),
                    " must be permuted scales (32, 4, RB, 4, KB4, L), got ", t.dim(), " dims");
  return t.permute({5, 2, 4, 0, 1, 3});
}

/* The group gemm's lists (a, b, c and the permuted scales of each group). */
void competition_group_gemm(const at::TensorList as, const at::TensorList bs, const at::TensorList sfas,
                            const at::TensorList sfbs, const at::TensorList cs) {
  const char *op = "nvfp4.competition_group_gemm";
  TORCH_CHECK_VALUE(bs.size() == as.size() && sfas.size() == as.size() && sfbs.size() == as.size() &&
                        cs.size() == as.size(),
                    op, ": the lists must have equal lengths, got a=", as.size(), " b=", bs.size(),
                    " sfa=", sfas.size(), " sfb=", sfbs.size(), " c=", cs.size());
  std::vector<Tensor> a2, b2, sfa2, sfb2, c2;
  for (size_t g = 0; g < as.size(); g++) {
    a2.push_back(harness_rows(op, "a", as[g], g));
    b2.push_back(harness_rows(op, "b", bs[g], g));
    c2.push_back(harness_rows(op, "c", cs[g], g));
    sfa2.push_back(harness_blocked(op, "sfa", sfas[g], g));
    sfb2.push_back(harness_blocked(op, "sfb", sfbs[g], g));
  }
  group_gemm_out(a2, b2, sfa2, sfb2, c2);
}

/* The gemv / gemm tuple (a, b, sfa, sfb, sfa_perm, sfb_perm, c). gemv (c is
 * (M, 1, L), b has the harness's 128 padded rows) reads the linear scales and
 * row 0 of b; gemm the permuted ones. */
void competition_gemm(const Tensor &a, const Tensor &b, const Tensor &sfa, const Tensor &sfb, const Tensor &sfa_perm,
                      const Tensor &sfb_perm, const Tensor &c) {
  const char *op = "nvfp4.competition_gemm";
  const Tensor c3 = harness_rows(op, "c", c), b3 = harness_rows(op, "b", b);
  if (c3.size(2) == 1 && b3.size(1) == 128) {  // gemv: row 0 of b and of its scales is the vector
    const Tensor sfb3 = harness_rows(op, "sfb", sfb);
    gemv_out(harness_rows(op, "a", a), b3.select(1, 0), harness_rows(op, "sfa", sfa), sfb3.select(1, 0), std::nullopt,
             c3.select(2, 0));
  } else {
    gemm_out(harness_rows(op, "a", a), b3, harness_blocked(op, "sfa_perm", sfa_perm),
             harness_blocked(op, "sfb_perm", sfb_perm), std::nullopt, c3);
  }
}

/* The dual gemm tuple (a, b1, b2, sfa, sfb1, sfb2, sfa_perm, sfb1_perm,
 * sfb2_perm, c): the permuted scales are read. */
void competition_dual_gemm(const Tensor &a, const Tensor &b1, const Tensor &b2, const Tensor &sfa, const Tensor &sfb1,
                           const Tensor &sfb2, const Tensor &sfa_perm, const Tensor &sfb1_perm,
                           const Tensor &sfb2_perm, const Tensor &c) {
  const char *op = "nvfp4.competition_dual_gemm";
  (void)sfa, (void)sfb1, (void)sfb2;
  dual_gemm_out(harness_rows(op, "a", a), harness_rows(op, "b1", b1), harness_rows(op, "b2", b2),
                harness_blocked(op, "sfa_perm", sfa_perm), harness_blocked(op, "sfb1_perm", sfb1_perm),
                harness_blocked(op, "sfb2_perm", sfb2_perm), harness_rows(op, "c", c));
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
  m.def("gemv(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha=None) -> Tensor");
  m.def("gemv_out(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha, Tensor(a!) out) -> ()");
  m.def("gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha=None) -> Tensor");
  m.def("gemm_out(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor? alpha, Tensor(a!) out) -> ()");
  m.def("dual_gemm(Tensor a, Tensor b1, Tensor b2, Tensor sfa, Tensor sfb1, Tensor sfb2) -> Tensor");
  m.def("dual_gemm_out(Tensor a, Tensor b1, Tensor b2, Tensor sfa, Tensor sfb1, Tensor sfb2, Tensor(a!) out) -> ()");
  m.def("group_gemm(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb) -> Tensor[]");
  m.def("group_gemm_out(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb, Tensor(a!)[] out) -> ()");
  m.def("competition_group_gemm(Tensor[] a, Tensor[] b, Tensor[] sfa, Tensor[] sfb, Tensor(a!)[] c) -> ()");
  m.def("competition_gemm(Tensor a, Tensor b, Tensor sfa, Tensor sfb, Tensor sfa_perm, Tensor sfb_perm, "
        "Tensor(a!) c) -> ()");
  m.def("competition_dual_gemm(Tensor a, Tensor b1, Tensor b2, Tensor sfa, Tensor sfb1, Tensor sfb2, "
        "Tensor sfa_perm, Tensor sfb1_perm, Tensor sfb2_perm, Tensor(a!) c) -> ()");
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
  m.impl("competition_group_gemm", &competition_group_gemm); \
  m.impl("competition_gemm", &competition_gemm);             \
  m.impl("competition_dual_gemm", &competition_dual_gemm);

NVFP4_LIBRARY_IMPL(NVFP4_OP_NAMESPACE, CPU, m) { NVFP4_IMPLS(m) }
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
