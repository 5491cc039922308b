/*
 * gemv.cu - batched NVFP4 GEMV, c[l, m] = alpha * sum_k A[l, m, k] * b[l, k].
 *
 * Speed of light: every byte of A and its scales is read once,
 *   bytes = L * M * K * (1/2 + 1/16)  (+ the vector and c, negligible),
 * so time >= bytes / DRAM bandwidth. The arithmetic (2 flops per value) is far
 * below any compute ceiling; what limits a kernel is whether it keeps enough
 * 16-byte loads in flight and decodes fast enough to keep up (on an H200 an SM
 * must consume ~36 fp4 codes per clock: ~3.5 integer instructions per code).
 *
 * Dataflow (per thread, per 16-byte chunk = 32 codes = 2 scale columns):
 *   b chunk: ld.global 16B -> 8 x int8x4 (2 * e2m1, nvfp4_e2m1x8_to_s8x8);
 *            its scales -> float2 * 1/4 (undoing the two factors of 2)
 *   for each of ROWS rows: ld.global.nc 16B of A + 2 scale bytes
 *            -> 4 dp4a per 16 codes: exact int32 sum of the 16 products
 *            -> acc += float(sum) * sa * sb / 4   (fp32 FMA, one rounding)
 * The block sums of 16 products are exact, so this is fp32 accumulation of
 * exact products, as the reference specifies, in another order.
 * Then: warp shuffles + shared memory reduce the TK threads of a row group.
 *
 * Grid: (ceil(M / (GROUPS * ROWS)), L). Block: 128 threads = GROUPS row
 * groups x TK threads along K, TK in {32, 64, 128} picked from K so that
 * threads are not idle on short rows.
 *
 * Fast-path preconditions (else the SIMT kernel runs): K % 32 == 0, A and b
 * rows 16-byte aligned, scale pairs 2-byte aligned.
 */
#include "common.cuh"

namespace {

constexpr int THREADS = 128, ROWS = 4, UNROLL = 2;

/* The two scales of chunk c (scale columns 2c, 2c+1) of a row, as float2. */
template <int SF_LAYOUT>
__device__ __forceinline__ float2 chunk_scales(const uint8_t *sf, int64_t row_stride, int64_t k_blocks, int64_t row,
                                               int64_t c) {
  uint32_t two = *reinterpret_cast<const uint16_t *>(sf + nvfp4_sf_offset(SF_LAYOUT, row_stride, k_blocks, row, 2 * c));
  return nvfp4_e4m3x2_to_float2(two);
}

/* sum over 16 codes of 2a * 2b, from two words of each (codes 0-7, 8-15). */
__device__ __forceinline__ int dot16(uint32_t a0, uint32_t a1, const uint32_t b[4]) {
  uint32_t lo, hi;
  int s = 0;
  nvfp4_e2m1x8_to_s8x8(a0, lo, hi);
  s = __dp4a((int)lo, (int)b[0], s);
  s = __dp4a((int)hi, (int)b[1], s);
  nvfp4_e2m1x8_to_s8x8(a1, lo, hi);
  s = __dp4a((int)lo, (int)b[2], s);
  s = __dp4a((int)hi, (int)b[3], s);
  return s;
}

template <int SFA_LAYOUT, int SFB_LAYOUT, int TK>
__global__ void __launch_bounds__(THREADS) gemv_kernel(const __grid_constant__ nvfp4_matmul p, int64_t l_base) {
  constexpr int GROUPS = THREADS / TK;
  const int lane_k = threadIdx.x % TK, group = threadIdx.x / TK;
  const int64_t l = l_base + blockIdx.y;
  const int64_t row0 = ((int64_t)blockIdx.x * GROUPS + group) * ROWS;
  const int64_t chunks = p.k / 32, k_blocks = p.k / 16;

  const uint8_t *a_rows[ROWS];
  const uint8_t *sfa = p.a.sf + l * p.a.sf_batch_stride;
#pragma unroll
  for (int r = 0; r < ROWS; r++) {  // rows past the end re-read the last row and are not stored
    int64_t row = row0 + r < p.m ? row0 + r : p.m - 1;
    a_rows[r] = p.a.data + l * p.a.batch_stride + row * p.a.row_stride;
  }
  const uint8_t *b_row = p.b.data + l * p.b.batch_stride;
  const uint8_t *sfb = p.b.sf + l * p.b.sf_batch_stride;

  float acc[ROWS] = {};
  for (int64_t c0 = lane_k; c0 < chunks; c0 += TK * UNROLL) {
    uint4 bv[UNROLL], av[UNROLL][ROWS];
    float2 sb[UNROLL], sa[UNROLL][ROWS];
    // Issue every load of this step before the first use.
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      int64_t c = c0 + u * TK;
      if (c < chunks) {
        bv[u] = *reinterpret_cast<const uint4 *>(b_row + 16 * c);
        sb[u] = chunk_scales<SFB_LAYOUT>(sfb, p.b.sf_row_stride, k_blocks, 0, c);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
          av[u][r] = ld_stream_16(a_rows[r] + 16 * c);
          int64_t row = row0 + r < p.m ? row0 + r : p.m - 1;
          sa[u][r] = chunk_scales<SFA_LAYOUT>(sfa, p.a.sf_row_stride, k_blocks, row, c);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      if (c0 + u * TK < chunks) {
        uint32_t b8[2][4];  // two scale columns x 4 words of int8x4
        nvfp4_e2m1x8_to_s8x8(bv[u].x, b8[0][0], b8[0][1]);
        nvfp4_e2m1x8_to_s8x8(bv[u].y, b8[0][2], b8[0][3]);
        nvfp4_e2m1x8_to_s8x8(bv[u].z, b8[1][0], b8[1][1]);
        nvfp4_e2m1x8_to_s8x8(bv[u].w, b8[1][2], b8[1][3]);
        const float sb0 = sb[u].x * 0.25f, sb1 = sb[u].y * 0.25f;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
          int s0 = dot16(av[u][r].x, av[u][r].y, b8[0]);
          int s1 = dot16(av[u][r].z, av[u][r].w, b8[1]);
          acc[r] = fmaf((float)s0, sa[u][r].x * sb0, acc[r]);
          acc[r] = fmaf((float)s1, sa[u][r].y * sb1, acc[r]);
        }
      }
    }
  }

