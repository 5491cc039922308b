/*
 * w4a16.cu - W4A16 on mma.sync (sm_80+): 16-bit activations (fp16 or bf16,
 * a_type) times NVFP4 weights, GEMM, dual GEMM and grouped GEMM, fp32
 * accumulators, any shape, stride and alignment.
 *   C[l, m, n] = sum_k A[l, m, k] * W[l, n, k],  A = p.a (2-byte values),
 *   W = p.b (and p.b2 for a dual), then common.cuh's Epilogue.
 * Rows grouped by expert (p.offs, nvfp4.h): A and C are not batched; rows
 * [offs[l - 1], offs[l]) of them go with expert l's W and alphas. Rows by
 * token (p.a_index): each tile row's row of A, read in place (the tile's
 * byte offsets in shared memory, found once; one outside A reads zeros).
 *
 * Roles: the weights are mma's A operand (m16 = 16 weight rows = 16 output
 * columns), decoded in registers straight from their code bytes
 * (nvfp4_wgmma_a_fragments); the activations are its B operand (n8 = 8
 * activation rows), read as they are. A warp decodes each of its weight
 * fragments once per K step and uses it for all n8 tiles of its 64 (or 16)
 * activation rows, so a small M (decode) wastes little: n8 tiles past M are
 * neither read nor multiplied.
 *
 * Speed of light: max(bytes / DRAM bandwidth, 2 M N K / the fp16 tensor
 * rate), bytes = L (N (K/2 + K/16) per weight matrix + 2 M K + 2 M N); a
 * dual has two weight matrices and twice the flops. M = 16, N = K = 4096:
 * 9.4 MB of weights, 2.8 us at 3.35 TB/s (H100 SXM), against 0.5 GFLOP
 * (0.5 us at 989 TFLOP/s): bandwidth-bound, the weights' bytes decide.
 * M = N = K = 4096: 77 MB (23 us) against 137 GFLOP (139 us at wgmma's dense
 * fp16 rate; mma.sync peaks lower on Hopper; an A100's 312 TFLOP/s is its
 * own peak): compute-bound. Per warp and K step of 64 (128 weight rows a
 * CTA, all 8 n8 tiles), estimated from the source: 64 mma m16n8k16; the
 * weights' decode, 8 words of 8 codes a thread (~13 instructions each,
 * numerics.cuh; bf16 ~17: codes placed as bf16 bits times the scale) and
 * their scales, ~125 (fp16) to ~175 (bf16); the activation fragments, 8 x (2
 * ld.shared.v4 + 8 prmt) = 80; the copies ~20 (inside K a copy's source
 * moves on by its bytes a step at a fixed size; a last partial step computes
 * them): ~4 (fp16) to ~4.5 (bf16) instructions per mma. At TM = 16
 * (weights repacked for bf16; sm_90a SASS) a warp's step is ~120
 * instructions for 1024 weights at one or two n8 tiles, ~175 at four, ~200
 * (~290 at four) for a dual's 2048, and the scale ring's bookkeeping ~15-20
 * more. In the checkpoint's layout the copies bound it (DeepSeek-V3 experts at
 * T = 8, H200: without its decode and mma gate/up takes 0.91x the time, down
 * 0.81x); laid out by tile the block reaches 0.71-0.72 of its SOL instead of
 * 0.63, and issue binds it (0.69 instructions a cycle per scheduler under
 * ncu; docs/PERF.md). The GEMV kernel (below) takes M <= 32 (a dual's M <= 16; weights laid out by tile
 * at 9-16 rows only where the 16-row tiles would split K more than 5 ways: config_of).
 *
 * Dataflow, per CTA = 128 threads = 4 warps, K step 64:
 *   tile: TM = 64 activation rows (16 where every M of the launch is <= 16;
 *     rows grouped by expert: at most 16 an expert on average, an expert of
 *     more than 16 rows in tiles of 32: each weight decoded once per 32 of
 *     its rows; DeepSeek-V3 experts at T = 64, skewed routing: 30 tiles
 *     instead of 45) x TN
 *     output columns; gemm TN = 128 (warp w: weight rows 32 w .. 32 w + 31, 2
 *     m16 tiles) or TN = 64 where the 128-column tiles leave SMs idle (warp w:
 *     16 w .., 1 m16 tile); dual TN = 64 (warp w: rows 16 w .. of W1 and the
 *     same of W2, its two m16 tiles).
 *   gmem activations (128 bytes of a row), weight codes (32 bytes of a row,
 *     each miss filling 128 bytes of L2: the row's next 3 steps reach DRAM in
 *     one run) and scales (4 bytes; weights laid out by tile, an MoE's experts
 *     (nvfp4.h): a step's codes of the tile's 128 rows are one 4 KB run and 4
 *     steps' scales one 2 KB run) --cp.async, a ring of 3 steps (4 at TN =
 *     64 of a gemm; 4 and 6 at TM = 16), zero-filled past M, N and K--> smem
 *   per warp and step: its weight m16 tiles -> A fragments in the
 *     activations' type (numerics.cuh's fp16 or bf16 decoder, exact), then per
 *     n8 tile its B fragments and 4 mma per m16
 *   epilogue: fp32 x 2^6 (NVFP4_TC_UNSCALE_F16: the weights' factor alone; bf16
 *     2^7) x alpha (+ bias), or silu(C1) * C2 ->
 *     c_type; lanes g, g ^ 1 swap halves (one shuffle per pair) so that each
 *     stores two adjacent columns as one 4-byte word.
 * Grid: the tiles of all problems of a launch (MatmulTable), every batch
 * (rows grouped by expert: a bound, (T + n (TM - 1)) / TM row tiles per
 * column tile, n = min(E, T); a CTA's warp 0 scans the offsets for its expert and rows, and
 * CTAs past the last expert's rows return), times `split` CTAs per tile where the tiles alone leave CTA slots empty
 * (a small M: few output tiles, long K): each CTA takes a contiguous share
 * of K's steps (at least 8), writes fp32 partials to the caller's workspace
 * and takes the tile's ticket; the last adds the partials in a fixed order
 * and runs the epilogue (as skinny.cu; deterministic, no memset).
 * 2 CTAs an SM (~190-245 registers; 40 KB of shared memory, which sm_86 /
 * sm_89's 100 KB also hold twice), 3 at TN = 64 (2 on sm_86 / sm_89: 42 KB
 * each), at TM = 16 4 on the fast path (<= 128 registers, 36-39 KB: 2 on
 * sm_86 / sm_89), 3 on the register-load path; the split rule asks the
 * runtime (ctas_per_sm). Programmatic dependent
 * launch where the device runs sm_90 code (common.cuh): pdl_wait first,
 * pdl_launch_dependents before the epilogue.
 *
 * K order: thread t of a quad owns scale block t of a step (values 16 t ..
 * 16 t + 15). The weight fragments come in the decoder's permuted order: in
 * k16 step s, mma k slots (2t, 2t + 1) hold values 16 t + (0, 2), (4, 6),
 * (1, 3), (5, 7) for s = 0..3 (fp16; bf16: (0, 4), (1, 5), (2, 6), (3, 7)),
 * and slots (2t + 8, 2t + 9) the same + 8. The B fragments are built to
 * match: the thread reads its row's 16 values (two 16-byte chunks, 8 words
 * {x[2i], x[2i + 1]}) and pairs them with one prmt each, e.g. {x0, x2} =
 * prmt(w0, w1, 0x5410), {x1, x3} = prmt(w0, w1, 0x7632) (numerics.cuh's
 * nvfp4_act16_words, as the wgmma kernel's W4A16 producer). Weights
 * repacked for bf16 (AT = NVFP4_BF16_PAIRS, nvfp4.h's NVFP4_CODES_BF16_PAIRS):
 * slots (2t, 2t + 1) of step s hold values 16 t + 4s + (0, 1), (2t + 8, 2t +
 * 9) 16 t + 4s + (2, 3), so each B fragment pair is one natural 8-byte piece
 * of the row: no prmt, and a word's decode takes 8 instructions, not 13.
 * Slot k of A and slot k of B are the same value of K in every thread, so each
 * 64-wide sum is the same set of exact products as the reference's: e2m1 x
 * e4m3 (<= 6 significant bits) x 2^-6 (fp16 fragments; 2^-14 below sm_89)
 * or x 2^-7 (bf16 fragments) is exact in that type, and its product with a
 * 16-bit activation exact in fp32 (but for bf16 activations below ~2^-109,
 * whose products with the scaled weights fall below fp32's normal range).
 *
 * Shared memory, a step: activations [TM rows][8 chunks of 16 bytes], chunk c
 * of row r at chunk c ^ (r & 1) (the two 16-byte reads of a quarter warp, rows
 * g and g + 1, then cover all 32 banks); weight codes [rows][32 bytes]. 12
 * KB a step at TN = 128 (10 KB at 64); at TM = 16 (room for 32 rows) 8 KB (6
 * KB). Then the scales' ring (Shape): slots of 4 steps, [rows][16 bytes].
 *
 * Zero fill: activation rows past M or the expert's rows (in an n8 tile that
 * is read), weight rows
 * past N and K past the end (K % 64 != 0) are zero values, zero codes with
 * zero scales: their products are 0 (a blocked layout's padding scales are
 * never read).
 *
 * Alignment: the fast path (FAST) copies everything with cp.async: activation
 * and weight rows 16-byte aligned (data, row and batch strides) and a step's 4
 * scale bytes one aligned word (common.cuh's cp_async_ok). Otherwise (any
 * pointer or stride; e.g. weights of K % 32 == 16, or linear scales of K %
 * 64 != 0) every byte goes through registers: a step's share of a thread is
 * loaded before the mma of the current step with the widest loads its
 * address allows (16 bytes down to 1) and stored to the ring after it. That
 * costs ~7 (16-byte aligned rows) to ~100 (odd addresses) loads a step per
 * thread instead of 7 copies, their shared-memory stores, and latency
 * hidden by one step's mma instead of two. C at any alignment too (4-byte
 * stores where c and its row stride allow, else 2-byte or single bytes).
 */
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "kernels.h"

