/*
 * gemv.cuh - what the two GEMV kernels share (gemv_dp4a.cu, gemv_mma.cu):
 * the vectors' loads, a thread's walk over its ring, how row sets are dealt
 * to warps, and the launch.
 *
 * A GEMV kernel streams the p.m rows of A (and of A2 for a dual) once
 * against p.n vectors held in shared memory (kernels.h, "as vectors").
 * Speed of light: every byte of A and its scales read once,
 *   bytes = L * M * K * (1/2 + 1/16)   (the vectors and c are negligible),
 * over the DRAM rate. On an H200 each SM must take ~16 bytes (32 codes) a
 * clock, so a kernel keeps ~40 KB per SM in flight and spends few
 * instructions per code.
 *
 * Dataflow of both: persistent CTAs; each thread copies exactly the bytes it
 * will consume into its own cp.async ring, so the main loop has no barrier;
 * the vectors are loaded and decoded once per CTA while the ring's first
 * stages are in flight; row sets (the rows a warp works on at once) are
 * dealt to warps CTA by CTA (GemvDeal), or with fewer sets than a wave has
 * warps, each set split along K over several warps.
 */
#pragma once
#include <algorithm>

#include "common.cuh"

namespace {

/* The most warps a row set is split over. */
constexpr int MAX_SPLIT = 8;

/* A (the streamed rows) laid out by tile (nvfp4.h): to the kernels a third scale layout, its codes' layout with it
 * (NVFP4_SF_LINEAR or NVFP4_SF_BLOCKED otherwise, the codes row_stride apart). */
constexpr int SF_BY_TILE = 2;

/* Chunk c (codes 32c..32c+31) of vector j of the batch's b: its 16 bytes and
 * the e4m3 bytes of its two scale blocks. */
struct BChunk {
  uint4 v;
  uint32_t s0, s1;
};
__device__ __forceinline__ BChunk load_b_chunk(const nvfp4_operand &b, const uint8_t *b_batch, const uint8_t *sfb_batch,
                                               int64_t k_blocks, int j, int c) {
  const uint8_t *sf = sfb_batch + nvfp4_sf_offset(b.sf_layout, b.sf_row_stride, k_blocks, j, 0);
  return BChunk{*reinterpret_cast<const uint4 *>(b_batch + j * b.row_stride + 16 * c),
                sf[nvfp4_sf_offset(b.sf_layout, 0, k_blocks, 0, 2 * c)], sf[nvfp4_sf_offset(b.sf_layout, 0, k_blocks, 0, 2 * c + 1)]};
}

/* A block of 16 16-bit values (bf16 or fp16, 8 words) quantized with global scale g as the quantize kernel does
 * (numerics.cuh), a quarter at a time (16 floats at once spilled in the kernel that quantizes its vector): its
 * codes as int8 2 * value in v (value i at byte i % 4 of v[i / 4]); returns its scale's value. */
__device__ __forceinline__ float x16_block_to_s8(const uint32_t (&w)[8], bool bf16, float g, uint32_t (&v)[4]) {
  float amax = 0.f;  // NaN once any value is
#pragma unroll
  for (int j = 0; j < 8; j++) {
    float x[2];
    x16x2_to_floats(w[j], bf16, x);
    amax = nvfp4_fmax_nan(amax, nvfp4_fmax_nan(fabsf(x[0]), fabsf(x[1])));
  }
  float s;
  nvfp4_quantize_scale_device(amax, g, s);
#pragma unroll
  for (int j = 0; j < 4; j++) {
    float x[4];
    x16x2_to_floats(w[2 * j], bf16, x), x16x2_to_floats(w[2 * j + 1], bf16, x + 2);
    uint32_t unused;
    nvfp4_e2m1x8_to_s8x8(nvfp4_quantize4_device(x, g, s), v[j], unused);
  }
  return s;
}

/* item(i, stage) for i < items in order, stage = i % STAGES, unrolled by
 * STAGES so that every ring offset is a constant; then this thread's copies
 * are all waited for. */
template <int STAGES, class Item>
__device__ __forceinline__ void for_each_item(int items, Item &&item) {
  for (int it0 = 0; it0 < items; it0 += STAGES) {
#pragma unroll
    for (int stage = 0; stage < STAGES; stage++) {
      if (it0 + stage >= items) break;
      item(it0 + stage, stage);
    }
  }
  cp_async_wait<0>();
}

/* How a batch's row sets are dealt (gemv_launch): set_stride = C * WARPS for
 * C CTAs per batch; warp w of CTA x takes sets w * C + x, then every
 * set_stride, so every warp gets row_sets = sets / set_stride of them and the
 * first extra = sets % set_stride warps (in dealing order) one more.
 * split > 1 (the SPLIT kernels; launches of fewer row sets than a wave has
 * warps): each row set is split along K over `split` warps of one CTA,
 * seg_steps steps each; CTA x takes sets x * G .. x * G + G - 1 (G = WARPS /
 * split; warps past G * split idle), `sets` of them in the batch; a row's
 * partial sums meet in shared memory after the loop, added in segment order.
 * A kernel whose traits say UNEVEN splits `steps` steps that split need not
 * divide: segment i takes steps [i steps / split, (i + 1) steps / split). */
struct GemvDeal {
  int set_stride, row_sets, extra;
  int split, seg_steps, sets, steps;
};

/* Per device: the dynamic shared memory a kernel was opened up to, and its
 * occupancy at the sizes launched so far (the first OCC_SIZES of them; a K
 * past those is queried per call), so a call costs no runtime query after
 * the first of its size. Occupancy is taken at the launch's own size: after
 * a long-K call the largest size opened has fewer CTAs per SM. */
struct LaunchCache {
  static constexpr int OCC_SIZES = 8;
  int64_t opened[64] = {};
  int64_t size[64][OCC_SIZES] = {};
  int per_sm[64][OCC_SIZES] = {};
};

/* Opens `kernel` up to `smem_bytes` of dynamic shared memory on `device`
 * (once per size beyond the largest so far) and gives its CTAs per SM at
 * that size. */
template <typename Kernel>
cudaError_t open_kernel(Kernel kernel, LaunchCache &cache, int device, int64_t smem_bytes, int threads, int &per_sm) {
  int64_t *size = cache.size[device];
  int *occ = cache.per_sm[device];
  for (int i = 0; i < LaunchCache::OCC_SIZES && size[i]; i++)
    if (size[i] == smem_bytes) {
      per_sm = occ[i];
      return cudaSuccess;
    }
  cudaError_t e = cudaSuccess;
  if (cache.opened[device] < smem_bytes) {  // grow only: one kernel, many K
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes);
    if (e != cudaSuccess) return e;
    cache.opened[device] = smem_bytes;
  }
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes);
  if (e != cudaSuccess) return e;
  for (int i = 0; i < LaunchCache::OCC_SIZES; i++)
    if (!size[i]) {
      size[i] = smem_bytes, occ[i] = per_sm;
      break;
    }
  return cudaSuccess;
}

