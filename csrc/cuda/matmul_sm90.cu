/*
 * matmul_sm90.cu - the Hopper tensor-core path (sm_90a): GEMM, dual GEMM and
 * grouped GEMM on fp16 (or bf16, for bf16 activations) wgmma with fp32
 * accumulators. Its planner (tile,
 * split-K, stream-K, pre-decode) is matmul_sm90_plan.cu.
 *
 * Roles swapped: the kernel computes C^T = B * A^T. The weights B (n x k, the
 * large operand) are wgmma's register-sourced A operand, each thread decoding
 * its own fragment from fp4; the activations A (m x k) are wgmma's
 * shared-memory B operand, decoded once per CTA and K step into a fp16 tile.
 *
 * CTA = 384 threads = 3 warpgroups; tile = 256 weight rows x TM activation
 * rows (TM = 128; 64 or 32 when every problem of the launch has M <= 64 or
 * <= 32); K step 64. Dual: weight rows 0-127 are B1's, 128-255 the same rows
 * of B2, so each activation tile feeds both products.
 *   warpgroup 0, producer (88 registers): cp.async of raw fp4 rows and scales
 *     into a 6-slot ring (mbarriers per slot: landed; read by every thread,
 *     since a slot's copies and its decode are done by different threads);
 *     decode of the activation rows into a 4-slot ring of fp16 tiles
 *     (128-byte swizzle), 128 / TM threads per row; rows past M (a tile's
 *     padding) are neither copied nor decoded.
 *   warpgroups 1 and 2, consumers (208 registers): 128 weight rows each
 *     (2 x 64 fp32 accumulators of 64 x 128), every K step, each issuing
 *     its 8 wgmma m64n128k16 as soon as its fragments are decoded; where it
 *     was measured to pay, decoding the next ones while they run (the K
 *     loop's SERIAL / HALVES / SETS). A 128-row tile of at most 96 rows (M % 128, a
 *     group's last tile) issues m64n96k16, m64n64k16 or m64n32k16 instead
 *     (stream-K: no n96, which spilled): 5%, 5% and 13% off such tiles.
 * Epilogue: both consumers' sums -> fp32 tile in smem -> split-K sum over the
 *   cluster -> alpha (or silu(C1) * C2) -> fp16 (store_share; in gemm
 *   launches of split 2 the producer's warps join the consumers' for the sum).
 *
 * K order. A sum may take its K terms in any order as long as both operands
 * agree. Inside each 64-wide step the kernel uses the order that makes every
 * thread's fragment one 8-byte read under one scale: thread t of a quad owns
 * fp4 bytes 8t..8t+7 (values 16t..16t+15, scale block t) of its two rows.
 * wgmma position p of k16 step s holds value e = 16t + 8h + 4(s%2) + s/2 + 2j,
 * where t = (p%8)/2, j = p%2, h = p/8 (nvfp4_e2m1x8_to_half2x4's pair s is
 * codes 4(s%2) + s/2 and that + 2). The activation tile is written by the
 * same decoder, so in the same order.
 *
 * Split-K. With few tiles (M = 128: 16 to 28 of them) S CTAs of one cluster
 * share a tile, each a contiguous K range; the partial fp32 tiles are summed
 * through distributed shared memory in rank order: deterministic, no
 * workspace, no extra launch.
 *
 * Pre-decoded activations (PRE: 128-row launches with a workspace and at
 * least 32 K steps a CTA, plan_launch; 16-bit ones not with stream-K):
 * a pre-pass kernel decodes (or permutes) every activation tile once into
 * 16-bit tiles in the workspace and the producer brings each K step's tile
 * in by one bulk copy, decoding nothing: the main kernel ~9% faster, the
 * pre-pass ~2 us plus 2.28 bytes per tile byte. Rows grouped by expert have
 * a pre-pass of their own (expert_predecode_kernel: each expert's tiles laid
 * out in place of its rows; rows by token gathered on the way).
 *
 * 16-bit activations (W4A16, AT = F16 or BF16; M > 16, plan.cu). The
 * producer copies each K step's activation rows raw (128 bytes a row,
 * StageCopies16) and permutes them into the weight decoder's K order with one
 * prmt per 32-bit word (produce16): the order above for fp16, pairs {i, i +
 * 4} of each 8 values for bf16 (nvfp4_e2m1x8_to_bf162x4), and for weights
 * repacked for bf16 (AT = NVFP4_BF16_PAIRS) adjacent values, whose words move
 * whole to other chunks (nvfp4_act16_chunk, no prmt), the orders
 * w4a16.cu's fragments use. The consumers
 * decode the weights into the activations' type, exactly: fp16 fragments
 * carry value * scale * 2^-6, bf16 ones 2^-7 (numerics.cuh), which the
 * epilogue takes back with alpha (tc_unscale). Where pre-decoded (PRE), the
 * pre-pass permutes them the same way. Rows grouped by
 * expert (an MoE's, offs): one CTA per tile of a bound on the (expert, 128
 * rows) tiles (expert_tile, common.cuh), found once into shared memory, the
 * column tiles of one row tile side by side (expert_row_tile); split 1, no
 * stream-K; the spare tiles return at once; pre-decoded where plan_launch
 * says (always for rows by token: the pre-pass gathers them). Their weights
 * may be laid out by tile (nvfp4.h): the producer's copies step on by
 * weight_step and scale_step.
 *
 * Stream-K. With whole tiles for only part of the SMs and long K (dual
 * 512 x 3072 x 7168: 96 tiles of 112 K steps for 132 SMs) one CTA per SM
 * takes an equal share (in cost) of all tiles' K steps instead, partials
 * through a global workspace (StreamK).
 *
 * Speed of light (H200: ~755 TFLOP/s fp16 dense, 4.28 TB/s), M = 128:
 * 7168 x 16384 39.8 us (compute), 4096 x 7168 9.9, 7168 x 2048 5.0. Issue
 * slots are the limit: per K step a 256 x 128 tile is 4.2 MFLOP of wgmma
 * (1024 tensor cycles at peak, 4096 issue slots) against the decode of
 * 128 x 64 activation and 256 x 64 weight values (~15 instructions per 8)
 * and the loop's loads, barriers and addressing, ~80% of the slots. A
 * consumer warpgroup spends ~30% of its time waiting for its own wgmma and
 * most of the rest decoding. The K loop rebuilt alone runs at the tensor
 * peak with the wgmma only; the producer's work and the barriers cost ~15%
 * of it, the per-thread copies ~25% more.
 *
 * Small M (2..64: a decode step's batch). The floor is streaming B: M = 8,
 * 7168 x 16384 moves 66 MB (15.6 us at 4.24 TB/s) for 1.9 GFLOP. A 128-row
 * tile spends 16x that on padding rows, so the tile shrinks to TM = 32 or 64
 * (wgmma m64n32k16 / m64n64k16) with a deeper raw ring (8 or 10 slots).
 * Then the step (256 weight rows x 64 K) is bound by the consumers' loop,
 * ~185 instructions per warp and step, ~120 of them decode: ~0.6 us per
 * step on an H200, ~17 GB/s per SM against the 32 GB/s streaming needs;
 * without any decode it still takes ~0.5 us. (TMA copies, 4 consumer
 * warpgroups, mma.sync on 8- and 16-row tiles and decoding the next step
 * during the wgmma did not move it.)
 */
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "kernels.h"
#include "matmul_sm90.cuh"
#include "ptx_sm90.cuh"

namespace {

using namespace sm90;

#if NVFP4_SM90A
/* Where K step k of a weight row lies from its step 0 (sf_step: the scales' of a step; tiles: laid out by tile,
 * b's and b2's alike, matmul_sm90_can_run; W4A16 only, the other copies take tiles = false): codes k * 32 on, or
 * k * NVFP4_TILE_STEP; scales k * sf_step on, plus a run's NVFP4_TILE_SF_GROUP a 4 steps by tile. */
__device__ __forceinline__ int weight_step(bool tiles, int k) { return k * (tiles ? NVFP4_TILE_STEP : 32); }
__device__ __forceinline__ int scale_step(bool tiles, int sf_step, int k) {
  return k * sf_step + (tiles ? (k >> 2) * (NVFP4_TILE_SF_GROUP - 16) : 0);
}

/* Byte offset of 16-byte chunk j (0, 1) of raw row r in a stage (Layout). */
__host__ __device__ constexpr int raw_chunk(int r, int j) { return r * 32 + 16 * (j ^ ((r >> 2) & 1)); }

/* Byte offset of 16-byte chunk c (0..7: fp16 values 8c .. 8c + 7 of the K
 * step, "K order") of row r in an fp16 activation tile: 128-byte rows, the
 * 128-byte swizzle of wgmma's shared-memory operand. */
__host__ __device__ constexpr int a16_chunk(int r, int c) { return r * 128 + 16 * (c ^ (r & 7)); }

/* The copies of one raw stage (K step) that thread i (0..127) of the copying
 * warpgroup issues: of the A and B tiles (thread pairs share a row: lane
 * 2i + h copies chunk h of row i, so one copy instruction covers 16 whole
 * 32-byte rows instead of half of 32 rows: half the L1 lookups) and of the
 * scales (one row per thread: in the blocked layout a warp's 32 rows are 512
 * contiguous bytes); then the thread's arrival on the stage's barrier once
 * they have landed. Weight rows past the end copy the last row (clamped);
 * activation rows past the end (a tile's padding, M < TM) are neither copied
 * nor decoded: their columns of the fp16 tile keep whatever they held, and
 * the products of either land only in outputs that are never stored.
 * ACT = false (the pre-decoded launches): the weights and their scales only,
 * at their places in the stage of W16's layout (16-bit activations). */
template <bool DUAL, int TM, bool PAD, bool ACT = true, bool W16 = false>
struct StageCopies {
  using L = Layout<TM, W16>;
  static constexpr bool TILES = W16; /* weights laid out by tile: W4A16 alone */
  static constexpr int A_COPIES = (TM + 63) / 64; /* activation rows pr + 64 i (TM = 32: pr < 32 only) */
  const uint8_t *a_src[A_COPIES], *b_src[4], *sa_src, *sb_src[2];
  int sa_step, sb_step[2], kbeg, r, half, pr;
  bool tiles; /* W16 only (weight_step) */
  int a_live = 7; /* PAD: bit c, activation row pr + 64 c exists; bit 2, row r (its scales) */

