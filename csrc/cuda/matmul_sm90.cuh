/*
 * matmul_sm90.cuh - what the wgmma kernel (matmul_sm90.cu) and its planner
 * (matmul_sm90_plan.cu) share: the tile's shape and shared-memory layout,
 * the stream-K and pre-decode parameters, and a launch's plan.
 */
#pragma once
#include "common.cuh"

namespace sm90 {

constexpr int THREADS = 384; /* warpgroup 0 produces, 1 and 2 consume         */
constexpr int TILE_R = 256;  /* weight rows per CTA (2 x 128; dual: 128 of B1 + B2) */
constexpr int KSTEP = 64;
constexpr int NA16 = 4;      /* fp16 A tile ring                                  */
static_assert((NA16 & (NA16 - 1)) == 0, "the consumers take the fp16 tile index by mask");
constexpr int MAX_SPLIT = 8; /* portable cluster size                             */
constexpr int PART_PITCH = TILE_R + 4; /* floats per row of the epilogue's fp32 [m][r] tile */

/* Shared memory of a tile of TM activation rows (TM = 128, 64 or 32: the
 * wgmma N), from a 1024-byte aligned base. Raw rows are 32 bytes (64 fp4);
 * chunk j of row r sits at 16 * (j ^ ((r / 4) & 1)), which keeps both the
 * 16-byte decode reads and the 8-byte fragment reads conflict-free. The
 * smaller tiles keep more raw stages in flight. */
template <int TM, bool W4A16 = false>
struct Layout {
  static_assert(TM == 128 || TM == 64 || TM == 32, "activation tile of 128, 64 or 32 rows");
  static constexpr int STAGES = TM == 128 ? 6 : TM == 64 ? 8 : 10; /* raw fp4 ring */
  static constexpr int A16_BYTES = TM * KSTEP * 2;                /* one fp16 A tile */
  /* W4A16: a raw activation row is 128 bytes of 16-bit values (chunks at
   * a16_chunk, natural K order), and there are no activation scales */
  static constexpr int RAW_A_ROW = W4A16 ? 128 : 32, RAW_SFA_ROW = W4A16 ? 0 : 4;
  static constexpr int RAW_A = 0, RAW_B = RAW_A + TM * RAW_A_ROW, RAW_SFA = RAW_B + TILE_R * 32,
                       RAW_SFB = RAW_SFA + TM * RAW_SFA_ROW;
  static constexpr int STAGE_BYTES = RAW_SFB + TILE_R * 4;
  static constexpr int RAW_BASE = NA16 * A16_BYTES;
  static constexpr int BAR_BASE = RAW_BASE + STAGES * STAGE_BYTES; /* 8-byte mbarriers */
  static constexpr int MAIN_BYTES = BAR_BASE + 8 * (2 * STAGES + 2 * NA16);
  static constexpr int PART_BYTES = TM * PART_PITCH * 4;
  static_assert(PART_BYTES <= BAR_BASE, "the epilogue tile reuses the rings, not the barriers");
  /* W4A16 rows grouped by expert: the tile's expert, first row and the
   * expert's row end (expert_tile) */
  static constexpr int EXPERT_BASE = MAIN_BYTES;
  static constexpr int SMEM_BYTES = MAIN_BYTES + (W4A16 ? 32 : 0);
  static_assert(SMEM_BYTES <= 227 * 1024, "an sm_90 CTA's shared memory");
};

/* Stream-K launches (128-row tiles, every problem the same K): the launch's
 * tiles x K steps are dealt to `ctas` CTAs (one per SM) in contiguous ranges
 * of equal cost (sk_ranges), so a CTA works on one or more segments (a tile's
 * K range). A segment that starts inside a tile can only be a CTA's first: it
 * stores its fp32 partial in the workspace slot of its range and raises the
 * range's flag. The segment holding the tile's K start (a CTA's last) adds
 * the partials of the later ranges in range order and stores the tile. No CTA
 * waits before its own partial is out. Ranges go to CTAs in reverse (CTA c
 * takes range ctas - 1 - c), so a tile's owner waits only on CTAs numbered
 * below it: with CTAs started in index order (the assumption CUB's decoupled
 * look-back scan makes too) every wait ends even when fewer CTAs than the
 * grid's fit at once (MPS limits, green contexts, a concurrent kernel holding
 * SMs).
 * Flags without a memset per launch (one would end the programmatic overlap
 * of this launch with the kernel before it): a raised flag holds the launch's
 * epoch, a 64-bit value no earlier launch used (launch_epoch), so whatever the
 * workspace held before passes for it only by a 2^-64 chance; the owner
 * resets each flag it consumed to 0, so a CUDA graph's replays, which keep
 * the captured epoch, start from cleared flags. */
constexpr int SK_MAX_CTAS = 256; /* stream-K plans one CTA per SM: devices of more SMs run split-K */
template <int MAX_CTAS>
struct StreamKT {
  float *ws;  /* per range: 256 consumer threads x TM floats, [TM / 4][256] float4 */
  unsigned long long *flags; /* per range: `epoch` once its partial is in ws  */
  unsigned long long epoch;
  int ctas;
  int ksteps; /* of every problem of the launch                               */
  /* range c is the launch's K steps [start[c], start[c + 1]) (tile-major),
   * start[ctas] = tiles x K steps; every range is non-empty (sk_ranges) */
  int32_t start[MAX_CTAS + 1];
};
/* The stream-K kernels' parameter; the others get StreamKT<0>, which adds
 * next to nothing to their parameters (the launch table: 4.4 KB). */
using StreamK = StreamKT<SK_MAX_CTAS>;


/* Pre-decoded activations (PRE launches: 128-row tiles, a workspace given).
 * A pre-pass kernel writes every fp16 activation tile the launch's consumers
 * will read, once, into the workspace; the main kernel's producer then brings
 * each K step's tile in with one bulk copy instead of copying and decoding
 * its raw rows: the producer warpgroup's decode, its shared-memory stores and
 * per-row copies took issue slots and barrier round trips from the
 * consumers' step (the K loop rebuilt alone: 1731 -> 1228 cycles per step).
 * The cost: a second launch (overlapped
 * by PDL) that reads the activations and writes 2 bytes per value, 128-row
 * tiles padded with zeros, and 16 KB instead of 4.5 KB read per CTA and step
 * (L2 hits mostly: the CTAs of an activation tile run side by side).
 * Layout: problem g's tiles from block blk[g] of 16 KB, block
 * ((l * tiles_m + m tile) * ksteps + ks) holding rows 0..127 as the shared
 * tile does (a16_chunk). Rows grouped by expert (16-bit, offs; rows by token
 * gathered on the way): the stacked rows' bytes, each (expert, 128 rows) tile
 * of `rows` rows from row m0 in place, K step ks at byte (m0 K + ks rows 64)
 * x 2, rows 0..rows-1 as the shared tile holds them (a16_chunk): one bulk
 * copy of rows x 128 bytes a step. */
struct Predecoded {
  uint8_t *a16;
  int32_t blk[NVFP4_LAUNCH_GROUPS + 1]; /* blk[count]: every block of the launch */
};

constexpr int PRE_THREADS = 128;     /* one per row of a block */
/* K steps of a tile per CTA of the by-expert pre-pass; 4 where it quantizes (an ALU-bound step, CTAs enough to
 * fill the device at T = 512) */
constexpr int EXPERT_PRE_STEPS = 16, EXPERT_PRE_STEPS_QUANT = 4;

/* Rows grouped by expert that a workspace lets the pre-pass lay out (and
 * gather, for rows by token): 128-row tiles, at least PRE_MIN_STEPS K steps,
 * the rows' 16-bit values within Launch::MAX_PRE_BYTES
 * (matmul_sm90_plan.cu). */
bool expert_predecodes(const nvfp4_matmul &p);


/* Stream-K workspace: a partial tile per range (CTA), then a flag per range. */
constexpr size_t sk_partial_bytes(int tm) { return (size_t)256 * tm * sizeof(float); }
inline size_t sk_workspace_bytes(int ctas, int tm) {
  return (size_t)ctas * (sk_partial_bytes(tm) + sizeof(unsigned long long));
}

/* How a launch covers its tiles: clusters of `split` CTAs sharing each tile's
 * K, or (sk_ctas > 0) stream-K over sk_ctas CTAs. */
struct Cover {
  int split, sk_ctas;
  double steps; /* its cost: K steps per CTA, fills included (choose_cover) */
};

/* One launch over problems[0, count <= NVFP4_LAUNCH_GROUPS): its tile of tm
 * activation rows (the smallest of 32, 64, 128 that holds the largest M),
 * table, cover and whether a pre-pass decodes the activations (a16_blk[count]
 * > 0: its blocks; only 128-row tiles). plan_launch (matmul_sm90_plan.cu)
 * makes it; matmul_sm90_launch launches it. */
struct Launch {
  static constexpr int64_t MAX_PRE_BYTES = (int64_t)1 << 30; /* fp16 tiles of one launch, at most */
  int tm = 128;
  bool dual = false;
  MatmulTable t;
  int64_t tiles = 0, ksteps = 0;
  int32_t a16_blk[NVFP4_LAUNCH_GROUPS + 1] = {}; /* Predecoded::blk */
  Cover cover = {1, 0, 0.0};
  int64_t sk_cost = 0; /* stream-K launches: the tiles' cost in 1/50 steps (sk_step_cost) */
  int64_t a16_bytes() const { return (int64_t)a16_blk[t.count] * tm * KSTEP * 2; }
  size_t workspace() const { return (size_t)a16_bytes() + (cover.sk_ctas ? sk_workspace_bytes(cover.sk_ctas, tm) : 0); }
};

/* no_pre = 1: no pre-pass (a test's forced variant); 0: the pre-pass where
 * the plan's rule takes it. */
Launch plan_launch(const nvfp4_matmul *problems, int count, bool workspace, int no_pre);

/* sk.start[0 .. sk.ctas] of a stream-K launch (matmul_sm90_plan.cu). */
void sk_ranges(const Launch &launch, StreamK &sk);

/* Clusters of `split` CTAs of the kernel that fit on the device at once
 * (matmul_sm90.cu; -1 where none does). */
int max_clusters(bool dual, int tm, int split, const DeviceInfo &dev, bool w4a16 = false);

}  // namespace sm90
