/*
 * gemv_mma.cuh - GEMV of 2 to 8 vectors on integer mma.sync (sm_80+): the
 * gemm or dual of M <= 8 activation rows with the roles swapped, or of N <= 8
 * weight rows (plan.cu); the shared dataflow and speed of light in gemv.cuh.
 *
 * The dp4a loop (gemv_dp4a.cu) spends 8 dp4a, 2 subtractions, 2 scale
 * products and 2 FMA per 32 codes and vector on top of the decode, and from
 * two vectors on is issue-bound below the DRAM rate. Here mma.sync m16n8k32
 * (u8 x s8, int32 sums) does the products of up to 8 vectors, and a scale
 * block costs 3 instructions per row and vector: ~1.8 instructions per code
 * at NV <= 2 (~56 decode + 8 mma + 4 loads of B + 24 scaling + ~25 copies
 * and loop per 64 codes of a lane) against dp4a's ~9.4 at NV = 4.
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
 *   gmem rows (each miss filling 128 bytes of L2) + scales --cp.async,
 *     per-thread STAGES-deep ring--> smem
 *   gmem vectors --once per CTA--> smem int8 2b planes (natural K order;
 *     a lane reads 8 bytes of one per word and tile, or a zero block) and
 *     scales / 4 per (block pair, vector)
 *   per word: 2 splits (7 instructions each), 2 U mma; per block and tile: 4
 *     x (subtract, scale product, FMA)
 *   set done: shuffles over the quad -> the epilogue (common.cuh; dual: silu(A b) *
 *     (A2 b)); split sets: partials to shared memory, summed in warp order.
 *
 * CPL = 2 (long warp shares, mma_cpl): an item is two steps, a lane's four
 * chunk copies back to back, so each row's 128-byte line is asked for at once
 * rather than in halves one item apart: up to 18% faster there; the 128-byte
 * L2 fetch, another 18% at Llama-3-70B down, M = 4 (H200: 74.5 -> 61 us, other
 * shapes within 2%). The copies
 * set the time: alone (no math) they read at 0.64-0.83 of the speed of light
 * on long shares, within ~10% of the whole kernel; the math alone runs at
 * 0.75-1.1. One vector is not built: its stream reached ~0.6 of the speed of
 * light where dp4a's reaches 0.86.
 *
 * Runs (gemv_mma_can_run): gemv_streams (gemv.cuh), K % 128 == 0, the vectors
 * (NV x K x 1.25 bytes) and rings in shared memory. A laid out by tile (nvfp4.h,
 * as NVFP4Linear holds W4A4 weights on a GPU; 2 to 4 vectors): only the copy
 * cursors differ (TILED); a warp's copy then reads 256 contiguous bytes of a
 * tile step per 8 rows.
 */
#pragma once
#include "gemv.cuh"
#include "kernels.h"

