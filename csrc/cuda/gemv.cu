/*
 * gemv.cu - batched NVFP4 GEMV, c[l, m] = alpha * sum_k A[l, m, k] * b[l, k].
 *
 * Speed of light: every byte of A and its scales is read once,
 *   bytes = L * M * K * (1/2 + 1/16)  (+ the vector and c, negligible),
 * so time >= bytes / DRAM bandwidth; the arithmetic is far below any compute
 * ceiling. On an H200 each SM must take ~16 bytes (32 codes) per clock, so the
 * kernel must keep ~40 KB per SM in flight and spend few instructions per code
 * (v2 measured 4.3 per code at 69% issue-slot use: issue-bound).
 *
 * Dataflow. Persistent CTAs of 8 warps. A warp streams rows: LPR lanes per row
 * (32 / LPR rows at once, a row set; with blocked scales, rows 32 apart so
 * their scale words are adjacent: RowSets), each lane CPL 16-byte chunks (32
 * codes each) per step, LPR chunks apart, so every copy instruction covers
 * whole runs of a row. CPL = 2 where K % 128 == 0, there is one vector and
 * rows for a full wave (launch_shape): the loop's control and waits are paid
 * once per two chunks, ~77 instead of ~91 SASS instructions per chunk (7168
 * x 16384, linear).
 * Every thread copies exactly what it will consume, so the pipeline is
 * private to the thread: no barrier in the main loop.
 * Few rows (fewer row sets than a wave has warps: 7 x 16384, 256 x 16384,
 * 6000 x 16384 in row quads): the SPLIT variant deals each row set to up to
 * 8 warps of a CTA, each a contiguous K segment of it, and adds their sums in
 * shared memory after the loop (GemvDeal), where that lightens the busiest
 * SM (launch): idle SMs then hold bytes in flight too.
 *
 *   gmem A + its scales --cp.async, per-thread STAGES-deep ring--> smem
 *   gmem b --once per CTA, loaded before the first A copies, decoded--> smem
 *     int8 2*b (16-byte planes) + scales / 4
 *   per 16 codes: 2 lookups per 4 codes split by sign (nvfp4_e2m1x8_split),
 *     dp4a against b: an exact int32 sum, times sa * sb / 4 into an fp32 acc
 *   row done: shuffles over the LPR lanes -> alpha * acc -> fp16
 *
 * Block sums of 16 products are exact integers, so this is fp32 accumulation of
 * exact products, as the reference specifies, in another order.
 *
 * LPR * CPL divides K/32, so a row is whole steps and the copy path has no
 * bounds checks.
 *
 * Several vectors (NV = N = 2..8; a gemm of M <= 8 rows with the roles
 * swapped, csrc/cuda/dispatch.cu); 4 of them on integer mma wherever it
 * fits, 2 or 3 where the warps' shares are neither short nor long, 5 to 8
 * (integer mma only) where they are not long (gemv_kernel_mma below,
 * takes_mma). The floor is the same bytes of A; the
 * vectors' arithmetic grows with NV. Each A chunk is decoded once to int8
 * (nvfp4_e2m1x8_to_s8x8, 11 instructions per 8 codes, tables from shared
 * memory) and dotted with each vector: 8 dp4a, 2 subtractions, 2 scale
 * products and 2 FMA per 32 codes and vector, where the split decode of
 * NV = 1 would need 16 dp4a. SASS per item (32 codes per lane; the loop of
 * 6 items and their rarely taken row ends, / 6): NV = 1 ~150, NV = 4 ~300.
 * At 4.24 TB/s each scheduler has ~110 issue slots per warp item (an SM
 * takes ~37 codes per cycle), so from NV = 2 on the kernel is issue-bound
 * below the DRAM rate (measured: NV = 2 0.49, NV = 4 0.39 of SOL at 7168 x
 * 16384, against 0.33 for the tensor-core path). At most 8 lanes per row
 * (launch_vectors); CTAs of 512 threads (Cfg), registers capped at 128 by
 * the launch bounds (without a minimum ptxas spilled NV = 4 of 256 threads
 * at 80 registers).
 *
 * Dual (DUAL; csrc/cuda/dispatch.cu sends a dual gemm of M <= 4 here with
 * the roles swapped): a second matrix A2 of A's shape, c = silu(A b) *
 * (A2 b). Lanes 0-15 of a warp stream rows of A, lanes 16-31 the same rows
 * of A2, so one shuffle brings a row's two sums together at its end; the
 * vectors are decoded once for both. Same bytes per product as the GEMV of
 * 2N rows.
 *
 * Fast-path preconditions (else another kernel runs): N <= 4 (the MMA
 * kernel: 8, gemv_mma_fits), K % 64 == 0,
 * A rows and b rows 16-byte aligned, A's scales 4-byte aligned (either
 * layout), and the shared memory (N * K * 1.25 bytes + the rings) within the
 * device's limit.
 */
#include <algorithm>
#include <cstdlib>

#include "common.cuh"

