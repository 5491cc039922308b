/*
 * matmul_mma.cu - the portable tensor-core path (sm_80+): GEMM, dual GEMM and
 * grouped GEMM on mma.sync m16n8k16, fp16 operands, fp32 accumulators.
 *
 * It serves every GPU without the wgmma kernel (Ampere, Ada, Blackwell: B200
 * runs sm_100a, where wgmma does not exist) and, on Hopper, the shapes that
 * kernel leaves (K not a multiple of 64, rows 8 but not 16 bytes aligned).
 *
 * Speed of light: max(bytes / DRAM bandwidth, 2 M N K / the fp16 tensor rate),
 * where on Hopper that rate is wgmma's (the ceiling benchmarks/ measure) and
 * mma.sync's own peak is lower; on an A100 mma.sync is the peak path (312
 * TFLOP/s dense). Per warp and K step of 64 the kernel issues 128 mma
 * m16n8k16 and decodes 64 activation rows and 64 weight rows itself (32
 * words of 8 codes, ~15 instructions each: numerics.cuh): the loop is ~830
 * SASS instructions a step (sm_90a, gemm, 16-byte copies, aligned scales),
 * ~6.5 per mma. A row is decoded by both warps that share it, in exchange for
 * no fp16 tile in shared memory and no barrier between the decode and the mma.
 * Measured (H100): 0.33 of the wgmma speed of light at 4096^3 (255 TFLOP/s),
 * 0.27-0.33 at M = 512..1024, 0.15-0.22 at M = 128 (gemm) and 256 (dual).
 * Not the tensor op holds it: without the mma the kernel takes 98% of the
 * time, without the decode 85%, without the loop's copies 79%, without both
 * 60% (0.56 of the wgmma speed of light at 4096^3).
 *
 * Dataflow, per CTA = 128 threads = 4 warps, K step 64, by WK:
 *   WK = 1: warps 2 x 2 over 128 activation rows x TN weight rows (gemm TN =
 *     128; dual 64 rows of B1 and the same 64 of B2), every warp every step;
 *   WK = 4: all 4 on one 64 x 64 tile (dual 64 x 32 of each), warp w on the
 *     steps 4 i + w; where the 128-row tiles would leave SMs idle
 *     (choose_wk: M = 128 1.5-2.7x faster).
 *   gmem codes (32 bytes of a row) + its 4 scale bytes --cp.async, a ring of
 *     STAGES slots of WK steps shared by the CTA, zero-filled past M, N and
 *     K--> smem (scale rows not in aligned words: loaded by bytes into
 *     registers and stored two stages ahead)
 *   per warp and step: its 64 activation rows -> mma A fragments
 *     (nvfp4_wgmma_a_fragments, 64 registers), then per 8 weight rows their
 *     B fragments (nvfp4_e2m1x8_to_half2x4) and 16 mma (4 m16 x 4 k16)
 *   WK = 4: the 4 partial tiles through shared memory, added in warp order
 *   epilogue: fp32 x 2^12 (NVFP4_TC_UNSCALE) x alpha (or silu(C1) * C2) -> fp16.
 * The K order inside a step is numerics.cuh's (thread t of a quad owns bytes
 * 8t..8t+7 of a row, one scale block): both operands decode the same way, so
 * every product pairs up and each 64-wide sum is the same set of exact
 * products as the reference's.
 *
 * Zero fill: rows past M or N and K past the end (K % 64 != 0) are copied as
 * zero codes with zero scales, whose products are 0 (a blocked layout's
 * padding scales are never read: a NaN there would make 0 x NaN).
 *
 * Copies are 16 bytes where every operand's rows are 16-byte aligned (CW =
 * 16), else 8 (rows of K % 32 == 16: K / 2 bytes is a multiple of 8 only).
 */
#include <algorithm>
#include <cstdio>

#include "kernels.h"

