/*
 * quantize.cu - float32 / float16 / bfloat16 values to NVFP4 on the GPU
 * (sm_80+): the activations' quantization before each layer's gemm.
 *
 * Dataflow: a warp takes 128 consecutive scale columns kb of one row r of
 * the scale grid (32 where the input is small), the blocked layout's padding
 * included (written as 0), each lane four of them, 32 apart; per column its
 * 16 values from global memory into registers (two or four 16-byte loads
 * where rows are 16-byte aligned), nvfp4_quantize_block_device (numerics.cuh:
 * the bytes of numerics.h's definition), one 8-byte store of the codes and
 * one byte of scale (quantized values, nvfp4.h: the block's 16 values in x's
 * type instead). Each load instruction of a warp reads 32 consecutive
 * blocks, 1 KB of 16-bit input; each store writes 256 contiguous bytes of
 * codes.
 *
 * Speed of light: bytes / copy bandwidth, 2 bytes read and 0.5625 written per
 * value of 16-bit input (a 128 x 7168 bf16 activation: 2.4 MB, ~0.8 us on an
 * H100, so a single call is launch-bound). Per value the block costs a
 * product, a binary search over the block's rounding boundaries as three
 * saturated fused multiply-adds and the packing as three more (numerics.cuh:
 * as compares and selects the search bound the kernel by the ALU pipe at
 * 0.65-0.72 of copy, H100), one prmt or mask for the sign, one max for the
 * amax and, from 16-bit input, one conversion; per block one division and,
 * on sm_89+, the hardware's e4m3 conversions; the item's index two 32-bit
 * divisions per 64 values. ~20 SASS instructions a value in all (sm_90a,
 * 4 blocks a lane), where an H200's copy rate leaves an SM's four issue
 * slots a clock ~18 per 16-bit value: there the instructions, not DRAM,
 * bound the kernel (bf16 0.70 of copy; 11-13% faster for 8% fewer
 * instructions).
 */
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common.cuh"

