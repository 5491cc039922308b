/*
 * dispatch.cu - the C entry of the CUDA kernels: picks a kernel per problem
 * (device, shape, alignment) and launches it on the caller's stream.
 *
 *   N <= 4, aligned, not dual          -> gemv.cu (dp4a, bandwidth path;
 *                                         N <= 8 on integer mma as below)
 *   M = 5..16 (Hopper: K >= 8192, and L N K >= 2^26 for M > 8; M <= 8
 *   only where the next line's integer mma does not take it first),
 *   K % 256 == 0, not dual             -> skinny.cu (mma.sync, sm_80+)
 *   M <= 8, aligned (dual too)         -> gemv.cu with the roles swapped
 *                                         (dp4a for M <= 4; integer mma,
 *                                         takes_mma, where K % 128 == 0:
 *                                         M = 4, M = 2, 3 at 3.5 to 12 steps
 *                                         a warp, M = 5..8 where the shares
 *                                         are not long)
 *   Hopper, K % 64 == 0, aligned       -> matmul_sm90.cu (wgmma tensor cores;
 *                                         stream-K where the caller gives scratch)
 *   sm_80+, rows 8-byte aligned        -> matmul_mma.cu (mma.sync tensor cores:
 *                                         every other GPU, Hopper's odd K)
 *   everything else                    -> matmul_simt.cu (portable, any layout)
 * NVFP4_MMA=1 puts matmul_mma.cu ahead of everything but the GEMV of the gemv op,
 * NVFP4_MMA=0 leaves its launches to matmul_simt.cu.
 * Grouped calls go in launches of up to NVFP4_LAUNCH_GROUPS problems, to the
 * first of the three kernels above that takes every problem of the call.
 */
#include "common.cuh"

bool gemv_supported(const nvfp4_matmul &p);
bool gemv_takes_mma(const nvfp4_matmul &p);
cudaError_t gemv_launch(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream);
cudaError_t matmul_simt_launch(const nvfp4_matmul *problems, int count, cudaStream_t stream);
bool skinny_supported(const nvfp4_matmul &p);
bool skinny_forced();
cudaError_t skinny_launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws, void *ctx, cudaStream_t stream);
bool matmul_sm90_supported(const nvfp4_matmul &p);
cudaError_t matmul_sm90_launch(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn ws, void *ctx,
                               cudaStream_t stream);
bool matmul_mma_supported(const nvfp4_matmul &p);
bool matmul_mma_forced();
cudaError_t matmul_mma_launch(const nvfp4_matmul *problems, int count, cudaStream_t stream);

/* common.cuh's DeviceInfo::sm90_code reads this kernel's attributes. */
__global__ void nvfp4_arch_probe_kernel() {}

static bool empty(const nvfp4_matmul &p) { return p.m == 0 || p.n == 0 || p.batch == 0; }

/* M <= 4 (M <= 8 where the integer-mma GEMV takes it) is a GEMV with the
 * roles swapped: B's N rows against A's M rows as vectors, c[l, m, n] as the
 * GEMV's result n of vector m (row stride 1, vector stride c_row_stride:
 * gemv_launch); a dual's B2 stays q.b2, the GEMV's A2.
 * The bandwidth kernel streams B once for all M rows, where the tensor-core
 * tile would decode a 32-row activation tile and spend ~0.6 us per 256 x 64
 * step on the weights' fp16 decode (PERF.md, sessions 4 and 13). Same
 * products, fp32 sums in another order. */
static bool as_gemv(const nvfp4_matmul &p, nvfp4_matmul &q) {
  if (p.m > 8) return false;
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

/* The kernel of a single problem, in the order above (q: the swapped GEMV's
 * problem, where that is the route). */
enum Route { GEMV, SKINNY, GEMV_SWAPPED, WGMMA, MMA, SIMT };
static Route route(const nvfp4_matmul &p, nvfp4_matmul &q) {
  if (!p.b2.data && gemv_supported(p)) return GEMV;
  if (matmul_mma_forced() && matmul_mma_supported(p)) return MMA;
  const bool swapped = as_gemv(p, q);
  /* Hopper, M = 5..8: the integer-mma GEMV wherever its rule takes the rows
   * (takes_mma: short and mid warp shares), ahead of the skinny kernel, which
   * keeps the long ones (H100, bench_gemm, skinny -> MMA: 5 x 4096 x 8192 21.3
   * -> 16.6 us, 8 x 2048 x 8192 18.6 -> 15.2; 8 x 7168 x 16384 39.6 -> 52.9
   * where the rule says no; PERF.md session 37). NVFP4_SKINNY=1 keeps it first. */
  const DeviceInfo &dev = device_info();
  if (swapped && p.m > 4 && dev.major == 9 && dev.minor == 0 && !skinny_forced()) return GEMV_SWAPPED;
  if (skinny_supported(p)) return SKINNY;
  if (swapped) return GEMV_SWAPPED;
  return matmul_sm90_supported(p) ? WGMMA : matmul_mma_supported(p) ? MMA : SIMT;
}

extern "C" const char *nvfp4_matmul_cuda_kernel_name(const nvfp4_matmul *p) {
  nvfp4_matmul q;
  const bool dual = p->b2.data != nullptr;
  switch (route(*p, q)) {
    case GEMV: return gemv_takes_mma(*p) ? "gemv_mma" : "gemv_dp4a";
    case SKINNY: return "mma_skinny";
    case GEMV_SWAPPED:
      return gemv_takes_mma(q) ? (dual ? "gemv_mma_dual" : "gemv_mma") : dual ? "gemv_dp4a_dual" : "gemv_dp4a";
    case WGMMA: return dual ? "wgmma_dual" : "wgmma";
    case MMA: return dual ? "mma_dual" : "mma";
    default: return dual ? "simt_dual" : "simt";
  }
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
    switch (route(p, q)) {
      case GEMV: err = gemv_launch(p, 1, stream); break;
      case SKINNY: err = skinny_launch(p, workspace, ctx, stream); break;
      case GEMV_SWAPPED: err = gemv_launch(q, p.c_row_stride, stream); break;
      case WGMMA: err = matmul_sm90_launch(&p, 1, workspace, ctx, stream); break;
      case MMA: err = matmul_mma_launch(&p, 1, stream); break;
      default: err = matmul_simt_launch(&p, 1, stream);
    }
  } else {
    bool tc = !matmul_mma_forced(), mma = true;
    for (int g = 0; g < count; g++) {
      tc = tc && matmul_sm90_supported(problems[g]);
      mma = mma && matmul_mma_supported(problems[g]);
    }
    for (int g = 0; g < count && err == cudaSuccess; g += NVFP4_LAUNCH_GROUPS) {
      int n = count - g < NVFP4_LAUNCH_GROUPS ? count - g : NVFP4_LAUNCH_GROUPS;
      err = tc    ? matmul_sm90_launch(problems + g, n, workspace, ctx, stream)
            : mma ? matmul_mma_launch(problems + g, n, stream)
                  : matmul_simt_launch(problems + g, n, stream);
    }
  }
  return err == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}