namespace {

constexpr int THREADS = 128; /* 4 warps */
constexpr int KSTEP = 64;    /* K values per step: 32 bytes of a row */
constexpr int STAGES = 4;

/* The CTA's shape. WK = 1: the 4 warps 2 x 2 over a 128 x 128 output tile
 * (activation rows x weight rows; dual 64 of each matrix), every warp every K
 * step. WK = 4: all 4 warps on one 64 x 64 tile, warp w on the steps
 * 4 i + w, the 4 partial tiles summed in shared memory at the end: 4x the
 * CTAs where the 128 x 128 tiles leave SMs idle (M = 128: 32 tiles for N =
 * 4096), at twice the copied bytes per flop. A stage holds WK steps: per
 * step ROWS rows of 32 code bytes, then their 4 scale bytes. */
template <int WK>
struct Shape {
  static_assert(WK == 1 || WK == 4, "two shapes");
  static constexpr int WM = WK == 1 ? 2 : 1, WN = WM;     /* warps along M and N */
  static constexpr int TM = 64 * WM, TB = 64 * WN;         /* activation rows, weight rows of a step */
  static constexpr int ROWS = TM + TB, NR = ROWS / THREADS; /* rows a thread copies */
  static constexpr int SF = ROWS * 32;                     /* scale bytes within a step */
  static constexpr int STEP_BYTES = ROWS * 36, STAGE_BYTES = WK * STEP_BYTES;
  static constexpr int RED_BYTES = WK == 1 ? 0 : THREADS * 128 * 4; /* the partial tiles */
  static constexpr int SMEM = STAGES * STAGE_BYTES > RED_BYTES ? STAGES * STAGE_BYTES : RED_BYTES;
  static_assert(NR * THREADS == ROWS, "a thread copies whole rows");
};

/* Output columns (weight rows) of a CTA: TB, or TB / 2 of each matrix (dual). */
template <bool DUAL, int WK>
constexpr int tile_n() { return DUAL ? Shape<WK>::TB / 2 : Shape<WK>::TB; }

/* What a thread copies: whole rows (row r of a step: A's below TM, then B's,
 * dual B1's then B2's), at K step 0; a step adds 32 bytes to the codes and
 * sf_step to the scales (4 linear, one 512-byte atom blocked). */
struct RowCopy {
  const uint8_t *codes, *sf;
  int64_t sf_step;
  bool ok; /* the row exists (else zero-filled) */
};

template <bool DUAL, int WK>
__device__ __forceinline__ RowCopy row_copy(const nvfp4_matmul &p, int r, int64_t l, int64_t m0, int64_t n0) {
  constexpr int TM = Shape<WK>::TM, TB = Shape<WK>::TB;
  const nvfp4_operand *op = &p.a;
  int64_t row = m0 + r, rows = p.m;
  if (r >= TM) {
    r -= TM;
    const bool second = DUAL && r >= TB / 2;
    op = second ? &p.b2 : &p.b;
    row = n0 + (second ? r - TB / 2 : r), rows = p.n;
  }
  const bool ok = row < rows;
  row = ok ? row : 0;
  return RowCopy{op->data + l * op->batch_stride + row * op->row_stride,
                 op->sf + l * op->sf_batch_stride + nvfp4_sf_offset(op->sf_layout, op->sf_row_stride, p.k / 16, row, 0),
                 op->sf_layout == NVFP4_SF_LINEAR ? 4 : 512, ok};
}

/* Bytes of a row's K step that exist: 32 codes (and 32 / 8 scales), fewer
 * at the end of K, none past it or for a row that does not exist. */
__device__ __forceinline__ int step_bytes(const RowCopy &rc, int64_t k, int step) {
  const int64_t left = k / 2 - (int64_t)step * 32;
  return !rc.ok || left <= 0 ? 0 : left < 32 ? (int)left : 32;
}

/* A row's 32 code bytes of K step `step` to row r of a stage's step at `dst`,
 * in CW-byte cp.async, zero-filled past what exists. */
template <int CW>
__device__ __forceinline__ void copy_codes(const RowCopy &rc, int64_t k, int step, uint8_t *dst, int r) {
  const int bytes = step_bytes(rc, k, step);
  const uint8_t *src = rc.codes + (int64_t)step * 32;
#pragma unroll
  for (int c = 0; c < 32 / CW; c++) {
    const int n = bytes - c * CW < 0 ? 0 : bytes - c * CW > CW ? CW : bytes - c * CW;
    if (CW == 16)
      cp_async_16(dst + r * 32 + c * CW, n ? src + c * CW : rc.codes, (uint32_t)n);
    else
      cp_async_8(dst + r * 32 + c * CW, n ? src + c * CW : rc.codes, (uint32_t)n);
  }
}

/* Its 4 scale bytes, 4-byte aligned: one cp.async to `dst` (the row's word),
 * zero-filled likewise. */
__device__ __forceinline__ void copy_scales(const RowCopy &rc, int64_t k, int step, uint8_t *dst) {
  const int n = step_bytes(rc, k, step) / 8;
  cp_async_4(dst, n ? rc.sf + step * rc.sf_step : rc.sf, (uint32_t)n);
}

/* The same 4 bytes at any alignment (linear scales of K % 64 != 0, sliced
 * scales), loaded byte by byte into a word: cp.async has no 1-byte copy. */
__device__ __forceinline__ uint32_t load_scales(const RowCopy &rc, int64_t k, int step) {
  const int n = step_bytes(rc, k, step) / 8;
  const uint8_t *src = rc.sf + step * rc.sf_step;
  uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < 4; i++)
    if (i < n) w |= (uint32_t)__ldg(src + i) << (8 * i);
  return w;
}