namespace {

constexpr int THREADS = 128; /* 4 warps */
constexpr int KSTEP = 64;    /* K values per step */
constexpr int MAX_SPLIT = 16; /* CTAs sharing a tile's K (a ticket counts up to 2^16) */

/* A CTA's shape: TM activation rows, RM at most (rows grouped by expert on
 * the 16-row launch: an expert of more than 16 rows in tiles of RM = 32, its
 * weights decoded once per 32 rows), NT = RM / 8 n8 tiles (every warp all of
 * them), MW m16 tiles (of 16 weight rows) per warp, TW weight rows a step
 * (dual: TW / 2 of W1, then the same columns of W2), TN output columns. A
 * step's bytes: activations, then weight codes at W_OFF; 16 rows leave room
 * for a deeper ring. The scales have a ring of their own after the steps', at
 * SF_OFF: SG slots of 4 steps, [TW rows][16 bytes], step k of the row (k0 + s
 * of a CTA's step s) at slot (k / 4) % SG (counted from the CTA's first),
 * bytes 4 (k % 4) .. + 3 of its row. A thread copies NA activation chunks of
 * 16 bytes (rows tid / 8 + 16 q, chunk tid % 8), MW weight chunks (rows
 * tid / 2 + 64 q, half tid % 2) and, below TW, the scales of row tid: 16
 * bytes at a slot's first step where the row's scales are linear and 16-byte
 * aligned and K has no partial step (one copy and one L2 request a 4 steps:
 * MoE blocks at T = 8 0.96-0.98x the time), else 4 bytes a step. SG: a slot is
 * written STAGES - 1 steps before its first step is read and its last read 3
 * steps after that, so 4 SG >= STAGES + 3. ACC: the floats of a CTA's
 * accumulators, a split tile's partial. */
template <bool DUAL, int MW, int TM>
struct Shape {
  static_assert(MW == 2 || (MW == 1 && !DUAL), "a dual warp holds one m16 tile of each matrix");
  static_assert(TM == 16 || TM == 64, "16 or 64 activation rows");
  static constexpr int STAGES = TM == 64 ? (MW == 2 ? 3 : 4) : (MW == 2 ? 4 : 6);
  static constexpr int MIN_CTAS = TM == 64 ? (MW == 2 ? 2 : 3) : 4; /* an SM's (launch bounds); 128 registers at 4 */
  static constexpr int RM = TM == 16 ? 32 : TM, NT = RM / 8;
  static constexpr int TW = 64 * MW, TN = DUAL ? TW / 2 : TW;
  static constexpr int W_OFF = RM * 2 * KSTEP, STEP_BYTES = W_OFF + TW * KSTEP / 2, SF_OFF = STAGES * STEP_BYTES;
  static constexpr int SG = (STAGES + 6) / 4, SF_SLOT = TW * 16, SMEM = SF_OFF + SG * SF_SLOT;
  static constexpr int NA = RM * 8 / THREADS;
  static constexpr int ACC = MW * NT * 4 * THREADS;
  static_assert(NA * THREADS == RM * 8 && MW * THREADS == TW * 2, "whole chunks per thread");
};

/* CTAs an SM holds: the shape's, but at most 3 on the register-load path
 * (whose loads in flight spill at 128 registers). */
__host__ __device__ constexpr int min_ctas(bool fast, int shape_min) { return fast || shape_min < 3 ? shape_min : 3; }

/* Where the CTAs of a tile share its K (split > 1): CTA part p of `split`
 * takes steps [steps p / split, steps (p + 1) / split), writes its fp32
 * accumulators to ws (slot tile * split + p, ACC floats, thread-major), takes
 * the tile's ticket (common.cuh), and the last to take it adds the slots in
 * order p = 0, 1, ... (deterministic) and runs the epilogue. */
struct Split {
  float *ws;
  unsigned long long *tickets;
  unsigned long long epoch;
  int split;
};

/* What a thread copies, at K step 0: row starts (rows that do not exist, at
 * or past m_end: row 0, never read), and which exist. A step adds 128 bytes to an activation
 * row, w_step to a weight row (32, or a tile's step laid out by tile), and step k's scales lie
 * sf_at(k) on (nvfp4_operand_sf_offset: 4 k linear, one 512-byte atom a step blocked, 4 k plus
 * a run's 2048 bytes a 4 steps by tile). Activation row q is act(q): rows 16 apart, one pointer and a
 * stride (four pointers took registers the loop needs). */
template <int NA, int MW>
struct Copies {
  const uint8_t *act0, *w[MW], *sf;
  int64_t act_step; /* 16 activation rows */
  const int64_t *rows; /* rows by token (nvfp4.h's a_index, NA > 1): the rows' byte offsets in A, shared memory */
  int sf_step;
  bool tiles; /* laid out by tile: a weight row's step NVFP4_TILE_STEP on, not 32 */
  uint32_t act_copy, act_ok, w_ok; /* bit q: row q is copied (its n8 tile is read) / exists (or reads zeros) */
  bool sf_ok, sf_copy;             /* the scale row exists / this thread has one */
  bool sf_grouped;                 /* its scales 16 bytes a 4 steps (the scale ring's slots) */

  __device__ __forceinline__ int w_step() const { return tiles ? NVFP4_TILE_STEP : 32; }
  /* step k's scales from step 0's (by tile: 4 k plus a run's NVFP4_TILE_SF_GROUP a 4 steps) */
  __device__ __forceinline__ int64_t sf_at(int64_t k) const {
    return k * sf_step + (tiles ? (k >> 2) * (NVFP4_TILE_SF_GROUP - 16) : 0);
  }