  /* problem p, batch l, tile origin (n0, m0), its K steps from kbeg */
  __device__ __forceinline__ StageCopies(const nvfp4_matmul &p, int l, int64_t n0, int64_t m0, int kbeg, int i)
      : kbeg(kbeg), r(i), half(i & 1), pr(i >> 1) {
    const int64_t k_blocks = p.k / 16;
    auto clamp = [](int64_t row, int64_t rows) { return row < rows ? row : rows - 1; };
    /* operand rows of tile row tr (0..255): B rows n0 + tr; dual: B1 rows
     * n0 + tr for tr < 128, B2 rows n0 + tr - 128 above */
    auto b_row = [&](int tr) { return clamp(n0 + (DUAL ? tr % 128 : tr), p.n); };
#pragma unroll
    for (int c = 0; c < A_COPIES; c++)
      a_src[c] = p.a.data + l * p.a.batch_stride + clamp(m0 + pr + 64 * c, p.m) * p.a.row_stride + 16 * half;
    if (PAD) a_live = (m0 + pr < p.m ? 1 : 0) | (m0 + pr + 64 < p.m ? 2 : 0) | (m0 + i < p.m ? 4 : 0);
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const nvfp4_operand &bop = (DUAL && c >= 2) ? p.b2 : p.b;
      b_src[c] = bop.data + l * bop.batch_stride + 16 * half +
                 (TILES ? nvfp4_codes_offset(&bop, b_row(pr + 64 * c), 0) : b_row(pr + 64 * c) * bop.row_stride);
    }
    /* scale columns 4ks..4ks+3 of a row: 4 contiguous bytes in every layout;
     * from one step's 4 columns to the next: the layout's alone */
    sa_src = p.a.sf + l * p.a.sf_batch_stride +
             nvfp4_sf_offset(p.a.sf_layout, p.a.sf_row_stride, k_blocks, clamp(m0 + r, p.m), 0);
    sa_step = (int)nvfp4_sf_offset(p.a.sf_layout, 0, k_blocks, 0, 4);
#pragma unroll
    for (int c = 0; c < 2; c++) {
      const nvfp4_operand &bop = (DUAL && c) ? p.b2 : p.b;
      sb_src[c] = bop.sf + l * bop.sf_batch_stride +
                  (TILES && bop.tile_rows
                       ? nvfp4_operand_sf_offset(&bop, k_blocks, b_row(r + 128 * c), 0)
                       : nvfp4_sf_offset(bop.sf_layout, bop.sf_row_stride, k_blocks, b_row(r + 128 * c), 0));
      sb_step[c] = (int)nvfp4_sf_offset(bop.sf_layout, 0, k_blocks, 0, 4); /* by tile: 4, as linear */
    }
    tiles = TILES && p.b.tile_rows;
  }

  /* K step kbeg + ks into `stage`; then an arrival on `full` (an mbarrier
   * expecting one per thread of the warpgroup) once the copies have landed */
  __device__ __forceinline__ void load(uint8_t *stage, int ks, uint32_t full) const {
    const int k = kbeg + ks, kk = k * 32, kb = weight_step(tiles, k);
#pragma unroll
    for (int c = 0; c < A_COPIES; c++)
      if (ACT && (TM >= 64 || pr < TM) && (!PAD || (a_live >> c & 1)))
        cp_async_16(stage + L::RAW_A + raw_chunk(pr + 64 * c, half), a_src[c] + kk, 16);
#pragma unroll
    for (int c = 0; c < 4; c++) cp_async_16(stage + L::RAW_B + raw_chunk(pr + 64 * c, half), b_src[c] + kb, 16);
    if (ACT && (TM == 128 || r < TM) && (!PAD || (a_live & 4))) cp_async_4(stage + L::RAW_SFA + r * 4, sa_src + k * sa_step, 4);
#pragma unroll
    for (int c = 0; c < 2; c++)
      cp_async_4(stage + L::RAW_SFB + (r + 128 * c) * 4, sb_src[c] + scale_step(tiles, sb_step[c], k), 4);
    cp_async_mbar_arrive(full);
  }
};

/* W4A16 (16-bit activations): the copies of one raw stage that thread i
 * (0..127) of the producer issues: activation rows as 16-byte chunks (lane i
 * takes chunk i % 8 of rows i / 8 + 16 q: one copy instruction covers 4
 * whole 128-byte rows), at their a16_chunk places in the stage's raw
 * activation rows (natural K order; the producer permutes them into the fp16
 * tile); the weights and their scales as StageCopies does. Activation rows
 * past m_end (M, or the expert's last row: PAD) are not copied. */
template <bool DUAL, int TM, bool PAD>
struct StageCopies16 {
  using L = Layout<TM, true>;
  static constexpr bool TILES = true;
  static constexpr int A_COPIES = TM / 16;
  const uint8_t *a_src, *b_src[4], *sb_src[2];
  int64_t a_step; /* 16 activation rows */
  int sb_step[2], kbeg;
  bool tiles; /* weight_step */
  uint32_t a_off, b_off, sb_off; /* the thread's first destination of each kind in a stage */
  uint32_t a_live; /* bit q: activation row ar + 16 q exists */

  __device__ __forceinline__ StageCopies16(const nvfp4_matmul &p, int l, int64_t n0, int64_t m0, int64_t m_end,
                                           int kbeg, int i)
      : kbeg(kbeg) {
    const int r = i, half = i & 1, pr = i >> 1, ar = i >> 3, ac = i & 7;
    a_off = L::RAW_A + a16_chunk(ar, ac), b_off = L::RAW_B + raw_chunk(pr, half), sb_off = L::RAW_SFB + 4 * r;
    const int64_t k_blocks = p.k / 16;
    auto clamp = [](int64_t row, int64_t rows) { return row < rows ? row : rows - 1; };
    auto b_row = [&](int tr) { return clamp(n0 + (DUAL ? tr % 128 : tr), p.n); };
    a_src = p.a.data + l * p.a.batch_stride + clamp(m0 + ar, m_end) * p.a.row_stride + 16 * ac;
    a_step = 16 * p.a.row_stride;
    /* always: the kernels that take padded tiles on the full-tile path (SK,
     * the dual's 64-row tile) must not read past the last row either */
    a_live = 0;
#pragma unroll
    for (int q = 0; q < A_COPIES; q++) a_live |= (m0 + ar + 16 * q < m_end ? 1u : 0u) << q;
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const nvfp4_operand &bop = (DUAL && c >= 2) ? p.b2 : p.b;
      b_src[c] = bop.data + l * bop.batch_stride + 16 * half +
                 (TILES ? nvfp4_codes_offset(&bop, b_row(pr + 64 * c), 0) : b_row(pr + 64 * c) * bop.row_stride);
    }
#pragma unroll
    for (int c = 0; c < 2; c++) {
      const nvfp4_operand &bop = (DUAL && c) ? p.b2 : p.b;
      sb_src[c] = bop.sf + l * bop.sf_batch_stride +
                  (TILES && bop.tile_rows
                       ? nvfp4_operand_sf_offset(&bop, k_blocks, b_row(r + 128 * c), 0)
                       : nvfp4_sf_offset(bop.sf_layout, bop.sf_row_stride, k_blocks, b_row(r + 128 * c), 0));
      sb_step[c] = (int)nvfp4_sf_offset(bop.sf_layout, 0, k_blocks, 0, 4); /* by tile: 4, as linear */
    }
    tiles = TILES && p.b.tile_rows;
  }

  __device__ __forceinline__ void load(uint8_t *stage, int ks, uint32_t full) const {
    const int k = kbeg + ks, kk = k * 32, kb = weight_step(tiles, k);
    /* rows 16 apart: 2048 bytes apart in the stage (a16_chunk's swizzle
     * depends on r % 8 alone), a_step in global memory; the step is made
     * opaque so that the 8 row pointers are formed here, not hoisted out of
     * the K loop (they spilled at 88 registers) */
    int64_t step = a_step;
    asm volatile("mov.b64 %0, %0;" : "+l"(step));
    const uint8_t *src = a_src + 4 * kk;
    uint8_t *dst = stage + a_off;
#pragma unroll
    for (int q = 0; q < A_COPIES; q++, src += step)
      if (a_live >> q & 1) cp_async_16(dst + 2048 * q, src, 16);
#pragma unroll
    for (int c = 0; c < 4; c++) cp_async_16(stage + b_off + 2048 * c, b_src[c] + kb, 16); /* rows 64 apart */
#pragma unroll
    for (int c = 0; c < 2; c++)
      cp_async_4(stage + sb_off + 512 * c, sb_src[c] + scale_step(tiles, sb_step[c], k), 4);
    cp_async_mbar_arrive(full);
  }
};
#endif

/* The power of two a kernel's sums carry (folded into the alphas): both
 * operands decoded (NVFP4_TC_UNSCALE), or the weights alone: fp16 fragments
 * (value * scale * 2^-6) or bf16 ones (2^-7, numerics.cuh). Device code only. */
template <int AT>
__device__ __forceinline__ float tc_unscale() {
  return AT == NVFP4_E2M1 ? NVFP4_TC_UNSCALE : AT == NVFP4_F16 ? NVFP4_TC_UNSCALE_F16 : NVFP4_TC_UNSCALE_BF16;
}

#if NVFP4_SM90A
/* Sum of the float4 at `addr` in CTAs 0..split-1 of the cluster, in rank
 * order (the same adds either way). At split 2 one load in flight per
 * thread, each added before the next goes out; at larger splits all loads
 * issued before the first add. Fewer loads in flight were faster at split 2
 * and slower at 4 and 6; more (two to eight vectors' loads batched) were
 * slower on six of the seven shapes measured (H100). */
__device__ __forceinline__ float4 sum_partials(uint32_t addr, int split) {
  if (split == 2) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    ld_shared_cluster_add_f4(s, mapa_shared(addr, 0u));
    ld_shared_cluster_add_f4(s, mapa_shared(addr, 1u));
    return s;
  }
  float4 v[MAX_SPLIT];
#pragma unroll
  for (int q = 0; q < MAX_SPLIT; q++)
    if (q < split) v[q] = ld_shared_cluster_f4(mapa_shared(addr, (uint32_t)q));
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int q = 0; q < MAX_SPLIT; q++)
    if (q < split) s = make_float4(s.x + v[q].x, s.y + v[q].y, s.z + v[q].z, s.w + v[q].w);
  return s;
}
#endif

/* A 16-bit activation row's K step, 8 chunks of 8 values in natural order
 * (n), as the fp16 tile's chunks 0..7, permuted as produce16 permutes them:
 * natural chunk 2q + h -> word q of tile chunks nvfp4_act16_chunk(i, h)
 * (nvfp4_act16_words). */
template <int AT>
__device__ __forceinline__ void act16_chunks(const uint4 (&n)[8], uint4 (&out)[8]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    uint32_t d[4][4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      uint32_t w[4];
      nvfp4_act16_words<AT>(n[2 * q + h], w);
#pragma unroll
      for (int i = 0; i < 4; i++) d[i][q] = w[i];
    }
#pragma unroll
    for (int i = 0; i < 4; i++) out[nvfp4_act16_chunk<AT>(i, h)] = make_uint4(d[i][0], d[i][1], d[i][2], d[i][3]);
  }
}