namespace {

#ifndef NVFP4_GEMV_STAGES  // experiment knob (NVFP4_NVCC_FLAGS, docs/PERF.md): 3, 6, 12 measured alike
#define NVFP4_GEMV_STAGES 6
#endif
/* Several vectors: CTAs of 512 threads, 6 stages. One CTA per SM then holds
 * the vectors (4 x 16384: 80 KB) once and decodes them with twice the
 * threads. H200, gemm 7168 x 16384, M = 2 / 3 / 4: 31.6 / 35.4 / 39.8 us,
 * against 34.7 / 38.9 / 44.5 with 256 threads (2 or 3 CTAs per SM); 8 stages
 * alike, 10 and 12 slower (docs/PERF.md, session 13). */
#ifndef NVFP4_GEMV_NV_THREADS  // experiment knobs (NVFP4_NVCC_FLAGS)
#define NVFP4_GEMV_NV_THREADS 512
#endif
#ifndef NVFP4_GEMV_NV_STAGES
#define NVFP4_GEMV_NV_STAGES 6
#endif
#ifndef NVFP4_GEMV_MAX_SPLIT  // experiment knob: the most warps a row is split over (1: none)
#define NVFP4_GEMV_MAX_SPLIT 8
#endif
#ifndef NVFP4_GEMV_STAGES2  // experiment knob: the ring's depth with 2 chunks per lane (3, 4, 5 measured)
#define NVFP4_GEMV_STAGES2 3
#endif
constexpr int THREADS_1 = 256, WARPS_1 = THREADS_1 / 32, STAGES_1 = NVFP4_GEMV_STAGES;  /* NV = 1 */

/* CTA size and ring depth of a kernel of NV vectors and CPL 16-byte chunks of
 * A per lane and step (2: one vector, K % 128 == 0, rows for a full wave;
 * launch_shape). */
template <int NV, int CPL = 1>
struct Cfg {
  static_assert(CPL == 1 || (CPL == 2 && NV == 1), "two chunks per lane: the GEMV of one vector");
  static constexpr int THREADS = NV == 1 ? THREADS_1 : NVFP4_GEMV_NV_THREADS;
  static constexpr int WARPS = THREADS / 32;
  static constexpr int STAGES = NV > 1 ? NVFP4_GEMV_NV_STAGES : CPL == 2 ? NVFP4_GEMV_STAGES2 : STAGES_1;
  static constexpr int MIN_CTAS = NV == 1 ? 0 : 512 / THREADS; /* launch bounds: <= 128 registers */
};

/* Vectors per launch: N (the gemm's columns) of 1 to GEMV_MAX_NV. */
constexpr int GEMV_MAX_NV = 4;

/* Shared-memory plan of one CTA of NV vectors. */
template <int NV, int CPL = 1>
struct GemvSmem {
  static constexpr int64_t nv = NV, THREADS = Cfg<NV, CPL>::THREADS, STAGES = Cfg<NV, CPL>::STAGES;
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

/* The vector of chunk f = j * chunks + c of NV vectors: j = f / chunks, by NV - 1
 * compares rather than an integer division (~25 instructions). (The dp4a
 * kernel's prologue still divides: it is kept instruction for instruction as
 * measured, PERF.md session 35.) */
template <int NV>
__device__ __forceinline__ int vector_of(int f, int chunks) {
  int j = 0;
#pragma unroll
  for (int v = 1; v < NV; v++) j += f >= v * chunks ? 1 : 0;
  return j;
}

/* Chunk c (codes 32c..32c+31) of vector j of the batch's b: its 16 bytes and
 * the e4m3 bytes of its two scale blocks (both kernels load their vectors so). */
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

/* A thread's chunks of the vectors (f = tid, tid + THREADS, ... < total; the
 * chunks of all vectors numbered f = j * chunks + c) in batches of BATCH,
 * every load of a batch issued before the first use of any: first() loads
 * the first batch (call it before the ring's copies are issued, so that these
 * loads do not queue behind them), rest() calls store(f, chunk) for every
 * chunk, loading each later batch when the one before is stored. One
 * chunk's loads, decode and stores after another cost ~4 us at K = 16384 in
 * the MMA kernel, each a round trip behind the ring's copies (PERF.md,
 * session 34). The later batches have one store in the code: the chunk
 * stored is always b[0], the others move down. */
template <int BATCH, int THREADS>
struct VectorBatches {
  BChunk b[BATCH] = {};
  template <class Load>
  __device__ __forceinline__ void first(int tid, int total, Load &&load) {
#pragma unroll
    for (int i = 0; i < BATCH; i++)
      if (tid + i * THREADS < total) b[i] = load(tid + i * THREADS);
  }
  template <class Load, class Store>
  __device__ __forceinline__ void rest(int tid, int total, Load &&load, Store &&store) {
#pragma unroll
    for (int i = 0; i < BATCH; i++)
      if (tid + i * THREADS < total) store(tid + i * THREADS, b[i]);
    int left = 0;  // chunks of the current batch not yet stored
#pragma unroll 1
    for (int f = tid + BATCH * THREADS; f < total; f += THREADS) {
      if (left == 0) {
#pragma unroll
        for (int i = 0; i < BATCH; i++)
          if (f + i * THREADS < total) b[i] = load(f + i * THREADS);
        left = BATCH;
      }
      store(f, b[0]);
#pragma unroll
      for (int i = 0; i + 1 < BATCH; i++) b[i] = b[i + 1];
      left--;
    }
  }
};

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

/* How a batch's row sets are dealt (host side, launch): set_stride = C * WARPS
 * for C CTAs per batch; every warp gets row_sets = sets / set_stride of them,
 * the first extra = sets % set_stride warps (in dealing order) one more.
 * split > 1 (the SPLIT variant of the kernels of one vector, the dual's too;
 * launches of fewer row sets than a wave has warps): each row set is split along K over `split` warps of one
 * CTA, seg_steps steps each; CTA x takes sets x * G .. x * G + G - 1 (G =
 * WARPS / split; warps past G * split idle), `sets` of them in the batch; the
 * row's partial sums meet in shared memory after the loop. */
struct GemvDeal {
  int set_stride, row_sets, extra;
  int split, seg_steps, sets;
};

/* NV vectors (p.n = NV): b's rows 0 .. NV-1, result j of row r at
 * c + r * c_row_stride + j * c_vec_stride. NV = 1 is the GEMV proper; 2 to 4
 * serve a gemm of that few rows (csrc/cuda/dispatch.cu), each A chunk decoded
 * once to int8 (11 instructions per 8 codes) and dotted with every vector.
 * DUAL: A2 = p.b2 (A's shape and scale layout) too, result silu(A b) * (A2 b)
 * (the dual gemm of that few rows), no alpha. */
template <int SFA_LAYOUT, int LPR, int NV, bool DUAL, int CPL, bool SPLIT>
__global__ void __launch_bounds__(Cfg<NV, CPL>::THREADS, Cfg<NV, CPL>::MIN_CTAS)
    gemv_kernel(const __grid_constant__ nvfp4_matmul p, int64_t l_base, const GemvDeal deal, int64_t c_vec_stride) {
  static_assert(!DUAL || CPL == 1, "the dual streams one chunk per lane");
  static_assert(!SPLIT || NV == 1, "split rows: one vector");
  constexpr int THREADS = Cfg<NV, CPL>::THREADS, STAGES = Cfg<NV, CPL>::STAGES;
  constexpr int SPAN = LPR * CPL;      // chunks of a row per step: CPL per lane, LPR apart
  extern __shared__ __align__(16) uint8_t smem[];
  const GemvSmem<NV, CPL> plan(p.k);
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
  const int chunks = (int)(p.k / 32), k_blocks = (int)(p.k / 16), steps = SPLIT ? deal.seg_steps : chunks / SPAN;
  const int vb = 2 * chunks, vs = chunks;  // uint4 / float2 between two vectors' planes
  // Row sets dealt CTA by CTA: warp w of CTA x (of C) takes set w * C + x, then
  // every 8C (contiguous runs of rows per warp measured no faster), so every
  // CTA gets its share to within one set per warp (see launch). Warps past the
  // last row still help decode the vector and meet the barrier. All of it in
  // 32 bits and without a division (sets < 2^31: gemv_supported).
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
  const int64_t sf_step = nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * SPAN);
  const int64_t sf_half = nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * LPR);  // CPL = 2: the second chunk's word
  int p_step = 0, p_set = set_first;
  int64_t p_row = Sets::row(p_set, g);
  const uint8_t *p_a = nullptr, *p_sf = nullptr;
  const int seg_chunk = seg * steps * SPAN;  // the segment's first chunk of the row (split rows)
  auto rebase = [&]() {
    const int64_t row = min(p_row, p.m - 1);  // rows past the end are read but not stored
    p_a = a_batch + row * pa.row_stride + 16 * (seg_chunk + q);
    p_sf = sfa_batch + nvfp4_sf_offset(SFA_LAYOUT, pa.sf_row_stride, k_blocks, row, 0) +
           nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 2 * seg_chunk + ((2 * q) & ~3));
  };
  rebase();
  const uint8_t *const s_dst = smem + plan.ring_s + tid * 4;
  uint32_t a_dst_s = smem_addr(smem + plan.ring_a + tid * 16), s_dst_s = smem_addr(s_dst);
  asm("" : "+r"(a_dst_s), "+r"(s_dst_s));  // kept in registers: ptxas otherwise redoes the conversion per copy
  auto issue = [&](int stage) {  // stage: a compile-time constant at every call (unrolled loops)
#pragma unroll
    for (int c = 0; c < CPL; c++) {  // chunk c of the lane: LPR chunks after chunk c - 1
      cp_async_16(a_dst_s + (stage * CPL + c) * THREADS * 16, p_a + 16 * LPR * c);
      cp_async_4(s_dst_s + (stage * CPL + c) * THREADS * 4, p_sf + sf_half * c);
    }
    p_a += 16 * SPAN, p_sf += sf_step;
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
  // whole vector (H200 trace, 4096 x 7168 L8: the vector was decoded 3.8 us
  // after entry, median, and up to 8.7 us, against 1.1 us for the copies'
  // issue; 2.1 us with the loads first). (Not VectorBatches: on this kernel
  // batches of 4 measured 1.7% faster at 3 x 7168 x 16384 but 3.5% slower at
  // 2 x 7168 x 16384, and even batches of 2 up to 5% slower; PERF.md, session 35.)
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
    if (f < b_chunks) early_b[i] = load_b(j, f - j * chunks);
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
    auto store_b = [&](int f, const BChunk &b) {
      // chunk c of vector j belongs to (step st, lane qq) of plane j: see the plan above
      const int j = NV == 1 ? 0 : f / chunks, c = f - j * chunks;
      const int cc = (c / LPR) % CPL, qq = c % LPR, st = c / SPAN;
      uint4 lo, hi;
      nvfp4_e2m1x8_to_s8x8(b.v.x, lo.x, lo.y);
      nvfp4_e2m1x8_to_s8x8(b.v.y, lo.z, lo.w);
      nvfp4_e2m1x8_to_s8x8(b.v.z, hi.x, hi.y);
      nvfp4_e2m1x8_to_s8x8(b.v.w, hi.z, hi.w);
      b8w[j * vb + ((st * CPL + cc) * 2) * LPR + qq] = lo;
      b8w[j * vb + ((st * CPL + cc) * 2 + 1) * LPR + qq] = hi;
      sbw[j * vs + (st * CPL + cc) * LPR + qq] =
          make_float2(0.25f * nvfp4_e4m3_to_float(b.s0), 0.25f * nvfp4_e4m3_to_float(b.s1));
    };
#pragma unroll
    for (int i = 0; i < EARLY; i++)
      if (tid + i * THREADS < b_chunks) store_b(tid + i * THREADS, early_b[i]);
    for (int f = tid + EARLY * THREADS; f < b_chunks; f += THREADS) {
      const int j = NV == 1 ? 0 : f / chunks;
      store_b(f, load_b(j, f - j * chunks));
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
  // register and be copied out before every prmt (numerics.h).
  const volatile uint32_t *table = reinterpret_cast<volatile uint32_t *>(smem + plan.table);
  const uint32_t mag = table[lane & 3];
  uint32_t s8_tab[4];  // NV > 1: nvfp4_e2m1x8_to_s8x8's tables
#pragma unroll
  for (int i = 0; i < 4; i++) s8_tab[i] = NV == 1 ? 0u : table[4 * i + (lane & 3)];
  const float alpha = problem_alpha(p);
  uint16_t *c_batch = p.c + l * p.c_batch_stride;
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
            store_half(c_batch + row * p.c_row_stride + j * c_vec_stride, silu(acc[j]) * up);
        } else if (q == j % LPR && row < p.m) {
          store_half(c_batch + row * p.c_row_stride + j * c_vec_stride, acc[j] * alpha);
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
        store_half(c_batch + row_g * p.c_row_stride, DUAL ? silu(sum) * up : sum * alpha);
      }
    }
  }
  NVFP4_TRACE_POINT(tid == 0, 3);
  NVFP4_TRACE_POINT(tid == THREADS - 1, 4);
}