namespace {

constexpr int GEMV_MMA_MAX_NV = 8;
/* x quantized in the kernel (QX: W4A4 of 2 to 4 activation rows, the kernel given them as 16-bit values and a
 * global scale): up to QX_MAX_NV vectors, each thread's blocks of 16 (at most QX_BLOCKS) loaded before the ring's
 * first copies, in registers. Where it pays (gemv_mma_can_run): A laid out by tile, at most 2 blocks a thread
 * (H200, 2026-12-03, against the quantize kernel before this GEMV, one call, 2 rounds, the linears of five
 * models' layers at M = 2 to 4: by tile 0.85-1.01x the time at up to 2 blocks a thread, 0.95-0.98x at 2.5,
 * 0.98-1.07x at 3 to 4; the checkpoint layout 0.99-1.11x at up to 2, 1.02-1.16x at 3 to 4). */
constexpr int QX_MAX_NV = 4, QX_BLOCKS = 2;

template <int NV, int CPL>
struct MmaCfg {
  static_assert(NV >= 1 && NV <= GEMV_MMA_MAX_NV, "1 to 8 vectors");
  static_assert(CPL == 1 || CPL == 2, "steps per item");
  static constexpr int U = (NV + 1) / 2;  // n8 tiles: vectors 2u and 2u + 1
  static constexpr int THREADS = NV == 1 || NV > 4 ? 256 : 512, WARPS = THREADS / 32;
  static constexpr int STAGES = CPL == 2 ? 3 : 4;  // (3 x 2 steps: 4 x 16384 fits)
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

/* The vector of chunk f = j * chunks + c of NV vectors: j = f / chunks, by
 * NV - 1 compares rather than an integer division (~25 instructions). */
template <int NV>
__device__ __forceinline__ int vector_of(int f, int chunks) {
  int j = 0;
#pragma unroll
  for (int v = 1; v < NV; v++) j += f >= v * chunks ? 1 : 0;
  return j;
}

/* A thread's chunks of the vectors (f = tid, tid + THREADS, ... < total; the
 * chunks of all vectors numbered f = j * chunks + c) in batches of BATCH,
 * every load of a batch issued before the first use of any: first() loads
 * the first batch (call it before the ring's copies are issued, so that these
 * loads do not queue behind them), rest() calls store(f, chunk) for every
 * chunk, loading each later batch when the one before is stored. One chunk's
 * loads, decode and stores after another cost ~4 us at K = 16384, each a
 * round trip behind the ring's copies. The later batches have one store in
 * the code: the chunk stored is always b[0], the others move down. */
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

template <int SFA_LAYOUT, int NV, bool DUAL, bool SPLIT, int CPL, bool QX>
__global__ void __launch_bounds__(MmaCfg<NV, CPL>::THREADS, MmaCfg<NV, CPL>::MIN_CTAS)
    gemv_mma_kernel(const __grid_constant__ nvfp4_matmul p, int64_t l_base, const GemvDeal deal, int64_t c_vec_stride, bool bias_by_row) {
  constexpr int THREADS = MmaCfg<NV, CPL>::THREADS, WARPS = THREADS / 32, STAGES = MmaCfg<NV, CPL>::STAGES;
  constexpr int U = MmaCfg<NV, CPL>::U;
  constexpr int32_t BIAS = 0x4B400000;  // the float 12582912 = 1.5 * 2^23
  extern __shared__ __align__(16) uint8_t smem[];
  const MmaSmem<NV, CPL> plan(p.k);
  float *const part = reinterpret_cast<float *>(smem + plan.part);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int64_t l = l_base + blockIdx.y;
  const int nv = (int)p.n;  // the vectors: NV, or fewer on a larger build (launch_vectors)
  // sets dealt as GemvDeal says; split: this warp's segment of its set
  const int split = SPLIT ? deal.split : 1, seg = SPLIT ? warp % split : 0;
  // this warp's items of a row, from item seg_first (GemvDeal: splits need not divide them)
  const int seg_first = SPLIT ? seg * deal.steps / split : 0;
  const int k_blocks = (int)(p.k / 16), steps = SPLIT ? (seg + 1) * deal.steps / split - seg_first : (int)(p.k / (128 * CPL));
  const int set_first = SPLIT ? (int)blockIdx.x * (WARPS / split) + warp / split : warp * (int)gridDim.x + (int)blockIdx.x;
  const int row_sets = SPLIT ? (warp < WARPS / split * split && set_first < deal.sets ? 1 : 0)
                             : deal.row_sets + (set_first < deal.extra ? 1 : 0);
  const int items = row_sets * steps;
  const int seg_step = CPL * seg_first;  // the segment's first step of the row (split sets)
  constexpr bool TILED = SFA_LAYOUT == SF_BY_TILE;
  // Row h (0: rows g, 1: g + 8; dual: row g of A, then of A2) of set s.
  auto set_row = [&](int s, int h) { return DUAL ? (int64_t)s * 8 + g : (int64_t)s * 16 + g + 8 * h; };
  pdl_wait();  // common.cuh: nothing global is touched before this

  // Producer: this thread's next (set, step) to copy, both rows. Laid out by tile (TILED), step i of a row is
  // tile K steps 2i, 2i + 1 (chunk t in step 2i + t / 2, at 16 (t % 2) of its place's 32 bytes: i 2 tile steps
  // on), its scale word at (i / 2) NVFP4_TILE_SF_GROUP + 8 (i % 2) + 4 (t / 2) of the place's: 8 on from an even
  // step, a group less 8 from an odd one (p_odd: the step's parity).
  constexpr int64_t a_step = TILED ? 2 * NVFP4_TILE_STEP : 64;
  const int64_t sf_step = TILED ? 8 : nvfp4_sf_offset(SFA_LAYOUT, 0, k_blocks, 0, 8);
  int p_step = 0, p_set = set_first, p_odd = 0;
  const uint8_t *p_a[2], *p_sf[2];
  auto rebase = [&]() {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const nvfp4_operand &op = DUAL && h ? p.b2 : p.a;
      const int64_t row = min(set_row(p_set, h), p.m - 1);  // rows past the end are read but not stored
      const int64_t chunk = TILED ? nvfp4_codes_offset(&op, row, 64 * seg_step) + (t >> 1) * NVFP4_TILE_STEP + 16 * (t & 1)
                                  : row * op.row_stride + 64 * seg_step + 16 * t;
      p_a[h] = op.data + l * op.batch_stride + chunk;
      p_sf[h] = op.sf + l * op.sf_batch_stride +
                (TILED ? nvfp4_operand_sf_offset(&op, k_blocks, row, 8 * seg_step + 4 * (t >> 1))
                       : nvfp4_sf_offset(SFA_LAYOUT, op.sf_row_stride, k_blocks, row, 8 * seg_step + 4 * (t >> 1)));
    }
    p_odd = seg_step & 1;
  };
  rebase();
  uint32_t a_dst = smem_addr(smem + plan.ring_a + tid * 16), s_dst = smem_addr(smem + plan.ring_s + tid * 4);
  asm("" : "+r"(a_dst), "+r"(s_dst));  // kept in registers: ptxas otherwise redoes the conversion per copy
  auto issue = [&](int stage) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
      for (int c = 0; c < CPL; c++) {  // a row's steps one after another: whole 128-byte lines with CPL = 2
        cp_async_16_l2_128(a_dst + ((stage * CPL + c) * 2 + h) * THREADS * 16, p_a[h] + a_step * c, 16);
        cp_async_4(s_dst + ((stage * CPL + c) * 2 + h) * THREADS * 4, p_sf[h] + c * sf_step);
      }
      p_a[h] += a_step * CPL;
      // by tile, two steps (seg_step even) are a group's scales; one step moves on by its parity
      if constexpr (TILED) p_sf[h] += CPL == 2 ? NVFP4_TILE_SF_GROUP : p_odd ? NVFP4_TILE_SF_GROUP - 8 : 8;
      else p_sf[h] += CPL * sf_step;
    }
    if (TILED && CPL == 1) p_odd ^= 1;
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
  if constexpr (!QX) vectors.first(tid, nv * chunks, load_b);
  // x quantized here (QX): the vectors as 16-bit values with global scale gs, a block of 16 a thread, all of a
  // thread's blocks (at most QX_BLOCKS: gemv_mma_can_run) loaded before the ring's copies
  const int x_blocks = nv * k_blocks;
  float gs = 0.f;
  uint4 x_early[QX ? 2 * QX_BLOCKS : 1] = {};
  if constexpr (QX) {
    gs = *p.a_global;
#pragma unroll
    for (int i = 0; i < QX_BLOCKS; i++) {
      const int f = tid + i * THREADS, j = vector_of<NV>(f, k_blocks);
      if (f >= x_blocks) continue;
      const uint4 *src = reinterpret_cast<const uint4 *>(b_batch + j * p.b.row_stride) + 2 * (f - j * k_blocks);
      x_early[2 * i] = __ldg(src), x_early[2 * i + 1] = __ldg(src + 1);
    }
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < items) issue(s);
    cp_async_commit();
  }
  {  // the vectors into shared memory, while the first stages are in flight
    float *sbw = reinterpret_cast<float *>(smem + plan.sb);
    // block kb (16 codes) of column j: its int8 2b at plane j's 16 kb, its scale / 4 among chunk kb / 2's 4 U
    auto codes_of = [&](int j, int kb) { return reinterpret_cast<uint4 *>(smem + plan.b8 + j * plan.plane + 16 * kb); };
    auto scale_of = [&](int j, int kb) -> float & { return sbw[(kb >> 1) * 4 * U + (kb & 1) * 2 * U + j]; };
    auto store_b = [&](int f, const BChunk &b) {
      const int j = vector_of<NV>(f, chunks), c = f - j * chunks;
      uint4 lo, hi;  // int8 2b of codes 0..15 and 16..31 of the chunk, in order
      nvfp4_e2m1x8_to_s8x8(b.v.x, lo.x, lo.y);
      nvfp4_e2m1x8_to_s8x8(b.v.y, lo.z, lo.w);
      nvfp4_e2m1x8_to_s8x8(b.v.z, hi.x, hi.y);
      nvfp4_e2m1x8_to_s8x8(b.v.w, hi.z, hi.w);
      *codes_of(j, 2 * c) = lo, *codes_of(j, 2 * c + 1) = hi;
      scale_of(j, 2 * c) = 0.25f * nvfp4_e4m3_to_float(b.s0);
      scale_of(j, 2 * c + 1) = 0.25f * nvfp4_e4m3_to_float(b.s1);
    };
    if constexpr (QX) {
      const bool bf16 = p.a_type == NVFP4_BF16;
#pragma unroll
      for (int i = 0; i < QX_BLOCKS; i++) {  // block kb of vector j
        const int f = tid + i * THREADS, j = vector_of<NV>(f, k_blocks), kb = f - j * k_blocks;
        if (f >= x_blocks) continue;
        const uint4 u0 = x_early[2 * i], u1 = x_early[2 * i + 1];
        const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
        uint32_t v[4];
        const float sx = x16_block_to_s8(w, bf16, gs, v);
        *codes_of(j, kb) = make_uint4(v[0], v[1], v[2], v[3]);
        scale_of(j, kb) = 0.25f * sx;
      }
    } else {
      vectors.rest(tid, nv * chunks, load_b, store_b);
    }
    for (int v = nv; v < 2 * U; v++)  // the columns past the vectors: scales 0 (their B reads the zero block)
      for (int c = tid; c < chunks; c += THREADS) scale_of(v, 2 * c) = scale_of(v, 2 * c + 1) = 0.f;
    if (tid < 8) reinterpret_cast<uint32_t *>(smem + plan.zero)[tid] = 0u;
    if (tid < 4) reinterpret_cast<uint32_t *>(smem + plan.table)[tid] = NVFP4_E2M1_MAG_03;
  }
  __syncthreads();

  // A lane-dependent read: a uniform value would be copied out before every prmt (numerics.cuh).
  const uint32_t mag = reinterpret_cast<volatile uint32_t *>(smem + plan.table)[lane & 3];
  // B of tile u: vector 2u + (g & 1) at chunk t where t == g / 2, else the zero block.
  uint32_t b_base[U], b_inc[U], b_ptr[U];
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int v = 2 * u + (g & 1);
    const bool on = (g >> 1) == t && v < nv;
    b_base[u] = smem_addr(smem + (on ? plan.b8 + v * plan.plane + 32 * t : plan.zero));
    b_inc[u] = on ? 128u : 0u;
    b_ptr[u] = b_base[u] + seg_step * b_inc[u];
  }
  const float *const sb_seg = reinterpret_cast<const float *>(smem + plan.sb) + 4 * U * (t + 4 * seg_step);
  const float *sb_step = sb_seg;
  const Epilogue ep(p, 1.f, bias_by_row);
  uint16_t *c_batch = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
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
        if (t != v % 4 || v >= nv) continue;  // lane v % 4 of the quad stores vector v
        if constexpr (SPLIT) {
          part[(warp * 16 + g) * NV + v] = acc[0][v];
          part[(warp * 16 + g + 8) * NV + v] = acc[1][v];
        } else if constexpr (DUAL) {
          const int64_t row = set_row(set, 0);
          if (row < p.m) ep.store(c_batch + row * p.c_row_stride + v * c_vec_stride, ep.dual(acc[0][v], acc[1][v]));
        } else {
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int64_t row = set_row(set, h);
            if (row < p.m) ep.store(c_batch + row * p.c_row_stride + v * c_vec_stride, ep.gemm(acc[h][v], row, v));
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
      if (set_g >= deal.sets || v >= nv) continue;
      float sum = 0.f, up = 0.f;
      for (int s2 = 0; s2 < split; s2++) {
        sum += part[((grp * split + s2) * 16 + r) * NV + v];
        if (DUAL) up += part[((grp * split + s2) * 16 + r + 8) * NV + v];
      }
      const int64_t row = DUAL ? (int64_t)set_g * 8 + r : (int64_t)set_g * 16 + r;
      if (row < p.m)
        ep.store(c_batch + row * p.c_row_stride + v * c_vec_stride, DUAL ? ep.dual(sum, up) : ep.gemm(sum, row, v));
    }
  }
}

