/*
 * gemv.cu - batched NVFP4 GEMV, c[l, m] = alpha * sum_k A[l, m, k] * b[l, k].
 *
 * Speed of light: every byte of A and its scales is read once,
 *   bytes = L * M * K * (1/2 + 1/16)  (+ the vector and c, negligible),
 * so time >= bytes / DRAM bandwidth; the arithmetic is far below any compute
 * ceiling. On an H200 each SM must take ~18 bytes (36 codes) per clock: the
 * kernel has to keep ~40 KB per SM in flight and spend only ~3.5 instructions
 * per code.
 *
 * Dataflow. Persistent CTAs of 256 threads; CTA (x, l) takes row blocks
 * x, x + gridDim.x, ... of batch l (the host makes that count equal per CTA).
 * A row block is R rows; it is walked in tiles of R rows x KT 16-byte chunks
 * (R * KT = 256: one chunk per thread), K tiles per row block:
 *
 *   gmem A, sfA --cp.async, STAGES-deep ring--> smem tile (4 KB + 512 B scales)
 *   gmem b     --once per CTA, decoded-------> smem int8 2*b (two planes) + scales/4
 *   thread (r, j): its chunk of row r: 2 lookups per 4 codes (nvfp4_e2m1x8_split),
 *     dp4a against b: exact int sums per 16 codes, times sa*sb/4 into an fp32 acc
 *   row block done: shuffles (+ smem across 2 warps) reduce KT partials -> fp16
 *
 * Block sums of 16 products are exact integers, so this is fp32 accumulation of
 * exact products, as the reference specifies, in another order.
 *
 * KT is the largest power of two <= 64 that divides K/32, so tiles never run
 * past a row and the copy path has no bounds checks.
 *
 * Fast-path preconditions (else the SIMT kernel runs): N == 1, K % 64 == 0,
 * A rows and b 16-byte aligned, A's scales 4-byte aligned (either layout), and
 * the shared memory (K * 1.25 bytes + 27 KB) within the device's limit.
 */
#include "common.cuh"