/* ---- Several vectors on the tensor cores (MMA) ---------------------------
 * The dp4a loop above spends 8 dp4a, 2 subtractions, 2 scale products and 2
 * FMA per 32 codes and vector on top of the decode: from two vectors on it is
 * issue-bound below the DRAM rate (~300 SASS instructions per warp and 32
 * codes per lane at NV = 4; measured 0.55 of SOL at 4 x 7168 x 16384 on an
 * H100). Here mma.sync m16n8k32 (u8 x s8, int32 sums) does the products of
 * up to 8 vectors, and a scale block costs 3 instructions per row and vector.
 *
 * A warp takes a set of 16 rows (dual: 8 rows of A and the same 8 of A2),
 * a step is 128 codes of each. Lane (g, t) (g = lane / 4, t = lane % 4)
 * copies chunk t (codes 32t..32t+31, scale blocks 2t, 2t + 1) of rows g and
 * g + 8: a quad's copy covers 64 contiguous bytes of a row. Word j of the
 * chunk (8 codes) is split by sign (nvfp4_e2m1x8_split: u8 magnitudes) into
 * the mma's A fragment: rows g / g + 8, k 4t..4t+3 and 16+4t..16+4t+3 hold
 * exactly this lane's 8 codes. So the 32 k of one mma are four chunks' word
 * j, one per lane of the quad. Column n = 2s + v' of n8 tile u reads, in B,
 * vector 2u + v' at the k of lane s only (zero elsewhere): D's columns 2t,
 * 2t + 1, held by lane t, are then sums over lane t's own codes, whose
 * scales it copied. Two mma per word and tile (positive and negative codes,
 * the same B), both starting from 0x4B400000, so that after the block's two
 * words float(pos) - float(neg) is the exact block sum (|sum| < 2^22), times
 * sa * sb / 4 into an fp32 accumulator per row and vector.
 *
 *   gmem rows + scales --cp.async, per-thread STAGES-deep ring--> smem
 *   gmem vectors --once per CTA--> smem int8 2b planes (natural K order;
 *     a lane reads 8 bytes of one per word and tile, or a zero block) and
 *     scales / 4 per (block pair, vector)
 *   per word: 2 splits (7 instructions each), 2 U mma; per block and tile: 4
 *     x (subtract, scale product, FMA)
 *   set done: shuffles over the quad -> alpha -> fp16 (dual: silu(A b) *
 *     (A2 b)); split sets: partials to shared memory, summed in warp order.
 * Per 64 codes of a lane (NV <= 2): ~56 decode + 8 mma + 4 loads of B + 24
 * scaling + copies and loop ~25, ~1.8 instructions per code (the dp4a loop:
 * ~4.7 at NV = 1, ~9.4 at NV = 4).
 * Measured (H100, PERF.md sessions 31-35): with 4 vectors faster than the
 * dp4a loop on most shapes, so launched for all of them (takes_mma); with 2
 * or 3 vectors faster only where the warps' shares are 3.5 to 12 steps (the
 * dp4a loop of so few vectors is not issue-bound by as much); with one
 * vector slower (its stream reached ~0.6 of SOL against dp4a's 0.86, though
 * its loop is ~110 instructions per 64 codes of a lane; more ring stages did
 * not help): not built. 5 to 8 vectors (CTAs of 8 warps: 132-182 registers)
 * against the kernels that took M = 5..8 before (skinny.cu for the gemm of
 * K >= 8192, else the wgmma kernel's 32-row tile): 4-25% faster where the
 * warps' shares are short or mid, slower on long ones (sessions 36-37).
 * CPL = 2 (warp shares of at least 12 steps; 5 to 8 vectors: 160 steps a
 * CTA, mma_long_shares): an item is
 * two steps, a lane's four chunk copies back to back, so each row's 128-byte
 * line is asked for at once rather than in halves one item apart: up to 18%
 * faster there (sessions 32-33). The copies still set the time: alone (no
 * math) they read at 0.64-0.83 of SOL on long shares, within ~10% of the
 * whole kernel; the math alone runs at 0.75-1.1 of SOL (session 33). Of
 * that, the vectors' prologue was ~4 us at K = 16384 (now batched, session
 * 34); the same copy pattern in tools/bulk_read.cu reads at ~0.79-0.84, on
 * 112 SMs as on 132, where a plain ld.global read reaches 0.88.
 * Preconditions (gemv_mma_fits): K % 128 == 0, the dp4a kernel's alignment,
 * the vectors (NV x K x 1.25 bytes) and rings in shared memory. */
#ifndef NVFP4_GEMV_MMA_STAGES  // experiment knob: the ring's depth
#define NVFP4_GEMV_MMA_STAGES 4
#endif
constexpr int GEMV_MMA_MAX_NV = 8;

template <int NV, int CPL>
struct MmaCfg {
  static_assert(NV >= 1 && NV <= GEMV_MMA_MAX_NV, "1 to 8 vectors");
  static_assert(CPL == 1 || CPL == 2, "steps per item");
  static constexpr int U = (NV + 1) / 2;  // n8 tiles: vectors 2u and 2u + 1
  static constexpr int THREADS = NV == 1 || NV > 4 ? 256 : 512, WARPS = THREADS / 32;
  static constexpr int STAGES = CPL == 2 ? 3 : NVFP4_GEMV_MMA_STAGES;  // (3 x 2 steps: 4 x 16384 fits)
  static constexpr int MIN_CTAS = NV > 4 ? 1 : 512 / THREADS;  // launch bounds: <= 128 registers up to 4 vectors
};