  __device__ __forceinline__ const uint8_t *act(int q) const {
    if (NA > 1 && rows) return act_ok >> q & 1 ? act0 + (rows[16 * q] - rows[0]) : act0;
    return act_ok >> q & 1 ? act0 + q * act_step : act0;
  }
};

template <bool DUAL, int MW, int TM>
__device__ __forceinline__ Copies<Shape<DUAL, MW, TM>::NA, MW> copies_of(const nvfp4_matmul &p, int64_t l, int64_t m0,
                                                                          int64_t m_end, int64_t n0, int tid,
                                                                          const int64_t *rows) {
  using S = Shape<DUAL, MW, TM>;
  Copies<S::NA, MW> c;
  c.act_copy = c.act_ok = c.w_ok = 0;
  /* row tid / 8 exists where any of the thread's rows does; rows by token: its offset in A */
  c.rows = rows ? rows + tid / 8 : nullptr;
  c.act0 = p.a.data + l * p.a.batch_stride +
           (rows ? rows[tid / 8] : (m0 + tid / 8 < m_end ? m0 + tid / 8 : 0) * p.a.row_stride);
  c.act_step = 16 * p.a.row_stride;
#pragma unroll
  for (int q = 0; q < S::NA; q++) {
    const int r = tid / 8 + 16 * q;
    const bool ok = m0 + r < m_end;
    c.act_copy |= (m0 + (r & ~7) < m_end ? 1u : 0u) << q;
    c.act_ok |= (ok ? 1u : 0u) << q;
  }
  if (rows) { /* a row outside A: not there (its copies zero-fill) */
#pragma unroll
    for (int q = 0; q < S::NA; q++) {
      const int64_t at = m0 + tid / 8 + 16 * q;
      const int64_t i = at < m_end ? p.a_index[at] : -1;
      if (i < 0 || i >= p.a_rows) c.act_ok &= ~(1u << q);
    }
  }
  /* smem weight row r: W's row n0 + r; dual: below TW / 2 W1's, then W2's */
  auto weight_row = [&](int r, const nvfp4_operand *&op) {
    const bool second = DUAL && r >= S::TW / 2;
    op = second ? &p.b2 : &p.b;
    return n0 + (second ? r - S::TW / 2 : r);
  };
#pragma unroll
  for (int q = 0; q < MW; q++) {
    const nvfp4_operand *op;
    const int64_t row = weight_row(tid / 2 + 64 * q, op);
    const bool ok = row < p.n;
    c.w[q] = op->data + l * op->batch_stride + nvfp4_codes_offset(op, ok ? row : 0, 0);
    c.w_ok |= (ok ? 1u : 0u) << q;
  }
  const nvfp4_operand *op;
  const int64_t row = weight_row(tid < S::TW ? tid : 0, op);
  c.sf_copy = tid < S::TW;
  c.sf_ok = c.sf_copy && row < p.n;
  c.sf = op->sf + l * op->sf_batch_stride + nvfp4_operand_sf_offset(op, p.k / 16, c.sf_ok ? row : 0, 0);
  c.tiles = op->tile_rows != 0;
  c.sf_step = c.tiles || op->sf_layout == NVFP4_SF_LINEAR ? 4 : 512;
  c.sf_grouped = c.sf_step == 4 && (c.tiles || p.k % KSTEP == 0) && aligned(c.sf, 16);
  return c;
}

/* Bytes of a 16-byte chunk that exist: `left` bytes of the row remain from
 * its start (0, 8 or 16 here). */
__device__ __forceinline__ int chunk_bytes(int64_t left) { return left <= 0 ? 0 : left < 16 ? (int)left : 16; }

/* Up to 16 bytes (n = 0, 8 or 16; the rest 0) at any alignment: the widest
 * loads the address allows. The general path's. */
__device__ __forceinline__ uint4 load_chunk(const uint8_t *src, int n) {
  uint32_t w[4] = {0u, 0u, 0u, 0u};
  const unsigned mis = (unsigned)reinterpret_cast<uintptr_t>(src) & 15u;
  if (n == 16 && !mis) {
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(src));
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if (!(mis & 7u)) {
#pragma unroll
    for (int i = 0; i < 2; i++)
      if (8 * i < n) {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(src) + i);
        w[2 * i] = v.x, w[2 * i + 1] = v.y;
      }
  } else if (!(mis & 3u)) {
#pragma unroll
    for (int i = 0; i < 4; i++)
      if (4 * i < n) w[i] = __ldg(reinterpret_cast<const unsigned int *>(src) + i);
  } else if (!(mis & 1u)) {
#pragma unroll
    for (int i = 0; i < 8; i++)
      if (2 * i < n) w[i / 2] |= (uint32_t)__ldg(reinterpret_cast<const unsigned short *>(src) + i) << (16 * (i % 2));
  } else {
#pragma unroll
    for (int i = 0; i < 16; i++)
      if (i < n) w[i / 4] |= (uint32_t)__ldg(src + i) << (8 * (i % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/* A step's n (0..4) scale bytes at any alignment, the rest 0. */
__device__ __forceinline__ uint32_t load_scales(const uint8_t *src, int n) {
  if (n == 4 && !(reinterpret_cast<uintptr_t>(src) & 3u)) return __ldg(reinterpret_cast<const unsigned int *>(src));
  uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < 4; i++)
    if (i < n) w |= (uint32_t)__ldg(src + i) << (8 * i);
  return w;
}

/* A thread's shared-memory offsets in a step's slot: its weight row g of each
 * m16 tile (row g + 8 is 256 bytes on), and its two activation chunks of row
 * g (n8 tile j: 1024 j on); in a step's scales (the scale ring's slot, at the
 * step's 4 bytes), that row's scale byte (g + 8's: 128 on). */
template <int MW>
struct StepOffsets {
  uint32_t w[MW], sf[MW], a0, a1;
};

/* One K step of a warp from the slot at shared address `step`, its scales at `sfs`: all its weight
 * m16 tiles (those past N are zero codes and scales) against n8 tiles of
 * activations: the first NTU (those past the tile's rows hold what the slot
 * held; their sums are never stored), or where NTU = 0 the first `nt`
 * (predicated). Each accumulator adds the k16 steps in order. */
template <int AT, int MW, int NT, int NTU>
__device__ __forceinline__ void mma_step(uint32_t step, uint32_t sfs, const StepOffsets<MW> &o, int nt,
                                         float (&acc)[MW][NT][4]) {
  auto decode = [&](int i, uint32_t (&f)[4][4]) { /* m16 tile i, straight to the activations' type */
    const uint32_t w = step + o.w[i], sf = sfs + o.sf[i];
    const uint2 v0 = ld_shared_u2(w), v1 = ld_shared_u2(w + 8 * 32);
    const uint32_t sb = ld_shared_u8(sf) | ld_shared_u8(sf + 8 * 16) << 8;
    nvfp4_wgmma_a_fragments16<AT>(v0, v1, sb, f);
  };
  auto b_of = [&](int j, uint32_t (&bx)[4], uint32_t (&by)[4]) { /* k16 step s: x's slots (values 16 t + 0..7), y's */
    const uint4 x = ld_shared_u4(step + o.a0 + j * 8 * 2 * KSTEP), y = ld_shared_u4(step + o.a1 + j * 8 * 2 * KSTEP);
    nvfp4_act16_b<AT>(x, y, bx, by); /* in the decoder's K order */
  };
  auto mma = [&](float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (nvfp4_at_bf16(AT)) mma_16816_bf16(d, a, b0, b1);
    else mma_16816(d, a, b0, b1);
  };
  if constexpr (NTU > 2) { /* 4 n8 tiles' fragments first, then each m16 tile decoded and multiplied in turn */
    uint32_t bx[NTU][4], by[NTU][4];
#pragma unroll
    for (int j = 0; j < NTU; j++) b_of(j, bx[j], by[j]);
#pragma unroll
    for (int i = 0; i < MW; i++) {
      uint32_t f[4][4];
      decode(i, f);
#pragma unroll
      for (int s = 0; s < 4; s++)
#pragma unroll
        for (int j = 0; j < NTU; j++) mma(acc[i][j], f[s], bx[j][s], by[j][s]);
    }
  } else if constexpr (NTU > 0) { /* every fragment first, then the n8 tiles' mma alternate */
    uint32_t fa[MW][4][4], bx[NTU][4], by[NTU][4];
#pragma unroll
    for (int i = 0; i < MW; i++) decode(i, fa[i]);
#pragma unroll
    for (int j = 0; j < NTU; j++) b_of(j, bx[j], by[j]);
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
      for (int i = 0; i < MW; i++)
#pragma unroll
        for (int j = 0; j < NTU; j++) mma(acc[i][j], fa[i][s], bx[j][s], by[j][s]);
  } else { /* one n8 tile at a time (8 tiles' fragments at once would spill) */
    uint32_t fa[MW][4][4];
#pragma unroll
    for (int i = 0; i < MW; i++) decode(i, fa[i]);
#pragma unroll
    for (int j = 0; j < NT; j++)
      if (j < nt) {
        uint32_t bx[4], by[4];
        b_of(j, bx, by);
#pragma unroll
        for (int i = 0; i < MW; i++)
#pragma unroll
          for (int s = 0; s < 4; s++) mma(acc[i][j], fa[i][s], bx[s], by[s]);
      }
  }
}

/* Where a thread's outputs go: c of the batch, as bytes. */
struct Out {
  uint8_t *c;
  int64_t row_stride; /* elements */
  bool pairs, halves; /* 4-byte stores of two columns allowed; 2-byte stores allowed */

  __device__ __forceinline__ void one(const Epilogue &ep, int64_t row, int64_t col, float v) const {
    uint8_t *dst = c + 2 * (row * row_stride + col);
    if (halves) {
      ep.store(reinterpret_cast<uint16_t *>(dst), v);
    } else {
      const uint32_t b = ep.bits(v);
      dst[0] = (uint8_t)b, dst[1] = (uint8_t)(b >> 8);
    }
  }
  /* outputs (row, col) and (row, col + 1), those that exist (rows below m_end) */
  __device__ __forceinline__ void pair(const nvfp4_matmul &p, const Epilogue &ep, int64_t m_end, int64_t row, int64_t col,
                                       float v0, float v1) const {
    if (row >= m_end || col >= p.n) return;
    if (pairs && col + 1 < p.n) {
      *reinterpret_cast<uint32_t *>(c + 2 * (row * row_stride + col)) = ep.pack2(v0, v1);
    } else {
      one(ep, row, col, v0);
      if (col + 1 < p.n) one(ep, row, col + 1, v1);
    }
  }
};

/* A split tile's partial (split > 1): the NTHR threads holding the tile's
 * accumulators (`each` visits them: fn(value, its offset in a slot of ACC
 * floats, thread-major)) write them to the workspace, then take the tile's
 * ticket; the last CTA to take it reads every part's back and adds them in
 * part order (deterministic) and returns true, the others false. */
template <int NTHR, int ACC, typename Each>
__device__ __forceinline__ bool split_sum(const Split &sp, int64_t tile_id, int part, int tid, int &last_part,
                                          Each &&each) {
  auto sync = [] {
    if constexpr (NTHR == 32) __syncwarp();
    else __syncthreads();
  };
  float *mine = sp.ws + (tile_id * sp.split + part) * (int64_t)ACC + tid;
  each([&](float &v, int at) { __stcg(mine + at, v); });
  __threadfence();
  sync(); /* every thread's partial is out and fenced */
  if (tid == 0) last_part = take_ticket(sp.tickets + tile_id, 0ull, sp.epoch, sp.split);
  sync();
  if (!last_part) return false;
  __threadfence();
  const float *slots = sp.ws + tile_id * sp.split * (int64_t)ACC + tid;
  each([&](float &v, int at) {
    v = __ldcg(slots + at);
    for (int q = 1; q < sp.split; q++) v += __ldcg(slots + at + q * (int64_t)ACC);
  });
  return true;
}

/* A warp's outputs: acc[i][j][e] is weight row (output column) col0 + 16 i (a
 * dual: W1's and W2's column col0 for i = 0, 1) + g + 8 (e / 2), activation row
 * (output row) m0 + 8 j + 2 tq + e % 2, for the m16 tiles set in `tiles` and
 * the first nt n8 tiles. After the swap with
 * lane ^ 4 (g ^ 1) a thread of even g holds row 2 tq, columns g, g + 1 and
 * g + 8, g + 9; of odd g row 2 tq + 1, columns g - 1, g and g + 7, g + 8. */
template <bool DUAL, bool BF16, int MW, int NT>
__device__ __forceinline__ void store_tiles(const nvfp4_matmul &p, int64_t l, int64_t m0, int64_t m_end, int64_t col0,
                                            uint32_t tiles, int nt, int g, int tq, float (&acc)[MW][NT][4]) {
  const Epilogue ep(p, BF16 ? NVFP4_TC_UNSCALE_BF16 : NVFP4_TC_UNSCALE_F16, false, p.offs ? l : 0);
  uint8_t *c = static_cast<uint8_t *>(p.c) + 2 * l * p.c_batch_stride;
  const Out out{c, p.c_row_stride, aligned(c, 4) && p.c_row_stride % 2 == 0, aligned(c, 2)};
  const bool odd = g & 1;
#pragma unroll
  for (int i = 0; i < (DUAL ? 1 : MW); i++) {
    if (!(tiles >> i & 1)) continue; /* all its columns past N (warp-uniform) */
    const int64_t col_i = col0 + 16 * i;
#pragma unroll
    for (int j = 0; j < NT; j++)
      if (j < nt) {
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int64_t row = m0 + 8 * j + 2 * tq + e % 2, col = col_i + g + 8 * (e / 2);
          v[e] = DUAL ? ep.dual(acc[0][j][e], acc[MW - 1][j][e])
                      : ep.gemm(acc[i][j][e], row, col < p.n ? col : p.n - 1); /* no bias past n */
        }
        const float r0 = __shfl_xor_sync(0xFFFFFFFFu, odd ? v[0] : v[1], 4);
        const float r1 = __shfl_xor_sync(0xFFFFFFFFu, odd ? v[2] : v[3], 4);
        const int64_t row = m0 + 8 * j + 2 * tq + (odd ? 1 : 0), col = col_i + (g & ~1);
        out.pair(p, ep, m_end, row, col, odd ? r0 : v[0], odd ? v[1] : r0);
        out.pair(p, ep, m_end, row, col + 8, odd ? r1 : v[2], odd ? v[3] : r1);
      }
  }
}

template <bool DUAL, int AT, bool FAST, int MW, int TM>
__global__ void __launch_bounds__(THREADS, (min_ctas(FAST, Shape<DUAL, MW, TM>::MIN_CTAS)))
    w4a16_kernel(const __grid_constant__ MatmulTable t, const Split sp) {
  using S = Shape<DUAL, MW, TM>;
  constexpr bool BF16 = nvfp4_at_bf16(AT);
  constexpr int NT = S::NT;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int last_part; /* this CTA took its split tile's ticket last */
  pdl_wait(); /* common.cuh: nothing global is touched before this */

  const int64_t tile_id = blockIdx.x / sp.split;
  const int part = blockIdx.x % sp.split;
  int64_t tile = tile_id;
  const nvfp4_matmul &p = t.p[table_find(t, tile)];
  const int64_t tiles_n = (p.n + S::TN - 1) / S::TN, n0 = tile % tiles_n * S::TN;
  /* the tile's batch (expert), first row and the row after its last */
  int64_t l, m0, m_end;
  __shared__ int64_t tile_rows[S::RM]; /* rows by token */
  if (p.offs) {
    __shared__ long long found[3];
    expert_tile<TM, S::RM>(p, tile / tiles_n, found);
    l = found[0], m0 = found[1], m_end = found[2];
    if (l < 0) return; /* past the last expert's rows */
    if (p.a_index) { /* rows by token: the tile's rows' byte offsets in A (row 0 where outside: copies_of) */
      for (int r = threadIdx.x; r < S::RM; r += blockDim.x) {
        const int64_t i = m0 + r < m_end ? p.a_index[m0 + r] : 0;
        tile_rows[r] = (i >= 0 && i < p.a_rows ? i : 0) * p.a.row_stride;
      }
      __syncthreads();
    }
  } else {
    const int64_t tiles_m = (p.m + TM - 1) / TM;
    l = tile / (tiles_m * tiles_n), m0 = tile / tiles_n % tiles_m * TM, m_end = std::min<int64_t>(p.m, m0 + TM);
  }
  const int64_t all_steps = (p.k + KSTEP - 1) / KSTEP;
  /* this CTA's steps: [k0, k0 + steps) */
  const int64_t k0 = all_steps * part / sp.split;
  const int steps = (int)(all_steps * (part + 1) / sp.split - k0);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  /* n8 tiles with a row below M (>= 1: the tile exists) */
  const int nt = (int)std::min<int64_t>(NT, (m_end - m0 + 7) / 8);
  /* the warp's m16 tiles (smem rows r .. r + 15: the thread reads rows g and
   * g + 8, 8 bytes and the scale byte of its block tq), which have a column
   * below N; the thread's two activation chunks (2 tq, 2 tq + 1) of row g,
   * swizzled */
  StepOffsets<MW> off;
  uint32_t tiles = 0;
#pragma unroll
  for (int i = 0; i < MW; i++) {
    const int r = DUAL ? i * (S::TW / 2) + 16 * warp : 16 * (MW * warp + i);
    off.w[i] = S::W_OFF + (r + g) * 32 + 8 * tq, off.sf[i] = (r + g) * 16 + tq;
    tiles |= (n0 + (DUAL ? 16 * warp : r) < p.n ? 1u : 0u) << i;
  }
  off.a0 = g * 2 * KSTEP + 32 * tq + 16 * (g & 1), off.a1 = g * 2 * KSTEP + 32 * tq + 16 * (~g & 1);

  float acc[MW][NT][4]; /* zeros, those of the n8 tiles the loop below multiplies: only they are ever read */
  auto zero = [&](int tiles) {
#pragma unroll
    for (int i = 0; i < MW; i++)
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (j < tiles) acc[i][j][e] = 0.f;
  };

  /* ---- the ring: a cp.async group per step (empty past the end, so the
   * count stays exact); the general path loads a step into registers
   * (st_*) before the mma of the current one and stores it after. Step s of
   * this CTA is step k0 + s of the row, in slot s % STAGES. */
  const auto cp = copies_of<DUAL, MW, TM>(p, l, m0, m_end, n0, tid, p.offs && p.a_index ? tile_rows : nullptr);
  const int a_chunk = tid % 8, w_half = tid % 2;
  const int64_t a_bytes = 2 * p.k, w_bytes = p.k / 2, k_blocks = p.k / 16;
  auto a_dst = [&](int s, int q) {
    const int r = tid / 8 + 16 * q;
    return s % S::STAGES * S::STEP_BYTES + r * 2 * KSTEP + 16 * (a_chunk ^ (r & 1));
  };
  auto w_dst = [&](int s, int q) { return s % S::STAGES * S::STEP_BYTES + S::W_OFF + 16 * (tid + THREADS * q); };
  /* step s's scales in the scale ring (its slot, at its 4 bytes); the thread's row at 16 tid on */
  const int ph0 = (int)(k0 & 3);
  auto sf_at = [&](int s) { return S::SF_OFF + (ph0 + s) / 4 % S::SG * S::SF_SLOT + 4 * ((ph0 + s) & 3); };
  auto sf_dst = [&](int s) { return sf_at(s) + 16 * tid; };
  auto a_n = [&](int s, int q) {
    return cp.act_ok >> q & 1 ? chunk_bytes(a_bytes - (k0 + s) * 128 - 16 * a_chunk) : 0;
  };
  auto w_n = [&](int s, int q) { return cp.w_ok >> q & 1 ? chunk_bytes(w_bytes - (k0 + s) * 32 - 16 * w_half) : 0; };
  auto sf_n = [&](int s) {
    const int64_t left = k_blocks - 4 * (k0 + s);
    return !cp.sf_ok || left <= 0 ? 0 : left < 4 ? (int)left : 4;
  };
  /* The last step, where K % 64 != 0: chunks cut at the row's end (whole steps: the fast path's ring below). */
  const int64_t whole_steps = p.k / KSTEP;
  auto copy_partial = [&](int s) {
#pragma unroll
    for (int q = 0; q < S::NA; q++)
      if (cp.act_copy >> q & 1) {
        const int n = a_n(s, q);
        cp_async_16(smem + a_dst(s, q), n ? cp.act(q) + (k0 + s) * 128 + 16 * a_chunk : cp.act0, (uint32_t)n);
      }
#pragma unroll
    for (int q = 0; q < MW; q++) {
      const int n = w_n(s, q);
      cp_async_16(smem + w_dst(s, q), n ? cp.w[q] + (k0 + s) * cp.w_step() + 16 * w_half : cp.w[q], (uint32_t)n);
    }
    if (cp.sf_copy) {
      const int n = sf_n(s);
      cp_async_4(smem + sf_dst(s), n ? cp.sf + cp.sf_at(k0 + s) : cp.sf, (uint32_t)n);
    }
  };
  uint4 st_a[S::NA], st_w[MW];
  uint32_t st_sf = 0;
  auto load_step = [&](int s) {
#pragma unroll
    for (int q = 0; q < S::NA; q++) st_a[q] = load_chunk(cp.act(q) + (k0 + s) * 128 + 16 * a_chunk, a_n(s, q));
#pragma unroll
    for (int q = 0; q < MW; q++) st_w[q] = load_chunk(cp.w[q] + (k0 + s) * cp.w_step() + 16 * w_half, w_n(s, q));
    st_sf = load_scales(cp.sf + cp.sf_at(k0 + s), sf_n(s));
  };
  auto store_step = [&](int s) {
#pragma unroll
    for (int q = 0; q < S::NA; q++)
      if (cp.act_copy >> q & 1) *reinterpret_cast<uint4 *>(smem + a_dst(s, q)) = st_a[q];
#pragma unroll
    for (int q = 0; q < MW; q++) *reinterpret_cast<uint4 *>(smem + w_dst(s, q)) = st_w[q];
    if (cp.sf_copy) *reinterpret_cast<uint32_t *>(smem + sf_dst(s)) = st_sf;
  };

  static_assert(S::STAGES >= 2, "a step in flight while one is read");
  static_assert(4 * S::SG >= S::STAGES + 3, "a scale slot outlives its 4 steps' reads");
  const uint32_t base = (uint32_t)opaque((int)smem_addr(smem)); /* computed once, not again in the loop */
  if constexpr (FAST) {
    /* Steps inside K (all but a last partial one): each copy's source moves
     * on by its bytes a step, its size and its place in a slot stay. The
     * slot of step s + STAGES - 1, written at step s, is step s - 1's. */
    const uint8_t *a_src[S::NA], *w_src[MW];
    uint32_t a_size[S::NA], w_size[MW], a_at[S::NA], w_at[MW];
#pragma unroll
    for (int q = 0; q < S::NA; q++)
      a_src[q] = cp.act(q) + k0 * 128 + 16 * a_chunk, a_size[q] = (cp.act_ok >> q & 1) * 16, a_at[q] = a_dst(0, q);
#pragma unroll
    for (int q = 0; q < MW; q++)
      w_src[q] = cp.w[q] + k0 * cp.w_step() + 16 * w_half, w_size[q] = (cp.w_ok >> q & 1) * 16, w_at[q] = w_dst(0, q);
    const uint32_t sf_size = cp.sf_ok ? 4 : 0;
    const int whole = (int)std::max<int64_t>(0, std::min<int64_t>(steps, whole_steps - k0));
    /* grouped scales: the next slot's 4 steps (a run) from sf_run on, run_left of the row's steps from its first */
    const uint8_t *sf_run = cp.sf + cp.sf_at(k0 - ph0);
    const int sf_run_bytes = (int)(cp.sf_at(4) - cp.sf_at(0));
    int run_left = (int)(all_steps - (k0 - ph0));
    auto copy = [&](int s, uint32_t slot) { /* step s, the sources at it */
      if (s < whole) {
#pragma unroll
        for (int q = 0; q < S::NA; q++)
          if (cp.act_copy >> q & 1) cp_async_16(slot + a_at[q], a_src[q], a_size[q]);
#pragma unroll
        for (int q = 0; q < MW; q++) cp_async_16_l2_128(slot + w_at[q], w_src[q], w_size[q]);
        if (cp.sf_copy) {
          if (!cp.sf_grouped) {
            cp_async_4(base + sf_dst(s), cp.sf + cp.sf_at(k0 + s), sf_size);
          } else if (((ph0 + s) & 3) == 0 || s == 0) { /* the slot's 4 steps (before k0: unread), none past the row */
            cp_async_16(base + sf_dst(s) - 4 * ((ph0 + s) & 3), sf_run,
                        cp.sf_ok ? (run_left < 4 ? 4 * (uint32_t)run_left : 16u) : 0u);
            sf_run += sf_run_bytes, run_left -= 4;
          }
        }
      } else {
        copy_partial(s);
      }
#pragma unroll
      for (int q = 0; q < S::NA; q++) a_src[q] += 128;
#pragma unroll
      for (int q = 0; q < MW; q++) w_src[q] += cp.w_step();
    };
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; s++) {
      if (s < steps) copy(s, base + s * S::STEP_BYTES);
      cp_async_commit();
    }
    /* the n8 tiles that have rows: 1, 2 or 4 (of NT = 4; a third's rows with a fourth) unpredicated; of 8 predicated */
    auto loop = [&](auto ntu) {
      zero(decltype(ntu)::value ? decltype(ntu)::value : NT);
      uint32_t rd = 0, wr = (S::STAGES - 1) * S::STEP_BYTES; /* slot offsets of step s, of step s + STAGES - 1 */
      for (int s = 0; s < steps; s++) {
        cp_async_wait<S::STAGES - 2>();
        __syncthreads(); /* step s landed for every thread; every warp is done with step s - 1's slot */
        if (s + S::STAGES - 1 < steps) copy(s + S::STAGES - 1, base + wr);
        cp_async_commit();
        mma_step<AT, MW, NT, decltype(ntu)::value>(base + rd, base + sf_at(s), off, nt, acc);
        wr = rd;
        rd = rd + S::STEP_BYTES == S::SF_OFF ? 0 : rd + S::STEP_BYTES;
      }
    };
    if constexpr (NT > 4) loop(std::integral_constant<int, 0>{});
    else if (nt > 2) loop(std::integral_constant<int, 4>{});
    else if (nt == 2) loop(std::integral_constant<int, 2>{});
    else loop(std::integral_constant<int, 1>{});
  } else {
    zero(NT);
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; s++)
      if (s < steps) {
        load_step(s);
        store_step(s);
      }
    for (int s = 0; s < steps; s++) {
      __syncthreads(); /* step s is in its slot; every warp is done with step s - 1's slot */
      const bool more = s + S::STAGES - 1 < steps;
      if (more) load_step(s + S::STAGES - 1);
      mma_step<AT, MW, NT, 0>(base + s % S::STAGES * S::STEP_BYTES, base + sf_at(s), off, nt, acc);
      if (more) store_step(s + S::STAGES - 1); /* into step s - 1's slot, which every warp left before the barrier */
    }
  }
  if constexpr (FAST) cp_async_wait<0>();
  pdl_launch_dependents(); /* the next kernel may launch during this epilogue */