/* Accumulators of a warp: [matrix][m16 tile][n8 tile][4]; 128 floats. */
template <bool DUAL>
struct Acc {
  static constexpr int MATS = DUAL ? 2 : 1, NT = (DUAL ? 32 : 64) / 8;
  float v[MATS][4][NT][4];
};

/* One K step of a warp from a stage's step at `step` (shared address): rows
 * 64 wm.. of A, and per matrix the warp's weight rows (gemm: 64 wn..; dual:
 * 32 wn.. of B1 and of B2). */
template <bool DUAL, int WK>
__device__ __forceinline__ void mma_step(uint32_t step, int wm, int wn, int g, int t, Acc<DUAL> &acc) {
  constexpr int TM = Shape<WK>::TM, TB = Shape<WK>::TB, SF = Shape<WK>::SF;
  uint32_t fa[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = 64 * wm + 16 * i + g;
    const uint2 v0 = ld_shared_u2(step + r * 32 + 8 * t), v1 = ld_shared_u2(step + (r + 8) * 32 + 8 * t);
    const uint32_t sb = ld_shared_u8(step + SF + r * 4 + t) | ld_shared_u8(step + SF + (r + 8) * 4 + t) << 8;
    nvfp4_wgmma_a_fragments(v0, v1, sb, fa[i]);
  }
#pragma unroll
  for (int j = 0; j < Acc<DUAL>::NT; j++)
#pragma unroll
    for (int mat = 0; mat < Acc<DUAL>::MATS; mat++) {
      const int r = TM + (DUAL ? mat * (TB / 2) + 32 * wn : 64 * wn) + 8 * j + g;
      const uint2 v = ld_shared_u2(step + r * 32 + 8 * t);
      const uint32_t s2 = nvfp4_e4m3x2_to_half2_bits(ld_shared_u8(step + SF + r * 4 + t) * 0x101u);
      uint32_t lo[4], hi[4];
      nvfp4_e2m1x8_to_half2x4(v.x, s2, lo);
      nvfp4_e2m1x8_to_half2x4(v.y, s2, hi);
#pragma unroll
      for (int s = 0; s < 4; s++)
#pragma unroll
        for (int i = 0; i < 4; i++) mma_16816(acc.v[mat][i][j], fa[i][s], lo[s], hi[s]);
    }
}

/* Outputs (row, col) and (row, col + 1) from their sums (x: B's or B1's, y:
 * B2's) through the epilogue (its alphas carry the 2^12); one 4-byte store
 * where both exist and c allows it (`pairs`). */
template <bool DUAL>
__device__ __forceinline__ void store_pair(const nvfp4_matmul &p, uint16_t *c, bool pairs, const Epilogue &ep,
                                           int64_t row, int64_t col, float x0, float x1, float y0, float y1) {
  if (row >= p.m || col >= p.n) return;
  const float v0 = DUAL ? ep.dual(x0, y0) : ep.gemm(x0, row, col);
  const float v1 = DUAL ? ep.dual(x1, y1) : ep.gemm(x1, row, col + 1 < p.n ? col + 1 : col); /* no bias past n */
  uint16_t *dst = c + row * p.c_row_stride + col;
  if (pairs && col + 1 < p.n) {
    *reinterpret_cast<uint32_t *>(dst) = ep.pack2(v0, v1);
  } else {
    ep.store(dst, v0);
    if (col + 1 < p.n) ep.store(dst + 1, v1);
  }
}

