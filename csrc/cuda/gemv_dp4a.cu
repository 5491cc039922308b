/*
 * gemv_dp4a.cu - GEMV of 1 to 4 vectors on dp4a dot products (sm_80+):
 * c[l, m, j] = alpha * sum_k A[l, m, k] * b[l, j, k] (+ bias), and the dual
 * silu(A b) * (A2 b); the shared dataflow and speed of light in gemv.cuh.
 *
 * A warp streams rows: LPR lanes per row (32 / LPR rows at once, a row set;
 * with blocked scales, rows 32 apart so their scale words are adjacent:
 * RowSets), each lane CPL 16-byte chunks (32 codes each) per step, LPR chunks
 * apart, so every copy instruction covers whole runs of a row. CPL = 2 where
 * K % 128 == 0, there is one vector and rows for a full wave: the loop's
 * control and waits are paid once per two chunks (~77 instead of ~91 SASS
 * instructions per chunk).
 *
 *   gmem A + its scales --cp.async, per-thread STAGES-deep ring--> smem
 *   gmem b --once per CTA, loaded before the first A copies, decoded--> smem
 *     int8 2*b (16-byte planes) + scales / 4
 *   per 16 codes: 2 lookups per 4 codes split by sign (nvfp4_e2m1x8_split),
 *     dp4a against b: an exact int32 sum, times sa * sb / 4 into an fp32 acc
 *   row done: shuffles over the LPR lanes -> the epilogue (common.cuh)
 * Block sums of 16 products are exact integers, so this is fp32 accumulation
 * of exact products in another order than the reference's.
 *
 * 2 to 4 vectors (a gemm of that few rows, plan.cu): each A chunk is decoded
 * once to int8 (nvfp4_e2m1x8_to_s8x8, tables from shared memory) and dotted
 * with each vector: ~150 SASS instructions per 32 codes of a lane at NV = 1,
 * ~300 at NV = 4, where an H200 leaves ~110 issue slots per warp item at the
 * DRAM rate: from two vectors on this loop is issue-bound (0.49 of the speed
 * of light at NV = 2, 0.39 at NV = 4, 7168 x 16384), which is why gemv_mma.cu
 * takes 4 vectors. At most 8 lanes per row; CTAs of 512 threads.
 *
 * Dual (DUAL): lanes 0-15 of a warp stream rows of A, lanes 16-31 the same
 * rows of A2, so one shuffle brings a row's two sums together; the vectors
 * are decoded once for both.
 *
 * One vector quantized here (QX; plan.cu: W4A4 of one activation row whose
 * global scale is in device memory): it comes as 16-bit values (p.a_type)
 * and each 16 are quantized as the quantize kernel does (numerics.cuh's
 * encoder) straight into the int8 planes and scales, in place of the codes'
 * load and decode: four threads a block while a thread has at most two
 * quarters (K <= 8192 at 1024 threads, 6144 at 768, 4096 at 512), else a
 * block a thread, each thread's first 32 bytes of x loaded before the ring's
 * first copies. One CTA an SM, so that an SM quantizes the vector once: of
 * the fewest threads of 512, 768 and 1024 (QX_NARROW, QX_MID, QX_WIDE) that
 * leave no warp a second row set and no thread much of x, since each warp's
 * start and end cost more than its few items hide. The quantize launch it
 * replaces cost more (docs/PERF.md).
 *
 * Runs (gemv_dp4a_can_run): gemv_streams (gemv.cuh), N <= 4, and the vectors
 * (N * K * 1.25 bytes) and the ring within the device's shared memory. LPR *
 * CPL divides K / 32, so a row is whole steps and the copy path has no bounds
 * checks. One vector's A may be laid out by tile (nvfp4.h, as NVFP4Linear
 * holds W4A4 weights on a GPU): its copy cursors and its launch differ
 * (launch_by_tile).
 */
#include "gemv.cuh"
#include "kernels.h"

