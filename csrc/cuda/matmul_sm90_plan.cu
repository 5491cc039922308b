/*
 * matmul_sm90_plan.cu - how the wgmma kernel (matmul_sm90.cu) covers one
 * launch's tiles: the activation tile (32, 64 or 128 rows), split-K over a
 * cluster, stream-K over one CTA per SM, and whether a pre-pass decodes the
 * activations. A cost model in K steps of one CTA, fitted to measured shapes.
 */
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "matmul_sm90.cuh"

namespace sm90 {
namespace {

/* The cover's credit for pre-decoding (Predecoded) a split-1 launch, in K
 * steps of one CTA (~0.9 us on an H100): its steps ~9% shorter (8.5-10.7% on
 * 10 shapes, H100, the serial K loop), against the pre-pass's ~2 steps plus
 * its traffic, 2.28 bytes per byte of fp16 tiles (fp4 and scales read, fp16
 * written) at ~2.9 TB/s: one step per 2.13 MB of tiles; counted where the
 * saving exceeds the cost by 25% and the pre-pass runs (plan_launch: at least
 * PRE_MIN_STEPS a CTA), never for a pre-pass the launch would not have. */
constexpr double PRE_STEP_SAVING = 0.09;
constexpr double PRE_MIN_STEPS = 32.0;
inline bool predecode_pays(double cta_steps, double a16_bytes) {
  return cta_steps >= PRE_MIN_STEPS && PRE_STEP_SAVING * cta_steps > 1.25 * (2.2 + a16_bytes / 2.13e6);
}

/* Costs in K steps of one CTA. Split-K: the waves of clusters that the tiles
 * need times the steps per CTA, plus the pipeline fill and epilogue per wave
 * (~3 steps of the 128-row tile; the smaller tiles' steps are shorter, so the
 * same time is more of them). Ties go to the smaller split.
 * Stream-K (128-row tiles, one K, a workspace to ask for): the steps per CTA
 * (sk_steps / ctas: the launch's steps at sk_step_cost, as sk_ranges deals
 * them), a fill and epilogue per segment, 4 for a partial's store and load, 3
 * more per further partial the tile's owner adds (the CTAs that share a tile),
 * against the best split-K with 2 more per wave where the split sums through
 * distributed shared memory (~4 us instead of ~1), and split 1 pre-decoded
 * (PRE_STEP_SAVING off its steps) where a workspace is given (pre_bytes >= 0:
 * the pre-pass's fp16 tiles) and predecode_pays. Stream-K is chosen when 6.5%
 * cheaper: fitted to 14 shapes measured both ways (H200) and 15 grouped
 * shapes (H100); of those with a cost ratio stream-K / split-K of 0.939-0.949,
 * as many ran slower as faster. */
Cover choose_cover(bool dual, int tm, int64_t tiles, int64_t ksteps, double sk_steps, double pre_bytes, bool sk_ok,
                   const DeviceInfo &dev, bool w4a16) {
  const double FILL_STEPS = tm == 128 ? 3.0 : 8.0;
  int best = 1;
  double best_cost = 1e30, split_k_cost = 1e30; /* the latter: against stream-K */
  double pre_cost = 1e30; /* split 1 pre-decoded, where that pays */
  for (int s = 1; s <= MAX_SPLIT; s++) {
    if (s > 1 && ksteps / s < 4) break;
    const int fit = max_clusters(dual, tm, s, dev, w4a16);
    if (fit < 1) continue;
    const double waves = (double)((tiles + fit - 1) / fit);
    const double cost = waves * ((double)((ksteps + s - 1) / s) + FILL_STEPS);
    if (cost < best_cost * 0.97) best = s, best_cost = cost;
    if (s == 1 && pre_bytes >= 0 && predecode_pays(cost, pre_bytes)) pre_cost = cost * (1.0 - PRE_STEP_SAVING);
    split_k_cost = std::min(split_k_cost, std::min(cost, pre_cost) + (s > 1 ? 2.0 * waves : 0.0));
  }
  if (pre_cost < best_cost) { /* split 1, pre-decoded (plan_launch: predecode_pays) */
    best_cost = pre_cost / (1.0 - PRE_STEP_SAVING);
    best = 1;
  }
  Cover cover = {best, 0, best_cost};
  /* Stream-K is planned for one CTA per SM of the device. Where the process
   * gets fewer SMs (MPS limits, green contexts) it stays correct (StreamK: an
   * owner waits only on CTAs numbered below it) but runs in more than one wave;
   * NVFP4_STREAM_K=0 turns it off there. */
  static const bool sk_off = env_flag("NVFP4_STREAM_K") == 0;
  if (tm == 128 && sk_ok && !sk_off && dev.sms <= SK_MAX_CTAS && tiles * ksteps >= dev.sms &&
      tiles * ksteps <= INT32_MAX) {
    const int ctas = dev.sms;
    const double per_cta = sk_steps / ctas;
    const double segments = std::ceil(per_cta / (double)ksteps) + 1.0;
    const double more_partials = std::ceil((double)ksteps / per_cta) - 1.0;
    const double cost = per_cta + segments * FILL_STEPS + 4.0 + 3.0 * more_partials;
    if (cost < split_k_cost * 0.935) cover.sk_ctas = ctas, cover.steps = cost;
  }
  return cover;
}

/* Stream-K ranges of equal cost, not equal K steps. A K step of a 128-row
 * tile whose activation rows end early costs less: the producer skips the
 * padding rows and the consumers' wgmma is as narrow as the rows (N = 32 or
 * 64; stream-K takes no N = 96). Measured per step against a full tile
 * (H100): <= 32 rows 0.82, <= 64 rows 0.90, fewer than 128 rows 0.98. Equal
 * step counts would leave the CTAs of narrow tiles done early while those of
 * full tiles set the time. Costs in 1/50 of a full step. */
int sk_step_cost(int64_t rows) { return rows <= 32 ? 41 : rows <= 64 ? 45 : rows < 128 ? 49 : 50; }

/* The cost of a launch's 128-row tiles of ksteps each, in 1/50 steps. */
int64_t sk_cost(const MatmulTable &t, int ksteps) {
  int64_t cost = 0;
  for (int g = 0; g < t.count; g++) {
    const nvfp4_matmul &p = t.p[g];
    const int64_t tiles_m = (p.m + 127) / 128;
    if (!tiles_m) continue;
    const int64_t periods = (t.tile_start[g + 1] - t.tile_start[g]) / tiles_m; /* column tiles x batches */
    cost += periods * ((tiles_m - 1) * 50 + sk_step_cost(p.m - (tiles_m - 1) * 128)) * ksteps;
  }
  return cost;
}

/* The activation tile: the smallest of 32, 64, 128 rows that holds the
 * largest M (small M: a decode step's batch). */
int tile_rows(const nvfp4_matmul *problems, int count) {
  int64_t max_m = 0;
  for (int g = 0; g < count; g++) max_m = problems[g].m > max_m ? problems[g].m : max_m;
  return max_m <= 32 ? 32 : max_m <= 64 ? 64 : 128;
}

}  // namespace

Launch plan_launch(const nvfp4_matmul *problems, int count, bool workspace, int no_pre) {
  Launch L;
  L.tm = tile_rows(problems, count);
  L.dual = problems[0].b2.data != nullptr;
  const int tm = L.tm;
  const bool ws_ok = workspace && tm == 128; /* the smaller tiles take no workspace */
  const int64_t out_cols = L.dual ? TILE_R / 2 : TILE_R;
  L.tiles = table_tiles(L.t, problems, count, tm, out_cols);
  if (problems[0].offs) { /* W4A16 rows grouped by expert (one problem, plan.cu's valid): a bound, a CTA per tile */
    const nvfp4_matmul &p = problems[0];
    L.tiles = expert_row_tiles(p, tm) * ((p.n + out_cols - 1) / out_cols);
    L.t.tile_start[1] = (int32_t)std::min<int64_t>(L.tiles, INT32_MAX);
    L.ksteps = p.k / KSTEP;
    L.cover = Cover{1, 0, (double)L.ksteps};
    /* The pre-pass lays the rows out: rows by token or quantized first always (it gathers and quantizes them, as
     * the caller would), rows as given where at least 16 column tiles share its pass over them (MoE blocks, H200,
     * 2026-11-30, bench_moe, W4A4 rows quantized by a kernel before, against no pre-pass: DeepSeek-V3 at T = 512,
     * 4096 (gate/up 16 column tiles, down 28) 0.85-0.92x the time; Qwen3-30B-A3B (gate/up 6) 1.00-1.04x) and not
     * where a test's variant asks for none. */
    const int64_t tiles_n = (p.n + out_cols - 1) / out_cols;
    if (ws_ok && expert_predecodes(p) && (p.a_index || p.a_global || (!no_pre && tiles_n >= 16)))
      L.a16_blk[1] = (int32_t)((p.m * L.ksteps + 127) / 128); /* 16 KB blocks holding the rows' m x K x 2 bytes */
    return L;
  }
  for (int g = 0; g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    if (p.m && p.n && p.batch && p.k / KSTEP > L.ksteps) L.ksteps = p.k / KSTEP;
  }
  const int64_t tiles = L.tiles, ksteps = L.ksteps;
  if (tiles == 0 || tiles * MAX_SPLIT > INT32_MAX) return L;
  bool sk_ok = ws_ok;
  for (int g = 0; g < count; g++) /* stream-K: every problem with tiles has the same K */
    sk_ok = sk_ok && (!problems[g].m || !problems[g].n || !problems[g].batch || problems[g].k / KSTEP == ksteps);
  int64_t blocks = 0; /* the fp16 tiles of problems with tiles, where a pre-pass may write them */
  const bool w4a16 = problems[0].a_type != NVFP4_E2M1;
  bool pre_ok = ws_ok && !no_pre;
  for (int g = 0; pre_ok && g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    L.a16_blk[g] = (int32_t)blocks;
    if (p.n) blocks += ((p.m + tm - 1) / tm) * p.batch * (p.k / KSTEP);
    pre_ok = blocks * tm * KSTEP * 2 <= Launch::MAX_PRE_BYTES;
  }
  const double pre_bytes = pre_ok ? (double)(blocks * tm * KSTEP * 2) : -1.0;
  if (sk_ok) L.sk_cost = sk_cost(L.t, (int)ksteps);
  const double sk_steps = sk_ok ? (double)L.sk_cost / 50.0 : (double)(tiles * ksteps);
  L.cover = choose_cover(L.dual, tm, tiles, ksteps, sk_steps, pre_bytes, sk_ok, device_info(), w4a16);
  /* Pre-decoded where a CTA runs at least PRE_MIN_STEPS (16-bit activations:
   * not with stream-K). H200, the consumers' HALVES loop, pre-decoded against
   * not (one run): Llama-3 8B / 70B linears at M = 128..1024 (CUDA graphs of
   * calls on rotated weights) 5-23% faster at 32-224 steps a CTA, 8-11% at
   * 11-16; the competition's calls back to back (t_loop) at 64 steps 5%
   * faster, 32 within 5%, but 8-15 steps 2-20% slower (gemm 128 x 7168 x
   * 2048 16.5 -> 18.3 us, group [128, 384] x 4096 x 1536 20.0 -> 24.1). */
  if (!pre_ok || (w4a16 && L.cover.sk_ctas) || L.cover.steps < PRE_MIN_STEPS) return L;
  L.a16_blk[count] = (int32_t)blocks;
  return L;
}

bool expert_predecodes(const nvfp4_matmul &p) {
  return p.offs && p.a_type != NVFP4_E2M1 && tile_rows(&p, 1) == 128 && p.k / KSTEP >= PRE_MIN_STEPS &&
         2 * p.m * p.k <= Launch::MAX_PRE_BYTES;
}

/* sk.start[0 .. ctas] for the launch's 128-row tiles (ksteps each, in the
 * kernel's order: problem, batch, column tile, row tile): range c's first
 * step is where the launch's cost reaches c / ctas of its total, rounded to a
 * step; every range keeps at least one step (an owner waits on the flag of
 * every range that starts inside its tile). */
void sk_ranges(const Launch &L, StreamK &sk) {
  const MatmulTable &t = L.t;
  const int ctas = sk.ctas, ksteps = (int)L.ksteps;
  const int64_t total = L.tiles * ksteps;
  const int64_t cost = L.sk_cost;
  int c = 1;
  int64_t before = 0; /* the cost of the tiles before tile gt */
  sk.start[0] = 0;
  for (int g = 0; g < t.count; g++) {
    const nvfp4_matmul &p = t.p[g];
    const int64_t tiles_m = (p.m + 127) / 128;
    for (int64_t gt = t.tile_start[g]; gt < t.tile_start[g + 1]; gt++) {
      const int64_t mt = (gt - t.tile_start[g]) % tiles_m; /* row tile: the fastest index */
      const int w = sk_step_cost(std::min<int64_t>(128, p.m - mt * 128));
      for (; c < ctas && cost * c / ctas < before + w * ksteps; c++)
        sk.start[c] = (int32_t)(gt * ksteps + (cost * c / ctas - before + w / 2) / w);
      before += w * ksteps;
    }
  }
  for (; c <= ctas; c++) sk.start[c] = (int32_t)total;
  for (c = 1; c < ctas; c++) sk.start[c] = std::max(sk.start[c], sk.start[c - 1] + 1);
  for (c = ctas - 1; c > 0; c--) sk.start[c] = std::min(sk.start[c], sk.start[c + 1] - 1);
}

}  // namespace sm90