namespace {

constexpr int THREADS = 256, STAGES = 6;

/* Shared-memory plan of one CTA for a given K and KT. */
struct GemvSmem {
  int64_t b_lo, b_hi, sb, stages, red, total;
  __host__ __device__ GemvSmem(int64_t k) {
    b_lo = 0;                          // int8 2*b, bytes 0-15 of each 32-code chunk
    b_hi = b_lo + k / 2;               // bytes 16-31
    sb = b_hi + k / 2;                 // float2 per chunk: b's two scales / 4
    stages = sb + (k / 32) * 8;        // STAGES x (A tile, scale tile)
    red = stages + STAGES * (THREADS * 16 + THREADS * 2);
    total = red + (THREADS / 32) * 4 + 4;  // one partial per warp, the e2m1 table word
  }
};

/* sum over 16 codes of 2a * 2b: A's two words against b's four int8x4 words. */
__device__ __forceinline__ int dot16(uint32_t a0, uint32_t a1, uint4 b, uint32_t mag) {
  uint32_t p0, p1, n0, n1;
  nvfp4_e2m1x8_split(a0, p0, p1, n0, n1, mag);
  int pos = __dp4a((int)p0, (int)b.x, 0), neg = __dp4a((int)n0, (int)b.x, 0);
  pos = __dp4a((int)p1, (int)b.y, pos), neg = __dp4a((int)n1, (int)b.y, neg);
  nvfp4_e2m1x8_split(a1, p0, p1, n0, n1, mag);
  pos = __dp4a((int)p0, (int)b.z, pos), neg = __dp4a((int)n0, (int)b.z, neg);
  pos = __dp4a((int)p1, (int)b.w, pos), neg = __dp4a((int)n1, (int)b.w, neg);
  return pos - neg;
}

template <int SFA_LAYOUT, int KT>
__global__ void __launch_bounds__(THREADS) gemv_kernel(const __grid_constant__ nvfp4_matmul p, int64_t l_base) {
  constexpr int R = THREADS / KT;            // rows per tile
  constexpr int A_TILE = THREADS * 16;       // one 16-byte chunk per thread
  constexpr int STAGE = A_TILE + THREADS * 2;  // + 2 scale bytes per chunk
  extern __shared__ __align__(16) uint8_t smem[];
  const GemvSmem plan(p.k);
  uint8_t *b_lo = smem + plan.b_lo, *b_hi = smem + plan.b_hi, *stages = smem + plan.stages;
  float2 *sb = reinterpret_cast<float2 *>(smem + plan.sb);
  float *red = reinterpret_cast<float *>(smem + plan.red);

  const int tid = threadIdx.x, r = tid / KT, j = tid % KT;
  const int64_t l = l_base + blockIdx.y;
  const int chunks = (int)(p.k / 32), k_blocks = (int)(p.k / 16), ksteps = chunks / KT;  // KT divides chunks
  const int64_t row_blocks = (p.m + R - 1) / R;
  if (blockIdx.x >= row_blocks) return;
  const int tiles = (int)((row_blocks - blockIdx.x + gridDim.x - 1) / gridDim.x) * ksteps;
  const int64_t row_step = (int64_t)gridDim.x * R;  // rows between this CTA's row blocks

  const uint8_t *a_batch = p.a.data + l * p.a.batch_stride;
  const uint8_t *sfa_batch = p.a.sf + l * p.a.sf_batch_stride;
  // This thread's scale word within a tile (first R * KT / 2 threads): row sr, word w.
  const bool copies_sf = tid < R * KT / 2;
  const int sr = tid / (KT / 2), w = tid % (KT / 2);

  // Producer state: the next tile to copy. Thread (r, j) copies chunk j of row
  // r; the scale threads copy 4 scale bytes (scale columns kb..kb+3) each.
  // Cursors move by a constant per tile (offsets separate by row and column,
  // numerics.h), so a tile costs a few adds: no division, no 64-bit multiply.
  const int64_t sf_step = nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * KT);
  int p_ks = 0, p_stage = 0;
  int64_t p_row0 = (int64_t)blockIdx.x * R;
  const uint8_t *p_a = nullptr, *p_sf = nullptr;
  auto rebase = [&]() {
    p_a = a_batch + min(p_row0 + r, p.m - 1) * p.a.row_stride + 16 * j;
    p_sf = sfa_batch + nvfp4_sf_offset(SFA_LAYOUT, p.a.sf_row_stride, k_blocks, min(p_row0 + sr, p.m - 1), 0) +
           nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 4 * w);
  };
  rebase();
  uint8_t *const a_dst = stages + tid * 16, *const sf_dst = stages + A_TILE + sr * 2 * KT + 4 * w;
  auto issue = [&]() {
    cp_async_16(a_dst + p_stage * STAGE, p_a, 16);
    if (copies_sf) cp_async_4(sf_dst + p_stage * STAGE, p_sf, 4);
    p_a += 16 * KT, p_sf += sf_step;
    if (++p_stage == STAGES) p_stage = 0;
    if (++p_ks == ksteps) {
      p_ks = 0;
      p_row0 += row_step;
      if (p_row0 < p.m) rebase();
    }
  };

  for (int s = 0; s < STAGES - 1; s++) {
    if (s < tiles) issue();
    cp_async_commit();
  }

  // While the first tiles are in flight: the vector, decoded once for this CTA.
  {
    const uint8_t *b_row = p.b.data + l * p.b.batch_stride;
    for (int c = tid; c < chunks; c += THREADS) {
      const uint4 v = *reinterpret_cast<const uint4 *>(b_row + 16 * c);
      uint4 lo, hi;
      nvfp4_e2m1x8_to_s8x8(v.x, lo.x, lo.y);
      nvfp4_e2m1x8_to_s8x8(v.y, lo.z, lo.w);
      nvfp4_e2m1x8_to_s8x8(v.z, hi.x, hi.y);
      nvfp4_e2m1x8_to_s8x8(v.w, hi.z, hi.w);
      reinterpret_cast<uint4 *>(b_lo)[c] = lo;
      reinterpret_cast<uint4 *>(b_hi)[c] = hi;
      sb[c] = make_float2(0.25f * nvfp4_scale(&p.b, k_blocks, l, 0, 2 * c),
                          0.25f * nvfp4_scale(&p.b, k_blocks, l, 0, 2 * c + 1));
    }
  }

  volatile uint32_t *mag_table = reinterpret_cast<uint32_t *>(red + THREADS / 32);
  if (tid == 0) *mag_table = NVFP4_E2M1_MAG_03;  // visible after the first barrier below
  const float alpha = problem_alpha(p);
  uint16_t *c_batch = p.c + l * p.c_batch_stride;
  float acc = 0.f;
  int ks = 0, stage = 0;
  int64_t row0 = (int64_t)blockIdx.x * R;
  for (int t = 0; t < tiles; t++) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed
    __syncthreads();              // everyone's have; everyone is done with tile t - 1's stage
    if (t + STAGES - 1 < tiles) issue();
    cp_async_commit();

    {
      const uint32_t mag = *mag_table;
      const int c = ks * KT + j;
      const uint8_t *st = stages + stage * STAGE;
      const uint4 av = *reinterpret_cast<const uint4 *>(st + tid * 16);
      const float2 sa = nvfp4_e4m3x2_to_float2(*reinterpret_cast<const uint16_t *>(st + A_TILE + r * 2 * KT + 2 * j));
      const float2 sbc = sb[c];
      const int s0 = dot16(av.x, av.y, reinterpret_cast<const uint4 *>(b_lo)[c], mag);
      const int s1 = dot16(av.z, av.w, reinterpret_cast<const uint4 *>(b_hi)[c], mag);
      acc = fmaf((float)s0, sa.x * sbc.x, acc);
      acc = fmaf((float)s1, sa.y * sbc.y, acc);
    }
    if (++stage == STAGES) stage = 0;
    if (++ks == ksteps) {  // row block done: reduce the KT partials of each row
      ks = 0;
#pragma unroll
      for (int off = (KT < 32 ? KT : 32) / 2; off; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (KT > 32) {
        if (tid % 32 == 0) red[tid / 32] = acc;
        __syncthreads();
        if (j == 0) {
          float s = 0.f;
#pragma unroll
          for (int w2 = 0; w2 < KT / 32; w2++) s += red[tid / 32 + w2];
          acc = s;
        }
      }
      if (j == 0 && row0 + r < p.m) store_half(c_batch + (row0 + r) * p.c_row_stride, acc * alpha);
      acc = 0.f;
      row0 += row_step;
    }
  }
  cp_async_wait<0>();
}