/* The kernel as gemv_launch sees it (gemv.cuh). */
template <int SFA, int NV, bool DUAL, int CPL, bool QX = false>
struct Mma {
  static constexpr int THREADS = MmaCfg<NV, CPL>::THREADS, WARPS = MmaCfg<NV, CPL>::WARPS, VECTORS = NV;
  /* splits need not divide a set's items (GemvDeal): Qwen2.5-7B down at M = 4, 224 sets of 74 items, took the
   * only even split, 2 warps a set on 28 CTAs (57.3 us); split 8 unevenly on 112 CTAs 25.0 us (H200, 2026-12-03) */
  static constexpr bool CAN_SPLIT = true, UNEVEN = true;
  static constexpr int SPLITS = MAX_SPLIT;
  template <bool SPLIT>
  static constexpr auto kernel() { return gemv_mma_kernel<SFA, NV, DUAL, SPLIT, CPL, QX>; }
  static int64_t smem(int64_t k) { return MmaSmem<NV, CPL>(k).total; }
  static int64_t sets(int64_t m) { return (m + (DUAL ? 7 : 15)) / (DUAL ? 8 : 16); }
  static int steps(int64_t k) { return (int)(k / (128 * CPL)); }  // items of a row set
};


/* Whether the build of p.n vectors and CPL steps per item has its shared
 * memory, by the plan of 4 or 8 vectors (the largest of 2..4 and of 5..8,
 * which share a CTA size). */
