/*
 * matmul_simt.cu - the portable CUDA path: GEMM, dual GEMM and grouped GEMM on
 * CUDA cores, for every shape, stride, alignment and scale layout (sm_80+).
 *
 * This is the kernel the planner (plan.cu) falls back to when no fast path applies
 * (odd K, misaligned slices, tiny problems). Correctness over speed.
 *
 * Dataflow, per 64x64 output tile, per 16-wide K step (one scale column):
 *   gmem fp4 bytes + e4m3 scale --(decode, exact fp32)--> smem As[16][64], Bs
 *   smem --> registers --> FFMA into a 4x4 fp32 accumulator per thread
 * Each product is exact in fp32, and each FFMA rounds once: fp32 accumulation.
 * Epilogue: common.cuh's (alpha, bias; or silu(alpha acc1) * alpha2 acc2), bounds-checked.
 *
 * Thread roles: 256 threads = 16 x 16; thread (tx, ty) owns rows ty + 16i,
 * columns tx + 16j (i, j < 4). For the decode each thread takes one of the 64
 * tile rows (t / 4) and 4 of its 16 K values (t % 4).
 */
#include "kernels.h"

namespace {

constexpr int TILE = 64, KSTEP = 16, THREADS = 256;

/* Decode 4 values (2 bytes) of row `row` of operand op at scale column kb into
 * dst[0..3] (column-strided by TILE + 1); zeros for rows past the end. */
__device__ __forceinline__ void decode_4(const nvfp4_operand &op, int64_t k, int64_t l, int64_t row, int64_t rows,
                                         int64_t kb, int q, float *dst) {
  float v[4] = {0.f, 0.f, 0.f, 0.f};
  if (row < rows) {
    const uint8_t *codes = op.data + l * op.batch_stride + row * op.row_stride + kb * 8 + q * 2;
    float s = nvfp4_scale(&op, k / 16, l, row, kb);
    uint32_t b0 = codes[0], b1 = codes[1];
    v[0] = nvfp4_e2m1_to_float(b0 & 15) * s;
    v[1] = nvfp4_e2m1_to_float(b0 >> 4) * s;
    v[2] = nvfp4_e2m1_to_float(b1 & 15) * s;
    v[3] = nvfp4_e2m1_to_float(b1 >> 4) * s;
  }
#pragma unroll
  for (int i = 0; i < 4; i++) dst[i * (TILE + 1)] = v[i];
}

template <bool DUAL>
__global__ void __launch_bounds__(THREADS) matmul_simt_kernel(const __grid_constant__ MatmulTable t) {
  __shared__ float a_smem[KSTEP][TILE + 1];
  __shared__ float b_smem[KSTEP][TILE + 1];
  __shared__ float b2_smem[DUAL ? KSTEP : 1][TILE + 1];

  int64_t tile = blockIdx.x;
  const nvfp4_matmul &p = t.p[table_find(t, tile)];
  const int64_t tiles_m = (p.m + TILE - 1) / TILE, tiles_n = (p.n + TILE - 1) / TILE;
  const int64_t l = tile / (tiles_m * tiles_n);
  const int64_t m0 = (tile / tiles_n) % tiles_m * TILE, n0 = tile % tiles_n * TILE;

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int ld_row = threadIdx.x / 4, ld_q = threadIdx.x % 4;

  float acc[4][4] = {}, acc2[DUAL ? 4 : 1][4] = {};
  for (int64_t kb = 0; kb < p.k / KSTEP; kb++) {
    decode_4(p.a, p.k, l, m0 + ld_row, p.m, kb, ld_q, &a_smem[ld_q * 4][ld_row]);
    decode_4(p.b, p.k, l, n0 + ld_row, p.n, kb, ld_q, &b_smem[ld_q * 4][ld_row]);
    if (DUAL) decode_4(p.b2, p.k, l, n0 + ld_row, p.n, kb, ld_q, &b2_smem[ld_q * 4][ld_row]);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KSTEP; kk++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = a_smem[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; j++) b[j] = b_smem[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      if (DUAL) {
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = b2_smem[DUAL ? kk : 0][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc2[DUAL ? i : 0][j] = fmaf(a[i], b[j], acc2[DUAL ? i : 0][j]);
      }
    }
    __syncthreads();
  }

  const Epilogue ep(p);
  uint16_t *c = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int64_t r = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (r < p.m && col < p.n)
        ep.store(c + r * p.c_row_stride + col, DUAL ? ep.dual(acc[i][j], acc2[DUAL ? i : 0][j]) : ep.gemm(acc[i][j], r, col));
    }
}

}  // namespace

/* Launch the SIMT kernel over problems[0, count), count <= NVFP4_LAUNCH_GROUPS,
 * all dual or all not. Empty problems get no tiles. */
cudaError_t matmul_simt_launch(const nvfp4_matmul *problems, int count, cudaStream_t stream) {
  MatmulTable t;
  const int64_t tiles = table_tiles(t, problems, count, TILE, TILE);
  if (tiles == 0) return cudaSuccess;
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  if (problems[0].b2.data)
    matmul_simt_kernel<true><<<(unsigned)tiles, THREADS, 0, stream>>>(t);
  else
    matmul_simt_kernel<false><<<(unsigned)tiles, THREADS, 0, stream>>>(t);
  return cudaGetLastError();
}
