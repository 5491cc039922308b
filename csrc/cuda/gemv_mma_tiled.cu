/*
 * gemv_mma_tiled.cu - the integer-mma GEMV's launches for A laid out by tile
 * (gemv_mma.cuh), 2 to GEMV_MMA_TILED_NV vectors, apart so that they compile
 * in parallel with the other layouts'.
 */
#include "gemv_mma.cuh"

NVFP4_TRACE_ATTACH(gemv_mma_tiled)

cudaError_t gemv_mma_launch_tiled(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  static_assert(GEMV_MMA_TILED_NV == 4, "the four-vector build serves 3 and 4");
  switch (p.n) {
    case 2: return launch_build<SF_BY_TILE, 2, 1>(p, c_vec_stride, bias_by_row, stream);
    default: return launch_cpl<SF_BY_TILE, 4>(p, c_vec_stride, bias_by_row, stream);  // 3 too (launch_vectors)
  }
}