/* Shared-memory plan of one CTA of NV vectors (bytes). */
template <int NV, int CPL>
struct MmaSmem {
  static constexpr int64_t U = MmaCfg<NV, CPL>::U, THREADS = MmaCfg<NV, CPL>::THREADS, STAGES = MmaCfg<NV, CPL>::STAGES;
  int64_t plane, b8, sb, zero, table, ring_a, ring_s, part, total;
  __host__ __device__ explicit MmaSmem(int64_t k) {
    plane = k + 16;                           // one vector's int8 2b; +16: the next vector 4 banks on
    b8 = 0;                                   // [NV][plane]
    sb = (NV * plane + 15) / 16 * 16;         // b's scales / 4: [k / 32 block pairs][2 blocks][2U vectors] floats
    zero = sb + (k / 32) * 2 * 2 * U * 4 + 8; // 32 zero bytes at banks 2 mod 4 (apart from the planes' reads)
    table = zero + 40;                        // the split's table, 4 copies
    ring_a = table + 16;                      // [STAGES][CPL steps][2 rows][THREADS] 16-byte chunks
    ring_s = ring_a + STAGES * CPL * 2 * THREADS * 16;  // [STAGES][CPL steps][2 rows][THREADS] scale words
    part = ring_s + STAGES * CPL * 2 * THREADS * 4;     // split sets: [warp][16 rows][NV] floats
    total = part + (THREADS / 32) * 16 * NV * 4;
  }
};

template <int SFA_LAYOUT, int NV, bool DUAL, bool SPLIT, int CPL>
__global__ void __launch_bounds__(MmaCfg<NV, CPL>::THREADS, MmaCfg<NV, CPL>::MIN_CTAS)
    gemv_kernel_mma(const __grid_constant__ nvfp4_matmul p, int64_t l_base, const GemvDeal deal, int64_t c_vec_stride) {
  constexpr int THREADS = MmaCfg<NV, CPL>::THREADS, WARPS = THREADS / 32, STAGES = MmaCfg<NV, CPL>::STAGES;
  constexpr int U = MmaCfg<NV, CPL>::U;
  constexpr int32_t BIAS = 0x4B400000;  // the float 12582912 = 1.5 * 2^23
  extern __shared__ __align__(16) uint8_t smem[];
  const MmaSmem<NV, CPL> plan(p.k);
  float *const part = reinterpret_cast<float *>(smem + plan.part);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int64_t l = l_base + blockIdx.y;
  // sets dealt as in gemv_kernel (GemvDeal); split: this warp's segment of its set
  const int split = SPLIT ? deal.split : 1, seg = SPLIT ? warp % split : 0;
  const int k_blocks = (int)(p.k / 16), steps = SPLIT ? deal.seg_steps : (int)(p.k / (128 * CPL));  // items
  const int set_first = SPLIT ? (int)blockIdx.x * (WARPS / split) + warp / split : warp * (int)gridDim.x + (int)blockIdx.x;
  const int row_sets = SPLIT ? (warp < WARPS / split * split && set_first < deal.sets ? 1 : 0)
                             : deal.row_sets + (set_first < deal.extra ? 1 : 0);
  const int items = row_sets * steps;
  const int seg_step = CPL * seg * steps;  // the segment's first step of the row (split sets)
  // Row h (0: rows g, 1: g + 8; dual: row g of A, then of A2) of set s.
  auto set_row = [&](int s, int h) { return DUAL ? (int64_t)s * 8 + g : (int64_t)s * 16 + g + 8 * h; };
  pdl_wait();  // common.cuh: nothing global is touched before this

  // Producer: this thread's next (set, step) to copy, both rows.
  const int64_t sf_step = nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 8);
  int p_step = 0, p_set = set_first;
  const uint8_t *p_a[2], *p_sf[2];
  auto rebase = [&]() {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const nvfp4_operand &op = DUAL && h ? p.b2 : p.a;
      const int64_t row = min(set_row(p_set, h), p.m - 1);  // rows past the end are read but not stored
      p_a[h] = op.data + l * op.batch_stride + row * op.row_stride + 64 * seg_step + 16 * t;
      p_sf[h] = op.sf + l * op.sf_batch_stride +
                nvfp4_sf_offset(SFA_LAYOUT, op.sf_row_stride, k_blocks, row, 8 * seg_step + 4 * (t >> 1));
    }
  };
  rebase();
  uint32_t a_dst = smem_addr(smem + plan.ring_a + tid * 16), s_dst = smem_addr(smem + plan.ring_s + tid * 4);
  asm("" : "+r"(a_dst), "+r"(s_dst));  // kept in registers (see gemv_kernel)
  auto issue = [&](int stage) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
      for (int c = 0; c < CPL; c++) {  // a row's steps one after another: whole 128-byte lines with CPL = 2
        cp_async_16(a_dst + ((stage * CPL + c) * 2 + h) * THREADS * 16, p_a[h] + 64 * c);
        cp_async_4(s_dst + ((stage * CPL + c) * 2 + h) * THREADS * 4, p_sf[h] + c * sf_step);
      }
      p_a[h] += 64 * CPL, p_sf[h] += CPL * sf_step;
    }
    if (++p_step == steps) {
      p_step = 0;
      p_set += deal.set_stride;
      rebase();
    }
  };

  // The vectors: a thread's chunks in batches (VectorBatches), the first
  // before the ring's copies.
  const int chunks = (int)(p.k / 32);
  const uint8_t *b_batch = p.b.data + l * p.b.batch_stride;
  const uint8_t *sfb_batch = p.b.sf + l * p.b.sf_batch_stride;
  auto load_b = [&](int f) {
    const int j = vector_of<NV>(f, chunks);
    return load_b_chunk(p.b, b_batch, sfb_batch, k_blocks, j, f - j * chunks);
  };
  VectorBatches<4, THREADS> vectors;
  vectors.first(tid, NV * chunks, load_b);
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < items) issue(s);
    cp_async_commit();
  }
  {  // the vectors into shared memory, while the first stages are in flight
    float *sbw = reinterpret_cast<float *>(smem + plan.sb);
    auto store_b = [&](int f, const BChunk &b) {
      const int j = vector_of<NV>(f, chunks), c = f - j * chunks;
      uint4 lo, hi;  // int8 2b of codes 0..15 and 16..31 of the chunk, in order
      nvfp4_e2m1x8_to_s8x8(b.v.x, lo.x, lo.y);
      nvfp4_e2m1x8_to_s8x8(b.v.y, lo.z, lo.w);
      nvfp4_e2m1x8_to_s8x8(b.v.z, hi.x, hi.y);
      nvfp4_e2m1x8_to_s8x8(b.v.w, hi.z, hi.w);
      uint4 *dst = reinterpret_cast<uint4 *>(smem + plan.b8 + j * plan.plane + 32 * c);
      dst[0] = lo, dst[1] = hi;
      sbw[c * 4 * U + j] = 0.25f * nvfp4_e4m3_to_float(b.s0);
      sbw[c * 4 * U + 2 * U + j] = 0.25f * nvfp4_e4m3_to_float(b.s1);
    };
    vectors.rest(tid, NV * chunks, load_b, store_b);
    if (NV % 2)  // the odd vector count's last column: scales 0 (its B reads the zero block)
      for (int c = tid; c < chunks; c += THREADS) sbw[c * 4 * U + NV] = sbw[c * 4 * U + 2 * U + NV] = 0.f;
    if (tid < 8) reinterpret_cast<uint32_t *>(smem + plan.zero)[tid] = 0u;
    if (tid < 4) reinterpret_cast<uint32_t *>(smem + plan.table)[tid] = NVFP4_E2M1_MAG_03;
  }
  __syncthreads();

  // A lane-dependent read: a uniform value would be copied out before every prmt (numerics.h).
  const uint32_t mag = reinterpret_cast<volatile uint32_t *>(smem + plan.table)[lane & 3];
  // B of tile u: vector 2u + (g & 1) at chunk t where t == g / 2, else the zero block.
  uint32_t b_base[U], b_inc[U], b_ptr[U];
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int v = 2 * u + (g & 1);
    const bool on = (g >> 1) == t && v < NV;
    b_base[u] = smem_addr(smem + (on ? plan.b8 + v * plan.plane + 32 * t : plan.zero));
    b_inc[u] = on ? 128u : 0u;
    b_ptr[u] = b_base[u] + seg_step * b_inc[u];
  }
  const float *const sb_seg = reinterpret_cast<const float *>(smem + plan.sb) + 4 * U * (t + 4 * seg_step);
  const float *sb_step = sb_seg;
  const float alpha = problem_alpha(p);
  uint16_t *c_batch = p.c + l * p.c_batch_stride;
  const uint32_t ring_a = smem_addr(smem + plan.ring_a + tid * 16), ring_s = smem_addr(smem + plan.ring_s + tid * 4);
  float acc[2][NV] = {};
  int step = 0, set = set_first;
  auto item = [&](int it, int stage) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of item `it` have landed