  /* ---- a split tile: the partial out, a ticket; the last CTA adds them all */
  if (sp.split > 1) {
    /* fn(accumulator, its offset in a slot) for each the tile has */
    auto each = [&](auto &&fn) {
#pragma unroll
      for (int i = 0; i < MW; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
          if (j < nt)
#pragma unroll
            for (int e = 0; e < 4; e++) fn(acc[i][j][e], ((i * NT + j) * 4 + e) * THREADS);
    };
    if (!split_sum<THREADS, S::ACC>(sp, tile_id, part, tid, last_part, each)) return;
  }
  store_tiles<DUAL, BF16, MW, NT>(p, l, m0, m_end, n0 + (DUAL ? 16 * warp : 16 * MW * warp), tiles, nt, g, tq, acc);
}

/* ---- decode: the GEMV kernel. Every M <= 32 (a dual: M <= 16, whose 32 rows
 * would spill), K % 128 == 0 and the fast path's alignment (a dual: both
 * scale layouts alike, one step between a row's scales); not rows grouped by
 * expert. A CTA = GEMV_WARPS warps on one tile of <= 8 NT activation rows (NT
 * n8 tiles: 1 to M = 8, 2 to 16, else 4; ~0.13 KB spilled at 4) x 16 output
 * columns. Warp w takes the CTA's K steps of 128 w, w + GEMV_WARPS, ...
 * (the warps read a row's bytes side by side) of the tile's 16 weight
 * rows (a dual: of W1's and W2's, MW = 2 m16 tiles), each decoded once for
 * all NT activation fragments, loaded from global memory straight into
 * registers (weights streamed, each miss filling 256 bytes of L2: the next
 * warps' pieces of the row), weights 2 or 4 steps ahead (gemv_depth) and
 * activations (L2 hits) a step (NT = 1) or half a step (NT = 2, 4) ahead, 32 or 64 registers:
 * no shared memory, no barrier and no copy bookkeeping in the loop, ~204
 * instructions a warp, step of 128 and m16 tile (bf16, NT = 1; the rounds
 * before the last two run without checks against n, 216 with them; 150 with
 * weights repacked for bf16), 0.10 a
 * weight, where the 16-row kernel takes ~115 a step of 64 (0.11; both from
 * the SASS, sm_90a). The instructions, not the loads, bound it at M <= 8
 * (H200, 1 x 8192 x 28672 with checked rounds: 62 us; its weights read from
 * L1 instead: 45 us; a plain read of its bytes in its load pattern: 38
 * us). Rows past M or N are loaded as the last row (or not at all) and their
 * sums never stored, except where predicates spill less (a dual's 16 rows, 32
 * rows). One matrix at NT = 1 also comes built for 3 CTAs
 * an SM (80 registers: weights 2 steps ahead, activations by half steps),
 * which the plan takes where it needs fewer waves of CTAs (Llama-3-8B qkv,
 * 384 tiles: 1 wave of 3 instead of 2 of 2 CTAs an SM on an H200, 0.75x the
 * time). Thread t of a quad loads 16 bytes of each of its
 * weight rows g, g + 8 (scale blocks 2t and 2t + 1 of the step), their 2
 * scale bytes, and rows g (g + 8)'s 64 values of those blocks (4 x 16 bytes,
 * none past the rows). Each 64-value half h then runs as mma_step's K order
 * with thread t on block 2t + h. Weights laid out by tile (TILES: a dense
 * layer's, repacked for bf16): the same loads, a thread's 16 bytes in tile
 * step 2i + t / 2, a warp's next step 16 tile steps (64 KB) on, its warp's
 * 16 rows one 512-byte run a tile step. The warps' sums meet in shared
 * memory (added in warp order: deterministic) and warp 0 runs the epilogue
 * (silu(W1's) * W2's for a dual), or writes the split tile's partial. Speed
 * of light as the file's. */
constexpr int GEMV_WARPS = 8, GEMV_THREADS = 32 * GEMV_WARPS, GEMV_STEP = 128;

/* steps of weights in flight a warp: 4 m16 tiles' worth (one matrix, NT = 1),
 * never fewer than 2; 2 where 3 CTAs share an SM (80 registers) */
constexpr int gemv_depth(int mw, int nt, int ctas) { return mw * nt >= 2 || ctas == 3 ? 2 : 4; }

template <int MW>
struct GemvWeights {
  uint4 w[MW][2];     /* the warp's weight rows g, g + 8 of each matrix: 16 bytes each */
  uint32_t sf[MW][2]; /* their scale bytes of blocks 2t, 2t + 1 */
};

template <bool DUAL, int AT, int NT, int CTAS, bool TILES>
__global__ void __launch_bounds__(GEMV_THREADS, CTAS) w4a16_kernel_gemv(const __grid_constant__ MatmulTable t,
                                                                         const Split sp) {
  constexpr bool BF16 = nvfp4_at_bf16(AT);
  constexpr int MW = DUAL ? 2 : 1, ACC = MW * NT * 4 * 32, DEPTH = gemv_depth(MW, NT, CTAS);
  /* 16-byte chunks of a row an activation buffer holds: a step, or half of one */
  constexpr int XC = NT == 1 && CTAS == 2 ? 4 : 2;
  static_assert(XC == 2 || DEPTH % 2 == 0, "the activations' two buffers alternate within the unrolled ring");
  /* rows past M and N read as zeros where the predicates keep registers from spilling (a dual's 16 rows, 32
   * rows); else activation rows past M as the last row and weight slots past N keep what they held: sums
   * never stored, no zeroing a step */
  constexpr bool ZERO = NT > (DUAL ? 1 : 2);
  static_assert(CTAS == 2 || (!DUAL && NT == 1), "3 CTAs an SM: one matrix, 8 rows");
  __shared__ float sums[GEMV_WARPS][MW * NT * 4][32];
  __shared__ int last_part;
  pdl_wait(); /* common.cuh: nothing global is touched before this */

  const int64_t tile_id = blockIdx.x / sp.split;
  const int part = blockIdx.x % sp.split;
  int64_t tile = tile_id;
  const nvfp4_matmul &p = t.p[table_find(t, tile)];
  const int64_t tiles_n = (p.n + 15) / 16, n0 = tile % tiles_n * 16, tiles_m = (p.m + 8 * NT - 1) / (8 * NT);
  const int64_t l = tile / (tiles_m * tiles_n), m0 = tile / tiles_n % tiles_m * 8 * NT, m_end = p.m;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  /* of the CTA's steps [k0, k1), the warp's: k0 + warp + GEMV_WARPS i, i < n */
  const int64_t all_steps = p.k / GEMV_STEP, k0 = all_steps * part / sp.split,
                k1 = all_steps * (part + 1) / sp.split;
  const int n = k1 - k0 > warp ? (int)((k1 - k0 - warp + GEMV_WARPS - 1) / GEMV_WARPS) : 0;

  /* the thread's sources at the warp's first step, and what a step adds (scales: the row's base plus the
   * column part, nvfp4_sf_offset; blocks 2 tq, 2 tq + 1 adjacent bytes in either layout) */
  const int64_t k_blocks = p.k / 16, kb0 = (k0 + warp) * (GEMV_STEP / 16) + 2 * tq;
  const uint8_t *w_src[MW][2], *sf_src[MW][2];
  bool w_ok[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int64_t row = n0 + g + 8 * h;
    w_ok[h] = row < p.n;
    const int64_t r = w_ok[h] ? row : 0;
#pragma unroll
    for (int q = 0; q < MW; q++) {
      const nvfp4_operand &op = q ? p.b2 : p.b;
      const int64_t kbyte = (k0 + warp) * (GEMV_STEP / 2) + 16 * tq;
      w_src[q][h] =
          op.data + l * op.batch_stride + (TILES ? nvfp4_codes_offset(&op, r, kbyte) : r * op.row_stride + kbyte);
      sf_src[q][h] = op.sf + l * op.sf_batch_stride +
                     (TILES ? nvfp4_operand_sf_offset(&op, k_blocks, r, kb0)
                            : nvfp4_sf_offset(op.sf_layout, op.sf_row_stride, k_blocks, r, 0) +
                                  nvfp4_sf_offset(op.sf_layout, 0, k_blocks, 0, kb0));
    }
  }
  const uint8_t *x_src[NT];
  bool x_ok[NT];
#pragma unroll
  for (int j = 0; j < NT; j++) {
    x_ok[j] = m0 + g + 8 * j < m_end;
    x_src[j] = p.a.data + l * p.a.batch_stride + std::min<int64_t>(m0 + g + 8 * j, m_end - 1) * p.a.row_stride +
               (k0 + warp) * (2 * GEMV_STEP) + 64 * tq;
  }
  /* a warp's next step: GEMV_WARPS steps of 128 on (by tile: twice as many tile steps, runs of 4 of them) */
  constexpr int64_t W_STEP = TILES ? 2 * GEMV_WARPS * NVFP4_TILE_STEP : GEMV_WARPS * GEMV_STEP / 2,
                    X_STEP = GEMV_WARPS * 2 * GEMV_STEP;
  static_assert(!TILES || GEMV_WARPS % 2 == 0, "a warp's steps by tile: whole runs of 4 tile steps");
  const int64_t sf_step = TILES ? nvfp4_operand_sf_offset(&p.b, k_blocks, 0, GEMV_WARPS * (GEMV_STEP / 16))
                                : nvfp4_sf_offset(p.b.sf_layout, 0, k_blocks, 0, GEMV_WARPS * (GEMV_STEP / 16));

  auto load_w = [&](GemvWeights<MW> &s, int i) {
#pragma unroll
    for (int q = 0; q < MW; q++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if constexpr (ZERO) {
          s.w[q][h] = w_ok[h] ? ld_cs_l2_256(w_src[q][h] + i * W_STEP) : make_uint4(0u, 0u, 0u, 0u);
          s.sf[q][h] = w_ok[h] ? ld_cs_l2_128_u16(sf_src[q][h] + i * sf_step) : 0u;
        } else if (w_ok[h]) {
          s.w[q][h] = ld_cs_l2_256(w_src[q][h] + i * W_STEP);
          s.sf[q][h] = ld_cs_l2_128_u16(sf_src[q][h] + i * sf_step);
        }
      }
  };
  /* chunks c0 .. c0 + XC - 1 of each row's 64 bytes of step i (chunks 2h, 2h + 1: block 2 tq + h) */
  auto load_x = [&](uint4 (&x)[NT][XC], int i, int c0) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int c = 0; c < XC; c++)
        x[j][c] = ZERO && !x_ok[j] ? make_uint4(0u, 0u, 0u, 0u)
                                   : __ldg(reinterpret_cast<const uint4 *>(x_src[j] + i * X_STEP) + c0 + c);
  };
  /* MW = NT = 1: the halves' mma on two accumulator sets (two dependency chains of 4, not one of 8), added at
   * the end */
  float acc[MW][NT][4] = {}, acc_h1[MW][NT][4] = {};
  /* block 2 tq + h, its activations at chunks c0, c0 + 1 of x */
  auto compute = [&](const GemvWeights<MW> &s, int h, const uint4 (&x)[NT][XC], int c0) {
    float(&a)[MW][NT][4] = MW * NT == 1 && h ? acc_h1 : acc;
    uint32_t bx[NT][4], by[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) nvfp4_act16_b<AT>(x[j][c0], x[j][c0 + 1], bx[j], by[j]);
#pragma unroll
    for (int q = 0; q < MW; q++) {
      uint32_t fa[4][4];
      const uint4 r0 = s.w[q][0], r8 = s.w[q][1];
      const uint2 v0 = h ? make_uint2(r0.z, r0.w) : make_uint2(r0.x, r0.y);
      const uint2 v1 = h ? make_uint2(r8.z, r8.w) : make_uint2(r8.x, r8.y);
      const uint32_t sb = prmt(s.sf[q][0], s.sf[q][1], h ? 0x51u : 0x40u); /* row g's byte h low, g + 8's */
      nvfp4_wgmma_a_fragments16<AT>(v0, v1, sb, fa);
#pragma unroll
      for (int k = 0; k < 4; k++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
          if (BF16) mma_16816_bf16(a[q][j], fa[k], bx[j][k], by[j][k]);
          else mma_16816(a[q][j], fa[k], bx[j][k], by[j][k]);
        }
    }
  };
  /* weights DEPTH steps ahead; activations one buffer ahead: XC = 4 the next
   * step (buffer = step % 2), else the next half (buffer = half) */
  GemvWeights<MW> ring[DEPTH] = {};
  uint4 xs[2][NT][XC];