  // Reduce over the TK threads of this row group: shuffles within each warp,
  // then shared memory across the TK / 32 warps.
#pragma unroll
  for (int r = 0; r < ROWS; r++)
#pragma unroll
    for (int off = 16; off; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  if (TK > 32) {
    __shared__ float partial[THREADS / 32][ROWS];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0)
#pragma unroll
      for (int r = 0; r < ROWS; r++) partial[warp][r] = acc[r];
    __syncthreads();
    if (lane_k == 0)
#pragma unroll
      for (int r = 0; r < ROWS; r++) {
        float s = 0.f;
        for (int w = 0; w < TK / 32; w++) s += partial[warp + w][r];
        acc[r] = s;
      }
  }
  if (lane_k == 0) {
    const float alpha = problem_alpha(p);
    uint16_t *c = p.c + l * p.c_batch_stride;
#pragma unroll
    for (int r = 0; r < ROWS; r++)
      if (row0 + r < p.m) store_half(c + (row0 + r) * p.c_row_stride, acc[r] * alpha);
  }
}

template <int SFA, int SFB, int TK>
cudaError_t launch(const nvfp4_matmul &p, cudaStream_t stream) {
  constexpr int GROUPS = THREADS / TK;
  const int64_t blocks = (p.m + GROUPS * ROWS - 1) / (GROUPS * ROWS);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  for (int64_t l = 0; l < p.batch; l += 65535) {
    const int64_t nb = p.batch - l < 65535 ? p.batch - l : 65535;
    gemv_kernel<SFA, SFB, TK><<<dim3((unsigned)blocks, (unsigned)nb), THREADS, 0, stream>>>(p, l);
  }
  return cudaGetLastError();
}

template <int SFA, int SFB>
cudaError_t launch_tk(const nvfp4_matmul &p, cudaStream_t stream) {
  const int64_t chunks = p.k / 32;
  if (chunks >= 256) return launch<SFA, SFB, 128>(p, stream);
  if (chunks >= 128) return launch<SFA, SFB, 64>(p, stream);
  return launch<SFA, SFB, 32>(p, stream);
}

bool aligned(const void *ptr, int64_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) == 0; }

}  // namespace

bool gemv_supported(const nvfp4_matmul &p) {
  if (p.n != 1 || p.b2.data || p.k % 32) return false;
  if (!aligned(p.a.data, 16) || p.a.row_stride % 16 || p.a.batch_stride % 16) return false;
  if (!aligned(p.b.data, 16) || p.b.batch_stride % 16) return false;
  const nvfp4_operand *ops[2] = {&p.a, &p.b};
  for (const nvfp4_operand *op : ops)
    if (!aligned(op->sf, 2) || op->sf_batch_stride % 2 || (op->sf_layout == NVFP4_SF_LINEAR && op->sf_row_stride % 2))
      return false;
  return true;
}

cudaError_t gemv_launch(const nvfp4_matmul &p, cudaStream_t stream) {
  const bool a_lin = p.a.sf_layout == NVFP4_SF_LINEAR, b_lin = p.b.sf_layout == NVFP4_SF_LINEAR;
  if (a_lin && b_lin) return launch_tk<NVFP4_SF_LINEAR, NVFP4_SF_LINEAR>(p, stream);
  if (a_lin) return launch_tk<NVFP4_SF_LINEAR, NVFP4_SF_BLOCKED>(p, stream);
  if (b_lin) return launch_tk<NVFP4_SF_BLOCKED, NVFP4_SF_LINEAR>(p, stream);
  return launch_tk<NVFP4_SF_BLOCKED, NVFP4_SF_BLOCKED>(p, stream);
}