/* Per device: the dynamic shared memory a kernel was opened up to and its
 * occupancy at that size, so a call costs no runtime queries after the first. */
struct LaunchCache {
  int64_t smem[64] = {};
  int per_sm[64] = {};
};

int current_device(int *sms) {
  int device = 0;
  cudaGetDevice(&device);
  static int sm_count[64] = {};
  if (device < 64 && !sm_count[device]) cudaDeviceGetAttribute(&sm_count[device], cudaDevAttrMultiProcessorCount, device);
  *sms = device < 64 ? sm_count[device] : 132;
  return device;
}

template <int SFA, int KT>
cudaError_t launch(const nvfp4_matmul &p, int64_t smem_bytes, cudaStream_t stream) {
  auto kernel = gemv_kernel<SFA, KT>;
  static LaunchCache cache;
  int sms = 0;
  const int device = current_device(&sms);
  if (device >= 64) return cudaErrorInvalidDevice;
  if (cache.smem[device] < smem_bytes || !cache.per_sm[device]) {  // grow only: one kernel, many K
    const int64_t want = std::max(smem_bytes, cache.smem[device]);
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)want);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cache.per_sm[device], kernel, THREADS, want);
    if (e != cudaSuccess) return e;
    cache.smem[device] = want;
  }
  constexpr int R = THREADS / KT;
  const int64_t row_blocks = (p.m + R - 1) / R;
  const int64_t slots = std::max<int64_t>(1, (int64_t)sms * std::max(cache.per_sm[device], 1) / p.batch);
  const int64_t per_cta = (row_blocks + slots - 1) / slots;   // row blocks per CTA, then as
  const int64_t ctas = (row_blocks + per_cta - 1) / per_cta;  // few CTAs as that allows
  for (int64_t l = 0; l < p.batch; l += 65535) {
    const int64_t nb = std::min<int64_t>(p.batch - l, 65535);
    kernel<<<dim3((unsigned)ctas, (unsigned)nb), THREADS, (size_t)smem_bytes, stream>>>(p, l);
  }
  return cudaGetLastError();
}

/* KT: the largest power of two <= 64 dividing the chunk count (K % 64 == 0
 * makes it even). */
template <int SFA>
cudaError_t launch_kt(const nvfp4_matmul &p, int64_t smem_bytes, cudaStream_t stream) {
  const int64_t chunks = p.k / 32;
  if (chunks % 64 == 0) return launch<SFA, 64>(p, smem_bytes, stream);
  if (chunks % 32 == 0) return launch<SFA, 32>(p, smem_bytes, stream);
  if (chunks % 16 == 0) return launch<SFA, 16>(p, smem_bytes, stream);
  if (chunks % 8 == 0) return launch<SFA, 8>(p, smem_bytes, stream);
  if (chunks % 4 == 0) return launch<SFA, 4>(p, smem_bytes, stream);
  return launch<SFA, 2>(p, smem_bytes, stream);
}

bool aligned(const void *ptr, int64_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) == 0; }

int64_t max_smem_optin() {
  int device = 0, v = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return v;
}

}  // namespace

bool gemv_supported(const nvfp4_matmul &p) {
  if (p.n != 1 || p.b2.data || p.k % 64 || p.k / 32 > INT32_MAX / 64) return false;
  if (!aligned(p.a.data, 16) || p.a.row_stride % 16 || p.a.batch_stride % 16) return false;
  if (!aligned(p.b.data, 16) || p.b.batch_stride % 16) return false;
  if (!aligned(p.a.sf, 4) || p.a.sf_batch_stride % 4 || (p.a.sf_layout == NVFP4_SF_LINEAR && p.a.sf_row_stride % 4))
    return false;
  return GemvSmem(p.k).total <= max_smem_optin();
}

cudaError_t gemv_launch(const nvfp4_matmul &p, cudaStream_t stream) {
  const int64_t smem = GemvSmem(p.k).total;
  return p.a.sf_layout == NVFP4_SF_LINEAR ? launch_kt<NVFP4_SF_LINEAR>(p, smem, stream)
                                          : launch_kt<NVFP4_SF_BLOCKED>(p, smem, stream);
}