namespace {

/* One vector: CTAs of 256 threads, a 6-deep ring (3, 6 and 12 stages
 * measured alike; 3 with two chunks per lane, where 4 and 5 were slower).
 * Several vectors: CTAs of 512 threads and 6 stages, so one CTA per SM holds
 * the vectors (4 x 16384: 80 KB) once and decodes them with twice the threads
 * (H200, M = 2 / 3 / 4 x 7168 x 16384: 31.6 / 35.4 / 39.8 us against 34.7 /
 * 38.9 / 44.5 with 256 threads; 10 and 12 stages slower). */
constexpr int THREADS_1 = 256, WARPS_1 = THREADS_1 / 32, STAGES_1 = 6; /* NV = 1 */
constexpr int STAGES_2 = 3;                                           /* NV = 1, CPL = 2 */
constexpr int THREADS_NV = 512, STAGES_NV = 6;                        /* NV = 2..4 */
/* x quantized in the kernel (QX, its value the CTA's threads): one CTA an SM, so that an SM quantizes the vector
 * once; of the fewest of 16, 24 and 32 warps where each warp has at most one row set and a thread at most 3 blocks
 * of x (by tile, gemv_dp4a_launch) or at most two quarters of a block (the checkpoint's layouts, launch_shape) */
constexpr int QX_NARROW = 512, QX_MID = 768, QX_WIDE = 1024;

/* CTA size and ring depth of a kernel of NV vectors and CPL 16-byte chunks of
 * A per lane and step (2: one vector, K % 128 == 0, rows for a full wave;
 * launch_shape). */
template <int NV, int CPL = 1, int QX = 0>
struct Cfg {
  static_assert(CPL == 1 || (CPL == 2 && NV == 1), "two chunks per lane: the GEMV of one vector");
  static_assert(!QX || NV == 1, "x quantized in the kernel: one vector");
  static_assert(!QX || QX == QX_NARROW || QX == QX_MID || QX == QX_WIDE,
                "x quantized in the kernel: CTAs of 512, 768 or 1024 threads");
  static constexpr int THREADS = QX ? QX : NV == 1 ? THREADS_1 : THREADS_NV;
  static constexpr int WARPS = THREADS / 32;
  static constexpr int STAGES = NV > 1 ? STAGES_NV : CPL == 2 ? STAGES_2 : STAGES_1;
  static constexpr int MIN_CTAS = QX ? 1 : NV == 1 ? 0 : 512 / THREADS; /* launch bounds: <= 128 registers */
};

/* Vectors per launch: N (the gemm's columns) of 1 to GEMV_MAX_NV. */
constexpr int GEMV_MAX_NV = 4;

/* Shared-memory plan of one CTA of NV vectors. */
template <int NV, int CPL = 1, int QX = 0>
struct GemvSmem {
  static constexpr int64_t nv = NV, THREADS = Cfg<NV, CPL, QX>::THREADS, STAGES = Cfg<NV, CPL, QX>::STAGES;
  int64_t b8, sb, ring_a, ring_s, table, part, total;
  __host__ __device__ explicit GemvSmem(int64_t k) {
    b8 = 0;                              // int8 2*b, [vector][step][CPL][2 halves][LPR lanes] x 16 bytes
    sb = b8 + nv * k;                    // b's scales / 4, [vector][step][CPL][LPR lanes] x float2
    ring_a = sb + nv * (k / 32) * 8;     // [STAGES][CPL][THREADS] 16-byte chunks of A
    ring_s = ring_a + STAGES * CPL * THREADS * 16;  // [STAGES][CPL][THREADS] 4 scale bytes
    table = ring_s + STAGES * CPL * THREADS * 4;    // the 4 decode tables, 4 copies each
    part = table + 64;                              // split rows (GemvDeal, NV = 1): a float per warp, row and matrix
    total = part + (NV == 1 ? (THREADS / 32) * 16 * 4 : 0);
  }
};

/* Row sets. A warp works on RPW rows at once, a "row set"; dual (DUAL), RPW
 * rows of A on lanes 0-15 and the same rows of A2 on lanes 16-31. Normally set
 * i is rows RPW i .. RPW i + RPW - 1. With blocked scales and 4 rows per set
 * (8 lanes per row; dual: 4) the rows of a set are r, r + 32, r + 64, r + 96
 * of one 128-row atom (set i: atom i / 32, r = i % 32); dual with 2 rows per
 * set (8 lanes per row), r + 64h and r + 64h + 32 (set i: atom i / 64,
 * h = i / 32 % 2). Their 4-byte scale words are contiguous, so a warp's scale
 * copy touches 4 sectors instead of one per lane pair (16 with a whole row
 * per warp). */
template <int SFA_LAYOUT, int LPR, bool DUAL = false>
struct RowSets {
  static constexpr int RPW = 32 / LPR / (DUAL ? 2 : 1);
  static constexpr bool ATOM = SFA_LAYOUT == NVFP4_SF_BLOCKED && (RPW == 4 || (DUAL && RPW == 2));
  static constexpr int SPA_SHIFT = RPW == 4 ? 5 : 6;  // log2 of the sets per atom (128 / RPW)
  __host__ __device__ static int64_t count(int64_t m) {
    return ATOM ? (m + 127) / 128 << SPA_SHIFT : (m + RPW - 1) / RPW;
  }
  __host__ __device__ static int64_t row(int64_t set, int g) {
    if (!ATOM) return set * RPW + g;
    if (RPW == 4) return (set >> 5) * 128 + (set & 31) + 32 * g;
    return (set >> 6) * 128 + (set & 31) + 32 * (((set >> 5) & 1) * 2 + g);
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

/* sum over 16 codes of 2a * 2b, a as int8 (nvfp4_e2m1x8_to_s8x8: lo0, hi0 of
 * its first 8 codes, lo1, hi1 of the next 8), plus 0x4B400000: the int32 is
 * the bits of the float 12582912 + sum (|sum| <= 16 * 144 < 2^22), so the
 * conversion is one subtraction on the FMA pipe instead of an I2F (a quarter-
 * rate conversion on Hopper). */
__device__ __forceinline__ float dot16_s8(uint32_t lo0, uint32_t hi0, uint32_t lo1, uint32_t hi1, uint4 b) {
  int d = __dp4a((int)lo0, (int)b.x, 0x4B400000);
  d = __dp4a((int)hi0, (int)b.y, d);
  d = __dp4a((int)lo1, (int)b.z, d);
  d = __dp4a((int)hi1, (int)b.w, d);
  return __int_as_float(d) - 12582912.0f;
}

/* NV vectors (p.n = NV): b's rows 0 .. NV-1, result j of row r at
 * c + r * c_row_stride + j * c_vec_stride. NV = 1 is the GEMV proper; 2 to 4
 * serve a gemm of that few rows (plan.cu), each A chunk decoded once to int8
 * (11 instructions per 8 codes) and dotted with every vector. DUAL: A2 =
 * p.b2 (A's shape and scale layout) too, result silu(A b) * (A2 b). The
 * epilogue's bias goes by row where bias_by_row (the roles swapped), else by
 * vector. */
template <int SFA_LAYOUT, int LPR, int NV, bool DUAL, int CPL, bool SPLIT, int QX>
__global__ void __launch_bounds__(Cfg<NV, CPL, QX>::THREADS, Cfg<NV, CPL, QX>::MIN_CTAS)
    gemv_dp4a_kernel(const __grid_constant__ nvfp4_matmul p, int64_t l_base, const GemvDeal deal, int64_t c_vec_stride, bool bias_by_row) {
  static_assert(!DUAL || CPL == 1, "the dual streams one chunk per lane");
  static_assert(!SPLIT || NV == 1, "split rows: one vector");
  constexpr int THREADS = Cfg<NV, CPL, QX>::THREADS, STAGES = Cfg<NV, CPL, QX>::STAGES;
  constexpr int SPAN = LPR * CPL;      // chunks of a row per step: CPL per lane, LPR apart
  constexpr bool TILED = SFA_LAYOUT == SF_BY_TILE;
  extern __shared__ __align__(16) uint8_t smem[];
  const GemvSmem<NV, CPL, QX> plan(p.k);
  const uint4 *b8 = reinterpret_cast<const uint4 *>(smem + plan.b8);
  const float2 *sb = reinterpret_cast<const float2 *>(smem + plan.sb);
  float *const part = reinterpret_cast<float *>(smem + plan.part);

  using Sets = RowSets<SFA_LAYOUT, LPR, DUAL>;
  // g: this lane's row of the set; dual: lanes 16-31 (`second`) stream A2.
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = (DUAL ? lane % 16 : lane) / LPR, q = lane % LPR;
  const bool second = DUAL && lane >= 16;
  const int64_t l = l_base + blockIdx.y;
  constexpr int WARPS = THREADS / 32, RPW = Sets::RPW;
  // split rows: this warp's segment of its row set (GemvDeal)
  const int split = SPLIT ? deal.split : 1, seg = SPLIT ? warp % split : 0;
  const int chunks = (int)(p.k / 32), k_blocks = (int)(p.k / 16);
  // this warp's steps of a row, from step seg_first (GemvDeal: uneven by tile)
  const int seg_first = SPLIT && TILED ? seg * deal.steps / split : 0;
  const int steps = !SPLIT ? chunks / SPAN : TILED ? (seg + 1) * deal.steps / split - seg_first : deal.seg_steps;
  const int vb = 2 * chunks, vs = chunks;  // uint4 / float2 between two vectors' planes
  // Row sets dealt CTA by CTA (GemvDeal; contiguous runs of rows per warp
  // measured no faster). Warps past the last row still help decode the vector
  // and meet the barrier. All of it in 32 bits and without a division (sets <
  // 2^31: gemv_streams).
  const int set_first = SPLIT ? (int)blockIdx.x * (WARPS / split) + warp / split : warp * (int)gridDim.x + (int)blockIdx.x;
  const int row_sets = SPLIT ? (warp < WARPS / split * split && set_first < deal.sets ? 1 : 0)
                                 : deal.row_sets + (set_first < deal.extra ? 1 : 0);
  const int items = row_sets * steps;  // this thread's sequence of (row, step)
  NVFP4_TRACE_POINT(tid == 0, 0);
  pdl_wait();  // common.cuh: nothing global is touched before this
  NVFP4_TRACE_POINT(tid == 0, 6);

  // Producer: the next (row set, step) this thread copies. Its chunk is chunk
  // s * LPR + q of the row, its 4 scale bytes the word holding that chunk's
  // scale columns (lanes q and q^1 copy the same word). Offsets separate by row
  // and column (numerics.h), so cursors move by constants: no division, no
  // 64-bit multiply.
  const nvfp4_operand &pa = second ? p.b2 : p.a;  // the matrix this thread streams
  const uint8_t *a_batch = pa.data + l * pa.batch_stride;
  const uint8_t *sfa_batch = pa.sf + l * pa.sf_batch_stride;
  // Laid out by tile (TILED), chunk c of a row is 16 bytes at (c / 2) * NVFP4_TILE_STEP + 16 (c % 2) of its
  // place, its scale word at (c / 8) * NVFP4_TILE_SF_GROUP + 4 (c / 2 % 4) (nvfp4.h). SPAN is even, so a lane's
  // c % SPAN never changes: the code cursor moves by a constant, the scale cursor too from 4 K steps of 64 an
  // item (KS), else by 4 KS and a group's rest where it crosses one (p_ks: the K step's place in its group). A
  // lane's second chunk (CPL = 2, LPR apart) is K step c / 2 + LPR / 2, in its group where LPR < 8 (c / 2 % 4
  // is even at LPR = 2 and below 2 at LPR = 4).
  const int seg_chunk = TILED ? seg_first * SPAN : seg * steps * SPAN;  // the segment's first chunk (split rows)
  const int ch0 = seg_chunk + q;             // the lane's first chunk of a row
  constexpr int KS = SPAN / 2;
  constexpr int64_t a_step = TILED ? KS * NVFP4_TILE_STEP : 16 * SPAN;
  constexpr int64_t a_half = TILED ? LPR / 2 * NVFP4_TILE_STEP : 16 * LPR;  // CPL = 2: the second chunk
  const int64_t sf_step = TILED ? KS / 4 * NVFP4_TILE_SF_GROUP : nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * SPAN);
  const int64_t sf_half = TILED ? (LPR >= 8 ? LPR / 8 * NVFP4_TILE_SF_GROUP : 2 * LPR)  // CPL = 2: the second word
                                : nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * LPR);
  int p_step = 0, p_set = set_first, p_ks = 0;
  int64_t p_row = Sets::row(p_set, g);
  const uint8_t *p_a = nullptr, *p_sf = nullptr;
  auto rebase = [&]() {
    const int64_t row = min(p_row, p.m - 1);  // rows past the end are read but not stored
    if constexpr (TILED) {
      p_a = a_batch + nvfp4_codes_offset(&pa, row, 16 * ch0);
      p_sf = sfa_batch + nvfp4_operand_sf_offset(&pa, k_blocks, row, (2 * ch0) & ~3);
      p_ks = (ch0 >> 1) & 3;
    } else {
      p_a = a_batch + row * pa.row_stride + 16 * (seg_chunk + q);
      p_sf = sfa_batch + nvfp4_sf_offset(SFA_LAYOUT, pa.sf_row_stride, k_blocks, row, 0) +
             nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * seg_chunk + ((2 * q) & ~3));
    }
  };
  rebase();
  const uint8_t *const s_dst = smem + plan.ring_s + tid * 4;
  uint32_t a_dst_s = smem_addr(smem + plan.ring_a + tid * 16), s_dst_s = smem_addr(s_dst);
  asm("" : "+r"(a_dst_s), "+r"(s_dst_s));  // kept in registers: ptxas otherwise redoes the conversion per copy
  auto issue = [&](int stage) {  // stage: a compile-time constant at every call (unrolled loops)
#pragma unroll
    for (int c = 0; c < CPL; c++) {  // chunk c of the lane: LPR chunks after chunk c - 1
      cp_async_16(a_dst_s + (stage * CPL + c) * THREADS * 16, p_a + a_half * c);
      cp_async_4(s_dst_s + (stage * CPL + c) * THREADS * 4, p_sf + sf_half * c);
    }
    p_a += a_step;
    if constexpr (TILED && KS < 4) {
      p_ks += KS;
      p_sf += 4 * KS + (p_ks >= 4 ? NVFP4_TILE_SF_GROUP - 16 : 0);
      p_ks &= 3;
    } else {
      p_sf += sf_step;
    }
    if (++p_step == steps) {
      p_step = 0;
      p_set += deal.set_stride;
      p_row = Sets::row(p_set, g);
      rebase();
    }
  };
  // The vector's chunk c: 16 bytes of b and its two scale bytes. Each thread's
  // first two chunks (K <= 16384) are loaded before the ring's first copies are
  // issued, so that they do not queue behind them: every warp waits for the
  // whole vector (H200, 4096 x 7168 L8: decoded 2.1 us after entry instead of
  // 3.8). Batched loads as in gemv_mma.cu measured up to 5% slower here.
  // Chunks of all NV vectors are numbered f = j * chunks + c (vector j, chunk c).
  const uint8_t *b_batch = p.b.data + l * p.b.batch_stride;
  const uint8_t *sfb_batch = p.b.sf + l * p.b.sf_batch_stride;
  auto load_b = [&](int j, int c) { return load_b_chunk(p.b, b_batch, sfb_batch, k_blocks, j, c); };
  const int b_chunks = NV * chunks;
  constexpr int EARLY = 2;
  BChunk early_b[EARLY] = {};
#pragma unroll
  for (int i = 0; i < EARLY; i++) {
    const int f = tid + i * THREADS, j = NV == 1 ? 0 : f / chunks;
    if (!QX && f < b_chunks) early_b[i] = load_b(j, f - j * chunks);
  }
  // x quantized here (QX): by four threads a block while each thread has at most two of those quarters (K <= 8192
  // with 1024 threads, 4096 with 512), else a block a thread; its global scale and each thread's first 32 bytes of
  // x (its two quarters or its first block) loaded early as b's chunks are. (Quarters loaded after the ring's first
  // copies wait behind them: H200, 2026-12-03, the down projections of Llama-3 and Qwen2.5 at M = 1, K >= 14336,
  // took 1.02-1.09x a block a thread's time, both loaded after the copies; docs/PERF.md.)
  const bool quarters = 4 * k_blocks <= 2 * THREADS;
  float gs = 0.f;
  uint4 early_x[2] = {};
  if constexpr (QX) {
    gs = *p.a_global;
    const uint4 *x16 = reinterpret_cast<const uint4 *>(b_batch);
    if (quarters) {
#pragma unroll
      for (int i = 0; i < 2; i++)
        if (tid + i * THREADS < 4 * k_blocks) {
          const uint2 u = __ldg(reinterpret_cast<const uint2 *>(b_batch) + tid + i * THREADS);
          early_x[i] = make_uint4(u.x, u.y, 0u, 0u);
        }
    } else if (tid < k_blocks) {
      early_x[0] = __ldg(x16 + 2 * tid), early_x[1] = __ldg(x16 + 2 * tid + 1);
    }
  }
  NVFP4_TRACE_POINT(tid == 0, 7);
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < items) issue(s);
    cp_async_commit();
  }
  NVFP4_TRACE_POINT(tid == 0, 5);

  // The vector, decoded once per CTA (all warps help, then one barrier), while
  // the first stages of A are in flight.
  {
    uint4 *b8w = reinterpret_cast<uint4 *>(smem + plan.b8);
    float2 *sbw = reinterpret_cast<float2 *>(smem + plan.sb);
    // chunk c of a vector belongs to (step st, lane qq) of its plane (see the plan above): slot st * CPL + cc, the
    // index of its 16 bytes of half h in b8w (2 slot + h) LPR + qq, of its scales in sbw slot LPR + qq
    auto slot_of = [&](int c) { return c / SPAN * CPL + (c / LPR) % CPL; };
    auto store_b = [&](int f, const BChunk &b) {
      const int j = NV == 1 ? 0 : f / chunks, c = f - j * chunks, qq = c % LPR;
      uint4 lo, hi;
      nvfp4_e2m1x8_to_s8x8(b.v.x, lo.x, lo.y);
      nvfp4_e2m1x8_to_s8x8(b.v.y, lo.z, lo.w);
      nvfp4_e2m1x8_to_s8x8(b.v.z, hi.x, hi.y);
      nvfp4_e2m1x8_to_s8x8(b.v.w, hi.z, hi.w);
      b8w[j * vb + (slot_of(c) * 2) * LPR + qq] = lo;
      b8w[j * vb + (slot_of(c) * 2 + 1) * LPR + qq] = hi;
      sbw[j * vs + slot_of(c) * LPR + qq] =
          make_float2(0.25f * nvfp4_e4m3_to_float(b.s0), 0.25f * nvfp4_e4m3_to_float(b.s1));
    };
    if constexpr (QX) {
      /* the vector as 16-bit values (p.a_type) with global scale gs, quantized as the quantize kernel does
       * (numerics.cuh), block kb's codes as int8 2 * value into b8w (half kb % 2 of chunk kb / 2), its scale / 4 */
      const bool bf16 = p.a_type == NVFP4_BF16;
      auto words = [&](int kb) {  // block kb: half kb % 2 of chunk kb / 2
        return reinterpret_cast<uint32_t *>(b8w + (slot_of(kb >> 1) * 2 + (kb & 1)) * LPR + (kb >> 1) % LPR);
      };
      auto put_scale = [&](int kb, float s) {
        reinterpret_cast<float *>(sbw + slot_of(kb >> 1) * LPR + (kb >> 1) % LPR)[kb & 1] = 0.25f * s;
      };
      if (quarters) {
        /* four threads a block: thread t % 4 its values 4 (t % 4) .. + 3, word t % 4 of the block's 16 bytes, and
         * the block's amax by two shuffles; at most two quarters a thread, both loaded early. A warp's trip count
         * is uniform (4 k_blocks is a multiple of 16: a warp's last 16 lanes may have none). */
        for (int i0 = tid - lane, n = 0; i0 < 4 * k_blocks; i0 += THREADS, n++) {
          const int i = i0 + lane;
          const bool half = i0 + 32 > 4 * k_blocks;  // the rest is 16 pieces: lanes 0-15 (warp-uniform)
          if (half && lane >= 16) break;
          const unsigned lanes = half ? 0xFFFFu : 0xFFFFFFFFu;
          const uint4 e = n == 0 ? early_x[0] : early_x[1];
          float x[4];
          x16x2_to_floats(e.x, bf16, x), x16x2_to_floats(e.y, bf16, x + 2);
          float amax = nvfp4_fmax_nan(nvfp4_fmax_nan(fabsf(x[0]), fabsf(x[1])),
                                      nvfp4_fmax_nan(fabsf(x[2]), fabsf(x[3])));
          amax = nvfp4_fmax_nan(amax, __shfl_xor_sync(lanes, amax, 1));
          amax = nvfp4_fmax_nan(amax, __shfl_xor_sync(lanes, amax, 2));
          float s;
          nvfp4_quantize_scale_device(amax, gs, s);
          uint32_t word, unused;
          nvfp4_e2m1x8_to_s8x8(nvfp4_quantize4_device(x, gs, s), word, unused);
          words(i >> 2)[i & 3] = word;
          if ((i & 3) == 0) put_scale(i >> 2, s);
        }
      } else {
        for (int kb = tid, n = 0; kb < k_blocks; kb += THREADS, n++) {  // a block a thread
          const uint4 *x16 = reinterpret_cast<const uint4 *>(b_batch) + 2 * kb;
          const uint4 u0 = n == 0 ? early_x[0] : __ldg(x16), u1 = n == 0 ? early_x[1] : __ldg(x16 + 1);
          const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
          uint32_t v[4];
          const float s = x16_block_to_s8(w, bf16, gs, v);
          *reinterpret_cast<uint4 *>(words(kb)) = make_uint4(v[0], v[1], v[2], v[3]);
          put_scale(kb, s);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < EARLY; i++)
        if (tid + i * THREADS < b_chunks) store_b(tid + i * THREADS, early_b[i]);
      for (int f = tid + EARLY * THREADS; f < b_chunks; f += THREADS) {
        const int j = NV == 1 ? 0 : f / chunks;
        store_b(f, load_b(j, f - j * chunks));
      }
    }
    if (tid < 16) {  // table i at words 4i .. 4i + 3 (table 0 is NVFP4_E2M1_MAG_03)
      constexpr uint32_t t[4] = NVFP4_E2M1_S8_TABLES;
      static_assert(t[0] == NVFP4_E2M1_MAG_03, "the split's table is the first");
      reinterpret_cast<uint32_t *>(smem + plan.table)[tid] = tid < 4 ? t[0] : tid < 8 ? t[1] : tid < 12 ? t[2] : t[3];
    }
  }

  __syncthreads();  // the vector and the table are in shared memory
  NVFP4_TRACE_POINT(tid == 0, 1);

  // Read at a lane-dependent address: a uniform value would live in a uniform
  // register and be copied out before every prmt (numerics.cuh).
  const volatile uint32_t *table = reinterpret_cast<volatile uint32_t *>(smem + plan.table);
  const uint32_t mag = table[lane & 3];
  uint32_t s8_tab[4];  // NV > 1: nvfp4_e2m1x8_to_s8x8's tables
#pragma unroll
  for (int i = 0; i < 4; i++) s8_tab[i] = NV == 1 ? 0u : table[4 * i + (lane & 3)];
  const Epilogue ep(p, 1.f, bias_by_row);
  uint16_t *c_batch = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
  float acc[NV] = {};
  const uint8_t *const a_dst = smem + plan.ring_a + tid * 16;
  int step = 0, set = set_first;
  int64_t row = Sets::row(set, g);
  // This lane's place in the vector's layout; moves by one step's worth per step.
  // (split rows: from the segment's first step; the planes are step-major)
  const uint4 *const b_seg = b8 + q + 2 * seg_chunk;
  const float2 *const sb_seg = sb + q + seg_chunk;
  const uint4 *b_step = b_seg;
  const float2 *sb_step = sb_seg;
  // One item: wait for its copies, consume them, refill the stage before it.
  auto item = [&](int it, int stage) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of item `it` have landed
    NVFP4_TRACE_POINT(tid == 0 && it == 0, 2);
#pragma unroll
    for (int cc = 0; cc < CPL; cc++) {
      const uint32_t sw = *reinterpret_cast<const uint32_t *>(s_dst + (stage * CPL + cc) * THREADS * 4);
      const uint4 av = *reinterpret_cast<const uint4 *>(a_dst + (stage * CPL + cc) * THREADS * 16);
      // the chunk's scale columns 2c, 2c+1 are the half of the word picked by c's parity
      const uint32_t two = sw >> (16 * ((step * LPR + q) & 1));
      const float2 sa = nvfp4_e4m3x2_to_float2(two & 0xFFFFu);
      if constexpr (NV == 1) {
        const float2 sbc = sb_step[cc * LPR];
        const int s0 = dot16(av.x, av.y, b_step[2 * cc * LPR], mag);
        const int s1 = dot16(av.z, av.w, b_step[(2 * cc + 1) * LPR], mag);
        acc[0] = fmaf((float)s0, sa.x * sbc.x, acc[0]);
        acc[0] = fmaf((float)s1, sa.y * sbc.y, acc[0]);
      } else {
        uint32_t lo[4], hi[4];
        nvfp4_e2m1x8_to_s8x8(av.x, lo[0], hi[0], s8_tab[0], s8_tab[1], s8_tab[2], s8_tab[3]);
        nvfp4_e2m1x8_to_s8x8(av.y, lo[1], hi[1], s8_tab[0], s8_tab[1], s8_tab[2], s8_tab[3]);
        nvfp4_e2m1x8_to_s8x8(av.z, lo[2], hi[2], s8_tab[0], s8_tab[1], s8_tab[2], s8_tab[3]);
        nvfp4_e2m1x8_to_s8x8(av.w, lo[3], hi[3], s8_tab[0], s8_tab[1], s8_tab[2], s8_tab[3]);
#pragma unroll
        for (int j = 0; j < NV; j++) {
          const float2 sbc = sb_step[j * vs];
          const float s0 = dot16_s8(lo[0], hi[0], lo[1], hi[1], b_step[j * vb]);
          const float s1 = dot16_s8(lo[2], hi[2], lo[3], hi[3], b_step[j * vb + LPR]);
          acc[j] = fmaf(s0, sa.x * sbc.x, acc[j]);
          acc[j] = fmaf(s1, sa.y * sbc.y, acc[j]);
        }
      }
    }
    // Refill (item it + STAGES - 1 goes to the stage just before this one) after
    // this item's shared-memory reads were consumed above.
    if (it + STAGES - 1 < items) issue(stage == 0 ? STAGES - 1 : stage - 1);
    cp_async_commit();
    b_step += 2 * CPL * LPR, sb_step += CPL * LPR;
    if (++step == steps) {  // row done: reduce its LPR partials
      step = 0;
      b_step = b_seg, sb_step = sb_seg;
#pragma unroll
      for (int j = 0; j < NV; j++) {
#pragma unroll
        for (int off = LPR / 2; off; off >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
        // every lane of the row holds the sums; lane j % LPR stores vector j's
        if constexpr (SPLIT) {  // a segment's sum (dual: A's and A2's): to shared memory, added up after the loop
          if (q == 0) part[(warp * RPW + g) * (DUAL ? 2 : 1) + (second ? 1 : 0)] = acc[j];
        } else if constexpr (DUAL) {
          const float up = __shfl_xor_sync(0xffffffffu, acc[j], 16);  // A2's sum of the row, to lanes 0-15
          if (!second && q == j % LPR && row < p.m)
            ep.store(c_batch + row * p.c_row_stride + j * c_vec_stride, ep.dual(acc[j], up));
        } else if (q == j % LPR && row < p.m) {
          ep.store(c_batch + row * p.c_row_stride + j * c_vec_stride, ep.gemm(acc[j], row, j));
        }
        acc[j] = 0.f;
      }
      set += deal.set_stride;
      row = Sets::row(set, g);
    }
  };
  for_each_item<STAGES>(items, item);
  pdl_launch_dependents();
  if (SPLIT) {  // split rows: the segments' sums of each row, in segment order
    __syncthreads();
    if (tid < WARPS / split * RPW) {
      const int grp = tid / RPW, gg = tid % RPW, set_g = (int)blockIdx.x * (WARPS / split) + grp;
      const int64_t row_g = Sets::row(set_g, gg);
      if (set_g < deal.sets && row_g < p.m) {
        constexpr int MATS = DUAL ? 2 : 1;
        float sum = 0.f, up = 0.f;
        for (int s2 = 0; s2 < split; s2++) {
          sum += part[((grp * split + s2) * RPW + gg) * MATS];
          if (DUAL) up += part[((grp * split + s2) * RPW + gg) * MATS + 1];
        }
        ep.store(c_batch + row_g * p.c_row_stride, DUAL ? ep.dual(sum, up) : ep.gemm(sum, row_g, 0));
      }
    }
  }
  NVFP4_TRACE_POINT(tid == 0, 3);
  NVFP4_TRACE_POINT(tid == THREADS - 1, 4);
}