template <int CPL>
bool mma_smem_fits(const nvfp4_matmul &p, const DeviceInfo &dev) {
  return (p.n <= 4 ? MmaSmem<4, CPL>(p.k).total : MmaSmem<8, CPL>(p.k).total) <= dev.smem_optin;
}

/* Two steps per item where the warps' shares are long and the two-step build
 * fits (K % 256 == 0, its ring in shared memory). 3 and 4 vectors (two n8
 * tiles) from 12 steps a warp (H100, CPL 1 -> 2 at 4: 28-56 steps the gemm
 * 8-15% and the dual 10-18% faster, 12 steps 1-3%, 10 within 1%, 2-8 steps up
 * to 10% slower); 5 to 8 from 10 (the gemm up to 12%, the dual 1-12% faster
 * at 168-1792 steps a CTA, within 1% at 112-128); 2 vectors one step. An
 * 8-deep ring of one step: 16-62% slower. */
int mma_cpl(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (p.n < 3 || p.k % 256 || !mma_smem_fits<2>(p, dev)) return 1;
  return gemv_mma_share_steps(p, dev) >= (p.n <= 4 ? 12 : 10) * MmaCfg<4, 1>::WARPS ? 2 : 1;
}

template <int SFA, int NV, int CPL>
cudaError_t launch_build(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  if constexpr (NV <= QX_MAX_NV && SFA == SF_BY_TILE) { /* x quantized in the kernel (gemv_mma_can_run) */
    if (p.a_global)
      return p.b2.data ? gemv_launch<Mma<SFA, NV, true, CPL, true>>(p, c_vec_stride, bias_by_row, stream)
                       : gemv_launch<Mma<SFA, NV, false, CPL, true>>(p, c_vec_stride, bias_by_row, stream);
  }
  if (p.a_global) return cudaErrorNotSupported; /* no such build: gemv_mma_can_run refuses it */
  return p.b2.data ? gemv_launch<Mma<SFA, NV, true, CPL>>(p, c_vec_stride, bias_by_row, stream)
                   : gemv_launch<Mma<SFA, NV, false, CPL>>(p, c_vec_stride, bias_by_row, stream);
}

