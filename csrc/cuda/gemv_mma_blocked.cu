/*
 * gemv_mma_blocked.cu - the integer-mma GEMV's launches for blocked
 * activation scales (gemv_mma.cuh), apart so that they compile in parallel
 * with the linear ones.
 */
#include "gemv_mma.cuh"

NVFP4_TRACE_ATTACH(gemv_mma_blocked)

cudaError_t gemv_mma_launch_blocked(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  return launch_vectors<NVFP4_SF_BLOCKED>(p, c_vec_stride, bias_by_row, stream);
}