template <bool DUAL, int CW, bool SF_ALIGNED, int WK>
__global__ void __launch_bounds__(THREADS, 2) matmul_mma_kernel(const __grid_constant__ MatmulTable t) {
  using S = Shape<WK>;
  extern __shared__ __align__(128) uint8_t smem[];

  int64_t tile = blockIdx.x;
  const nvfp4_matmul &p = t.p[table_find(t, tile)];
  constexpr int TN = tile_n<DUAL, WK>();
  const int64_t tiles_n = (p.n + TN - 1) / TN, tiles_m = (p.m + S::TM - 1) / S::TM;
  const int64_t l = tile / (tiles_m * tiles_n);
  const int64_t m0 = tile / tiles_n % tiles_m * S::TM, n0 = tile % tiles_n * TN;
  const int ksteps = (int)((p.k + KSTEP - 1) / KSTEP), steps = (ksteps + WK - 1) / WK; /* stages' worth */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int wm = WK == 1 ? warp & 1 : 0, wn = WK == 1 ? warp >> 1 : 0, wk = WK == 1 ? 0 : warp;
  const uint32_t base = smem_addr(smem) + wk * S::STEP_BYTES;

  Acc<DUAL> acc;
#pragma unroll
  for (int m = 0; m < Acc<DUAL>::MATS; m++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < Acc<DUAL>::NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc.v[m][i][j][e] = 0.f;

  /* The ring: a cp.async group per stage (empty past the end, so the count
   * stays exact). Unaligned scales go through registers instead: stage s's
   * are loaded when its codes are copied (iteration s - 3) and stored at
   * iteration s - 2, whose slot every warp left before that iteration's
   * barrier; the loads have one stage's mma to arrive. */
  static_assert(STAGES >= 3, "unaligned scales are stored two stages ahead");
  RowCopy rc[S::NR];
#pragma unroll
  for (int q = 0; q < S::NR; q++) rc[q] = row_copy<DUAL, WK>(p, threadIdx.x + q * THREADS, l, m0, n0);
  uint32_t sfr[S::NR][WK]; /* unaligned scales on their way to shared memory */
  auto copy_stage = [&](int s) {
    uint8_t *slot = smem + s % STAGES * S::STAGE_BYTES;
#pragma unroll
    for (int u = 0; u < WK; u++)
#pragma unroll
      for (int q = 0; q < S::NR; q++) {
        const int r = threadIdx.x + q * THREADS;
        copy_codes<CW>(rc[q], p.k, s * WK + u, slot + u * S::STEP_BYTES, r);
        if (SF_ALIGNED)
          copy_scales(rc[q], p.k, s * WK + u, slot + u * S::STEP_BYTES + S::SF + r * 4);
        else
          sfr[q][u] = load_scales(rc[q], p.k, s * WK + u);
      }
  };
  auto store_scales = [&](int s) {
    uint8_t *slot = smem + s % STAGES * S::STAGE_BYTES;
#pragma unroll
    for (int u = 0; u < WK; u++)
#pragma unroll
      for (int q = 0; q < S::NR; q++)
        *reinterpret_cast<uint32_t *>(slot + u * S::STEP_BYTES + S::SF + (threadIdx.x + q * THREADS) * 4) = sfr[q][u];
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < steps) {
      copy_stage(s);
      if (!SF_ALIGNED && s < STAGES - 2) store_scales(s);
    }
    cp_async_commit();
  }
  for (int s = 0; s < steps; s++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads(); /* stage s landed for every thread; every warp is done with stage s - 1's slot */
    if (!SF_ALIGNED && s + STAGES - 2 < steps) store_scales(s + STAGES - 2);
    if (s + STAGES - 1 < steps) copy_stage(s + STAGES - 1);
    cp_async_commit();
    mma_step<DUAL, WK>(base + s % STAGES * S::STAGE_BYTES, wm, wn, g, tq, acc);
  }
  cp_async_wait<0>();

  /* d[e] of an n8 tile: activation row g (e < 2) or g + 8, weight row 2 tq + e % 2. */
  const Epilogue ep(p, NVFP4_TC_UNSCALE);
  uint16_t *c = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
  const bool pairs = aligned(c, 4) && p.c_row_stride % 2 == 0;
  constexpr int NT = Acc<DUAL>::NT, M2 = Acc<DUAL>::MATS - 1;
  const int64_t col0 = n0 + (DUAL ? 32 : 64) * wn + 2 * tq;
  if constexpr (WK == 1) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const float *x = acc.v[0][i][j], *y = acc.v[M2][i][j];
          store_pair<DUAL>(p, c, pairs, ep, m0 + 64 * wm + 16 * i + g + 8 * h, col0 + 8 * j, x[2 * h], x[2 * h + 1],
                           y[2 * h], y[2 * h + 1]);
        }
  } else {
    /* The 4 partial tiles: warp w's float f (f = ((mat * 4 + i) * NT + j) * 4 + e)
     * at red[(w * 128 + f) * 32 + lane]; warp w then adds all four of m16
     * tile i = w in warp order (deterministic) and stores them. */
    float *red = reinterpret_cast<float *>(smem);
    __syncthreads(); /* every warp is done with the ring */
#pragma unroll
    for (int m = 0; m < Acc<DUAL>::MATS; m++)
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) red[(warp * 128 + ((m * 4 + i) * NT + j) * 4 + e) * 32 + lane] = acc.v[m][i][j][e];
    __syncthreads();
    auto sum = [&](int m, int j, int e) {
      const int f = ((m * 4 + warp) * NT + j) * 4 + e;
      float x = 0.f;
#pragma unroll
      for (int w = 0; w < 4; w++) x += red[(w * 128 + f) * 32 + lane];
      return x;
    };
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        store_pair<DUAL>(p, c, pairs, ep, m0 + 16 * warp + g + 8 * h, col0 + 8 * j, sum(0, j, 2 * h),
                         sum(0, j, 2 * h + 1), sum(M2, j, 2 * h), sum(M2, j, 2 * h + 1));
  }
}