#pragma unroll
  for (int d = 0; d < DEPTH; d++)
    if (d < n) load_w(ring[d], d);
  if (n > 0) load_x(xs[0], 0, 0);
  /* step i + d of a round: its halves, the next activations, its ring slot's refill (GUARD: each checked
   * against n) */
  auto step = [&](auto guard, int i, int d) {
    constexpr bool GUARD = decltype(guard)::value;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if constexpr (XC == 4) {
        if (h == 0 && (!GUARD || i + d + 1 < n)) load_x(xs[(d + 1) % 2], i + d + 1, 0);
        compute(ring[d], h, xs[d % 2], 2 * h);
      } else {
        if (h == 0) load_x(xs[1], i + d, 2);
        else if (!GUARD || i + d + 1 < n) load_x(xs[0], i + d + 1, 0);
        compute(ring[d], h, xs[h], 0);
      }
    }
    if (!GUARD || i + d + DEPTH < n) load_w(ring[d], i + d + DEPTH);
  };
  int i = 0;
  if constexpr (NT == 1) /* rounds whose refills all fall below n, unchecked (more n8 tiles: the copy spills) */
    for (; i + 2 * DEPTH <= n; i += DEPTH)
#pragma unroll
      for (int d = 0; d < DEPTH; d++) step(std::false_type{}, i, d);
  for (; i < n; i += DEPTH)
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
      if (i + d < n) step(std::true_type{}, i, d);
  pdl_launch_dependents(); /* the next kernel may launch during this epilogue */
  if constexpr (MW * NT == 1)
