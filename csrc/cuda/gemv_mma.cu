/*
 * gemv_mma.cu - the integer-mma GEMV's entries (kernels.h) and its launches
 * for linear activation scales; the kernel is gemv_mma.cuh.
 */
#include "gemv_mma.cuh"

NVFP4_TRACE_ATTACH(gemv_mma)

/* gemv_streams, 2 to 8 vectors (A laid out by tile, dense: 2 to 4), K % 128 == 0, the one-step build's shared
 * memory. The vectors as 16-bit values quantized in the kernel (a_global): 2 to QX_MAX_NV, dense, A laid out by
 * tile, a thread's blocks at most QX_BLOCKS (where it pays: QX_BLOCKS). */
bool gemv_mma_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (p.b.tile_rows || (p.a.tile_rows && (p.a.tile_rows != NVFP4_TILE_ROWS || p.n > GEMV_MMA_TILED_NV))) return false;
  if (p.a_global && (p.a_type == NVFP4_E2M1 || p.offs || !p.a.tile_rows || p.n > QX_MAX_NV ||
                     p.n * (p.k / 16) > (int64_t)QX_BLOCKS * MmaCfg<QX_MAX_NV, 1>::THREADS))
    return false;
  return gemv_streams(p) && p.n >= 2 && p.n <= GEMV_MMA_MAX_NV && p.k % 128 == 0 && mma_smem_fits<1>(p, dev);
}

int64_t gemv_mma_share_steps(const nvfp4_matmul &p, const DeviceInfo &dev) {
  const int64_t sets = p.b2.data ? Mma<NVFP4_SF_LINEAR, 4, true, 1>::sets(p.m) : Mma<NVFP4_SF_LINEAR, 4, false, 1>::sets(p.m);
  const int64_t ctas = std::max<int64_t>(1, std::min<int64_t>(dev.sms / std::max<int64_t>(p.batch, 1), sets));
  return (sets + ctas - 1) / ctas * (p.k / 128);
}

cudaError_t gemv_mma_launch(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  if (p.a.tile_rows) return gemv_mma_launch_tiled(p, c_vec_stride, bias_by_row, stream);
  return p.a.sf_layout == NVFP4_SF_LINEAR ? launch_vectors<NVFP4_SF_LINEAR>(p, c_vec_stride, bias_by_row, stream)
                                          : gemv_mma_launch_blocked(p, c_vec_stride, bias_by_row, stream);
}