template <int AT>
__device__ __forceinline__ void act16_chunks(const uint8_t *row, uint4 (&out)[8]) {
  uint4 n[8];
#pragma unroll
  for (int c = 0; c < 8; c++) n[c] = __ldg(reinterpret_cast<const uint4 *>(row) + c);
  act16_chunks<AT>(n, out);
}

/* 16 16-bit values (chunks c0, c1, natural order) replaced by their
 * quantization's values with global scale g (nvfp4_quantize_block_device,
 * nvfp4_block_values16: quantized_values' numbers). */
template <bool BF16>
__device__ __forceinline__ void quantized_block16(uint4 &c0, uint4 &c1, float g) {
  const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  float x[16];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    if constexpr (BF16) {
      x[2 * i] = __uint_as_float(w[i] << 16), x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
      x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
  }
  uint32_t codes[2], v[8];
  const uint32_t sf = nvfp4_quantize_block_device(x, g, reinterpret_cast<uint8_t *>(codes));
  nvfp4_block_values16<BF16>(codes, sf, v);
  c0 = make_uint4(v[0], v[1], v[2], v[3]), c1 = make_uint4(v[4], v[5], v[6], v[7]);
}

/* The pre-pass: CTA i decodes blocks i, i + gridDim.x, ...; thread r row r
 * (reads 32 fp4 bytes and 4 scale bytes, decodes as the producer does; 16-bit
 * activations: reads 128 bytes and permutes them as produce16 does) into a
 * 16 KB tile in shared memory, which one bulk copy writes out whole (each
 * thread storing its own row to global memory, a warp's 16-byte stores 32
 * rows of 128 bytes apart, ran at ~0.8 TB/s). */
template <int AT>
__global__ void __launch_bounds__(PRE_THREADS, 8)
    act_predecode_kernel(const __grid_constant__ MatmulTable t, const __grid_constant__ Predecoded pre) {
#if NVFP4_SM90A
  constexpr int BYTES = Layout<128>::A16_BYTES;
  extern __shared__ __align__(1024) uint8_t tile[];
  const uint32_t tile_addr = (uint32_t)__cvta_generic_to_shared(tile);
  pdl_launch_dependents(); /* the main kernel's CTAs start as SMs free up, then wait */
  pdl_wait();
  const int r = threadIdx.x;
  for (int blk = blockIdx.x; blk < pre.blk[t.count]; blk += gridDim.x) {
    int g = 0;
    while (g + 1 < t.count && blk >= pre.blk[g + 1]) g++;
    const nvfp4_matmul &p = t.p[g];
    const int ksteps = (int)(p.k / KSTEP), tiles_m = (int)((p.m + 127) / 128), b = blk - pre.blk[g];
    const int ks = b % ksteps, tm = b / ksteps, l = tm / tiles_m;
    const int64_t m = (int64_t)(tm % tiles_m) * 128 + r;
    uint4 out[8] = {}; /* chunk c; rows past M stay zero */
    if (m < p.m && AT != NVFP4_E2M1) {
      act16_chunks<AT>(p.a.data + l * p.a.batch_stride + m * p.a.row_stride + ks * 128, out);
    } else if (m < p.m) {
      const uint8_t *row = p.a.data + l * p.a.batch_stride + m * p.a.row_stride + ks * 32;
      const uint4 c0 = __ldg(reinterpret_cast<const uint4 *>(row)), c1 = __ldg(reinterpret_cast<const uint4 *>(row + 16));
      const uint32_t sf = __ldg(reinterpret_cast<const uint32_t *>(
          p.a.sf + l * p.a.sf_batch_stride + nvfp4_sf_offset(p.a.sf_layout, p.a.sf_row_stride, p.k / 16, m, 4 * ks)));
      const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
      uint32_t sc[4];
      nvfp4_act_scales<4>(sf, sc);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        uint32_t d[4][4];
        nvfp4_act_half<4>(w, h, sc, d);
#pragma unroll
        for (int i = 0; i < 4; i++) out[2 * i + h] = make_uint4(d[i][0], d[i][1], d[i][2], d[i][3]);
      }
    }
    if (r == 0) bulk_wait_read(); /* the previous block's copy has read the tile */
    __syncthreads();
#pragma unroll
    for (int c = 0; c < 8; c++) *reinterpret_cast<uint4 *>(tile + a16_chunk(r, c)) = out[c];
    fence_proxy_async_smem();
    __syncthreads();
    if (r == 0) {
      bulk_copy_s2g(pre.a16 + (int64_t)blk * BYTES, tile_addr, BYTES);
      bulk_commit();
    }
  }
  if (r == 0) bulk_wait();
#else
  (void)t;
  (void)pre;
#endif
}

/* The pre-pass of rows grouped by expert (Predecoded, by expert): CTA c
 * writes K steps STEPS (c % pieces) onwards of row tile c / pieces,
 * found as the main kernel finds it (expert_tile), each step's rows x 128
 * bytes by one bulk copy; rows by token (a_index) read where they are, an
 * index outside x as a row of zeros (as w4a16.cu's tiles read it). QUANT
 * (a_global): each row quantized with its expert's global scale on the way
 * (W4A4: the values quantized_values gives, NaN for an index outside x). */
template <int AT, bool QUANT>
__global__ void __launch_bounds__(PRE_THREADS, QUANT ? 4 : 8)
    expert_predecode_kernel(const __grid_constant__ nvfp4_matmul p, const __grid_constant__ Predecoded pre,
                            int pieces) {
#if NVFP4_SM90A
  extern __shared__ __align__(1024) uint8_t tile[];
  __shared__ long long found[3];
  const uint32_t tile_addr = (uint32_t)__cvta_generic_to_shared(tile);
  pdl_launch_dependents();
  pdl_wait();
  expert_tile<128>(p, blockIdx.x / (unsigned)pieces, found);
  if (found[0] < 0) return; /* past the bound's real tiles */
  const int r = threadIdx.x, ksteps = (int)(p.k / KSTEP);
  const int64_t m0 = found[1];
  const int rows = (int)std::min<int64_t>(128, found[2] - m0);
  constexpr int STEPS = QUANT ? EXPERT_PRE_STEPS_QUANT : EXPERT_PRE_STEPS;
  const int s0 = (int)(blockIdx.x % (unsigned)pieces) * STEPS, s1 = min(ksteps, s0 + STEPS);
  int64_t src = m0 + r;
  bool ok = r < rows;
  if (ok && p.a_index) {
    src = p.a_index[m0 + r];
    ok = src >= 0 && src < p.a_rows;
  }
  const uint8_t *row = p.a.data + (ok ? src : 0) * p.a.row_stride;
  /* QUANT: the expert's global scale; a row outside A: NaN (quantize.cu's convention) */
  const float g = QUANT ? (ok || r >= rows ? p.a_global[found[0]] : __int_as_float(0x7FC00000)) : 0.0f;
  uint8_t *dst = pre.a16 + m0 * ksteps * 128; /* the tile's steps, rows x 128 bytes each */
  for (int s = s0; s < s1; s++) {
    uint4 out[8] = {};
    if constexpr (QUANT) {
      if (r < rows) {
        uint4 n[8] = {};
        if (ok)
#pragma unroll
          for (int c = 0; c < 8; c++) n[c] = __ldg(reinterpret_cast<const uint4 *>(row + s * 128) + c);
#pragma unroll
        for (int b = 0; b < 4; b++) quantized_block16<AT != NVFP4_F16>(n[2 * b], n[2 * b + 1], g);
        act16_chunks<AT>(n, out);
      }
    } else if (ok) {
      act16_chunks<AT>(row + s * 128, out);
    }
    if (r == 0) bulk_wait_read(); /* the previous step's copy has read the tile */
    __syncthreads();
    if (r < rows)
#pragma unroll
      for (int c = 0; c < 8; c++) *reinterpret_cast<uint4 *>(tile + a16_chunk(r, c)) = out[c];
    fence_proxy_async_smem();
    __syncthreads();
    if (r == 0) {
      bulk_copy_s2g(dst + (int64_t)s * rows * 128, tile_addr, (uint32_t)rows * 128);
      bulk_commit();
    }
  }
  if (r == 0) bulk_wait();
#else
  (void)p;
  (void)pre;
  (void)pieces;
#endif
}

#if NVFP4_SM90A
/* The epilogue's second half, after barrier B: of the tile at (l, n0, m0) of
 * problem p, this CTA's share of the rows (TM / split of them, rank `rank`),
 * the partials of the cluster's fp32 tiles `part` (shared address part_addr)
 * summed in rank order, the epilogue (common.cuh), 2-byte stores; element vectors
 * first, first + stride, ... by the consumers' eight warps, or with the
 * producer's four (the kernel's EPI_ALL): then the distributed-shared-memory
 * loads of a split-K sum have 12 warps to hide their latency. */
template <bool DUAL, int TM, int AT = NVFP4_E2M1>
__device__ __forceinline__ void store_share(const nvfp4_matmul &p, int l, const float *part, uint32_t part_addr,
                                            int rank, int split, int64_t m0, int64_t n0, int first, int stride,
                                            const long long *expert) {
  constexpr int OUT_COLS = DUAL ? TILE_R / 2 : TILE_R;
  constexpr int VECS = OUT_COLS / 4;
  const int mr0 = TM * rank / split, mr1 = TM * (rank + 1) / split;
  /* W4A16 rows grouped by expert: expert l's alphas, rows to its end */
  const bool by_expert = AT != NVFP4_E2M1 && p.offs;
  const Epilogue ep(p, tc_unscale<AT>(), false, by_expert ? l : 0);
  uint16_t *c = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
  const bool vec_ok = aligned(p.c, 8) && p.c_row_stride % 4 == 0 && p.c_batch_stride % 4 == 0;
  /* the problem's fields in registers: read through the table's dynamic
   * index, each was an indexed constant load inside the loop */
  const int64_t pm = by_expert ? expert[2] : p.m, pn = p.n, c_row_stride = p.c_row_stride;
  /* PLAIN (a gemm without bias, fp16 out: the competition's and most calls):
   * the loop compiled without the bias and bf16 branches; the same values. The
   * dual keeps its one loop: with a second copy, its single calls at M = 256
   * measured ~10% slower (H200). */
  auto loop = [&](auto plain) {
    constexpr bool PLAIN = decltype(plain)::value;
    /* all of a thread's loads are issued before the sums */
#pragma unroll 2
    for (int idx = first; idx < (mr1 - mr0) * VECS; idx += stride) {
      const int mr = mr0 + idx / VECS, nc = (idx % VECS) * 4;
      const int64_t m = m0 + mr, n = n0 + nc;
      if (m >= pm || n >= pn) continue;
      float4 s1 = make_float4(0.f, 0.f, 0.f, 0.f), s2 = s1;
      if (split == 1) {
        s1 = *reinterpret_cast<const float4 *>(part + mr * PART_PITCH + nc);
        if (DUAL) s2 = *reinterpret_cast<const float4 *>(part + mr * PART_PITCH + nc + OUT_COLS);
      } else {
        const uint32_t addr = part_addr + (uint32_t)(mr * PART_PITCH + nc) * 4;
        s1 = sum_partials(addr, split);
        if (DUAL) s2 = sum_partials(addr + OUT_COLS * 4, split);
      }
      float o[4];
      if (DUAL) {
        o[0] = ep.dual(s1.x, s2.x), o[1] = ep.dual(s1.y, s2.y), o[2] = ep.dual(s1.z, s2.z), o[3] = ep.dual(s1.w, s2.w);
      } else if (PLAIN) {
        o[0] = __fmul_rn(s1.x, ep.alpha), o[1] = __fmul_rn(s1.y, ep.alpha), o[2] = __fmul_rn(s1.z, ep.alpha);
        o[3] = __fmul_rn(s1.w, ep.alpha);
      } else {
        /* columns past n read no bias (n < pn here) */
        const int64_t last = pn - 1;
        o[0] = ep.gemm(s1.x, m, n), o[1] = ep.gemm(s1.y, m, min(n + 1, last)), o[2] = ep.gemm(s1.z, m, min(n + 2, last));
        o[3] = ep.gemm(s1.w, m, min(n + 3, last));
      }
      uint16_t *dst = c + m * c_row_stride + n;
      auto pack2 = [&](float lo, float hi) {
        if (!PLAIN) return ep.pack2(lo, hi);
        const __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&h);
      };
      if (vec_ok && n + 3 < pn) {
        st_global_v2(dst, pack2(o[0], o[1]), pack2(o[2], o[3]));
      } else {
        for (int i = 0; i < 4 && n + i < pn; i++) {
          if (PLAIN) dst[i] = __half_as_ushort(__float2half_rn(o[i]));
          else ep.store(dst + i, o[i]);
        }
      }
    }
  };
  if constexpr (DUAL) loop(std::false_type{});
  else if (!ep.bias && ep.c_type == NVFP4_F16) loop(std::true_type{});
  else loop(std::false_type{});
}
#endif