#pragma unroll
    for (int q = 0; q < MW; q++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[q][0][e] += acc_h1[q][0][e];

  /* the warps' sums, in warp order, to warp 0 */
  if (warp > 0)
#pragma unroll
    for (int q = 0; q < MW; q++)
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) sums[warp][(q * NT + j) * 4 + e][lane] = acc[q][j][e];
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int w = 1; w < GEMV_WARPS; w++)
#pragma unroll
    for (int q = 0; q < MW; q++)
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[q][j][e] += sums[w][(q * NT + j) * 4 + e][lane];
  if (sp.split > 1) {
    auto each = [&](auto &&fn) {
#pragma unroll
      for (int q = 0; q < MW; q++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) fn(acc[q][j][e], ((q * NT + j) * 4 + e) * 32);
    };
    if (!split_sum<32, ACC>(sp, tile_id, part, lane, last_part, each)) return;
  }
  const int nt = (int)std::min<int64_t>(NT, (m_end - m0 + 7) / 8); /* n8 tiles with a row below M */
  store_tiles<DUAL, BF16, MW, NT>(p, l, m0, m_end, n0, (1u << MW) - 1, nt, g, tq, acc);
}

/* Every copy of a problem one cp.async: activation and weight rows 16-byte
 * aligned, a step's scale bytes one aligned word. */