/* The kernel as gemv_launch sees it (gemv.cuh). */
template <int SFA, int LPR, int NV, bool DUAL, int CPL, int QX = 0>
struct Dp4a {
  static constexpr int THREADS = Cfg<NV, CPL, QX>::THREADS, WARPS = Cfg<NV, CPL, QX>::WARPS, VECTORS = NV;
  static constexpr bool CAN_SPLIT = NV == 1;
  /* A laid out by tile (LPR 2: 16 rows a warp), rows split over up to 32 warps, unevenly: enough warps for a
   * wave from rows of a few thousand */
  static constexpr bool UNEVEN = SFA == SF_BY_TILE;
  static constexpr int SPLITS = UNEVEN ? 32 : MAX_SPLIT;
  template <bool SPLIT>
  static constexpr auto kernel() { return gemv_dp4a_kernel<SFA, LPR, NV, DUAL, CPL, SPLIT, QX>; }
  static int64_t smem(int64_t k) { return GemvSmem<NV, CPL, QX>(k).total; }
  static int64_t sets(int64_t m) { return RowSets<SFA, LPR, DUAL>::count(m); }
  static int steps(int64_t k) { return (int)(k / 32 / (LPR * CPL)); }
};

/* LPR: blocked scales take 8 when it divides the chunk count and the row
 * quads (RowSets) give at least half a wave of warps work (H200, blocked:
 * 4096 x 7168 with quads 11.9 us, 13.7 without; 1000 x 7168 10.8 and 7.7);
 * otherwise (and for linear scales) the largest power of two <= 32 dividing
 * the chunk count (even, as K % 64 == 0), which spreads small M over 4x the
 * warps; but
 * - 16 rather than 32 where that makes every warp of a full wave take one row
 *   set at most (7168 x 16384: 3584 row pairs for 4224 warps rather than 7168
 *   rows, some warps taking two);
 * - halved while a row is fewer than 6 steps and every warp of a full wave
 *   still gets a set: short rows spend less on their ends (shuffles, store,
 *   the next row's addresses) per step (H200, linear, kernel time: 7168 x 2048
 *   L4 12.1 -> 11.5 us at 8 lanes, 16384 x 2048 8.0 -> 7.5 at 16; at 8 lanes
 *   7.7, with 4096 sets for 4224 warps).
 * The rule counts a lane's chunks per row in units of CPL (launch_rows).
 * Two chunks per lane are LPR chunks apart: two adjacent ones measured
 * slower on an H200 (7168 x 16384: 36 vs 19 us with one vector): each
 * 16-byte copy instruction then touches half of every 32-byte sector,
 * doubling the L2 requests. */