#pragma unroll
    for (int c = 0; c < CPL; c++) {  // the item's steps
      const int slot = stage * CPL + c;
      const uint4 x0 = ld_shared_u4(ring_a + (slot * 2) * THREADS * 16);
      const uint4 x1 = ld_shared_u4(ring_a + (slot * 2 + 1) * THREADS * 16);
      const uint32_t w0 = ld_shared_u32(ring_s + (slot * 2) * THREADS * 4) >> (16 * (t & 1));
      const uint32_t w1 = ld_shared_u32(ring_s + (slot * 2 + 1) * THREADS * 4) >> (16 * (t & 1));
      const float2 sa0 = nvfp4_e4m3x2_to_float2(w0 & 0xFFFFu), sa1 = nvfp4_e4m3x2_to_float2(w1 & 0xFFFFu);
      float sbl[4 * U];  // [block][2U vectors] of this lane's two blocks
#pragma unroll
      for (int q = 0; q < U; q++) reinterpret_cast<float4 *>(sbl)[q] = reinterpret_cast<const float4 *>(sb_step)[q];
      const uint32_t xa[2][4] = {{x0.x, x0.y, x0.z, x0.w}, {x1.x, x1.y, x1.z, x1.w}};
#pragma unroll
      for (int blk = 0; blk < 2; blk++) {
        int dp[U][4], dn[U][4];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int e = 0; e < 4; e++) dp[u][e] = dn[u][e] = BIAS;
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
          const int j = 2 * blk + jj;
          uint32_t pa[4], na[4];
          nvfp4_e2m1x8_split(xa[0][j], pa[0], pa[2], na[0], na[2], mag);
          nvfp4_e2m1x8_split(xa[1][j], pa[1], pa[3], na[1], na[3], mag);
#pragma unroll
          for (int u = 0; u < U; u++) {
            const uint2 b = ld_shared_u2(b_ptr[u] + 8 * j);
            mma_16832_u8s8(dp[u], pa, b.x, b.y);
            mma_16832_u8s8(dn[u], na, b.x, b.y);
          }
        }
        const float sa[2] = {blk ? sa0.y : sa0.x, blk ? sa1.y : sa1.x};
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int h = e >> 1, v = 2 * u + (e & 1);
            if (v < NV)
              acc[h][v] = fmaf(__int_as_float(dp[u][e]) - __int_as_float(dn[u][e]), sa[h] * sbl[blk * 2 * U + v],
                               acc[h][v]);
          }
      }
#pragma unroll
      for (int u = 0; u < U; u++) b_ptr[u] += b_inc[u];
      sb_step += 16 * U;
    }
    // Refill (item it + STAGES - 1 goes to the stage just before this one).
    if (it + STAGES - 1 < items) issue(stage == 0 ? STAGES - 1 : stage - 1);
    cp_async_commit();
    if (++step == steps) {  // set done: the quad's sums of each row and vector
      step = 0;
#pragma unroll
      for (int u = 0; u < U; u++) b_ptr[u] = b_base[u] + seg_step * b_inc[u];
      sb_step = sb_seg;
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int v = 0; v < NV; v++) {
          acc[h][v] += __shfl_xor_sync(0xffffffffu, acc[h][v], 1);
          acc[h][v] += __shfl_xor_sync(0xffffffffu, acc[h][v], 2);
        }
#pragma unroll
      for (int v = 0; v < NV; v++) {
        if (t != v % 4) continue;  // lane v % 4 of the quad stores vector v
        if constexpr (SPLIT) {
          part[(warp * 16 + g) * NV + v] = acc[0][v];
          part[(warp * 16 + g + 8) * NV + v] = acc[1][v];
        } else if constexpr (DUAL) {
          const int64_t row = set_row(set, 0);
          if (row < p.m) store_half(c_batch + row * p.c_row_stride + v * c_vec_stride, silu(acc[0][v]) * acc[1][v]);
        } else {
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int64_t row = set_row(set, h);
            if (row < p.m) store_half(c_batch + row * p.c_row_stride + v * c_vec_stride, acc[h][v] * alpha);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int v = 0; v < NV; v++) acc[h][v] = 0.f;
      set += deal.set_stride;
    }
  };
  for_each_item<STAGES>(items, item);
  pdl_launch_dependents();
  if (SPLIT) {  // split sets: each row's segment sums in segment order
    __syncthreads();
    const int sets_here = WARPS / split;
    for (int i = tid; i < sets_here * (DUAL ? 8 : 16) * NV; i += THREADS) {
      const int grp = i / ((DUAL ? 8 : 16) * NV), r = i / NV % (DUAL ? 8 : 16), v = i % NV;
      const int set_g = (int)blockIdx.x * sets_here + grp;
      if (set_g >= deal.sets) continue;
      float sum = 0.f, up = 0.f;
      for (int s2 = 0; s2 < split; s2++) {
        sum += part[((grp * split + s2) * 16 + r) * NV + v];
        if (DUAL) up += part[((grp * split + s2) * 16 + r + 8) * NV + v];
      }
      const int64_t row = DUAL ? (int64_t)set_g * 8 + r : (int64_t)set_g * 16 + r;
      if (row < p.m) store_half(c_batch + row * p.c_row_stride + v * c_vec_stride, DUAL ? silu(sum) * up : sum * alpha);
    }
  }
}

/* Per device: the dynamic shared memory a kernel was opened up to, and its
 * occupancy at the sizes launched so far (the first OCC_SIZES of them; a K
 * past those is queried per call), so a call costs no runtime queries after
 * the first of its size. Occupancy at the launch's own size: at the largest
 * one opened it was lower after a long-K call (K = 131072: 1 CTA per SM), and
 * every later short-K launch planned for that. */
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

/* The two kernels as launch() sees them: CTA size, shared memory, row sets,
 * steps per row, and whether rows may be split over warps (SPLIT). */
template <int SFA, int LPR, int NV, bool DUAL, int CPL>
struct Dp4a {
  static constexpr int THREADS = Cfg<NV, CPL>::THREADS, WARPS = Cfg<NV, CPL>::WARPS, VECTORS = NV;
  static constexpr bool CAN_SPLIT = NV == 1;
  template <bool SPLIT>
  static constexpr auto kernel() { return gemv_kernel<SFA, LPR, NV, DUAL, CPL, SPLIT>; }
  static int64_t smem(int64_t k) { return GemvSmem<NV, CPL>(k).total; }
  static int64_t sets(int64_t m) { return RowSets<SFA, LPR, DUAL>::count(m); }
  static int steps(int64_t k) { return (int)(k / 32 / (LPR * CPL)); }
};
template <int SFA, int NV, bool DUAL, int CPL>
struct Mma {
  static constexpr int THREADS = MmaCfg<NV, CPL>::THREADS, WARPS = MmaCfg<NV, CPL>::WARPS, VECTORS = NV;
  static constexpr bool CAN_SPLIT = true;
  template <bool SPLIT>
  static constexpr auto kernel() { return gemv_kernel_mma<SFA, NV, DUAL, SPLIT, CPL>; }
  static int64_t smem(int64_t k) { return MmaSmem<NV, CPL>(k).total; }
  static int64_t sets(int64_t m) { return (m + (DUAL ? 7 : 15)) / (DUAL ? 8 : 16); }
  static int steps(int64_t k) { return (int)(k / (128 * CPL)); }  // items of a row set
};