bool fast_ok(const nvfp4_matmul &p) {
  return rows_aligned(p.a, 16) && cp_async_ok(p.b) && (!p.b2.data || cp_async_ok(p.b2));
}

/* A launch's kernel: dual, bf16 activations (pairs: weights repacked for
 * them), the fast path, the GEMV kernel, m16 tiles per warp, activation rows
 * per tile; and how many CTAs share a tile's K. */
struct Config {
  bool dual, bf16, pairs, fast, gemv;
  int mw, tm, split;
  int gemv_ctas = 2; /* the GEMV instance: built for 2 CTAs an SM, or 3 (8 rows of one matrix) */
  bool tiles = false; /* weights laid out by tile (the GEMV's instance; the other kernels read either) */
};

int tile_n(const Config &c) { return c.gemv ? 16 : c.dual ? 64 : 64 * c.mw; }

/* A problem's tiles of TM rows; rows grouped by expert: a bound (expert_tile). */
int64_t row_tiles(const nvfp4_matmul &p, int tm) {
  return p.offs ? expert_row_tiles(p, tm) : (p.m + tm - 1) / tm * p.batch;
}

int64_t count_tiles(const nvfp4_matmul *problems, int count, int tm, int tn) {
  int64_t tiles = 0;
  for (int g = 0; g < count; g++) tiles += row_tiles(problems[g], tm) * ((problems[g].n + tn - 1) / tn);
  return tiles;
}

/* A configuration's kernel and its dynamic shared memory: the one place
 * that maps a Config to a template instance. */
struct Entry {
  const void *fn;
  int smem, threads;
};

template <bool DUAL, int AT, bool FAST, int MW, int TM>
Entry entry() {
  constexpr int smem = Shape<DUAL, MW, TM>::SMEM;
  static_assert(smem <= 48 * 1024, "no opt-in: every sm_80+ device gives a CTA 48 KB");
  return {reinterpret_cast<const void *>(w4a16_kernel<DUAL, AT, FAST, MW, TM>), smem, THREADS};
}

template <int AT, int TM>
Entry entry(const Config &c) {
  if (c.dual) return c.fast ? entry<true, AT, true, 2, TM>() : entry<true, AT, false, 2, TM>();
  if (!c.fast) return entry<false, AT, false, 2, TM>();
  return c.mw == 1 ? entry<false, AT, true, 1, TM>() : entry<false, AT, true, 2, TM>();
}

template <bool DUAL, int AT, bool TILES>
Entry gemv_entry(const Config &c) {
  if constexpr (!DUAL) {
    if (c.tm == 32) return {reinterpret_cast<const void *>(w4a16_kernel_gemv<false, AT, 4, 2, TILES>), 0, GEMV_THREADS};
    if (c.gemv_ctas == 3)
      return {reinterpret_cast<const void *>(w4a16_kernel_gemv<false, AT, 1, 3, TILES>), 0, GEMV_THREADS};
  }
  return {c.tm == 8 ? reinterpret_cast<const void *>(w4a16_kernel_gemv<DUAL, AT, 1, 2, TILES>)
                    : reinterpret_cast<const void *>(w4a16_kernel_gemv<DUAL, AT, 2, 2, TILES>),
          0, GEMV_THREADS};
}

template <int AT>
Entry entry_of(const Config &c) {
  if (c.gemv) {
    if (c.tiles) return c.dual ? gemv_entry<true, AT, true>(c) : gemv_entry<false, AT, true>(c); /* dense by tile */
    return c.dual ? gemv_entry<true, AT, false>(c) : gemv_entry<false, AT, false>(c);
  }
  return c.tm == 16 ? entry<AT, 16>(c) : entry<AT, 64>(c);
}

Entry entry_of(const Config &c) {
  return c.pairs  ? entry_of<NVFP4_BF16_PAIRS>(c)
         : c.bf16 ? entry_of<NVFP4_BF16>(c)
                  : entry_of<NVFP4_F16>(c);
}

/* CTAs of the configuration an SM of this device holds at once (registers
 * and shared memory: an sm_86 / sm_89 holds fewer than an A100 or H100),
 * asked once per device and configuration; 1 where the runtime cannot say. */
int ctas_per_sm(const Config &c) {
  static int cache[64][2048] = {};
  const DeviceInfo &dev = device_info();
  if (dev.id < 0 || dev.id >= 64) return 1;
  const int key = (c.dual ? 1 : 0) | (c.bf16 ? 2 : 0) | (c.fast ? 4 : 0) | (c.mw == 2 ? 8 : 0) | (c.tm == 64 ? 16 : 0) |
                  (c.tm == 8 ? 32 : 0) | (c.gemv ? 64 : 0) | (c.tm == 32 ? 128 : 0) | (c.gemv_ctas == 3 ? 256 : 0) |
                  (c.pairs ? 512 : 0) | (c.gemv && c.tiles ? 1024 : 0);
  int &n = cache[dev.id][key];
  if (!n) {
    const Entry k = entry_of(c);
    int got = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&got, k.fn, k.threads, k.smem) != cudaSuccess || got < 1) {
      cudaGetLastError(); /* not this call's error to report */
      got = 1;
    }
    n = got;
  }
  return n;
}

/* problems[0, count) share a_type. Rules of thumb, not measured yet:
 * - the GEMV kernel where every M is at most 32 (8 rows a tile to 8, 16 to 16; a dual at most 16: its
 *   32-row tiles spilled: 1.2-1.5x the 64-row tiles' time; a gemm's took 0.60-1.03x their time at M = 20,
 *   32 on Llama-3 shapes, H200), K % 128 == 0, the fast
 *   path's alignment and a dual's two scale layouts alike (not rows grouped
 *   by expert: CTAs that scanned the offsets, then ran 4 column tiles in
 *   turn, took 1.2-1.5x the 16-row kernel's time on DeepSeek-V3 and Qwen3 MoE
 *   blocks at T = 8, 64; H200);
 * - a GEMV of one matrix and <= 8 rows: its 3-CTA instance where that takes
 *   fewer waves of CTAs than 2 an SM (H200, Llama-3 qkv at M <= 8: 8B 0.68-0.76x,
 *   70B 0.78-0.79x the time; o and down, as many waves either way, 1.02-1.10x);
 * - 16 activation rows where every M is at most 16 (decode; rows grouped by
 *   expert: at most 16 an expert on average): the n8 tiles past 16 would be
 *   neither read nor multiplied anyway, and the smaller step leaves room for
 *   a ring twice as deep;
 * - weights laid out by tile, 9 to 16 rows, the caller giving scratch: the 16-row tiles rather than the GEMV
 *   where their output tiles alone fill a sixth of the CTA slots (split-K of at most 5; H200, a239c31, Llama-3
 *   linears at M = 12, 16 by tile: 8B qkv 0.87-0.92x the GEMV's time, gate_up 0.81-0.85x, every 70B linear
 *   0.71-0.96x; 8B o and down, split-K 8, 1.14-1.93x); at M <= 8 the GEMV (the tiles 0.91-1.86x its time,
 *   faster only for 8B gate_up);
 * - gemm: 64-column tiles (MW = 1) where the 128-column ones would not give
 *   every SM two CTAs (fast path only);
 * - where the tiles still do not fill the SMs' CTA slots (ctas_per_sm;
 *   `workspace`: the caller gives scratch), the CTAs of a tile share its K,
 *   each at least 8 steps of 64: a small M streams its weights through every
 *   SM. */