template <int SFA, int NV>
cudaError_t launch_cpl(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  return mma_cpl(p, device_info()) == 2 ? launch_build<SFA, NV, 2>(p, c_vec_stride, bias_by_row, stream)
                                        : launch_build<SFA, NV, 1>(p, c_vec_stride, bias_by_row, stream);
}

/* 3 to 8 vectors one or two steps per item (mma_cpl); 2 one. Three take the
 * four-vector build (the fourth column's B and scales zero): the same mma and
 * instructions, where a build of three took 1.3-1.4x its time (H200,
 * 2026-12-03, layers' duals by tile; its one-step build, without spills, too). */
template <int SFA>
cudaError_t launch_vectors(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream) {
  switch (p.n) {
    case 2: return launch_build<SFA, 2, 1>(p, c_vec_stride, bias_by_row, stream);
    case 3:
    case 4: return launch_cpl<SFA, 4>(p, c_vec_stride, bias_by_row, stream);
    case 5: return launch_cpl<SFA, 5>(p, c_vec_stride, bias_by_row, stream);
    case 6: return launch_cpl<SFA, 6>(p, c_vec_stride, bias_by_row, stream);
    case 7: return launch_cpl<SFA, 7>(p, c_vec_stride, bias_by_row, stream);
    default: return launch_cpl<SFA, 8>(p, c_vec_stride, bias_by_row, stream);
  }
}

}  // namespace

/* The launches of blocked activation scales and of A laid out by tile (2 to 4
 * vectors), each in a compilation unit of its own (gemv_mma_blocked.cu,
 * gemv_mma_tiled.cu) so that the layouts' builds compile in parallel;
 * gemv_mma.cu has the linear ones and the entries of kernels.h. */
cudaError_t gemv_mma_launch_blocked(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream);
cudaError_t gemv_mma_launch_tiled(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream);

/* The most vectors of A laid out by tile: 5 to 8 rows of a W4A4 layer take the quantized values (plan.cu). */
constexpr int GEMV_MMA_TILED_NV = 4;