/* Rows by expert: tile i of the launch is column tile i % tiles_n of row tile
 * i / tiles_n, so the CTAs that run side by side share an expert's row tile
 * (its activations read from DRAM about once, then from L2) and sweep its
 * weights, which the expert's next row tile finds in L2. With the row tiles
 * fastest (the dense problems' order) each wave read every expert's rows
 * again per column tile: an MoE's activations are far beyond L2 (DeepSeek-V3,
 * T = 4096: 470 MB read 16 times for the gate/up). */
template <bool DUAL>
__device__ __forceinline__ int64_t expert_row_tile(const nvfp4_matmul &p, int64_t tile) {
  constexpr int OUT_COLS = DUAL ? TILE_R / 2 : TILE_R;
  return tile / ((p.n + OUT_COLS - 1) / OUT_COLS);
}

/* Dense tile order. Row tiles fastest: a wave of CTAs shares a column tile's
 * weights but reads every row tile's activations again per column tile (70B
 * down at M = 8192: 470 MB of them a sweep, far beyond L2). From GROUP_FROM
 * row tiles, the launch runs in bands of GROUP_ROWS row tiles, the row tiles
 * of a band fastest and its column tiles after one another, so a band's
 * activations stay in L2 while its column tiles sweep the weights (H200,
 * Llama-3 layers at M = 8192 0.92-0.96x the time, M = 4096 0.97-0.99x; at
 * M = 2048, 16 row tiles, 1.02-1.08x: there the activations fit). Not
 * stream-K (its CTAs take tiles in a cost order of their own). */
constexpr int GROUP_ROWS = 8, GROUP_FROM = 32;

/* how a consumer's K step meets its wgmma (the consumers' K loop) */
enum Overlap : int { SERIAL, HALVES, SETS };