template <class K>
cudaError_t launch(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
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
  // the same number of row sets to within one per warp: the kernel deals them
  // CTA by CTA) when at least half its warps get a set. The SMs' rates are
  // what limits: with 512 CTAs of equal work for 528 places (4096 x 7168 L8,
  // 7168 x 2048 L4), the 16 SMs holding 3 ended at 3/4 of the time of the
  // others (H200 trace). With fewer sets, as few CTAs as give every warp
  // one: the extra CTAs' vector decode cost more than the balance gained
  // (1000 x 7168: 7.7 -> 8.4 us; 7168 x 16384 in row quads, 1792 sets: 24.7
  // -> 26.4).
  const int64_t sets = K::sets(p.m);
  const int64_t max_ctas = std::max<int64_t>(1, (int64_t)sms * std::max(per_sm, 1) / p.batch);
  // Several vectors: every CTA decodes all of them first, so a CTA per SM
  // with at least one set, whatever the warps left idle (4096 x 7168, 1024
  // sets: 132 CTAs of 512 threads, not 64 full ones).
  const int64_t ctas = NV > 1 ? std::max<int64_t>(1, std::min(max_ctas, sets))
                       : 2 * sets >= WARPS * max_ctas ? max_ctas
                                                      : std::max<int64_t>(1, (sets + WARPS - 1) / WARPS);
  GemvDeal deal = {};
  deal.set_stride = (int)(ctas * WARPS);
  deal.row_sets = (int)(sets / deal.set_stride);
  deal.extra = (int)(sets % deal.set_stride);
  deal.split = 1;
  // Fewer sets than a wave has warps (a set per warp): split rows (the SPLIT
  // kernel) where that evens out the SMs' loads. An SM's time goes as its
  // CTAs x (a warp's steps + a CTA's own cost: the vector's decode, the ramp;
  // fitted: 2 steps). Each split of 2 to 8 warps per set that divides the
  // steps (2 or more per warp) and fits a wave is weighed by that load; the
  // lightest wins; ties go to no split, or to the split with the fewest warps
  // where the unsplit grid leaves SMs idle. Unsplit on every SM, k CTAs per
  // SM may replace the grid of a set per warp where that lightens the busiest
  // SM's warp-steps (7168 x 16384 blocked: 224 CTAs of 8 quads, 92 SMs with
  // 2, -> 264 of 6-7, 21.5 -> 21.0 us; 1100 x 4096: 138 -> 264 CTAs, 3.4 ->
  // 3.4 (4.4 -> 3.8)). H200, kernel time, linear (blocked), us:
  // - 7 x 16384 over 8 warps (7 CTAs) 5.0 -> 2.9 (6.0 -> 3.6); 256 x 16384
  //   over 4 5.2 -> 3.8 (6.4 -> 4.6); 512 x 16384 over 2 5.4 -> 4.5 (6.8 ->
  //   5.0; over 4 (6.4), load 12 against 10); 3000 x 16384 blocked over 4 (96
  //   -> 384 CTAs) 14.3 -> 12.2; 6000 x 16384 blocked over 2 (188 -> 376
  //   CTAs) 20.8 -> 17.3 (264 CTAs unsplit: 19.3); blocked 3072 x 4096 over 4
  //   (96 -> 384 CTAs, a tie) 8.1 -> 7.6 (event time, bench_gemm 1 x 3072 x
  //   4096);
  // - splits of no lighter load measured no faster: 2000 x 8192 over 2 (250
  //   -> 500 CTAs) 5.0 -> 6.0; 512 x 7168 over 7 (1 step per warp) 3.6 -> 4.8;
  //   7168 x 16384 blocked over 2 (224 -> 448 CTAs) 21.3 either way
  //   (PERF.md, session 16).
  int64_t grid = ctas;
  if constexpr (CAN_SPLIT) {
    constexpr int CTA_COST = 2;  // steps
    const int steps = K::steps(p.k);
    auto per_sm_of = [&](int64_t c) { return (c * p.batch + sms - 1) / sms; };
    if (2 * sets < WARPS * max_ctas) {
      const bool idle = ctas * p.batch < sms;  // the unsplit grid leaves SMs idle: a tie goes to the split
      auto load = [&](int64_t c, int seg_steps) { return per_sm_of(c) * (seg_steps + CTA_COST); };
      int64_t best = load(ctas, steps);
      for (int s = 2; s <= std::min(WARPS, NVFP4_GEMV_MAX_SPLIT); s++) {
        const int64_t c = (sets + WARPS / s - 1) / (WARPS / s), l = load(c, steps / s);
        if (steps % s || steps / s < 2 || c > max_ctas || l > best || (l == best && (deal.split > 1 || !idle)))
          continue;
        best = l, grid = c;
        deal.split = s, deal.seg_steps = steps / s, deal.sets = (int)sets;
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
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, l, deal, c_vec_stride);
    if (e != cudaSuccess) return e;
  }
  return cudaGetLastError();
}

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
 * slower on an H200 (7168 x 16384: 45 vs 31 us with two vectors, 36 vs 19
 * with one, PERF.md session 15): each 16-byte copy instruction then touches
 * half of every 32-byte sector, doubling the L2 requests. */
template <int SFA, int NV, bool DUAL = false>
cudaError_t launch_vectors(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  switch ((p.k / 32) % 8 == 0 ? 8 : (p.k / 32) % 4 == 0 ? 4 : 2) {
    case 8: return launch<Dp4a<SFA, 8, NV, DUAL, 1>>(p, c_vec_stride, stream);
    case 4: return launch<Dp4a<SFA, 4, NV, DUAL, 1>>(p, c_vec_stride, stream);
    default: return launch<Dp4a<SFA, 2, NV, DUAL, 1>>(p, c_vec_stride, stream);
  }
}

/* One vector: CPL chunks per lane and step, LPR by the rule above. Two chunks
 * with a 3-deep ring where K % 128 == 0 and the launch has a row for every
 * warp of a full wave (kernel time, H200, linear: 7168 x 16384 19.1 -> 18.8
 * us, 4096 x 7168 L8 34.1 -> 33.5-34.1, 7168 x 2048 L4 11.4 -> 10.4, 16384 x
 * 2048 7.5 -> 6.9; 4 and 5 stages were slower than 3). With fewer rows a
 * warp's few items are latency-bound and the 3-deep ring holds fewer bytes
 * in flight per thread than the 6-deep one (64 against 80): 512 x 7168 3.6
 * -> 4.5 us, 1000 x 7168 3.8 -> 4.6, so one chunk there (PERF.md session 15). */
template <int SFA, int CPL>
cudaError_t launch_rows(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  const int64_t chunks = p.k / 32 / CPL; /* a lane's steps of a row, times LPR */
  if (SFA == NVFP4_SF_BLOCKED && chunks % 8 == 0 &&
      2 * RowSets<SFA, 8>::count(p.m) * p.batch >= (int64_t)WARPS_1 * device_info().sms)
    return launch<Dp4a<SFA, 8, 1, false, CPL>>(p, c_vec_stride, stream);
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
    case 32: return launch<Dp4a<SFA, 32, 1, false, CPL>>(p, c_vec_stride, stream);
    case 16: return launch<Dp4a<SFA, 16, 1, false, CPL>>(p, c_vec_stride, stream);
    case 8: return launch<Dp4a<SFA, 8, 1, false, CPL>>(p, c_vec_stride, stream);
    case 4: return launch<Dp4a<SFA, 4, 1, false, CPL>>(p, c_vec_stride, stream);
    default: return launch<Dp4a<SFA, 2, 1, false, CPL>>(p, c_vec_stride, stream);
  }
}