template <int SFA, int NV, bool DUAL = false, int QX = 0>
cudaError_t launch_vectors(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  switch ((p.k / 32) % 8 == 0 ? 8 : (p.k / 32) % 4 == 0 ? 4 : 2) {
    case 8: return gemv_launch<Dp4a<SFA, 8, NV, DUAL, 1, QX>>(p, c_vec_stride, bias_by_row, stream);
    case 4: return gemv_launch<Dp4a<SFA, 4, NV, DUAL, 1, QX>>(p, c_vec_stride, bias_by_row, stream);
    default: return gemv_launch<Dp4a<SFA, 2, NV, DUAL, 1, QX>>(p, c_vec_stride, bias_by_row, stream);
  }
}

/* One vector: CPL chunks per lane and step, LPR by the rule above. Two chunks
 * with a 3-deep ring where K % 128 == 0 and the launch has a row for every
 * warp of a full wave (kernel time, H200, linear: 7168 x 16384 19.1 -> 18.8
 * us, 4096 x 7168 L8 34.1 -> 33.5-34.1, 7168 x 2048 L4 11.4 -> 10.4, 16384 x
 * 2048 7.5 -> 6.9; 4 and 5 stages were slower than 3). With fewer rows a
 * warp's few items are latency-bound and the 3-deep ring holds fewer bytes
 * in flight per thread than the 6-deep one (64 against 80): 512 x 7168 3.6
 * -> 4.5 us, 1000 x 7168 3.8 -> 4.6, so one chunk there. */