template <bool DUAL, int TM, bool SK, bool PRE, int AT = NVFP4_E2M1>
__global__ void __launch_bounds__(THREADS, 1)
    matmul_sm90_kernel(const __grid_constant__ MatmulTable t, int split,
                       const __grid_constant__ StreamKT<SK ? SK_MAX_CTAS : 0> sk,
                       const __grid_constant__ Predecoded pre) {
#if NVFP4_SM90A
  using L = Layout<TM, AT != NVFP4_E2M1>;
  constexpr int STAGES = L::STAGES, A16_BYTES = L::A16_BYTES, RAW_BASE = L::RAW_BASE, STAGE_BYTES = L::STAGE_BYTES;
  constexpr int RAW_A = L::RAW_A, RAW_B = L::RAW_B, RAW_SFA = L::RAW_SFA, RAW_SFB = L::RAW_SFB;
  /* 1024-byte aligned by declaration (the 128-byte swizzle's atoms): a base
   * aligned at run time was recomputed in every K step of the consumer loops
   * (18 of the 225 instructions per warp and step of the 32- and 64-row
   * tiles). A base off the alignment would garble every wgmma: trap. */
  extern __shared__ __align__(1024) uint8_t smem_dyn[];
  uint8_t *smem = smem_dyn;
  const uint32_t smem_addr = (uint32_t)__cvta_generic_to_shared(smem);
  if (smem_addr & 1023) __trap();
  /* W4A16 rows grouped by expert: expert_tile's finding for the tile */
  long long *const expert = reinterpret_cast<long long *>(smem + L::EXPERT_BASE);
  /* setmaxnreg split of the CTA's 384 x 168 = 64512 registers (what it was
   * given at launch: an .inc beyond that waits forever): 128 x 88 + 256 x 208.
   * The producer spilled at 56 and 64; 72 and 88 measured alike. Pre-decoded
   * (no activation decode) and not stream-K, the producer needs fewer:
   * 128 x 56 + 256 x 224, 0.8-1.1% faster on 3 of 5 gemm shapes, the dual
   * unchanged; 40 + 232 made the dual 2% slower. */
  constexpr bool LEAN_PRODUCER = PRE && !SK;
  constexpr int PRODUCER_REGS = LEAN_PRODUCER ? 56 : 88, CONSUMER_REGS = LEAN_PRODUCER ? 224 : 208;
  constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8; /* __launch_bounds__(THREADS, 1): 168 */
  static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= THREADS * LAUNCH_REGS, "setmaxnreg split");
  /* raw slot landed / read by every reader; fp16 tile written / read by wgmma */
  constexpr int BAR_FULL = 0, BAR_EMPTY = STAGES, BAR_A16_FULL = 2 * STAGES, BAR_A16_EMPTY = 2 * STAGES + NA16;
  auto bar = [&](int i) { return smem_addr + L::BAR_BASE + 8 * i; };
  static_assert(raw_chunk(4, 1) + 256 == raw_chunk(12, 1) && raw_chunk(4, 1) + 2048 == raw_chunk(68, 1),
                "the consumers' fixed offsets: rows 8 and 64 apart keep their chunk swizzle");

  const int rank = SK ? 0 : (int)(blockIdx.x % (unsigned)split);
  int64_t tile = SK ? 0 : blockIdx.x / (unsigned)split; /* in its problem */
  int pg = SK ? 0 : table_find(t, tile);                 /* the problem */
  constexpr int OUT_COLS = DUAL ? TILE_R / 2 : TILE_R; /* output columns (n) per tile */
  const int ksteps = SK ? sk.ksteps : (int)(t.p[pg].k / KSTEP);
  /* SK: the first K step of range c of the launch's tiles x ksteps (< 2^31);
   * this CTA's range (reversed: see StreamK) */
  auto sk_start = [&](int c) { return sk.start[opaque(c)]; }; /* loaded where used, not held in a register */
  const int range = SK ? sk.ctas - 1 - (int)blockIdx.x : 0;
  int gtile = 0; /* SK: the segment's tile in the launch */
  int g0 = 0;    /* SK: the CTA's K steps before this segment (the rings run on) */
  int l = 0, kbeg = 0, steps = 0;
  int64_t n0 = 0, m0 = 0;
  /* Segment si of this CTA into pg, tile, l, n0, m0, kbeg, steps (SK: and
   * gtile, g0); false past the last. A function of si alone, so that the loops
   * carry one register and the epilogue recomputes the rest (the consumers
   * have none to spare). Without SK the one segment is K range `rank` of
   * `split`. */
  auto segment = [&](int si) {
    if (SK) {
      const int first = sk_start(range), end = sk_start(range + 1);
      const int start = si == 0 ? first : (first / ksteps + si) * ksteps;
      if (start >= end) return false;
      gtile = start / ksteps;
      g0 = start - first;
      tile = gtile;
      pg = table_find(t, tile);
      kbeg = start - gtile * ksteps;
      steps = min(end - start, ksteps - kbeg);
    } else {
      if (si) return false;
      kbeg = (int)((int64_t)ksteps * rank / split);
      steps = (int)((int64_t)ksteps * (rank + 1) / split) - kbeg;
    }
    /* 32-bit tile arithmetic (the launch has < 2^31 tiles): 64-bit divisions
     * are subroutine calls */
    const nvfp4_matmul &q = t.p[pg];
    const bool by_expert = AT != NVFP4_E2M1 && q.offs; /* the expert and rows: found once (below) */
    const int tiles_m = by_expert ? (int)expert_row_tiles(q, TM) : (int)((q.m + TM - 1) / TM),
              tiles_n = (int)((q.n + OUT_COLS - 1) / OUT_COLS);
    const int tile32 = (int)tile, in_batch = tile32 % (tiles_m * tiles_n);
    l = by_expert ? (int)expert[0] : tile32 / (tiles_m * tiles_n);
    if (by_expert) { /* the column tiles of one row tile side by side (expert_row_tile) */
      n0 = (int64_t)(tile32 % tiles_n) * OUT_COLS;
      m0 = expert[1];
    } else if (!SK && tiles_m >= GROUP_FROM) { /* bands of GROUP_ROWS row tiles (Dense tile order) */
      const int band = in_batch / (GROUP_ROWS * tiles_n), first = band * GROUP_ROWS,
                rows = min(tiles_m - first, GROUP_ROWS), r = in_batch - band * GROUP_ROWS * tiles_n;
      n0 = (int64_t)(r / rows) * OUT_COLS;
      m0 = (int64_t)(first + r % rows) * TM;
    } else {
      n0 = (int64_t)(in_batch / tiles_m) * OUT_COLS;
      m0 = (int64_t)(in_batch % tiles_m) * TM;
    }
    return true;
  };
  /* the row after the tile's last: M, or (W4A16 rows grouped by expert) the expert's end */
  auto m_end_of = [&](const nvfp4_matmul &q) -> int64_t {
    if constexpr (AT != NVFP4_E2M1) {
      if (q.offs) return expert[2];
    }
    return q.m;
  };
  const int tid = threadIdx.x;
  NVFP4_TRACE_POINT(tid == 0, 0);

  static_assert(!PRE || TM == 128, "pre-decoded tiles are 128 rows");
  if (tid == 0) {
    for (int i = 0; i < STAGES; i++) {
      mbar_init(bar(BAR_FULL + i), 128);  /* one cp.async arrival per producer thread */
      /* every thread, after its own reads of the slot (PRE: the producer reads none) */
      mbar_init(bar(BAR_EMPTY + i), PRE ? THREADS - 128 : THREADS);
    }
    for (int i = 0; i < NA16; i++) {
      mbar_init(bar(BAR_A16_FULL + i), PRE ? 1 : 128); /* PRE: thread 0's, with the tile's bytes */
      mbar_init(bar(BAR_A16_EMPTY + i), 8);
    }
  }
  __syncthreads();
  pdl_wait(); /* the set-up above overlaps the previous kernel's end */
  NVFP4_TRACE_POINT(tid == 0, 1);
  /* W4A16 rows grouped by expert (one problem, split 1, no stream-K: the
   * plan's): the tile's expert and rows, found once (expert_tile) */
  if constexpr (AT != NVFP4_E2M1) {
    if (t.p[0].offs) {
      expert_tile<TM>(t.p[0], expert_row_tile<DUAL>(t.p[0], tile), expert);
      if (expert[0] < 0) return; /* past the last expert's rows: the bound's spare tiles */
    }
  }
  /* SK: the rings and their barriers run on from one segment to the next (K
   * step g0 + j of the CTA). A segment that ends by handing its partial over
   * leaves the rings to the next one at once; one that stored its tile
   * through the rings' memory (the epilogue) needs every thread past that
   * first: a CTA barrier at the next segment's start. */
  auto segment_start = [&](int si) {
    const bool after_handover = si == 1 && sk_start(range) % ksteps != 0;
    if (SK && si && !after_handover) named_barrier_sync(0, THREADS);
  };

  /* store_share by all 12 warps in gemm launches of split 2: there each thread's
   * share drops from 16 to 11 element vectors, and the 2-group 3072 x 4096
   * shape ran 4% faster (H100); at split 4 and 8 the share
   * drops by less than the producer's entry costs (1-2% slower), at split 1
   * nothing changed; the dual's producer, summing two tiles at 88 registers,
   * made it slower; stream-K and the pre-decoded producer spilled. */
  constexpr bool EPI_ALL = !DUAL && !SK && !PRE && AT == NVFP4_E2M1;
  if (tid < 128) {
    setmaxnreg_dec<PRODUCER_REGS>();
    for (int si = 0; segment(si); si++) {
      segment_start(si);
      /* SK: per segment, what derives from the thread index is computed again
       * rather than kept alive through the epilogue (LICM would hoist it) */
      const int tid = SK || AT != NVFP4_E2M1 ? opaque((int)threadIdx.x) : (int)threadIdx.x;
      const nvfp4_matmul &p = t.p[pg];
      /* ---- producer: the copies of every K step (StageCopies); decode of
       * activation row(s) ar into the fp16 tile. A tile with rows past the
       * activation's end (PAD: a tile of M < TM rows, the last tile of a
       * group) skips their copies and decode, 7-10% off the padded launches;
       * the full tiles' loop is compiled apart, without the tests (they cost
       * the full tiles 1-3%). */
      auto produce = [&](auto pad) {
        constexpr bool PAD = decltype(pad)::value;
        const StageCopies<DUAL, TM, PAD> copies(p, l, n0, m0, kbeg, tid);
        /* the activation decode: TPR threads per row, BPT scale blocks (16
         * values) each, blocks t0 .. t0 + BPT - 1 of row ar */
        constexpr int TPR = 128 / TM, BPT = 4 / TPR;
        const int ar = tid / TPR, t0 = (tid % TPR) * BPT;
        const bool live = !PAD || m0 + ar < p.m;
        auto load = [&](int slot, int ks) { /* step ks (relative to kbeg) into ring slot */
          copies.load(smem + RAW_BASE + slot * STAGE_BYTES, ks, bar(BAR_FULL + slot));
        };
        for (int j = 0; j < STAGES && j < steps; j++) {
          const int gj = g0 + j; /* SK: the slot's last use (a step of the last segment) must be read */
          if (SK && gj >= STAGES) mbar_wait(bar(BAR_EMPTY + gj % STAGES), (gj / STAGES - 1) & 1);
          load(gj % STAGES, j);
        }
        NVFP4_TRACE_POINT(tid == 0, 9);

        for (int j = 0; j < steps; j++) {
          const int gj = g0 + j, slot = gj % STAGES, buf = gj % NA16;
          mbar_wait(bar(BAR_FULL + slot), (gj / STAGES) & 1);
          NVFP4_TRACE_POINT(tid == 0 && j == 0, 2);
          if (gj >= NA16) mbar_wait(bar(BAR_A16_EMPTY + buf), ((gj / NA16) - 1) & 1);
          const uint8_t *st = smem + RAW_BASE + slot * STAGE_BYTES;
          /* the fp4 bytes of scale blocks t0 .. t0 + BPT - 1 of row ar, as
           * words in memory order (nvfp4_act_half) */
          uint32_t w[2 * BPT], sf;
          if (live) {
            if constexpr (BPT == 4) {
              const uint4 c0 = *reinterpret_cast<const uint4 *>(st + RAW_A + raw_chunk(ar, 0));
              const uint4 c1 = *reinterpret_cast<const uint4 *>(st + RAW_A + raw_chunk(ar, 1));
              w[0] = c0.x, w[1] = c0.y, w[2] = c0.z, w[3] = c0.w, w[4] = c1.x, w[5] = c1.y, w[6] = c1.z, w[7] = c1.w;
            } else if constexpr (BPT == 2) {
              const uint4 c = *reinterpret_cast<const uint4 *>(st + RAW_A + raw_chunk(ar, t0 >> 1));
              w[0] = c.x, w[1] = c.y, w[2] = c.z, w[3] = c.w;
            } else {
              const uint2 c = *reinterpret_cast<const uint2 *>(st + RAW_A + raw_chunk(ar, t0 >> 1) + 8 * (t0 & 1));
              w[0] = c.x, w[1] = c.y;
            }
            sf = *reinterpret_cast<const uint32_t *>(st + RAW_SFA + ar * 4) >> (8 * t0);
          }
          /* this thread's reads of the slot are done: its refill (by producer
           * threads that decode other rows, one step later) waits for every
           * reader. Every thread arrives: racecheck orders a thread's reads
           * before another's writes through the thread's own arrival, not
           * through a __syncwarp and lane 0's. */
          mbar_arrive(bar(BAR_EMPTY + slot));
          /* refill the slot of step j-1 once every consumer and producer
           * thread has read it: before this step's decode rather than after
           * it, so the copies go out one decode earlier (small M 3% faster,
           * the rest 0-1%) */
          if (j >= 1 && j - 1 + STAGES < steps) {
            const int old = (gj - 1) % STAGES;
            mbar_wait(bar(BAR_EMPTY + old), ((gj - 1) / STAGES) & 1);
            load(old, j - 1 + STAGES);
          }
          if (live) {
            uint32_t sc[BPT];
            nvfp4_act_scales<BPT>(sf, sc);
            uint8_t *a16 = smem + buf * A16_BYTES + 4 * t0;
#pragma unroll
            for (int h = 0; h < 2; h++) {
              uint32_t d[4][BPT];
              nvfp4_act_half<BPT>(w, h, sc, d);
#pragma unroll
              for (int i = 0; i < 4; i++) {
                uint8_t *dst = a16 + a16_chunk(ar, 2 * i + h);
                if constexpr (BPT == 4) *reinterpret_cast<uint4 *>(dst) = make_uint4(d[i][0], d[i][1], d[i][2], d[i][3]);
                else if constexpr (BPT == 2) *reinterpret_cast<uint2 *>(dst) = make_uint2(d[i][0], d[i][1]);
                else *reinterpret_cast<uint32_t *>(dst) = d[i][0];
              }
            }
          }
          fence_proxy_async_smem();
          mbar_arrive(bar(BAR_A16_FULL + buf));
        }
      };
      /* W4A16: the activation rows arrive as 16-bit values in natural K
       * order (StageCopies16); TPR threads per row permute BPT 16-byte pairs
       * of chunks each (chunks 2t + h, t = t0 .. t0 + BPT - 1) into the
       * decoders' K order (nvfp4_act16_words): word t of tile chunks 2s + h. */
      auto produce16 = [&](auto pad) {
        constexpr bool PAD = decltype(pad)::value;
        const StageCopies16<DUAL, TM, PAD> copies(p, l, n0, m0, m_end_of(p), kbeg, tid);
        constexpr int TPR = 128 / TM, BPT = 4 / TPR;
        const int ar = tid / TPR, t0 = (tid % TPR) * BPT;
        const bool live = !PAD || m0 + ar < m_end_of(p);
        auto load = [&](int slot, int ks) { copies.load(smem + RAW_BASE + slot * STAGE_BYTES, ks, bar(BAR_FULL + slot)); };
        for (int j = 0; j < STAGES && j < steps; j++) {
          const int gj = g0 + j;
          if (SK && gj >= STAGES) mbar_wait(bar(BAR_EMPTY + gj % STAGES), (gj / STAGES - 1) & 1);
          load(gj % STAGES, j);
        }
        for (int j = 0; j < steps; j++) {
          const int gj = g0 + j, slot = gj % STAGES, buf = gj % NA16;
          mbar_wait(bar(BAR_FULL + slot), (gj / STAGES) & 1);
          if (gj >= NA16) mbar_wait(bar(BAR_A16_EMPTY + buf), ((gj / NA16) - 1) & 1);
          /* the row's chunk c at (row base | swizzle) ^ 16 c: raw slots and
           * fp16 tiles are 1024-byte aligned, rows 128 bytes; one XOR an
           * access instead of 16 addresses held across the loop (they
           * spilled) */
          const uint32_t x16 = (uint32_t)opaque((ar & 7) << 4);
          const uint32_t raw_row = (smem_addr + RAW_BASE + slot * STAGE_BYTES + RAW_A + ar * 128) | x16;
          const uint32_t a16_row = (smem_addr + buf * A16_BYTES + ar * 128) | x16;
          if (live) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
              uint32_t d[4][BPT];
#pragma unroll
              for (int q = 0; q < BPT; q++) {
                uint32_t w[4];
                nvfp4_act16_words<AT>(ld_shared_u4(raw_row ^ (uint32_t)(16 * (2 * (t0 + q) + h))), w);
#pragma unroll
                for (int i = 0; i < 4; i++) d[i][q] = w[i];
              }
#pragma unroll
              for (int i = 0; i < 4; i++) {
                const uint32_t dst = (a16_row ^ (uint32_t)(16 * nvfp4_act16_chunk<AT>(i, h))) + 4 * t0;
                if constexpr (BPT == 4)
                  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(d[i][0]), "r"(d[i][1]),
                               "r"(d[i][2]), "r"(d[i][3]) : "memory");
                else if constexpr (BPT == 2)
                  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(dst), "r"(d[i][0]), "r"(d[i][1]) : "memory");
                else
                  asm volatile("st.shared.b32 [%0], %1;" ::"r"(dst), "r"(d[i][0]) : "memory");
              }
            }
          }
          /* this thread's reads of the slot are done (as in produce); the
           * refill of step j-1's slot after the permute: its stores first
           * keep the copies' pointers and the permuted words apart (they
           * spilled at 88 registers together) */
          mbar_arrive(bar(BAR_EMPTY + slot));
          fence_proxy_async_smem();
          mbar_arrive(bar(BAR_A16_FULL + buf));
          if (j >= 1 && j - 1 + STAGES < steps) {
            const int old = (gj - 1) % STAGES;
            mbar_wait(bar(BAR_EMPTY + old), ((gj - 1) / STAGES) & 1);
            load(old, j - 1 + STAGES);
          }
        }
      };
      /* PRE: the weights' copies, and thread 0 brings the step's fp16 tile
       * in (one bulk copy, Predecoded). Nothing to wait for but free slots:
       * the refill of step j-1's raw slot after step j's tile copy, as in
       * the decoding loop. */
      auto produce_pre = [&] {
        const StageCopies<DUAL, TM, false, false, AT != NVFP4_E2M1> copies(p, l, n0, m0, kbeg, tid);
        auto load = [&](int slot, int ks) {
          copies.load(smem + RAW_BASE + slot * STAGE_BYTES, ks, bar(BAR_FULL + slot));
        };
        /* a step's tile: A16_BYTES, or (rows by expert) the tile's rows x 128 bytes */
        uint32_t a16_bytes = A16_BYTES;
        const uint8_t *a16_src;
        if (AT != NVFP4_E2M1 && p.offs) {
          a16_bytes = (uint32_t)std::min<int64_t>(TM, m_end_of(p) - m0) * 128;
          a16_src = pre.a16 + m0 * (p.k / KSTEP) * 128 + (int64_t)kbeg * a16_bytes;
        } else {
          const int64_t first = pre.blk[pg] + ((int64_t)l * ((p.m + TM - 1) / TM) + m0 / TM) * (p.k / KSTEP) + kbeg;
          a16_src = pre.a16 + first * A16_BYTES;
        }
        for (int j = 0; j < STAGES && j < steps; j++) {
          const int gj = g0 + j;
          if (SK && gj >= STAGES) mbar_wait(bar(BAR_EMPTY + gj % STAGES), (gj / STAGES - 1) & 1);
          load(gj % STAGES, j);
        }
        for (int j = 0; j < steps; j++) {
          const int gj = g0 + j, buf = gj % NA16;
          if (tid == 0) {
            if (gj >= NA16) mbar_wait(bar(BAR_A16_EMPTY + buf), ((gj / NA16) - 1) & 1);
            mbar_arrive_expect_tx(bar(BAR_A16_FULL + buf), a16_bytes);
            bulk_copy_g2s(smem_addr + buf * A16_BYTES, a16_src + (int64_t)j * a16_bytes, a16_bytes,
                          bar(BAR_A16_FULL + buf));
          }
          if (j >= 1 && j - 1 + STAGES < steps) {
            const int old = (gj - 1) % STAGES;
            mbar_wait(bar(BAR_EMPTY + old), ((gj - 1) / STAGES) & 1);
            load(old, j - 1 + STAGES);
          }
        }
      };
      /* not in the stream-K kernel and the dual's 64-row tile: there the
       * second loop made every tile 1-3% slower and the padded ones no faster */
      if constexpr (PRE) produce_pre();
      else if constexpr (AT != NVFP4_E2M1) {
        if constexpr (SK || (DUAL && TM == 64)) produce16(std::false_type{});
        else if (m0 + TM <= m_end_of(p)) produce16(std::false_type{});
        else produce16(std::true_type{});
      } else if constexpr (SK || (DUAL && TM == 64)) produce(std::false_type{});
      else if (m0 + TM <= p.m) produce(std::false_type{});
      else produce(std::true_type{});
      NVFP4_TRACE_POINT(tid == 0, 3);
      pdl_launch_dependents();
      /* the epilogue's barriers, with the consumers: (A) the rings are free, (B)
       * the partial tile is written (and with split-K: (C) it has been read);
       * none where the consumers hand the partial over (SK). Between B and C
       * (EPI_ALL, split 2) a share of the sums and stores. */
      if (!(SK && kbeg > 0)) {
        named_barrier_sync(0, THREADS);
        if (split > 1) {
          cluster_sync();
          if (EPI_ALL && split == 2)
            store_share<DUAL, TM, AT>(p, l, reinterpret_cast<const float *>(smem), smem_addr, rank, split, m0, n0, tid,
                                      THREADS, expert);
          cluster_sync();
        } else {
          named_barrier_sync(0, THREADS);
        }
      }
    }
  } else {
    /* ---- consumers: warpgroup wg takes weight rows 128 wg .. 128 wg + 127
     * (two halves of 64) over every K step. Warp w, lane (g, tq): rows
     * 128 wg + 64 hf + 16 w + g (+ 8). */
    setmaxnreg_inc<CONSUMER_REGS>();
    for (int si = 0; segment(si); si++) {
      segment_start(si);
      const int tid = SK ? opaque((int)threadIdx.x) : (int)threadIdx.x; /* as in the producer */
      const nvfp4_matmul &p = t.p[pg];
      const int ct = tid - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31, g = lane >> 2, tq = lane & 3;
      float acc[2][TM / 2]; /* [half of the warpgroup's rows][wgmma accumulator] */
#pragma unroll
      for (int i = 0; i < TM / 2; i++) acc[0][i] = acc[1][i] = 0.f;
      /* The loop's addresses, all 32-bit shared ones fixed before it: the
       * thread's raw rows r0, r0 + 8, r0 + 64, r0 + 72 are 256 / 2048 / 2304
       * bytes apart in every slot (the chunk swizzle depends on (r / 4) % 2
       * only), their scale bytes 32 / 256 / 288. Slot, phase and descriptors
       * advance by additions. 19 fewer instructions per warp and step than
       * addresses computed per step: the dual 2-5% faster, the gemm 0-1.6%
       * (H200). */
      const int r00 = wg * 128 + warp * 16 + g;
      /* opaque: kept in registers; ptxas recomputed both from the thread index
       * in every step (21 instructions per warp and step) */
      const uint32_t b_at =
          (uint32_t)opaque((int)(smem_addr + RAW_BASE + RAW_B + raw_chunk(r00, tq >> 1) + 8 * (tq & 1)));
      const uint32_t sfb_at = (uint32_t)opaque((int)(smem_addr + RAW_BASE + RAW_SFB + r00 * 4 + tq));
      const uint64_t desc0 = wgmma_desc_sw128(smem_addr);
      /* The K loop with wgmma of N activation rows: TM, or for a 128-row
       * tile of at most 96, 64 or 32 rows (the last of M % 128 <= 96) the
       * smaller instruction, which reads the first N rows of the fp16 tile
       * into the first N / 2 accumulators of each half (the m64nN layouts
       * are prefixes of one another); the rest stay 0. How a step's decode
       * meets the wgmma (OV):
       *   SERIAL both halves decoded, their 8 wgmma run, waited for;
       *   HALVES one half decoded while the other half's 4 run (pre-decoded
       *          activations, 128-row tiles but stream-K's: 128-row layers
       *          of Llama-3 8B / 70B 4-10% faster, H200; 1-10% slower where
       *          the producer decodes);
       *   SETS   the next step decoded into a second register set while
       *          this step's 8 run (32-row tiles of more than 16 rows: M = 32
       *          6-12% faster; 7-9% slower at 16 rows and below).
       * Each wait leaves one group in flight: the one whose fragments are
       * not about to be written. */
      auto consume = [&](auto n_rows, auto overlap) {
        constexpr int N = decltype(n_rows)::value, OV = decltype(overlap)::value;
        int slot = g0 % STAGES; /* SK: where the rings stand after the earlier segments */
        uint32_t full_phase = (g0 / STAGES) & 1, slot_off = slot * STAGE_BYTES;
        /* the step's raw weights and scale bytes (both halves); the slot released once read */
        auto load = [&](uint2(&v)[2][2], uint32_t(&sb)[2]) {
          mbar_wait(bar(BAR_FULL + slot), full_phase);
#pragma unroll
          for (int hf = 0; hf < 2; hf++) {
            v[hf][0] = ld_shared_u2(b_at + slot_off + 2048 * hf);
            v[hf][1] = ld_shared_u2(b_at + slot_off + 2048 * hf + 256);
            sb[hf] = ld_shared_u8(sfb_at + slot_off + 256 * hf) | ld_shared_u8(sfb_at + slot_off + 256 * hf + 32) << 8;
          }
          mbar_arrive(bar(BAR_EMPTY + slot)); /* as in the producer */
          if (++slot == STAGES) slot = 0, slot_off = 0, full_phase ^= 1;
          else slot_off += STAGE_BYTES;
        };
        /* f: [k16 step][reg]: (g, 2t) (g+8, 2t) (g, 2t+8) (g+8, 2t+8) */
        auto decode = [&](const uint2(&v)[2], uint32_t sb, uint32_t(&f)[4][4]) {
          nvfp4_wgmma_a_fragments16<AT == NVFP4_E2M1 ? NVFP4_F16 : AT>(v[0], v[1], sb, f);
        };
        auto load_decode = [&](uint32_t(&f)[2][4][4]) {
          uint2 v[2][2];
          uint32_t sb[2];
          load(v, sb);
          decode(v[0], sb[0], f[0]);
          decode(v[1], sb[1], f[1]);
        };
        auto a16_ready = [&](int j) { mbar_wait(bar(BAR_A16_FULL + ((g0 + j) & (NA16 - 1))), ((g0 + j) / NA16) & 1); };
        /* half hf's 4 wgmma of step j (the caller fences and commits) */
        auto mmas = [&](const uint32_t(&f)[4][4], int hf, int j) {
          /* descriptor address field: (byte address) / 16, + 2 per k16 step */
          const uint64_t desc = desc0 + (uint64_t)(((g0 + j) & (NA16 - 1)) * (A16_BYTES >> 4));
#pragma unroll
          for (int s = 0; s < 4; s++)
            wgmma_rs<N, nvfp4_at_bf16(AT)>(*reinterpret_cast<float(*)[N / 2]>(&acc[hf][0]), f[s], desc + 2 * s);
        };
        /* step j's 8 wgmma on both halves' fragments, committed as one group */
        auto mmas_step = [&](const uint32_t(&f)[2][4][4], int j) {
          a16_ready(j);
          wgmma_fence();
          mmas(f[0], 0, j);
          mmas(f[1], 1, j);
          wgmma_commit();
          NVFP4_TRACE_POINT(tid == 128 && j == 0, 4);
        };
        auto release = [&](int j) {
          if (lane == 0) mbar_arrive(bar(BAR_A16_EMPTY + ((g0 + j) & (NA16 - 1))));
        };
        if constexpr (OV == HALVES) {
          uint32_t f[2][4][4];
          for (int j = 0; j < steps; j++) {
            uint2 v[2][2];
            uint32_t sb[2];
            load(v, sb);
            decode(v[0], sb[0], f[0]);
            a16_ready(j);
            wgmma_fence();
            mmas(f[0], 0, j);
            wgmma_commit();
            NVFP4_TRACE_POINT(tid == 128 && j == 0, 4);
            wgmma_wait<1>(); /* step j - 1's second half: f[1] and that step's activation tile free */
            if (j >= 1) release(j - 1);
            decode(v[1], sb[1], f[1]);
            wgmma_fence();
            mmas(f[1], 1, j);
            wgmma_commit();
            wgmma_wait<1>(); /* this step's first half: f[0] free */
          }
          wgmma_wait<0>();
          if (steps > 0) release(steps - 1);
        } else if constexpr (OV == SETS) {
          uint32_t fa[2][4][4], fb[2][4][4];
          if (steps > 0) load_decode(fa);
          auto step = [&](const uint32_t(&cur)[2][4][4], uint32_t(&next)[2][4][4], int j) {
            mmas_step(cur, j);
            wgmma_wait<1>(); /* step j - 1's group: its set (next) and activation tile free */
            if (j >= 1) release(j - 1);
            if (j + 1 < steps) load_decode(next);
          };
          for (int j = 0; j < steps; j += 2) {
            step(fa, fb, j);
            if (j + 1 < steps) step(fb, fa, j + 1);
          }
          wgmma_wait<0>();
          if (steps > 0) release(steps - 1);
        } else {
          for (int j = 0; j < steps; j++) {
            uint32_t f[2][4][4];
            load_decode(f);
            mmas_step(f, j);
            wgmma_wait<0>();
            release(j);
          }
        }
      };
      using Serial = std::integral_constant<int, SERIAL>;
      if constexpr (TM == 128) {
        using Ov = std::integral_constant<int, PRE && !SK ? HALVES : SERIAL>;
        const int64_t rows = m_end_of(p) - m0;
        if (rows <= 32) consume(std::integral_constant<int, 32>{}, Ov{});
        else if (rows <= 64) consume(std::integral_constant<int, 64>{}, Ov{});
        else if (!SK && rows <= 96) consume(std::integral_constant<int, 96>{}, Ov{});
        else consume(std::integral_constant<int, 128>{}, Ov{});
      } else if constexpr (TM == 32) {
        if (m_end_of(p) - m0 > 16) consume(std::integral_constant<int, 32>{}, std::integral_constant<int, SETS>{});
        else consume(std::integral_constant<int, 32>{}, Serial{});
      } else {
        consume(std::integral_constant<int, TM>{}, Serial{});
      }
      NVFP4_TRACE_POINT(tid == 128, 5);
      NVFP4_TRACE_POINT(tid == 256, 8);
      pdl_launch_dependents(); /* the next kernel may launch during this epilogue */
      /* ---- SK: a segment that starts inside its tile hands its partial over;
       * the one at the tile's K start adds the later ranges' partials */
      if (SK) segment(opaque(si)); /* recomputed, not carried through the loop */
      if (SK) {
        float4 *slot_ws = reinterpret_cast<float4 *>(sk.ws) + (int64_t)range * (TM / 4) * 256 + ct;
        constexpr int QH = TM / 8; /* float4 per half */
        if (kbeg > 0) { /* no epilogue: the next segment (if any) has the rings */
#pragma unroll
          for (int q = 0; q < TM / 4; q++) {
            const float *a = &acc[q / QH][4 * (q % QH)];
            __stcg(slot_ws + q * 256, make_float4(a[0], a[1], a[2], a[3]));
          }
          __threadfence();
          named_barrier_sync(1, 256);
          if (ct == 0) {
            __threadfence();
            st_release_gpu(sk.flags + range, sk.epoch);
          }
          continue;
        } else if (steps < ksteps) {
          /* the later ranges of this tile, held by the CTAs numbered below this one */
          for (int r2 = range + 1; r2 < sk.ctas && sk_start(r2) < (gtile + 1) * ksteps; r2++) {
            if (ct == 0) {
              wait_flag_gpu(sk.flags + r2, sk.epoch);
              sk.flags[r2] = 0; /* for the next replay of a graph (StreamK) */
            }
            named_barrier_sync(1, 256);
            const float4 *src = reinterpret_cast<const float4 *>(sk.ws) + (int64_t)r2 * (TM / 4) * 256 + ct;
#pragma unroll
            for (int q = 0; q < TM / 4; q++) {
              const float4 v = __ldcg(src + q * 256);
              float *a = &acc[q / QH][4 * (q % QH)];
              a[0] += v.x, a[1] += v.y, a[2] += v.z, a[3] += v.w;
            }
          }
        }
      }
      /* ---- epilogue, first half: the fp32 tile [m][r] in smem, over the rings
       * (after barrier A of all 384 threads: every copy, store and wgmma read of
       * the rings is done).
       * acc[hf][4b + 2rr + jj] is weight row 128 wg + 64 hf + 16 warp + g + 8 rr,
       * activation row 8b + 2tq + jj. */
      float *part = reinterpret_cast<float *>(smem);
      named_barrier_sync(0, THREADS); /* (A), bar.sync 0 reached from both branches: well defined in PTX */
#pragma unroll
      for (int hf = 0; hf < 2; hf++)
#pragma unroll
        for (int b = 0; b < TM / 8; b++)
#pragma unroll
          for (int rr = 0; rr < 2; rr++)
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
              part[(8 * b + 2 * tq + jj) * PART_PITCH + wg * 128 + hf * 64 + warp * 16 + g + 8 * rr] =
                  acc[hf][4 * b + 2 * rr + jj];
      NVFP4_TRACE_POINT(tid == 128, 10);
      if (split > 1) cluster_sync(); /* (B) every CTA's partial tile complete */
      else named_barrier_sync(0, THREADS);
      NVFP4_TRACE_POINT(tid == 128, 6);

      /* ---- epilogue, second half (store_share; stream-K launches have split 1,
       * said at compile time: with the cluster sum compiled in, their kernels
       * spilled) */
      const bool all = EPI_ALL && split == 2;
      store_share<DUAL, TM, AT>(p, l, part, smem_addr, rank, SK ? 1 : split, m0, n0, all ? tid : ct,
                                all ? THREADS : THREADS - 128, expert);
      NVFP4_TRACE_POINT(tid == 128, 11);
      if (split > 1) cluster_sync(); /* (C) keep this CTA's partial alive until every peer has read it */
      NVFP4_TRACE_POINT(tid == 128, 7);
    }
  }