/* NVFP4_GEMV_MMA=0 in the environment (read once): the MMA kernel never
 * runs (takes_mma). */
inline int gemv_mma_env() {
  static const int v = [] {
    const char *e = std::getenv("NVFP4_GEMV_MMA");
    return e && e[0] == '0' ? 0 : e && e[0] == '2' ? 2 : 1;
  }();
  return v;
}

/* Whether the MMA kernel's build of p.n vectors and CPL steps per item has
 * its shared memory, by the plan of 4 or 8 vectors (the largest of 2..4 and
 * of 5..8, which share a CTA size). */
template <int CPL>
bool mma_smem_fits(const nvfp4_matmul &p) {
  return (p.n <= 4 ? MmaSmem<4, CPL>(p.k).total : MmaSmem<8, CPL>(p.k).total) <= device_info().smem_optin;
}

/* Whether the MMA kernel can take p (the common checks passed). Its builds
 * of 2 to 8 vectors are launched (the rule below); the kernel takes 1 to 8. */
bool gemv_mma_fits(const nvfp4_matmul &p) {
  return p.n >= 2 && p.n <= GEMV_MMA_MAX_NV && p.k % 128 == 0 && mma_smem_fits<1>(p);
}

/* Whether the dp4a kernel can take p (the common checks passed). */
bool gemv_dp4a_fits(const nvfp4_matmul &p) {
  if (p.n > GEMV_MAX_NV) return false;
  const int64_t smem = p.n == 1 ? std::max(GemvSmem<1>(p.k).total, GemvSmem<1, 2>(p.k).total)
                       : p.n == 2 ? GemvSmem<2>(p.k).total
                       : p.n == 3 ? GemvSmem<3>(p.k).total : GemvSmem<4>(p.k).total;
  return smem <= device_info().smem_optin;
}

/* NVFP4_GEMV_MMA_CPL in the environment (read once): 1 / 2 forces either
 * where it fits; unset, the rule in mma_cpl. */
inline int gemv_mma_cpl_env() {
  static const int v = [] {
    const char *e = std::getenv("NVFP4_GEMV_MMA_CPL");
    return e && e[0] == '1' ? 1 : e && e[0] == '2' ? 2 : 0;
  }();
  return v;
}

/* Whether the MMA kernel's two-step build of p.n vectors can take p: K % 256 == 0, its ring in shared memory. */
bool mma_cpl2_fits(const nvfp4_matmul &p) { return p.k % 256 == 0 && mma_smem_fits<2>(p); }

/* The steps (128 K of a row set) of the busiest CTA of p on the MMA kernel,
 * a CTA per SM, which its 16 warps share. */
int64_t mma_share_steps(const nvfp4_matmul &p) {
  const int64_t sets = p.b2.data ? Mma<NVFP4_SF_LINEAR, 4, true, 1>::sets(p.m) : Mma<NVFP4_SF_LINEAR, 4, false, 1>::sets(p.m);
  const int64_t ctas = std::max<int64_t>(1, std::min<int64_t>(device_info().sms / std::max<int64_t>(p.batch, 1), sets));
  return (sets + ctas - 1) / ctas * (p.k / 128);
}
constexpr int MMA_LONG_SHARE = 12 * MmaCfg<4, 1>::WARPS;     // steps: 12 a warp
constexpr int MMA_MID_SHARE = 7 * MmaCfg<4, 1>::WARPS / 2;  // steps: 3.5 a warp
/* 5 to 8 vectors (CTAs of 8 warps, the steps still counted for 16): below these shares, the dual of 5 or 6 always */
constexpr int MMA_WIDE_SHARE = 28 * MmaCfg<4, 1>::WARPS;     // steps: the gemm of 5, 6 vectors
constexpr int MMA_WIDE8_DUAL_SHARE = 16 * MmaCfg<4, 1>::WARPS;  // steps: the dual of 7, 8
constexpr int MMA_WIDE8_SHARE = 10 * MmaCfg<4, 1>::WARPS;       // steps: the gemm of 7, 8
constexpr int MMA_WIDE_LONG_SHARE = 10 * MmaCfg<4, 1>::WARPS;   // steps: 5 to 8 vectors two steps per item

/* Whether the MMA kernel copies two steps per item for p (gemv_mma_fits(p);
 * CPL = 2: each row's copies cover whole 128-byte lines, a 3-deep ring): where
 * the warps' shares are long (4 vectors: at least MMA_LONG_SHARE; 5 to 8:
 * MMA_WIDE_LONG_SHARE) and the build fits.
 * Measured on an H100, bench_gemm, us, CPL 1 -> 2 (PERF.md sessions 32-33),
 * by the warps' steps: 28-56 steps the
 * gemm 8-15% and the dual 10-18% faster (gemm 4 x 7168 x 16384 40.4 -> 37.0,
 * 4 x 14336 x 16384 73.6 -> 62.5; dual 4 x 7168 x 16384 74.2 -> 61.3), 14-24
 * steps the gemm 0-6% and the dual 2-12% (gemm 4 x 14336 x 4096 22.2 ->
 * 20.8; dual 4 x 6144 x 7168 30.4 -> 27.5), 12 steps 1-3% (gemm 4 x 5120 x
 * 8192 19.3 -> 18.8), 10 steps within 1%, 2-8 steps 0-10% slower (gemm 4 x
 * 4096 x 8192 15.4 -> 16.0, 4 x 4096 x 2048 9.1 -> 10.0). */
bool mma_long_shares(const nvfp4_matmul &p) {
  return mma_cpl2_fits(p) && mma_share_steps(p) >= (p.n <= 4 ? MMA_LONG_SHARE : MMA_WIDE_LONG_SHARE);
}

/* Steps per item: the rule above, or NVFP4_GEMV_MMA_CPL where it fits; 4 to
 * 8 vectors (takes_mma gives the kernel 2 or 3 only below MMA_LONG_SHARE).
 * 5 to 8 vectors (CTAs of 8 warps; H100, bench_gemm, us, the MMA kernel
 * forced, CPL 1 -> 2, PERF.md session 38): at 168-1792 steps the gemm up to
 * 12% faster (6 x 14336 x 16384 77.3 -> 68.4, 7 x 14336 x 4096 29.1 -> 26.5;
 * 7 x 4096 x 16384 1.2% slower) and the dual 1-12% (6 x 28672 x 4096 67.4 ->
 * 60.3), at 112-128 within 1%. An 8-deep ring of one step: 16-62% slower. */
int mma_cpl(const nvfp4_matmul &p) {
  if (p.n < 4) return 1;
  const int env = gemv_mma_cpl_env();
  if (env == 2 && mma_cpl2_fits(p)) return 2;
  return env == 0 && mma_long_shares(p) ? 2 : 1;
}