template <int SFA, int CPL, int QX = 0>
cudaError_t launch_rows(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  const int64_t chunks = p.k / 32 / CPL; /* a lane's steps of a row, times LPR */
  if (SFA == NVFP4_SF_BLOCKED && chunks % 8 == 0 &&
      2 * RowSets<SFA, 8>::count(p.m) * p.batch >= (int64_t)WARPS_1 * device_info().sms)
    return gemv_launch<Dp4a<SFA, 8, 1, false, CPL, QX>>(p, c_vec_stride, bias_by_row, stream);
  // (a full wave: 4 CTAs of 8 warps per SM)
  const int64_t warps = (int64_t)device_info().sms * 4 * WARPS_1;
  auto sets = [&](int lpr) {  // row sets of the launch at lpr = 32, 16 or 8 lanes per row
    return p.batch * (lpr == 32 ? RowSets<SFA, 32>::count(p.m)
                      : lpr == 16 ? RowSets<SFA, 16>::count(p.m) : RowSets<SFA, 8>::count(p.m));
  };
  int lpr = 32;
  while (chunks % lpr) lpr /= 2;  // chunks is even
  if (lpr == 32 && sets(32) > warps && sets(16) <= warps) lpr = 16;
  while (lpr > 8 && chunks / lpr < 6 && sets(lpr / 2) >= warps) lpr /= 2;
  switch (lpr) {
    case 32: return gemv_launch<Dp4a<SFA, 32, 1, false, CPL, QX>>(p, c_vec_stride, bias_by_row, stream);
    case 16: return gemv_launch<Dp4a<SFA, 16, 1, false, CPL, QX>>(p, c_vec_stride, bias_by_row, stream);
    case 8: return gemv_launch<Dp4a<SFA, 8, 1, false, CPL, QX>>(p, c_vec_stride, bias_by_row, stream);
    case 4: return gemv_launch<Dp4a<SFA, 4, 1, false, CPL, QX>>(p, c_vec_stride, bias_by_row, stream);
    default: return gemv_launch<Dp4a<SFA, 2, 1, false, CPL, QX>>(p, c_vec_stride, bias_by_row, stream);
  }
}

