/*
 * dispatch.cu - the C entry of the CUDA kernels: picks a kernel per problem
 * (device, shape, alignment) and launches it on the caller's stream.
 *
 *   N <= 4, aligned, not dual          -> gemv.cu (dp4a, bandwidth path)
 *   M = 5..16 (Hopper: K >= 8192, and L N K >= 2^26 for M > 8),
 *   K % 256 == 0, not dual             -> skinny.cu (mma.sync, sm_80+)
 *   M <= 4, aligned (dual too)         -> gemv.cu with the roles swapped
 *                                         (K % 128 == 0: M = 4, and M = 2, 3
 *                                         at 3.5 to 12 steps a warp, on
 *                                         integer mma, takes_mma)
 *   Hopper, K % 64 == 0, aligned       -> matmul_sm90.cu (wgmma tensor cores;
 *                                         stream-K where the caller gives scratch)
 *   everything else                    -> matmul_simt.cu (portable, any layout)
 * Grouped calls go in launches of up to NVFP4_LAUNCH_GROUPS problems, to the
 * tensor-core kernel when every problem of the call qualifies.
 */
#include "common.cuh"

bool gemv_supported(const nvfp4_matmul &p);
bool gemv_takes_mma(const nvfp4_matmul &p);
cudaError_t gemv_launch(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream);
cudaError_t matmul_simt_launch(const nvfp4_matmul *problems, int count, cudaStream_t stream);
bool skinny_supported(const nvfp4_matmul &p);
cudaError_t skinny_launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws, void *ctx, cudaStream_t stream);
bool matmul_sm90_supported(const nvfp4_matmul &p);
cudaError_t matmul_sm90_launch(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn ws, void *ctx,
                               cudaStream_t stream);

static bool empty(const nvfp4_matmul &p) { return p.m == 0 || p.n == 0 || p.batch == 0; }

/* M <= 4 is a GEMV with the roles swapped: B's N rows against A's M rows as
 * vectors, c[l, m, n] as the GEMV's result n of vector m (row stride 1, vector
 * stride c_row_stride: gemv_launch); a dual's B2 stays q.b2, the GEMV's A2.
 * The bandwidth kernel streams B once for all M rows, where the tensor-core
 * tile would decode a 32-row activation tile and spend ~0.6 us per 256 x 64
 * step on the weights' fp16 decode (PERF.md, sessions 4 and 13). Same
 * products, fp32 sums in another order. */
static bool as_gemv(const nvfp4_matmul &p, nvfp4_matmul &q) {
  if (p.m > 4) return false;
  q = p;
  q.m = p.n, q.n = p.m;
  q.a = p.b, q.b = p.a;
  q.c_row_stride = 1;
  return gemv_supported(q);
}

/* Sizes in range; pointers present unless the problem is empty (an empty
 * tensor may have no storage). */
static bool valid(const nvfp4_matmul &p) {
  if (p.k <= 0 || p.k % 16 || p.m < 0 || p.n < 0 || p.batch < 0) return false;
  return empty(p) || (p.a.data && p.b.data && p.a.sf && p.b.sf && p.c && (!p.b2.data || p.b2.sf));
}

extern "C" const char *nvfp4_matmul_cuda_kernel_name(const nvfp4_matmul *p) {
  nvfp4_matmul q;
  if (!p->b2.data && gemv_supported(*p)) return gemv_takes_mma(*p) ? "gemv_mma" : "gemv_dp4a";
  if (skinny_supported(*p)) return "mma_skinny";
  if (as_gemv(*p, q))
    return gemv_takes_mma(q) ? (p->b2.data ? "gemv_mma_dual" : "gemv_mma") : p->b2.data ? "gemv_dp4a_dual" : "gemv_dp4a";
  if (matmul_sm90_supported(*p)) return p->b2.data ? "wgmma_dual" : "wgmma";
  return p->b2.data ? "simt_dual" : "simt";
}

extern "C" nvfp4_status nvfp4_matmul_cuda(const nvfp4_matmul *problems, int count, cudaStream_t stream) {
  return nvfp4_matmul_cuda_ws(problems, count, nullptr, nullptr, stream);
}

/* The tensor-core and skinny kernels ask for scratch, at most once per launch. */
extern "C" nvfp4_status nvfp4_matmul_cuda_ws(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn workspace,
                                             void *ctx, cudaStream_t stream) {
  if (count <= 0) return NVFP4_ERR_INVALID;
  for (int g = 0; g < count; g++)
    if (!valid(problems[g]) || (problems[g].b2.data != nullptr) != (problems[0].b2.data != nullptr))
      return NVFP4_ERR_INVALID;
  /* Empty problems get no blocks; a call of only empty problems launches nothing. */

  cudaError_t err = cudaSuccess;
  if (count == 1) {
    const nvfp4_matmul &p = problems[0];
    if (empty(p)) return NVFP4_OK;
    nvfp4_matmul q;
    if (!p.b2.data && gemv_supported(p)) err = gemv_launch(p, 1, stream);
    else if (skinny_supported(p)) err = skinny_launch(p, workspace, ctx, stream);
    else if (as_gemv(p, q)) err = gemv_launch(q, p.c_row_stride, stream);
    else if (matmul_sm90_supported(p)) err = matmul_sm90_launch(&p, 1, workspace, ctx, stream);
    else err = matmul_simt_launch(&p, 1, stream);
  } else {
    bool tc = true;
    for (int g = 0; g < count; g++) tc = tc && matmul_sm90_supported(problems[g]);
    for (int g = 0; g < count && err == cudaSuccess; g += NVFP4_LAUNCH_GROUPS) {
      int n = count - g < NVFP4_LAUNCH_GROUPS ? count - g : NVFP4_LAUNCH_GROUPS;
      err = tc ? matmul_sm90_launch(problems + g, n, workspace, ctx, stream)
               : matmul_simt_launch(problems + g, n, stream);
    }
  }
  return err == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}