/* The MMA kernel takes 4 vectors (the gemm and the dual of M = 4) wherever
 * it fits. H100, bench_gemm, us, dp4a -> MMA (PERF.md session 33, 22 gemm
 * and 15 dual shapes): the dual 5-19% faster (4 x 4096 x 7168 23.7 -> 21.4,
 * 4 x 6144 x 7168 33.0 -> 27.1); the gemm 2-18% faster on 16 shapes (4 x
 * 4096 x 7168 16.4 -> 15.4, 4 x 28672 x 4096 37.4 -> 33.9), within 1% on 3,
 * 2-3% slower on 3 whose warps make 2-4 steps (4 x 7168 x 2048 11.0 ->
 * 11.3). 2 and 3 vectors where the warps' shares are 3.5 to 12 steps (one
 * step per item): H100, bench_gemm, us, dp4a -> MMA (PERF.md session 35, 46
 * shapes): there the dual 5-18% faster on all 12 (2 x 2048 x 7168 13.9 ->
 * 12.8, 3 x 1536 x 8192 15.5 -> 12.9), the gemm 2-14% faster on 9 of 11 (3
 * x 4096 x 7168 14.4 -> 13.3, 3 x 2560 x 8192 15.5 -> 13.3), alike on 2; with
 * shorter shares the gemm 0.5-4% slower (3 x 8192 x 1024 8.2 -> 8.5), with
 * long ones up to 8% (2 x 14336 x 4096 18.7 -> 20.1; the dp4a loop of so
 * few vectors is less issue-bound than of 4). One vector: not built
 * (session 31: its loop streamed at ~0.6 of SOL where dp4a's reaches 0.86).
 * 5 to 8 vectors (no dp4a build; before, the gemm of M = 5..8 took the
 * skinny kernel at K >= 8192, else the wgmma kernel's 32-row tile, and a
 * gemm of N = 5..8 weight rows the wgmma kernel): the rule's bounds from
 * session 36's forced runs (5, 6 vectors: alike at 448 steps; 7, 8: 20%
 * slower at 168, 1-5% at 224; the dual of 7, 8 alike or up to 7% slower
 * from 256). H100, bench_gemm, us, HEAD -> this rule (PERF.md session 37,
 * 36 shapes): the gemm of 5, 6 rows 16-25% faster below MMA_WIDE_SHARE (6 x
 * 4096 x 7168 20.5 -> 15.7, 5 x 14336 x 4096 27.3 -> 22.9), of 7, 8 4-19%
 * below MMA_WIDE8_SHARE (7 x 8192 x 4096 21.6 -> 18.2, 8 x 4096 x 2048 13.0
 * -> 10.5); the dual of 5, 6 9-24% (6 x 28672 x 4096 81.2 -> 67.0), of 7, 8
 * 4-22% below MMA_WIDE8_DUAL_SHARE (8 x 4096 x 7168 29.5 -> 26.3); a gemm of
 * 8 or 6 weight rows 4.7x and 14x (4096 x 8 x 7168 87.3 -> 18.6, 16384 x 6 x
 * 2048 225 -> 15.6); shapes past the bounds unchanged. Against the skinny
 * kernel (gemm, K >= 8192) the rule picks the faster of the two on all 8
 * shapes measured (5 x 4096 x 8192 21.2 -> 16.6; dispatch.cu). */
bool takes_mma(const nvfp4_matmul &p) {
  if (gemv_mma_env() == 0 || !gemv_mma_fits(p)) return false;
  if (p.n == 4 || gemv_mma_env() == 2) return true;
  const int64_t steps = mma_share_steps(p);
  if (p.n > 4) {
    if (p.b2.data) return p.n <= 6 || steps < MMA_WIDE8_DUAL_SHARE;
    return steps < (p.n <= 6 ? MMA_WIDE_SHARE : MMA_WIDE8_SHARE);
  }
  return steps >= MMA_MID_SHARE && steps < MMA_LONG_SHARE;
}

template <int SFA, int NV, int CPL>
cudaError_t launch_mma_build(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  return p.b2.data ? launch<Mma<SFA, NV, true, CPL>>(p, c_vec_stride, stream)
                   : launch<Mma<SFA, NV, false, CPL>>(p, c_vec_stride, stream);
}

template <int SFA, int NV>
cudaError_t launch_mma_cpl(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  return mma_cpl(p) == 2 ? launch_mma_build<SFA, NV, 2>(p, c_vec_stride, stream)
                         : launch_mma_build<SFA, NV, 1>(p, c_vec_stride, stream);
}

/* 4 to 8 vectors one or two steps per item (mma_cpl); 2 and 3 one. */
template <int SFA>
cudaError_t launch_mma(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  switch (p.n) {
    case 2: return launch_mma_build<SFA, 2, 1>(p, c_vec_stride, stream);
    case 3: return launch_mma_build<SFA, 3, 1>(p, c_vec_stride, stream);
    case 4: return launch_mma_cpl<SFA, 4>(p, c_vec_stride, stream);
    case 5: return launch_mma_cpl<SFA, 5>(p, c_vec_stride, stream);
    case 6: return launch_mma_cpl<SFA, 6>(p, c_vec_stride, stream);
    case 7: return launch_mma_cpl<SFA, 7>(p, c_vec_stride, stream);
    default: return launch_mma_cpl<SFA, 8>(p, c_vec_stride, stream);
  }
}

template <int SFA>
cudaError_t launch_shape(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  if (takes_mma(p)) return launch_mma<SFA>(p, c_vec_stride, stream);
  /* Several vectors: at most 8 lanes per row. Lanes of a warp that share a
   * chunk column read the same vector words (a broadcast), so 4 rows per warp
   * read each vector's 48 bytes per step in 3 shared-memory wavefronts where 32
   * lanes of one row need 10; with 4 vectors that would be ~40 wavefronts per
   * 512 bytes of A, more than the SM can serve at the DRAM rate. The dual
   * takes the same path for any vector count: a warp holds both halves. */
  if (p.b2.data) switch (p.n) {
      case 1: return launch_vectors<SFA, 1, true>(p, c_vec_stride, stream);
      case 2: return launch_vectors<SFA, 2, true>(p, c_vec_stride, stream);
      case 3: return launch_vectors<SFA, 3, true>(p, c_vec_stride, stream);
      default: return launch_vectors<SFA, 4, true>(p, c_vec_stride, stream);
    }
  switch (p.n) {
    case 2: return launch_vectors<SFA, 2>(p, c_vec_stride, stream);
    case 3: return launch_vectors<SFA, 3>(p, c_vec_stride, stream);
    case 4: return launch_vectors<SFA, 4>(p, c_vec_stride, stream);
    default: break;
  }
  static_assert(GEMV_MAX_NV == 4, "one case per vector count");
  const bool two = p.k % 128 == 0 && p.m * p.batch >= (int64_t)device_info().sms * 4 * WARPS_1;
  return two ? launch_rows<SFA, 2>(p, c_vec_stride, stream) : launch_rows<SFA, 1>(p, c_vec_stride, stream);
}

}  // namespace

NVFP4_TRACE_ATTACH(gemv)

/* p.b2, when given, is A2 of the dual (gemv_kernel), not a second vector set. */
bool gemv_supported(const nvfp4_matmul &p) {
  if (p.n < 1 || p.n > GEMV_MMA_MAX_NV || p.k % 64 || p.k / 32 > INT32_MAX / 64) return false;
  auto streamable = [&](const nvfp4_operand &a) {  // A or A2: 16-byte rows, 4-byte scale words
    return aligned(a.data, 16) && a.row_stride % 16 == 0 && a.batch_stride % 16 == 0 && aligned(a.sf, 4) &&
           a.sf_batch_stride % 4 == 0 && (a.sf_layout != NVFP4_SF_LINEAR || a.sf_row_stride % 4 == 0) &&
           a.sf_layout == p.a.sf_layout;
  };
  if (!streamable(p.a) || (p.b2.data && !streamable(p.b2))) return false;
  if (!aligned(p.b.data, 16) || p.b.batch_stride % 16 || (p.n > 1 && p.b.row_stride % 16)) return false;
  if (p.m > INT32_MAX / 2) return false;  // row sets counted in 32 bits
  return takes_mma(p) || gemv_dp4a_fits(p);
}

/* Whether gemv_launch runs the MMA kernel for p (gemv_supported(p)). */
bool gemv_takes_mma(const nvfp4_matmul &p) { return takes_mma(p); }

cudaError_t gemv_launch(const nvfp4_matmul &p, int64_t c_vec_stride, cudaStream_t stream) {
  return p.a.sf_layout == NVFP4_SF_LINEAR ? launch_shape<NVFP4_SF_LINEAR>(p, c_vec_stride, stream)
                                          : launch_shape<NVFP4_SF_BLOCKED>(p, c_vec_stride, stream);
}