/* A laid out by tile: one vector (gemv_dp4a_can_run), CPL as launch_shape's, 2 lanes a row: a warp's copy
 * instruction reads 16 places' 32 bytes of a K step, 512 contiguous bytes, and its row sets split over warps
 * (Dp4a::UNEVEN) make a wave. H200, 2026-12-02, the linears of Llama-3 8B / 70B, Qwen2.5-7B, Qwen3-32B layers at
 * M = 1 (x quantized in the kernel), time by tile over the checkpoint layout's: 8 lanes a row (even splits of up
 * to 8 warps) 1.10-1.28x, 4 lanes (uneven splits) 1.08-1.35x; 2 lanes, even splits 0.93-1.42x (8B down on 64 of
 * 132 SMs), uneven splits of up to 32 warps 0.91-1.21x (layers 0.98-1.11x; the duals 0.91-1.10x). */
template <int QX>
cudaError_t launch_by_tile(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  constexpr int S = SF_BY_TILE, LPR = 2;
  if (p.b2.data) return gemv_launch<Dp4a<S, LPR, 1, true, 1, QX>>(p, c_vec_stride, bias_by_row, stream);
  const bool two = p.k % 128 == 0 && p.m * p.batch >= (int64_t)device_info().sms * 4 * WARPS_1;
  return two ? gemv_launch<Dp4a<S, LPR, 1, false, 2, QX>>(p, c_vec_stride, bias_by_row, stream)
             : gemv_launch<Dp4a<S, LPR, 1, false, 1, QX>>(p, c_vec_stride, bias_by_row, stream);
}