/* c as the tiled kernels (not the GEMV) run it, and their tiles and CTA slots. */
Config tile_config(Config c, const nvfp4_matmul *problems, int count, bool workspace, int64_t min_steps,
                   int64_t &tiles, int64_t &slots) {
  const int sms = device_info().sms;
  if (!c.dual && c.fast && count_tiles(problems, count, c.tm, 128) < 2 * (int64_t)sms) c.mw = 1;
  tiles = count_tiles(problems, count, c.tm, tile_n(c)), slots = (int64_t)ctas_per_sm(c) * sms;
  if (workspace && tiles > 0 && tiles < slots && min_steps != INT64_MAX)
    c.split = (int)std::max<int64_t>(1, std::min<int64_t>({MAX_SPLIT, slots / tiles, min_steps / 8}));
  return c;
}

Config config_of(const nvfp4_matmul *problems, int count, bool workspace) {
  Config c{problems[0].b2.data != nullptr, problems[0].a_type == NVFP4_BF16,
           problems[0].b.codes == NVFP4_CODES_BF16_PAIRS, true, false, 2, 16, 1};
  c.tiles = problems[0].b.tile_rows != 0;
  int64_t min_steps = INT64_MAX;
  bool gemv = true;
  int gemv_rows = 8;
  for (int g = 0; g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    c.fast = c.fast && fast_ok(p);
    if (p.offs ? p.m > 16 * p.batch : p.m > 16) c.tm = 64;
    gemv = gemv && !p.offs && p.m <= (p.b2.data ? 16 : 32) && p.k % GEMV_STEP == 0 &&
           (!p.b2.data || p.b2.sf_layout == p.b.sf_layout);
    if (p.m > 8) gemv_rows = std::max(gemv_rows, p.m > 16 ? 32 : 16);
    if (p.m && p.n && p.batch) min_steps = std::min<int64_t>(min_steps, (p.k + KSTEP - 1) / KSTEP);
  }
  int64_t tiles_t, slots_t;
  if (gemv && c.fast && workspace && c.tiles && gemv_rows == 16) { /* the 16-row tiles where they split K <= 5 ways */
    const Config t = tile_config(c, problems, count, workspace, min_steps, tiles_t, slots_t);
    if (6 * tiles_t >= slots_t) return t;
  }
  const int sms = device_info().sms;
  if (gemv && c.fast) { /* as below; each warp of a split CTA at least 2 steps of 128 */
    c.gemv = true, c.tm = gemv_rows, c.mw = c.dual ? 2 : 1;
    const int64_t tiles = count_tiles(problems, count, c.tm, 16), slots = (int64_t)ctas_per_sm(c) * sms;
    if (workspace && tiles > 0 && tiles < slots && min_steps != INT64_MAX)
      c.split = (int)std::max<int64_t>(1, std::min<int64_t>({MAX_SPLIT, slots / tiles, min_steps / (4 * GEMV_WARPS)}));
    if (!c.dual && c.tm == 8 && tiles >= slots) { /* the 3-CTA instance where it needs fewer waves */
      Config c3 = c;
      c3.gemv_ctas = 3;
      const int64_t slots3 = (int64_t)ctas_per_sm(c3) * sms;
      if ((tiles + slots3 - 1) / slots3 < (tiles + slots - 1) / slots) return c3;
    }
    return c;
  }
  return tile_config(c, problems, count, workspace, min_steps, tiles_t, slots_t);
}

/* The workspace of a split launch: the partials, then a ticket per tile. */
size_t partial_bytes(const Config &c, int64_t tiles) {
  /* n8 tiles a CTA holds (the 16-row tiles: room for 32 rows) */
  const int nt = c.gemv || c.tm != 16 ? c.tm / 8 : Shape<false, 1, 16>::NT;
  const int acc = (c.dual ? 2 : c.mw) * nt * 4 * (c.gemv ? 32 : THREADS);
  return (size_t)tiles * c.split * acc * sizeof(float);
}

cudaError_t launch(const Config &c, const MatmulTable &t, unsigned ctas, const Split &sp, cudaStream_t stream) {
  const Entry k = entry_of(c);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(k.threads);
  cfg.dynamicSmemBytes = k.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = pdl_attribute();
  cfg.attrs = &attr;
  cfg.numAttrs = device_info().sm90_code ? 1 : 0; /* its pdl_wait exists */
  void *args[] = {const_cast<MatmulTable *>(&t), const_cast<Split *>(&sp)};
  return cudaLaunchKernelExC(&cfg, k.fn, args);
}

/* One launch of problems[0, count), count <= NVFP4_LAUNCH_GROUPS, one a_type. */
cudaError_t launch_group(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn ws_fn, void *ctx,
                         cudaStream_t stream) {
  Config c = config_of(problems, count, ws_fn != nullptr);
  MatmulTable t;
  int64_t tiles = table_tiles(t, problems, count, c.tm, tile_n(c));
  if (problems[0].offs) { /* rows grouped by expert: a bound (expert_tile) */
    tiles = count_tiles(problems, 1, c.tm, tile_n(c));
    if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
    t.tile_start[1] = (int32_t)tiles;
  }
  if (tiles == 0) return cudaSuccess;
  Split sp = {nullptr, nullptr, 0, 1};
  if (c.split > 1) {
    const size_t part = partial_bytes(c, tiles);
    void *ws = ws_fn(part + (size_t)tiles * sizeof(unsigned long long), ctx);
    if (ws && aligned(ws, 16)) {
      sp = {static_cast<float *>(ws), reinterpret_cast<unsigned long long *>(static_cast<uint8_t *>(ws) + part),
            ticket_epoch(), c.split};
    } else {
      c.split = 1; /* no scratch: a CTA per tile */
    }
  }
  if (tiles * c.split > INT32_MAX) return cudaErrorInvalidConfiguration;
  return launch(c, t, (unsigned)(tiles * c.split), sp, stream);
}

/* problems of one a_type, in their order, at most NVFP4_LAUNCH_GROUPS of them:
 * returns how many of `count` were taken (from `from` on). */
int gather(const nvfp4_matmul *problems, int count, int32_t a_type, int &from, nvfp4_matmul (&out)[NVFP4_LAUNCH_GROUPS]) {
  int n = 0;
  for (; from < count && n < NVFP4_LAUNCH_GROUPS; from++)
    if (problems[from].a_type == a_type) out[n++] = problems[from];
  return n;
}
}  // namespace

/* sm_80+, 16-bit activations; any shape, stride, alignment and scale layout. */
bool w4a16_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) {
  return dev.major >= 8 && (p.a_type == NVFP4_F16 || p.a_type == NVFP4_BF16);
}

/* problems[0, count), all dual or all not, each w4a16_can_run: one launch per
 * activation type present (fp16 and bf16 problems are different kernels);
 * empty problems get no tiles. */
cudaError_t w4a16_launch(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn ws, void *ctx,
                         cudaStream_t stream) {
  for (const int32_t type : {(int32_t)NVFP4_F16, (int32_t)NVFP4_BF16}) {
    nvfp4_matmul group[NVFP4_LAUNCH_GROUPS];
    for (int from = 0, n; (n = gather(problems, count, type, from, group)) > 0;) {
      const cudaError_t err = launch_group(group, n, ws, ctx, stream);
      if (err != cudaSuccess) return err;
    }
  }
  return cudaSuccess;
}

W4A16Launch w4a16_launch_of(const nvfp4_matmul &p) {
  const Config c = config_of(&p, 1, true);
  const int64_t tiles = count_tiles(&p, 1, c.tm, tile_n(c));
  return {c.gemv, tiles * c.split, (int64_t)ctas_per_sm(c) * device_info().sms, (p.k + c.split - 1) / c.split};
}

void w4a16_describe(const nvfp4_matmul *problems, int count, bool workspace, char *what, size_t len) {
  bool f16 = false, bf16 = false;
  for (int g = 0; g < count; g++) (problems[g].a_type == NVFP4_BF16 ? bf16 : f16) = true;
  if (count <= 0) {
    std::snprintf(what, len, "%s", "");
    return;
  }
  if (f16 && bf16) {
    std::snprintf(what, len, "fp16 and bf16 activations, a launch each");
    return;
  }
  const Config c = config_of(problems, count, workspace);
  char split[24] = "";
  if (c.split > 1) std::snprintf(split, sizeof split, ", split-K %d", c.split);
  const char *gemv = !c.gemv            ? ""
                     : c.gemv_ctas == 3 ? ", GEMV (8 warps share K, 3 CTAs an SM)"
                                        : ", GEMV (8 warps share K)";
  std::snprintf(what, len, "%s activations, %dx%d tiles%s%s%s%s%s%s", c.bf16 ? "bf16" : "fp16", c.tm, tile_n(c), gemv,
                split, c.fast ? "" : ", register loads", problems[0].offs ? ", rows by expert" : "",
                c.pairs ? ", weights in bf16 pairs" : "", c.tiles ? " laid out by tile" : "");
}