#else
  (void)t;
  (void)split;
  (void)sk;
  (void)pre;
#endif
}

/* A launch of `ctas` CTAs in clusters of `split` (attr: storage for the
 * attributes the config points to: the cluster shape, and with `pdl` the
 * programmatic dependent launch of common.cuh). */
template <int TM, int AT = NVFP4_E2M1>
cudaLaunchConfig_t launch_config(int64_t ctas, int split, cudaStream_t stream, cudaLaunchAttribute (&attr)[2],
                                 bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)ctas);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = Layout<TM, AT != NVFP4_E2M1>::SMEM_BYTES;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = (unsigned)split;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1] = pdl_attribute();
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 2 : 1;
  return cfg;
}

/* The kernel's shared-memory opt-in, once per device (before its first
 * launch and before any occupancy query, which fails without it). */
template <bool DUAL, int TM, bool SK, bool PRE, int AT = NVFP4_E2M1>
cudaError_t configure(const DeviceInfo &dev) {
  static bool configured[64] = {};
  if (dev.id >= 64) return cudaErrorInvalidDevice;
  if (!configured[dev.id]) {
    cudaError_t e = cudaFuncSetAttribute(matmul_sm90_kernel<DUAL, TM, SK, PRE, AT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Layout<TM, AT != NVFP4_E2M1>::SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured[dev.id] = true;
  }
  return cudaSuccess;
}

/* Clusters of `split` CTAs that fit on the device at once (a cluster must sit
 * in one GPC: on an H200, 30 clusters of 4 but 66 of 2), per device. */
template <bool DUAL, int TM, int AT = NVFP4_E2M1>
int max_clusters_of(int split, const DeviceInfo &dev) {
  static int cache[64][MAX_SPLIT + 1] = {};
  int &n = cache[dev.id][split];
  if (!n && configure<DUAL, TM, false, false, AT>(dev) != cudaSuccess) {
    cudaGetLastError();
    n = -1;
  }
  if (!n) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = launch_config<TM, AT>(split * dev.sms, split, nullptr, attr, false);
    if (cudaOccupancyMaxActiveClusters(&n, matmul_sm90_kernel<DUAL, TM, false, false, AT>, &cfg) != cudaSuccess ||
        n < 1) {
      cudaGetLastError(); /* clear it: the split is then simply not chosen */
      n = -1;
    }
  }
  return n;
}