/* Launch of one GEMV kernel K (its traits: THREADS, WARPS, VECTORS,
 * CAN_SPLIT, kernel<SPLIT>(), smem(k), sets(m), steps(k)) over p as
 * vectors: the grid and the deal, then one launch per 65535 batches. */
template <class K>
cudaError_t gemv_launch(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  constexpr bool CAN_SPLIT = K::CAN_SPLIT;
  constexpr int NV = K::VECTORS;
  auto kernel = K::template kernel<false>();
  constexpr int THREADS = K::THREADS, WARPS = K::WARPS;
  const int64_t smem_bytes = K::smem(p.k);
  static LaunchCache cache;
  const DeviceInfo &dev = device_info();
  const int device = dev.id, sms = dev.sms;
  if (device >= 64) return cudaErrorInvalidDevice;
  int per_sm = 0;
  if (cudaError_t e = open_kernel(kernel, cache, device, smem_bytes, THREADS, per_sm)) return e;
  // CTAs per batch: a full wave (every SM the same number of CTAs, every CTA
  // the same number of row sets to within one per warp) when at least half
  // its warps get a set: the SMs' rates limit, and a partial last wave left
  // 16 SMs ending at 3/4 of the others' time (H200). With fewer sets, as few
  // CTAs as give every warp one: more CTAs' vector decodes cost more than the
  // balance gained (1000 x 7168: 7.7 -> 8.4 us).
  const int64_t sets = K::sets(p.m);
  const int64_t max_ctas = std::max<int64_t>(1, (int64_t)sms * std::max(per_sm, 1) / p.batch);
  // Several vectors: every CTA decodes all of them first, so a CTA per SM
  // with at least one set, whatever the warps left idle. So too a kernel of
  // one CTA an SM (the one that quantizes x itself): fewer CTAs leave SMs
  // idle (H200, 3584 x 18944, 37 steps a row, no split: 56 of 132 SMs took
  // 22.8 us, every SM 15.0).
  const int64_t ctas = NV > 1 || per_sm == 1 ? std::max<int64_t>(1, std::min(max_ctas, sets))
                       : 2 * sets >= WARPS * max_ctas ? max_ctas
                                                      : std::max<int64_t>(1, (sets + WARPS - 1) / WARPS);
  GemvDeal deal = {};
  deal.set_stride = (int)(ctas * WARPS);
  deal.row_sets = (int)(sets / deal.set_stride);
  deal.extra = (int)(sets % deal.set_stride);
  deal.split = 1;
  // Fewer sets than a wave has warps: split rows (the SPLIT kernel) where
  // that evens out the SMs' loads. An SM's time goes as its CTAs x (a warp's
  // steps + a CTA's own cost, fitted: 2 steps for the vector's decode and the
  // ramp). Each split of 2 to 8 warps per set that divides the steps (2 or
  // more per warp) and fits a wave is weighed by that load; the lightest wins;
  // ties go to no split, or, where the unsplit grid leaves SMs idle, to the
  // split of fewest warps (H200: 7 x 16384 over 8 warps 5.0 -> 2.9 us, 6000 x
  // 16384 blocked over 2 20.8 -> 17.3; splits of no lighter load measured no
  // faster). Unsplit on every SM, k CTAs per SM replace the grid of a set per
  // warp where that lightens the busiest SM's warp-steps (7168 x 16384
  // blocked 21.5 -> 21.0 us).
  int64_t grid = ctas;
  if constexpr (CAN_SPLIT) {
    constexpr int CTA_COST = 2;  // steps
    const int steps = K::steps(p.k);
    auto per_sm_of = [&](int64_t c) { return (c * p.batch + sms - 1) / sms; };
    if (2 * sets < WARPS * max_ctas) {
      const bool idle = ctas * p.batch < sms;  // the unsplit grid leaves SMs idle: a tie goes to the split
      // an uneven split's segments average steps / s steps, weighed in 1/64 steps (as whole steps it would tie
      // with splits of fewer CTAs: 8B qkv by tile, 384 sets, 10 warps a set on 128 SMs against 8 on 96)
      constexpr int64_t UNIT = K::UNEVEN ? 64 : 1;
      auto load = [&](int64_t c, int seg_steps) { return per_sm_of(c) * (seg_steps + CTA_COST) * UNIT; };
      int64_t best = load(ctas, steps);
      for (int s = 2; s <= std::min(WARPS, K::SPLITS); s++) {
        const int64_t c = (sets + WARPS / s - 1) / (WARPS / s);
        const int64_t l = K::UNEVEN ? per_sm_of(c) * (steps + CTA_COST * s) * UNIT / s : load(c, steps / s);
        if ((!K::UNEVEN && steps % s) || steps / s < 2 || c > max_ctas || l > best ||
            (l == best && (deal.split > 1 || !idle)))
          continue;
        best = l, grid = c;
        deal.split = s, deal.seg_steps = steps / s, deal.sets = (int)sets, deal.steps = steps;
      }
      if (deal.split == 1 && !idle) {
        // unsplit on every SM: k CTAs per SM (each SM as many, every CTA its sets
        // to within one) where that lightens the busiest SM's warp-steps
        auto work = [&](int64_t c) { return per_sm_of(c) * ((sets + c - 1) / c * steps + CTA_COST * WARPS); };
        for (int k = 1; k <= per_sm; k++) {
          const int64_t c = ((int64_t)k * sms + p.batch - 1) / p.batch;
          if (c > grid && c <= max_ctas && work(c) < work(grid)) grid = c;
        }
        deal.set_stride = (int)(grid * WARPS);
        deal.row_sets = (int)(sets / deal.set_stride);
        deal.extra = (int)(sets % deal.set_stride);
      }
    }
  }
  if constexpr (CAN_SPLIT) {
    if (deal.split > 1) {
      static LaunchCache split_cache;
      kernel = K::template kernel<true>();
      int split_per_sm;
      if (cudaError_t e = open_kernel(kernel, split_cache, device, smem_bytes, THREADS, split_per_sm)) return e;
    }
  }
  // Programmatic dependent launch where the device runs sm_90+ code
  // (common.cuh): the kernel may start while the previous one in the stream ends.
  cudaLaunchAttribute attr = pdl_attribute();
  for (int64_t l = 0; l < p.batch; l += 65535) {
    const int64_t nb = std::min<int64_t>(p.batch - l, 65535);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid, (unsigned)nb);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = (size_t)smem_bytes;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = dev.sm90_code ? 1 : 0; /* its pdl_wait exists */
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, l, deal, c_vec_stride, bias_by_row);
    if (e != cudaSuccess) return e;
  }
  return cudaGetLastError();
}

/* The checks both kernels make: 1 to 8 vectors; K a multiple of 64 whose
 * chunk counts fit 32 bits; A (and A2) rows 16-byte aligned with 4-byte
 * scale words in one layout; the vectors 16-byte aligned; row sets counted
 * in 32 bits. */
inline bool gemv_streams(const nvfp4_matmul &p) {
  if (p.n < 1 || p.n > 8 || p.k % 64 || p.k / 32 > INT32_MAX / 64) return false;
  auto streamable = [&](const nvfp4_operand &a) { return cp_async_ok(a) && a.sf_layout == p.a.sf_layout; };
  if (!streamable(p.a) || (p.b2.data && !streamable(p.b2))) return false;
  if (!aligned(p.b.data, 16) || p.b.batch_stride % 16 || (p.n > 1 && p.b.row_stride % 16)) return false;
  return p.m <= INT32_MAX / 2;
}

}  // namespace