/* x quantized in the kernel, the checkpoint's layouts: CTAs of 16 warps while a thread has at most two quarters of
 * blocks of x (K <= 4096), of 24 to K = 6144, else of 32. H200, 2026-12-03, 16 warps against 32 (K <= 4096 at M =
 * 1): Llama-3-8B o 6.15 -> 5.2 us, Qwen2.5-7B gate_up 23.5 -> 22.1, Qwen3-8B gate_up 18.5 -> 17.2; Qwen3-32B o (K =
 * 5120, a block a thread at 16 warps) 9.4 -> 10.35, down (K = 25600) 24.1 -> 29.1. 24 warps against 32 (K = 5120,
 * 3 rounds): Qwen3-32B qkv 11.3 -> 10.1, gate_up 45.7 -> 43.3, o 9.6 -> 9.6. */
template <int SFA, int QX>
cudaError_t launch_qx(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  if (p.b2.data) return launch_vectors<SFA, 1, true, QX>(p, c_vec_stride, bias_by_row, stream);
  const bool two = p.k % 128 == 0 && p.m * p.batch >= (int64_t)device_info().sms * 4 * WARPS_1;
  return two ? launch_rows<SFA, 2, QX>(p, c_vec_stride, bias_by_row, stream)
             : launch_rows<SFA, 1, QX>(p, c_vec_stride, bias_by_row, stream);
}