/* The code copies' width every operand of a problem allows: 16, 8, or 0
 * (rows not 8-byte aligned: the SIMT kernel's). */
int copy_width(const nvfp4_operand &o) { return rows_aligned(o, 16) ? 16 : rows_aligned(o, 8) ? 8 : 0; }

int copy_width(const nvfp4_matmul &p) {
  int w = std::min(copy_width(p.a), copy_width(p.b));
  return p.b2.data ? std::min(w, copy_width(p.b2)) : w;
}

/* Whether a K step's 4 scale bytes of every row are one aligned word. */
bool scales_aligned(const nvfp4_matmul &p) {
  return scales_aligned(p.a) && scales_aligned(p.b) && (!p.b2.data || scales_aligned(p.b2));
}

template <bool DUAL, int CW, bool SF_ALIGNED, int WK>
cudaError_t launch(const MatmulTable &t, unsigned tiles, cudaStream_t stream) {
  auto kernel = matmul_mma_kernel<DUAL, CW, SF_ALIGNED, WK>;
  constexpr int smem = Shape<WK>::SMEM;
  if (smem > 48 * 1024) { /* opt in once per device */
    static std::atomic<uint64_t> done{0};
    const DeviceInfo &dev = device_info();
    const uint64_t bit = 1ull << (dev.id & 63);
    if (!(done.load(std::memory_order_relaxed) & bit)) {
      const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (err != cudaSuccess) return err;
      done.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  kernel<<<tiles, THREADS, smem, stream>>>(t);
  return cudaGetLastError();
}

template <bool DUAL, int CW, bool SF_ALIGNED>
cudaError_t launch(const MatmulTable &t, unsigned tiles, int wk, cudaStream_t stream) {
  return wk == 1 ? launch<DUAL, CW, SF_ALIGNED, 1>(t, tiles, stream) : launch<DUAL, CW, SF_ALIGNED, 4>(t, tiles, stream);
}

template <bool DUAL, int CW>
cudaError_t launch(const MatmulTable &t, unsigned tiles, bool sf_aligned, int wk, cudaStream_t stream) {
  return sf_aligned ? launch<DUAL, CW, true>(t, tiles, wk, stream) : launch<DUAL, CW, false>(t, tiles, wk, stream);
}

/* The output tile of a launch with WK = wk: activation rows x weight rows. */
void tile_of(bool dual, int wk, int &tm, int &tn) {
  tm = wk == 1 ? Shape<1>::TM : Shape<4>::TM;
  tn = dual ? (wk == 1 ? tile_n<true, 1>() : tile_n<true, 4>()) : (wk == 1 ? tile_n<false, 1>() : tile_n<false, 4>());
}

/* Tiles of a launch with WK = wk (empty problems have none). */
int64_t count_tiles(const nvfp4_matmul *problems, int count, int wk) {
  int tm, tn;
  tile_of(problems[0].b2.data != nullptr, wk, tm, tn);
  int64_t tiles = 0;
  for (int g = 0; g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    tiles += (p.m + tm - 1) / tm * ((p.n + tn - 1) / tn) * p.batch;
  }
  return tiles;
}

/* WK for a launch of `tiles` 128 x 128 tiles (WK = 1) on `sms` SMs, by time
 * in units of one such tile at two CTAs per SM: an SM with one CTA of WK = 1
 * runs at 0.82 of that, and WK = 4 at full occupancy at 0.82 of WK = 1 (its
 * copies and its partial sums; H100, 512 x 4096 x 7168 and 4096^3). A 4x
 * finer split pays where the coarse one leaves SMs idle or unevenly loaded:
 * M = 128 (32 to 56 tiles) 1.5-2.7x faster, 192 tiles 11%; at 128 and 256
 * tiles WK = 1 measured 9% and 19% faster. */
int choose_wk(int64_t tiles, int sms) {
  constexpr double EFF = 0.82;
  const double n1 = (double)((tiles + sms - 1) / sms), n4 = (double)((4 * tiles + sms - 1) / sms);
  const double c1 = n1 <= 1 ? 1 / EFF : n1, c4 = (n4 <= 1 ? 1 / EFF : 1) * n4 / 4 / EFF;
  return c4 < 0.95 * c1 ? 4 : 1;
}

/* The launch's WK: forced (1, 4) or by choose_wk. */
int launch_wk(const nvfp4_matmul *problems, int count, int wk) {
  return wk == 1 || wk == 4 ? wk : choose_wk(count_tiles(problems, count, 1), device_info().sms);
}
}  // namespace

/* sm_80+, rows 8-byte aligned (copy_width); scales at any alignment. */
bool matmul_mma_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) { return dev.major >= 8 && copy_width(p) > 0; }