template <bool DUAL, int TM, bool SK, bool PRE, int AT = NVFP4_E2M1>
cudaError_t launch_kernel(const MatmulTable &t, int64_t ctas, int split, const StreamK &sk, const Predecoded &pre,
                          cudaStream_t stream) {
  cudaError_t e = configure<DUAL, TM, SK, PRE, AT>(device_info());
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = launch_config<TM, AT>(ctas, split, stream, attr, true);
  if constexpr (SK) return cudaLaunchKernelEx(&cfg, matmul_sm90_kernel<DUAL, TM, SK, PRE, AT>, t, split, sk, pre);
  else return cudaLaunchKernelEx(&cfg, matmul_sm90_kernel<DUAL, TM, SK, PRE, AT>, t, split, StreamKT<0>{}, pre);
}

/* A pre-pass of `ctas` CTAs of PRE_THREADS and a 16 KB tile, with PDL. */
template <typename... Params, typename... Args>
cudaError_t launch_pre_pass(void (*kernel)(Params...), int64_t ctas, cudaStream_t stream, const Args &...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)ctas);
  cfg.blockDim = dim3(PRE_THREADS);
  cfg.dynamicSmemBytes = Layout<128>::A16_BYTES;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {pdl_attribute()};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* The pre-pass over pre.blk[t.count] blocks: 8 CTAs per SM (a wave: every
 * CTA starts at once and lets the main kernel launch). */