namespace {

constexpr int THREADS = 256;

/* Row r's expert (nvfp4_quantize.scale_offs; every lane of the warp asks for
 * the same r): nvfp4_expert_of_row's count, by the warp, its lanes' loads in
 * flight together (a binary search's dependent loads cost a T = 1 MoE block
 * ~1 us). */
__device__ __forceinline__ int64_t expert_of_row(const int32_t *offs, int64_t experts, int64_t r, int lane) {
  int n = 0;
#pragma unroll 8
  for (int64_t e = lane; e < experts; e += 32) n += __ldg(offs + e) <= r;
  n = __reduce_add_sync(0xFFFFFFFFu, n);
  return n < experts ? n : experts - 1;
}

/* A warp's item: 32 * PER consecutive scale columns of one row (PER per
 * lane, lanes adjacent: each load instruction covers 32 consecutive blocks).
 * The row's bases are computed once per item; the index arithmetic, 32-bit
 * divisions wherever the items fit in I = int32_t (a 64-bit one is a
 * subroutine of ~70 instructions), is shared by PER blocks. PER = 4 where
 * the launch has enough such items, else 1. */
template <typename T, bool VEC, typename I, int PER, bool VALUES>
__global__ void __launch_bounds__(THREADS) quantize_kernel(const nvfp4_quantize q, I rows_pad, I kb_pad) {
  constexpr int CHUNK = 32 * PER;
  const int64_t k_blocks = q.k / 16;
  const I chunks = (kb_pad + CHUNK - 1) / CHUNK, items = (I)q.batch * rows_pad * chunks;
  /* launched early itself (programmatic dependent launch, sm_90+): x may be the kernel before's output */
  pdl_wait();
  if (q.early_trigger) pdl_launch_dependents();
  const float g_all = q.scale_ptr ? *q.scale_ptr : q.scale;
  const int lane = threadIdx.x % 32;
  const I warps = (I)gridDim.x * (THREADS / 32);
  for (I w = (I)blockIdx.x * (THREADS / 32) + threadIdx.x / 32; w < items; w += warps) {
    const I lr = w / chunks, chunk = w - lr * chunks, l = lr / rows_pad, r = lr - l * rows_pad;
    const I kb0 = chunk * CHUNK + lane;
    const bool pad_row = r >= q.rows;
    int64_t xr = r;
    bool nan_row = false; /* an index outside its range (nvfp4.h) */
    if (q.row_index) {
      const int32_t i = q.row_index[r];
      nan_row = i < 0 || i >= q.x_rows;
      xr = nan_row ? 0 : i;
    }
    const T *x_row = static_cast<const T *>(q.x) + l * q.x_batch_stride + xr * q.x_row_stride;
    float g = g_all;
    if (q.row_scale && !pad_row) {
      int64_t at = l * q.rows + r;
      if (q.scale_index) {
        at = q.scale_index[at];
        nan_row = nan_row || at < 0 || at >= q.scales;
      } else if (q.scale_offs) {
        at = expert_of_row(q.scale_offs, q.scales, r, lane);
      }
      g = nan_row ? 0.0f : q.row_scale[at];
    }
    if (nan_row) g = __int_as_float(0x7FC00000);
    if constexpr (VALUES) { /* no padding: rows_pad, kb_pad are the rows and blocks */
      T *values_row = static_cast<T *>(q.values) + l * q.values_batch_stride + r * q.values_row_stride;
#pragma unroll
      for (int j = 0; j < PER; j++) {
        const I kb = kb0 + 32 * j;
        if (kb >= kb_pad) break;
        float x[16];
        load16<T, VEC>(x_row + (int64_t)kb * 16, x);
        uint8_t codes[8];
        const uint32_t sf = nvfp4_quantize_block_device(x, g, codes);
        store_block_values<T, VEC>(values_row + (int64_t)kb * 16, codes, sf);
      }
      continue;
    }
    uint8_t *data_row = q.data + l * q.data_batch_stride + r * q.data_row_stride;
    uint8_t *sf_row = q.sf + l * q.sf_batch_stride + nvfp4_sf_offset(q.sf_layout, q.sf_row_stride, k_blocks, r, 0);
#pragma unroll
    for (int j = 0; j < PER; j++) {
      const I kb = kb0 + 32 * j;
      if (kb >= kb_pad) break;
      uint8_t *sf = sf_row + nvfp4_sf_offset(q.sf_layout, 0, k_blocks, 0, kb);
      if (pad_row || kb >= k_blocks) { /* the blocked layout's padding */
        *sf = 0;
        continue;
      }
      float x[16];
      load16<T, VEC>(x_row + (int64_t)kb * 16, x);
      uint8_t codes[8];
      *sf = (uint8_t)nvfp4_quantize_block_device(x, g, codes);
      uint2 packed;
      memcpy(&packed, codes, 8);
      *reinterpret_cast<uint2 *>(data_row + (int64_t)kb * 8) = packed;
    }
  }
  /* the gemm that reads these codes may launch now (its pdl_wait still waits for this grid's end). At the start
   * where the caller asks (gemm_w4a4: a dense layer's gemm, its launch then hidden behind this grid: Llama-3
   * layers at M = 1, 2 2-3% faster), not by default: an MoE's grouped GEMM would fill the SMs with CTAs waiting
   * on this grid (docs/PERF.md) */
  if (!q.early_trigger) pdl_launch_dependents();
}

template <typename T, typename I, int PER>
void launch_per(const nvfp4_quantize &q, bool vec, int64_t ctas, I rows_pad, I kb_pad, cudaStream_t stream) {
  auto kernel = q.values ? (vec ? quantize_kernel<T, true, I, PER, true> : quantize_kernel<T, false, I, PER, true>)
                         : (vec ? quantize_kernel<T, true, I, PER, false> : quantize_kernel<T, false, I, PER, false>);
  (void)launch_pdl(kernel, (unsigned)ctas, THREADS, 0, stream, q, rows_pad, kb_pad); /* errors: launch's check */
}

template <typename T>
cudaError_t launch(const nvfp4_quantize &q, cudaStream_t stream) {
  constexpr int WARPS = THREADS / 32;
  /* the scale grid, the blocked layout's padding included */
  const int64_t rows_pad = nvfp4_sf_grid_rows(q.sf_layout, q.rows), kb_pad = nvfp4_sf_grid_cols(q.sf_layout, q.k / 16);
  /* a warp per 128 columns of a row where that still gives every SM 64 warps' work, else per 32 */
  const int sms = device_info().sms;
  const bool four = q.batch * rows_pad * ((kb_pad + 127) / 128) >= (int64_t)sms * 64;
  const int64_t items = q.batch * rows_pad * ((kb_pad + (four ? 127 : 31)) / (four ? 128 : 32));
  if (items == 0) return cudaSuccess;
  const int64_t ctas = std::min<int64_t>((items + WARPS - 1) / WARPS, (int64_t)sms * 16);
  bool vec = aligned(q.x, 16) && (q.x_row_stride * sizeof(T)) % 16 == 0 && (q.x_batch_stride * sizeof(T)) % 16 == 0;
  if (q.values)
    vec = vec && aligned(q.values, 16) && (q.values_row_stride * sizeof(T)) % 16 == 0 &&
          (q.values_batch_stride * sizeof(T)) % 16 == 0;
  /* 32-bit items while the last grid-stride step stays below 2^31 */
  if (items + ctas * WARPS <= INT32_MAX && kb_pad <= INT32_MAX) {
    if (four) launch_per<T, int32_t, 4>(q, vec, ctas, (int32_t)rows_pad, (int32_t)kb_pad, stream);
    else launch_per<T, int32_t, 1>(q, vec, ctas, (int32_t)rows_pad, (int32_t)kb_pad, stream);
  } else {
    if (four) launch_per<T, int64_t, 4>(q, vec, ctas, rows_pad, kb_pad, stream);
    else launch_per<T, int64_t, 1>(q, vec, ctas, rows_pad, kb_pad, stream);
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" nvfp4_status nvfp4_quantize_cuda(const nvfp4_quantize *q, cudaStream_t stream) {
  if (q->k <= 0 || q->k % 16 || q->rows < 0 || q->batch < 0) return NVFP4_ERR_INVALID;
  if (q->values ? q->values_type != q->x_type || q->sf_layout != NVFP4_SF_LINEAR
                : !aligned(q->data, 8) || q->data_row_stride % 8 || q->data_batch_stride % 8)
    return NVFP4_ERR_INVALID;
  if ((q->row_index && (!q->values || q->batch != 1)) || (q->scale_index && !q->row_scale) ||
      (q->scale_offs && (!q->row_scale || q->scale_index || q->batch != 1 || q->scales < 1)))
    return NVFP4_ERR_INVALID;
  cudaError_t e;
  switch (q->x_type) {
    case NVFP4_F32: e = launch<float>(*q, stream); break;
    case NVFP4_F16: e = launch<__half>(*q, stream); break;
    case NVFP4_BF16: e = launch<__nv_bfloat16>(*q, stream); break;
    default: return NVFP4_ERR_INVALID;
  }
  return e == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}