/* problems[0, count), count <= NVFP4_LAUNCH_GROUPS, all dual or all not, each
 * matmul_mma_can_run. One launch; empty problems get no tiles. */
cudaError_t matmul_mma_launch(const nvfp4_matmul *problems, int count, int wk_forced, cudaStream_t stream) {
  int cw = 16;
  bool sf_aligned = true;
  for (int g = 0; g < count; g++) {
    cw = std::min(cw, copy_width(problems[g]));
    sf_aligned = sf_aligned && scales_aligned(problems[g]);
  }
  const int wk = launch_wk(problems, count, wk_forced);
  int tm, tn;
  tile_of(problems[0].b2.data != nullptr, wk, tm, tn);
  MatmulTable t;
  const int64_t tiles = table_tiles(t, problems, count, tm, tn);
  if (tiles == 0) return cudaSuccess;
  if (tiles > INT32_MAX || cw == 0) return cudaErrorInvalidConfiguration;
  if (problems[0].b2.data)
    return cw == 16 ? launch<true, 16>(t, (unsigned)tiles, sf_aligned, wk, stream)
                    : launch<true, 8>(t, (unsigned)tiles, sf_aligned, wk, stream);
  return cw == 16 ? launch<false, 16>(t, (unsigned)tiles, sf_aligned, wk, stream)
                  : launch<false, 8>(t, (unsigned)tiles, sf_aligned, wk, stream);
}

void matmul_mma_describe(const nvfp4_matmul *problems, int count, int wk, char *what, size_t len) {
  std::snprintf(what, len, launch_wk(problems, count, wk) == 1 ? "128x128 tiles" : "64x64 tiles, K over 4 warps");
}