template <int AT>
cudaError_t launch_predecode(const MatmulTable &t, const Predecoded &pre, cudaStream_t stream) {
  return launch_pre_pass(act_predecode_kernel<AT>, std::min<int64_t>(pre.blk[t.count], 8 * (int64_t)device_info().sms),
                         stream, t, pre);
}

/* The by-expert pre-pass (expert_predecode_kernel): pieces of
 * EXPERT_PRE_STEPS (_QUANT) K steps of every row tile of the bound. */
template <int AT>
cudaError_t launch_expert_predecode(const nvfp4_matmul &p, const Predecoded &pre, cudaStream_t stream) {
  const int64_t steps = p.a_global ? EXPERT_PRE_STEPS_QUANT : EXPERT_PRE_STEPS;
  const int64_t ksteps = p.k / KSTEP, pieces = (ksteps + steps - 1) / steps;
  const int64_t ctas = expert_row_tiles(p, 128) * pieces;
  if (ctas == 0) return cudaSuccess;
  if (ctas > INT32_MAX) return cudaErrorInvalidConfiguration;
  return p.a_global ? launch_pre_pass(expert_predecode_kernel<AT, true>, ctas, stream, p, pre, (int)pieces)
                    : launch_pre_pass(expert_predecode_kernel<AT, false>, ctas, stream, p, pre, (int)pieces);
}

/* Pre-decoded and stream-K where the plan says so and the caller gives the
 * workspace; else split-K, the producer decoding. */
template <int TM, int AT = NVFP4_E2M1>
cudaError_t launch_tiles(const Launch &L, nvfp4_workspace_fn ws_fn, void *ctx, cudaStream_t stream) {
  const MatmulTable &t = L.t;
  const int64_t tiles = L.tiles;
  const bool dual = L.dual;
  if (tiles == 0) return cudaSuccess;
  if (tiles * MAX_SPLIT > INT32_MAX) return cudaErrorInvalidConfiguration;
  void *ws = L.workspace() && ws_fn ? ws_fn(L.workspace(), ctx) : nullptr;
  if (ws && !aligned(ws, 16)) ws = nullptr;
  Predecoded pre = {};
  StreamK sk = {};
  if (ws && L.a16_bytes()) {
    pre.a16 = static_cast<uint8_t *>(ws);
    for (int g = 0; g <= t.count; g++) pre.blk[g] = L.a16_blk[g];
    cudaError_t e;
    if constexpr (AT != NVFP4_E2M1)
      e = t.p[0].offs ? launch_expert_predecode<AT>(t.p[0], pre, stream) : launch_predecode<AT>(t, pre, stream);
    else e = launch_predecode<AT>(t, pre, stream);
    if (e != cudaSuccess) return e;
  }
  if ((t.p[0].a_index || t.p[0].a_global) && !pre.a16) return cudaErrorMemoryAllocation; /* the pre-pass's alone */
  if (ws && L.cover.sk_ctas) {
    uint8_t *base = static_cast<uint8_t *>(ws) + L.a16_bytes();
    sk.ws = reinterpret_cast<float *>(base);
    sk.flags = reinterpret_cast<unsigned long long *>(base + (size_t)L.cover.sk_ctas * sk_partial_bytes(TM));
    sk.epoch = launch_epoch();
    sk.ctas = L.cover.sk_ctas;
    sk.ksteps = (int)L.ksteps;
    sk_ranges(L, sk);
  }
  const int64_t ctas = sk.ctas ? sk.ctas : tiles * L.cover.split;
  const int split = sk.ctas ? 1 : L.cover.split;
  if constexpr (AT != NVFP4_E2M1) { /* pre-decoded without stream-K only (plan_launch) */
    if (TM == 128 && sk.ctas)
      return dual ? launch_kernel<true, TM, true, false, AT>(t, ctas, split, sk, pre, stream)
                  : launch_kernel<false, TM, true, false, AT>(t, ctas, split, sk, pre, stream);
    if constexpr (TM == 128)
      if (pre.a16)
        return dual ? launch_kernel<true, TM, false, true, AT>(t, ctas, split, sk, pre, stream)
                    : launch_kernel<false, TM, false, true, AT>(t, ctas, split, sk, pre, stream);
    return dual ? launch_kernel<true, TM, false, false, AT>(t, ctas, split, sk, pre, stream)
                : launch_kernel<false, TM, false, false, AT>(t, ctas, split, sk, pre, stream);
  }
  if constexpr (TM == 128) {
    if (sk.ctas)
      return pre.a16 ? (dual ? launch_kernel<true, TM, true, true>(t, ctas, split, sk, pre, stream)
                             : launch_kernel<false, TM, true, true>(t, ctas, split, sk, pre, stream))
                     : (dual ? launch_kernel<true, TM, true, false>(t, ctas, split, sk, pre, stream)
                             : launch_kernel<false, TM, true, false>(t, ctas, split, sk, pre, stream));
    if (pre.a16)
      return dual ? launch_kernel<true, TM, false, true>(t, ctas, split, sk, pre, stream)
                  : launch_kernel<false, TM, false, true>(t, ctas, split, sk, pre, stream);
  }
  return dual ? launch_kernel<true, TM, false, false>(t, ctas, split, sk, pre, stream)
              : launch_kernel<false, TM, false, false>(t, ctas, split, sk, pre, stream);
}

}  // namespace

int sm90::max_clusters(bool dual, int tm, int split, const DeviceInfo &dev, bool w4a16) {
  if (w4a16) /* the larger raw ring (Layout): its own occupancy */
    switch (tm) {
      case 32:
        return dual ? max_clusters_of<true, 32, NVFP4_F16>(split, dev) : max_clusters_of<false, 32, NVFP4_F16>(split, dev);
      case 64:
        return dual ? max_clusters_of<true, 64, NVFP4_F16>(split, dev) : max_clusters_of<false, 64, NVFP4_F16>(split, dev);
      default:
        return dual ? max_clusters_of<true, 128, NVFP4_F16>(split, dev)
                    : max_clusters_of<false, 128, NVFP4_F16>(split, dev);
    }
  switch (tm) {
    case 32: return dual ? max_clusters_of<true, 32>(split, dev) : max_clusters_of<false, 32>(split, dev);
    case 64: return dual ? max_clusters_of<true, 64>(split, dev) : max_clusters_of<false, 64>(split, dev);
    default: return dual ? max_clusters_of<true, 128>(split, dev) : max_clusters_of<false, 128>(split, dev);
  }
}

NVFP4_TRACE_ATTACH(sm90)

/* Hopper (9.0) running this build's sm_90a code (else the kernel's body is
 * empty); K a multiple of 64; data 16-byte and scales 4-byte aligned, so
 * every copy is one cp.async. */
bool matmul_sm90_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (dev.major != 9 || dev.minor != 0 || !dev.sm90_code) return false;
  if (p.k % KSTEP || p.k >= (int64_t)1 << 28) return false; /* byte offsets along K in 32 bits */
  if (p.b.tile_rows && p.k >= (int64_t)1 << 25) return false;  /* by tile too */
  /* one codes step for both weight operands (weight_step) */
  if (p.b2.data && p.b2.tile_rows != p.b.tile_rows) return false;
  const bool w4a16 = p.a_type != NVFP4_E2M1;
  if (p.b.tile_rows && !w4a16) return false; /* by tile: StageCopies16 and the W16 pre-decoded copies only */
  /* W4A16: 16-byte aligned activation rows (no scales); rows grouped by
   * expert: W4A16 only */
  if (w4a16 && !rows_aligned(p.a, 16)) return false;
  if (p.offs && !w4a16) return false;
  /* rows by token, rows quantized first: through the pre-pass only */
  if ((p.a_index || p.a_global) && !sm90::expert_predecodes(p)) return false;
  return (w4a16 || cp_async_ok(p.a)) && cp_async_ok(p.b) && (!p.b2.data || cp_async_ok(p.b2));
}

/* problems[0, count), count <= NVFP4_LAUNCH_GROUPS, all dual or all not, each
 * matmul_sm90_can_run. One launch (two with the pre-pass); empty problems get
 * no tiles. `ws` (may be nullptr) is asked for the workspace where the plan
 * pre-decodes or runs stream-K. */
cudaError_t matmul_sm90_launch(const nvfp4_matmul *problems, int count, int no_pre, nvfp4_workspace_fn ws,
                               void *ctx, cudaStream_t stream) {
  const Launch L = plan_launch(problems, count, ws != nullptr, no_pre);
  switch (problems[0].a_type) { /* one a_type per call (plan.cu's valid) */
    case NVFP4_F16: return L.tm == 32   ? launch_tiles<32, NVFP4_F16>(L, nullptr, nullptr, stream)
                           : L.tm == 64 ? launch_tiles<64, NVFP4_F16>(L, nullptr, nullptr, stream)
                                        : launch_tiles<128, NVFP4_F16>(L, ws, ctx, stream);
    case NVFP4_BF16:
      if (problems[0].b.codes == NVFP4_CODES_BF16_PAIRS) /* weights repacked for bf16 (nvfp4.h) */
        return L.tm == 32   ? launch_tiles<32, NVFP4_BF16_PAIRS>(L, nullptr, nullptr, stream)
               : L.tm == 64 ? launch_tiles<64, NVFP4_BF16_PAIRS>(L, nullptr, nullptr, stream)
                            : launch_tiles<128, NVFP4_BF16_PAIRS>(L, ws, ctx, stream);
      return L.tm == 32   ? launch_tiles<32, NVFP4_BF16>(L, nullptr, nullptr, stream)
             : L.tm == 64 ? launch_tiles<64, NVFP4_BF16>(L, nullptr, nullptr, stream)
                          : launch_tiles<128, NVFP4_BF16>(L, ws, ctx, stream);
    default: break;
  }
  switch (L.tm) {
    case 32: return launch_tiles<32>(L, nullptr, nullptr, stream);
    case 64: return launch_tiles<64>(L, nullptr, nullptr, stream);
    default: return launch_tiles<128>(L, ws, ctx, stream);
  }
}

void matmul_sm90_describe(const nvfp4_matmul *problems, int count, int no_pre, bool workspace, char *what,
                          size_t len) {
  const Launch L = plan_launch(problems, count, workspace, no_pre);
  char split[48] = "";
  if (L.cover.sk_ctas) std::snprintf(split, sizeof split, ", stream-K over %d CTAs", L.cover.sk_ctas);
  else if (L.cover.split > 1) std::snprintf(split, sizeof split, ", split-K %d", L.cover.split);
  const int32_t at = problems[0].a_type;
  std::snprintf(what, len, "%s%d-row tiles%s%s%s%s", at == NVFP4_F16 ? "fp16 activations, " : at == NVFP4_BF16 ? "bf16 activations, " : "",
                L.tm, split, L.a16_bytes() ? ", activations pre-decoded" : "", problems[0].offs ? ", rows by expert" : "",
                problems[0].b.codes == NVFP4_CODES_BF16_PAIRS ? ", weights in bf16 pairs" : "");
}