template <int SFA>
cudaError_t launch_shape(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  /* Several vectors: at most 8 lanes per row. Lanes of a warp that share a
   * chunk column read the same vector words (a broadcast), so 4 rows per warp
   * read each vector's 48 bytes per step in 3 shared-memory wavefronts where 32
   * lanes of one row need 10; with 4 vectors that would be ~40 wavefronts per
   * 512 bytes of A, more than the SM can serve at the DRAM rate. The dual
   * takes the same path for any vector count: a warp holds both halves. */
  if (p.a_global) { /* x quantized in the kernel (gemv_dp4a_can_run: one vector) */
    if (4 * (p.k / 16) <= 2 * QX_NARROW) return launch_qx<SFA, QX_NARROW>(p, c_vec_stride, bias_by_row, stream);
    if (4 * (p.k / 16) <= 2 * QX_MID) return launch_qx<SFA, QX_MID>(p, c_vec_stride, bias_by_row, stream);
    return launch_qx<SFA, QX_WIDE>(p, c_vec_stride, bias_by_row, stream);
  }
  if (p.b2.data) switch (p.n) {
      case 1: return launch_vectors<SFA, 1, true>(p, c_vec_stride, bias_by_row, stream);
      case 2: return launch_vectors<SFA, 2, true>(p, c_vec_stride, bias_by_row, stream);
      case 3: return launch_vectors<SFA, 3, true>(p, c_vec_stride, bias_by_row, stream);
      default: return launch_vectors<SFA, 4, true>(p, c_vec_stride, bias_by_row, stream);
    }
  switch (p.n) {
    case 2: return launch_vectors<SFA, 2>(p, c_vec_stride, bias_by_row, stream);
    case 3: return launch_vectors<SFA, 3>(p, c_vec_stride, bias_by_row, stream);
    case 4: return launch_vectors<SFA, 4>(p, c_vec_stride, bias_by_row, stream);
    default: break;
  }
  static_assert(GEMV_MAX_NV == 4, "one case per vector count");
  const bool two = p.k % 128 == 0 && p.m * p.batch >= (int64_t)device_info().sms * 4 * WARPS_1;
  return two ? launch_rows<SFA, 2>(p, c_vec_stride, bias_by_row, stream) : launch_rows<SFA, 1>(p, c_vec_stride, bias_by_row, stream);
}

}  // namespace

NVFP4_TRACE_ATTACH(gemv_dp4a)

/* gemv_streams, 1 to 4 vectors, and the shared memory of the builds a
 * launch may take (one vector: one or two chunks per lane). */
bool gemv_dp4a_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (!gemv_streams(p) || p.n > GEMV_MAX_NV) return false;
  /* A laid out by tile (128 rows, dense): one vector */
  if (p.b.tile_rows || (p.a.tile_rows && (p.a.tile_rows != NVFP4_TILE_ROWS || p.n != 1))) return false;
  if (p.a_global) /* the vector as 16-bit values (a_type), quantized in the kernel: one, its rows 16-byte aligned */
    return p.n == 1 && p.a_type != NVFP4_E2M1 && !p.offs &&
           std::max(GemvSmem<1, 1, QX_WIDE>(p.k).total, GemvSmem<1, 2, QX_WIDE>(p.k).total) <= dev.smem_optin;
  if (p.a_type != NVFP4_E2M1) return false;
  const int64_t smem = p.n == 1 ? std::max(GemvSmem<1>(p.k).total, GemvSmem<1, 2>(p.k).total)
                       : p.n == 2 ? GemvSmem<2>(p.k).total
                       : p.n == 3 ? GemvSmem<3>(p.k).total : GemvSmem<4>(p.k).total;
  return smem <= dev.smem_optin;
}

cudaError_t gemv_dp4a_launch(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  if (p.a.tile_rows) {
    if (!p.a_global) return launch_by_tile<0>(p, c_vec_stride, bias_by_row, stream);
    /* x quantized here: CTAs of the fewest of 16, 24 and 32 warps where every warp of one a multiprocessor has at
     * most one row set (16 rows, 8 of a dual; a set split over warps or not) and each thread at most 3 blocks of
     * x. H200, 2026-12-03, layers at M = 1 by tile, 16 warps against 32: Llama-3-8B o 6.65 -> 5.3 us, gate_up
     * 22.7 -> 20.9; Qwen3-8B gate_up 21.3 -> 18.2; Qwen2.5-7B gate_up (2368 sets) 24.4 -> 27.8 (a second set for
     * some warps), Qwen3-32B down (K = 25600, 3.1 blocks a thread) 25.5 -> 26.2; 24 warps against 32 there (3
     * rounds): 24.9 -> 22.5, 25.6 -> 25.6 (Llama-3-70B down, K = 28672: 42.2 -> 42.0). */
    const int64_t sets = p.b2.data ? RowSets<SF_BY_TILE, 2, true>::count(p.m) : RowSets<SF_BY_TILE, 2>::count(p.m);
    auto fits = [&](int threads) {
      return sets * p.batch <= (int64_t)device_info().sms * (threads / 32) && p.k / 16 <= 3 * threads;
    };
    if (fits(QX_NARROW)) return launch_by_tile<QX_NARROW>(p, c_vec_stride, bias_by_row, stream);
    if (fits(QX_MID)) return launch_by_tile<QX_MID>(p, c_vec_stride, bias_by_row, stream);
    return launch_by_tile<QX_WIDE>(p, c_vec_stride, bias_by_row, stream);
  }
  return p.a.sf_layout == NVFP4_SF_LINEAR ? launch_shape<NVFP4_SF_LINEAR>(p, c_vec_stride, bias_by_row, stream)
                                          : launch_shape<NVFP4_SF_BLOCKED>(p, c_vec_stride, bias_by_row, stream);
}
