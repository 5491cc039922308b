/*
 * plan.cu - which kernel runs a call: the one place that decides, and the C
 * entry of the CUDA kernels (nvfp4.h).
 *
 * Each kernel file says only what it can run on a device (kernels.h); here
 * an ordered table of rules says which of those is fastest. The first rule
 * whose kernel can run every problem of the call and whose condition holds
 * takes it. Each rule names the measurement that put it there (H100 unless
 * said; docs/PERF.md has the numbers per kernel). A call is planned once;
 * nvfp4_matmul_cuda_ws launches that plan and nvfp4_matmul_cuda_describe
 * reports it.
 *
 * A GEMV kernel sees its problem "as vectors" (kernels.h): the call as given
 * (the gemv op; a gemm of few weight rows, not dual) or with the roles
 * swapped (a gemm or dual of few activation rows: B's rows are streamed
 * against the M activation rows as vectors, the output written transposed).
 *
 * Grouped calls (more than one problem) take the first tile kernel (wgmma,
 * mma, simt) that runs every problem, in launches of up to
 * NVFP4_LAUNCH_GROUPS problems.
 *
 * A W4A4 call whose activations come unquantized (the gemm_w4a4 ops) is
 * quantized either to codes or to the values they stand for (a W4A16
 * problem): nvfp4_matmul_cuda_prefers_values picks by values_pay. One row
 * (per batch) with its global scale in device memory is quantized by the dp4a
 * GEMV itself on Hopper (nvfp4_matmul_cuda_quantizes_in_kernel): no quantize
 * launch.
 *
 * Problems whose activations are 16-bit values (W4A16, a_type), rows grouped
 * by expert (offs) among them, go to the wgmma kernel (Hopper, from 17 rows;
 * 9 to 16 of weights laid out by tile where w4a16.cu would leave SMs idle; by
 * expert from 16 an expert) or the w4a16 kernel, prefill gemms on Hopper to
 * cuBLASLt over weights decoded per call (cublas.cu; where it has an
 * algorithm and, at launch, its scratch); the other kernels take NVFP4
 * activations only.
 *
 * Tests force a kernel ahead of the table with NVFP4_FORCE_KERNEL=name[:option]
 * (read once): it takes every call it can run, the table the rest.
 *   gemv_dp4a, gemv_mma, skinny, wgmma, mma, simt, w4a16, cublas; wgmma:decode (no
 *   pre-pass: the producer decodes); mma:wk1, mma:wk4 (its CTA shape).
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels.h"

namespace {

enum class Kernel { W4A16, GEMV_DP4A, GEMV_MMA, SKINNY, WGMMA, MMA, SIMT, CUBLAS, NONE };
constexpr const char *KERNEL_NAMES[] = {"w4a16", "gemv_dp4a", "gemv_mma", "skinny", "wgmma", "mma", "simt", "cublas"};

/* How a rule's kernel sees the problem. */
enum class View { GIVEN, VECTORS, SWAPPED };

/* ---- the policy's conditions --------------------------------------------
 * In steps of 128 K of the busiest CTA (gemv_mma_share_steps; a CTA has 16
 * warps): where the integer-mma GEMV beats the dp4a GEMV of as many vectors
 * and the kernels that would otherwise take 5 to 8 rows (skinny, wgmma). */
constexpr int64_t WARP_STEPS = 16;

/* p as vectors on the integer-mma GEMV (gemv_mma_can_run(p) holds). */
bool gemv_mma_pays(const nvfp4_matmul &p, const DeviceInfo &dev) {
  /* 4 vectors everywhere: gemm 2-18% faster on 16 of 22 shapes, 2-3% slower on 3 of 2-4 steps a warp; dual 5-19% */
  if (p.n == 4) return true;
  const int64_t steps = gemv_mma_share_steps(p, dev);
  if (p.n > 4) {
    /* 5 to 8 (no dp4a build): vs skinny / the 32-row wgmma tile, gemm of 5, 6 16-25% faster below 28 steps a
     * warp, of 7, 8 4-19% below 10; dual of 5, 6 everywhere 9-24%, of 7, 8 4-22% below 16 */
    if (p.b2.data) return p.n <= 6 || steps < 16 * WARP_STEPS;
    return steps < (p.n <= 6 ? 28 : 10) * WARP_STEPS;
  }
  /* 2, 3 vectors from 3.5 steps a warp: dual 5-18%, gemm 2-14% faster than dp4a at 3.5 to 12; shorter 0.5-4%
   * slower. Longer shares, now split unevenly and three vectors on the four-vector build (H200, 2026-12-03, one
   * run, each forced): the linears of Llama-3 8B / 70B and Qwen2.5-7B layers at M = 2, 3 0.69-1.02x dp4a's time
   * (70B gate_up 82.2 / 92.0 us, Qwen2.5-7B down 16.7 / 24.1; layers 0.86-0.98x); bench_gemm's 2-3 x 2048-28672 x
   * 7168-16384, gemm and dual, 0.71-0.95x */
  return steps >= 7 * WARP_STEPS / 2;
}

/* The skinny kernel (skinny_can_run(p) holds): Hopper, 5-15% faster than the wgmma kernel's 32-row tile at K >=
 * 8192 for M = 5..8, and M = 9..16 with at least 2^26 weight values (slower with shorter K, fewer items a CTA);
 * other GPUs M = 5..16 (not yet measured against matmul_mma.cu there). The GEMV is as fast for M <= 4. */
bool skinny_pays(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (p.m < 5) return false;
  if (dev.major != 9 || dev.minor != 0) return true;
  return p.k >= 8192 && (p.m <= 8 || (double)p.batch * p.n * p.k >= (double)(1ll << 26));
}

/* Where it pays (above); 2 to 4 vectors laid out by tile (a W4A4 layer's weights on a GPU) always. Layers' linears
 * by tile (H200, 2026-12-03, one round, bench_models w4a4t, NVFP4_FORCE_KERNEL=w4a16 for the quantized values on
 * the W4A16 GEMV), time over the values': Llama-3 8B M = 2 0.77x (gate_up 25.0 / 36.6 us), M = 4 0.86x; 70B 0.82x,
 * 0.90x; Qwen2.5-7B 0.79x, 0.90x (down at M = 4 1.05x); M = 3 (on the four-vector build) 0.84x, 0.88x, 0.89x. */
bool gemv_mma_pays_or_tiled(const nvfp4_matmul &p, const DeviceInfo &dev) {
  return p.a.tile_rows || gemv_mma_pays(p, dev);
}

/* Hopper, 5 to 8 vectors where the integer-mma GEMV pays. */
bool hopper_wide_mma_pays(const nvfp4_matmul &p, const DeviceInfo &dev) {
  return dev.major == 9 && dev.minor == 0 && p.n > 4 && gemv_mma_pays(p, dev);
}

bool always(const nvfp4_matmul &, const DeviceInfo &) { return true; }

/* 9 to 16 rows of weights laid out by tile (as NVFP4Linear holds them), dense: the wgmma kernel's 32-row tile
 * (its step costs the same as at 16 rows) where w4a16.cu would leave SMs idle. Its GEMV where its CTAs fill 0.75 to
 * 0.9 of one wave's slots or trail past a wave under 0.9 of their waves'; its 16-row tiles where split K gives each
 * CTA at most 2048 values. H200, 2026-12-02, be99ee1's kernels, bench_models w4a16t, M = 12 / 16, one round;
 * wgmma's time over w4a16.cu's:
 * - GEMV: Qwen2.5-7B qkv (288 CTAs for 264 slots) 0.68 / 0.64, down (224) 0.80 / 0.73, o (224) 1.01 / 0.98;
 *   Qwen3-32B o and down (320) 0.54-0.64; Llama-3-8B and Qwen3-8B o and down (256): 0.94-1.17, kept.
 * - 16-row tiles, a CTA's K: Llama-3-8B / Qwen3-8B qkv (820) 0.79-0.82, gate_up (2048) 0.87-0.92; Llama-3-70B o
 *   (2048) 0.95 / 0.96; Qwen3-32B qkv (1707) 1.00 / 1.01. Kept: Llama-3-70B qkv (2731) 1.09-1.11, gate_up
 *   (8192) and down (7168) 1.05-1.10; Qwen2.5-7B gate_up (3584) 1.24-1.30; Qwen3-32B gate_up (5120) 1.09-1.11.
 * Layers at M = 12 against bf16, the next run: Llama-3-8B 1.63x -> 1.77x, 70B 1.87x -> 1.92x, Qwen2.5-7B 1.63x ->
 * 1.80x, Qwen3-8B 1.61x -> 1.72x, Qwen3-32B 1.46x -> 1.80x. */
bool by_tile_wgmma_pays(const nvfp4_matmul &p) {
  if (!p.b.tile_rows || p.m > 16) return false;
  const W4A16Launch w = w4a16_launch_of(p);
  if (!w.gemv) return w.cta_k <= 2048;
  const int64_t waves = (w.ctas + w.slots - 1) / w.slots;
  return 4 * w.ctas >= 3 * w.slots && 10 * w.ctas < 9 * waves * w.slots;
}

/* W4A16 on the wgmma kernel (where matmul_sm90_can_run: Hopper, K % 64 == 0,
 * aligned rows) from 17 rows (9 to 16 by tile: above), or rows grouped by
 * expert from 16 an expert on average. A Llama-3-8B / 70B layer's linears (H200, 2026-11-29): M = 20, 24,
 * 32 took 0.66 / 0.65 / 0.56x the time of w4a16.cu's GEMV (8B; 70B 0.63 /
 * 0.62 / 0.53x), M = 40..56 0.45-0.56x that of its 64-row tiles; M = 8, 12,
 * 16 1.22 / 1.04 / 0.99x the GEMV's (70B 1.36 / 1.15 / 1.09x): its 256 x 32
 * tile's step costs the same at any M. MoE blocks (bench_moe, uniform /
 * skewed routing, against w4a16.cu's 16-row tiles): Qwen3-30B-A3B T = 512 (32
 * an expert) 0.76x / 0.58x the time; DeepSeek-V3 T = 512 (16 an expert)
 * 1.16x / 0.51x (the 16-row tiles decode a busy expert's weights once per 16
 * of its rows: 0.56x of bf16 skewed, wgmma 1.13x), T = 64 1.68x / 1.30x; T =
 * 4096 (fecdef0) 0.44x / 0.51x. */
bool w4a16_wgmma_pays(const nvfp4_matmul &p, const DeviceInfo &) {
  return p.a_type != NVFP4_E2M1 && (p.offs ? p.m >= 16 * p.batch : p.m > 16 || (p.m > 8 && by_tile_wgmma_pays(p)));
}

/* W4A4 with unquantized activations (nvfp4_matmul_cuda_prefers_values): the quantized values on w4a16.cu's GEMV
 * rather than the codes on the integer-mma GEMV or the wgmma kernel, for M = 5..8 on Hopper. A Llama-3 8B / 70B
 * layer's linears (H200, 2026-11-30, cf635f3; each way the activations' quantization plus the kernel), values' time
 * over codes' at M = 5..8: 8B qkv 0.68-0.80, o 0.89-1.07, gate_up 0.80-0.96, down 0.88-0.90 (M = 5, 6); 70B qkv
 * 0.79, o 0.99-1.00, gate_up 0.62-0.79 (the dual on the 32-row wgmma tile: 162 -> 103 us at M = 8). Not taken:
 * skinny's shapes at M = 7, 8 (8B down 0.88-0.90, 70B 1.04-1.15), M <= 4 (dp4a, the integer-mma GEMV at 4:
 * 0.78-1.64, 1.22-1.64 at M = 1), M = 10..16 (0.77-1.32). */
bool values_pay(const nvfp4_matmul &p, Kernel codes, View codes_view, Kernel values, const DeviceInfo &dev) {
  /* prefill: the values on cuBLASLt where its rule takes them (Llama-3 gemms at M = 2048..8192 0.82-0.98x the time
   * of the codes on wgmma, M = 1024 with K <= 4096 0.88-1.02x: cublas_pays' measurement) */
  if (values == Kernel::CUBLAS) return true;
  const bool mma_gemv = codes == Kernel::GEMV_MMA && codes_view == View::SWAPPED;
  return dev.major == 9 && dev.minor == 0 && p.m >= 5 && p.m <= 8 && values == Kernel::W4A16 &&
         (mma_gemv || codes == Kernel::WGMMA);
}

/* W4A16 gemms of many rows (prefill) on cuBLASLt over weights decoded per call (cublas.cu), on Hopper: from 2048
 * rows, 1024 where K <= 4096. Llama-3 8B / 70B layers' gemms (H200, 2026-12-02, bench_models, one round; time
 * over the wgmma kernel's, 16-bit activations as NVFP4Linear holds its weights / W4A4's quantized values):
 * M = 1024: 8B qkv 0.87 / 0.88, o 0.96 / 1.02, down 1.05 / 1.05; 70B qkv 1.00-1.05, o 1.08-1.12, down 1.06-1.16;
 * M = 2048: 8B 0.85-0.90, 70B 0.94-1.00; M = 4096, 8192: 0.78-0.92. Duals stay on wgmma (both products' fp32
 * sums through cuBLASLt, then their silu product: 0.98-1.39x its time). */
bool cublas_pays(const nvfp4_matmul &p, const DeviceInfo &dev) {
  return dev.major == 9 && dev.minor == 0 && (p.m >= 2048 || (p.m >= 1024 && p.k <= 4096));
}

struct Rule {
  Kernel kernel;
  View view;
  bool grouped; /* may take a call of several problems */
  bool (*when)(const nvfp4_matmul &seen, const DeviceInfo &dev); /* on the problem as the kernel sees it */
};

/* The table. */
constexpr Rule RULES[] = {
    /* 16-bit activations, prefill gemms on Hopper: the weights decoded, then cuBLASLt */
    {Kernel::CUBLAS, View::GIVEN, false, cublas_pays},
    /* 16-bit activations (W4A16): wgmma on Hopper from 17 rows, else mma.sync (every sm_80+ GPU) */
    {Kernel::WGMMA, View::GIVEN, true, w4a16_wgmma_pays},
    {Kernel::W4A16, View::GIVEN, true, always},
    /* the gemv op, a gemm of <= 8 weight rows: the weights' bytes decide, streamed once by a GEMV */
    {Kernel::GEMV_MMA, View::VECTORS, false, gemv_mma_pays},
    {Kernel::GEMV_DP4A, View::VECTORS, false, always}, /* 1 to 4 vectors: 0.84-0.93 of the copy rate (H200) */
    /* Hopper, M = 5..8: the integer-mma GEMV ahead of skinny where its rule takes it (5 x 4096 x 8192 21.3 -> 16.6
     * us, 8 x 2048 x 8192 18.6 -> 15.2; 8 x 7168 x 16384 39.6 -> 52.9 where the rule says no) */
    {Kernel::GEMV_MMA, View::SWAPPED, false, hopper_wide_mma_pays},
    {Kernel::SKINNY, View::GIVEN, false, skinny_pays},
    /* M <= 8 activation rows: the weights streamed once against them (M = 1..4 on a 128-row wgmma tile spends
     * ~0.6 us per 256 x 64 step on the weights' decode: 2-4x slower) */
    {Kernel::GEMV_MMA, View::SWAPPED, false, gemv_mma_pays_or_tiled},
    {Kernel::GEMV_DP4A, View::SWAPPED, false, always},
    /* larger M: tensor cores; wgmma on Hopper (0.6-0.9 of the fp16 rate on large shapes), else mma.sync (0.33 of
     * the wgmma rate at 4096^3 on an H100, ~16x the SIMT kernel) */
    {Kernel::WGMMA, View::GIVEN, true, always},
    {Kernel::MMA, View::GIVEN, true, always},
    {Kernel::SIMT, View::GIVEN, true, always}, /* any shape, stride and alignment: ~0.02 of the speed of light */
};

/* Problem p as a rule's kernel sees it (false: that view does not exist).
 * VECTORS: p itself, not dual (a dual's B2 is A's partner, not more vectors);
 * SWAPPED: M <= 8 activation rows as the vectors, B (and B2) streamed. */
bool view_of(const nvfp4_matmul &p, View view, nvfp4_matmul &q, int64_t &c_vec_stride) {
  q = p;
  c_vec_stride = 1;
  if (view == View::VECTORS) return !p.b2.data && !p.a_global; /* A quantized in the kernel: only as the vectors */
  if (view == View::SWAPPED) {
    if (p.m > 8) return false;
    q.m = p.n, q.n = p.m;
    q.a = p.b, q.b = p.a;
    q.c_row_stride = 1;
    c_vec_stride = p.c_row_stride;
  }
  return true;
}

bool is_gemv(Kernel k) { return k == Kernel::GEMV_DP4A || k == Kernel::GEMV_MMA; }

bool can_run(Kernel k, const nvfp4_matmul &p, const DeviceInfo &dev) {
  const bool w4a16 = p.a_type != NVFP4_E2M1;
  /* dense rows quantized in the kernel (a_global, no offs): the GEMVs, x as their vectors (dp4a one, integer mma
   * 2 to 4) */
  if (p.a_global && !p.offs)
    return (k == Kernel::GEMV_DP4A && gemv_dp4a_can_run(p, dev)) || (k == Kernel::GEMV_MMA && gemv_mma_can_run(p, dev));
  /* weights laid out by tile (tiles_ok; A of the swapped view): w4a16.cu, wgmma and cuBLASLt's decode read them,
   * and the GEMVs as their streamed A (W4A4 layers at M <= 4: dp4a one row, integer mma 2 to 4) */
  if ((p.a.tile_rows || p.b.tile_rows) && k != Kernel::W4A16 && k != Kernel::WGMMA && k != Kernel::CUBLAS &&
      !is_gemv(k))
    return false;
  /* W4A16: w4a16.cu, wgmma or cuBLASLt */
  if (k == Kernel::W4A16 || k == Kernel::CUBLAS ? !w4a16 : w4a16 && k != Kernel::WGMMA) return false;
  /* rows grouped by expert: 16-bit activations, on w4a16.cu or wgmma; rows by token (a_index) too, wgmma through
   * its pre-pass only (matmul_sm90_can_run; else nvfp4_matmul_cuda_reads_rows); rows quantized first (a_global)
   * there alone */
  if (p.offs && (!w4a16 || (k != Kernel::W4A16 && k != Kernel::WGMMA))) return false;
  if (p.a_global && k != Kernel::WGMMA) return false;
  switch (k) {
    case Kernel::W4A16: return w4a16_can_run(p, dev);
    case Kernel::GEMV_DP4A: return gemv_dp4a_can_run(p, dev);
    case Kernel::GEMV_MMA: return gemv_mma_can_run(p, dev);
    case Kernel::SKINNY: return skinny_can_run(p, dev);
    case Kernel::WGMMA: return matmul_sm90_can_run(p, dev);
    case Kernel::MMA: return matmul_mma_can_run(p, dev);
    case Kernel::SIMT: return true;
    case Kernel::CUBLAS: return cublas_can_run(p, dev);
    default: return false;
  }
}

bool is_tile(Kernel k) { return k == Kernel::W4A16 || k == Kernel::WGMMA || k == Kernel::MMA || k == Kernel::SIMT; }

/* NVFP4_FORCE_KERNEL (tests): the kernel, and its option (wgmma: decode,
 * no pre-pass, 1; mma: its WK). Unknown names force nothing. */
struct Forced {
  Kernel kernel = Kernel::NONE;
  int option = 0;
};

const Forced &forced() {
  static const Forced f = [] {
    Forced r;
    const char *e = std::getenv("NVFP4_FORCE_KERNEL");
    if (!e || !*e) return r;
    const char *colon = std::strchr(e, ':');
    const size_t n = colon ? (size_t)(colon - e) : std::strlen(e);
    for (int k = 0; k < (int)Kernel::NONE; k++)
      if (std::strlen(KERNEL_NAMES[k]) == n && !std::strncmp(e, KERNEL_NAMES[k], n)) r.kernel = (Kernel)k;
    if (colon && r.kernel == Kernel::WGMMA && !std::strcmp(colon + 1, "decode")) r.option = 1;
    if (colon && r.kernel == Kernel::MMA && !std::strcmp(colon + 1, "wk1")) r.option = 1;
    if (colon && r.kernel == Kernel::MMA && !std::strcmp(colon + 1, "wk4")) r.option = 4;
    return r;
  }();
  return f;
}

/* A call's plan: its kernel and, for a GEMV kernel, the problem as it sees
 * it. */
struct Plan {
  Kernel kernel = Kernel::NONE;
  View view = View::GIVEN;
  nvfp4_matmul seen;        /* GEMV kernels: the problem as vectors */
  int64_t c_vec_stride = 1; /* GEMV kernels */
  int option = 0;           /* a forced variant (Forced) */
};

/* Whether kernel k in view `view` takes the call (and `when`, if given, holds). */
bool takes(Kernel k, View view, bool (*when)(const nvfp4_matmul &, const DeviceInfo &), const nvfp4_matmul *problems,
           int count, const DeviceInfo &dev, Plan &plan) {
  if (count > 1 && !is_tile(k)) return false;
  for (int g = 0; g < count; g++) {
    nvfp4_matmul q;
    int64_t vs;
    if (!view_of(problems[g], view, q, vs) || !can_run(k, q, dev) || (when && !when(q, dev))) return false;
    if (g == 0) plan.seen = q, plan.c_vec_stride = vs;
  }
  plan.kernel = k, plan.view = view;
  return true;
}

/* cuBLASLt takes a call only where it has an algorithm for it (asked once per shape: after the cheap conditions)
 * and, at launch, its scratch (cublas = false: it had none). */
Plan plan_call(const nvfp4_matmul *problems, int count, const DeviceInfo &dev, bool cublas = true) {
  Plan plan;
  auto ok = [&](const Plan &p) { return p.kernel != Kernel::CUBLAS || (cublas && cublas_ready(problems[0])); };
  const Forced &f = forced();
  if (f.kernel != Kernel::NONE) {
    const bool gemv = is_gemv(f.kernel);
    if ((takes(f.kernel, gemv ? View::VECTORS : View::GIVEN, nullptr, problems, count, dev, plan) ||
         (gemv && takes(f.kernel, View::SWAPPED, nullptr, problems, count, dev, plan))) &&
        ok(plan)) {
      plan.option = f.option;
      return plan;
    }
  }
  for (const Rule &r : RULES)
    if ((count == 1 || r.grouped) && takes(r.kernel, r.view, r.when, problems, count, dev, plan) && ok(plan))
      return plan;
  plan = Plan();
  return plan; /* NONE for W4A16 where its kernel cannot run and for weights laid out by tile that no codes
                * kernel reads (can_run); the SIMT kernel runs every other NVFP4 problem */
}

bool empty(const nvfp4_matmul &p) { return p.m == 0 || p.n == 0 || p.batch == 0; }

/* Weights laid out by tile (nvfp4.h): whole tiles, linear scales, b2 as b; rows grouped by expert 64 or 128 rows
 * a tile, a dense problem's 128 (what NVFP4Linear holds on a GPU). Read by the kernels can_run lets take them. */
bool tiles_ok(const nvfp4_matmul &p) {
  const int32_t t = p.b.tile_rows;
  if (p.a.tile_rows || (p.b2.data ? p.b2.tile_rows : 0) != (p.b2.data ? t : 0)) return false;
  if (!t) return true;
  if (p.n % t || p.b.sf_layout != NVFP4_SF_LINEAR || (p.b2.data && p.b2.sf_layout != NVFP4_SF_LINEAR)) return false;
  return p.offs ? t == 64 || t == NVFP4_TILE_ROWS : t == NVFP4_TILE_ROWS;
}

/* Sizes in range; types known; pointers present unless the problem is empty
 * (an empty tensor may have no storage); all dual or none, all W4A16 or none;
 * no bias on a dual; rows grouped by expert alone in a call, A and C not
 * batched, no bias; weights laid out by tile as tiles_ok says. */
bool valid(const nvfp4_matmul *problems, int count) {
  if (count <= 0) return false;
  for (int g = 0; g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    const bool fp4 = p.a_type == NVFP4_E2M1;
    if (p.k <= 0 || p.k % 16 || p.m < 0 || p.n < 0 || p.batch < 0) return false;
    if ((p.b2.data != nullptr) != (problems[0].b2.data != nullptr) || p.a_type != problems[0].a_type) return false;
    if (!fp4 && p.a_type != NVFP4_F16 && p.a_type != NVFP4_BF16) return false;
    /* weights repacked for bf16 (nvfp4.h): bf16 activations, every weight operand of the call so */
    if (p.b.codes != problems[0].b.codes || (p.b2.data && p.b2.codes != p.b.codes)) return false;
    if (p.b.codes != NVFP4_CODES_BYTES && (p.b.codes != NVFP4_CODES_BF16_PAIRS || p.a_type != NVFP4_BF16)) return false;
    if (p.c_type != NVFP4_F16 && p.c_type != NVFP4_BF16) return false;
    if (p.bias && (p.b2.data || (p.bias_type != NVFP4_F32 && p.bias_type != NVFP4_F16 && p.bias_type != NVFP4_BF16)))
      return false;
    if (!empty(p) && !(p.a.data && p.b.data && (p.a.sf || !fp4) && p.b.sf && p.c && (!p.b2.data || p.b2.sf)))
      return false;
    if (p.offs && (count > 1 || p.a.batch_stride || p.c_batch_stride || p.bias)) return false;
    if (p.a_index && (!p.offs || fp4 || p.a_rows < 0)) return false; /* 16-bit rows by expert */
    if (p.a_global && (fp4 || p.a_rows < 0)) return false;            /* 16-bit rows, by expert or dense */
    if (!tiles_ok(p)) return false;
  }
  return true;
}

/* One launch of a tile kernel over problems[0, count <= NVFP4_LAUNCH_GROUPS). */
cudaError_t launch_tiles(const Plan &plan, const nvfp4_matmul *problems, int count, nvfp4_workspace_fn ws, void *ctx,
                         cudaStream_t stream) {
  switch (plan.kernel) {
    case Kernel::W4A16: return w4a16_launch(problems, count, ws, ctx, stream);
    case Kernel::WGMMA: return matmul_sm90_launch(problems, count, plan.option, ws, ctx, stream);
    case Kernel::MMA: return matmul_mma_launch(problems, count, plan.option, stream);
    default: return matmul_simt_launch(problems, count, stream);
  }
}

}  // namespace

/* common.cuh's DeviceInfo::sm90_code reads this kernel's attributes. */
__global__ void nvfp4_arch_probe_kernel() {}

extern "C" nvfp4_status nvfp4_matmul_cuda(const nvfp4_matmul *problems, int count, cudaStream_t stream) {
  return nvfp4_matmul_cuda_ws(problems, count, nullptr, nullptr, stream);
}

extern "C" nvfp4_status nvfp4_matmul_cuda_ws(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn workspace,
                                             void *ctx, cudaStream_t stream) {
  if (!valid(problems, count)) return NVFP4_ERR_INVALID;
  if (count == 1 && empty(problems[0])) return NVFP4_OK; /* nothing to launch */
  Plan plan = plan_call(problems, count, device_info());
  if (plan.kernel == Kernel::CUBLAS) {
    const cudaError_t err = cublas_launch(problems[0], workspace, ctx, stream);
    if (err != cudaErrorNotSupported) return err == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
    plan = plan_call(problems, count, device_info(), false); /* no scratch: it launched nothing */
  }
  if (plan.kernel == Kernel::NONE) return NVFP4_ERR_INVALID; /* W4A16 on a device no kernel runs */
  const bool swapped = plan.view == View::SWAPPED; /* a GEMV kernel's bias then goes by its rows */
  cudaError_t err = cudaSuccess;
  switch (plan.kernel) {
    case Kernel::GEMV_DP4A: err = gemv_dp4a_launch(plan.seen, plan.c_vec_stride, swapped, stream); break;
    case Kernel::GEMV_MMA: err = gemv_mma_launch(plan.seen, plan.c_vec_stride, swapped, stream); break;
    case Kernel::SKINNY: err = skinny_launch(problems[0], workspace, ctx, stream); break;
    default:
      for (int g = 0; g < count && err == cudaSuccess; g += NVFP4_LAUNCH_GROUPS)
        err = launch_tiles(plan, problems + g, std::min(count - g, NVFP4_LAUNCH_GROUPS), workspace, ctx, stream);
  }
  return err == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}

extern "C" int nvfp4_matmul_cuda_prefers_values(const nvfp4_matmul *values, const nvfp4_matmul *codes) {
  /* the caller validated the problem (its output may be unbound: kernel_name); planning needs sizes and types */
  const nvfp4_matmul &p = *values;
  if (p.k <= 0 || p.k % 16 || p.m < 0 || p.n < 0 || p.batch < 0 || p.a_type == NVFP4_E2M1 || p.offs ||
      codes->a_type != NVFP4_E2M1)
    return 0;
  const DeviceInfo &dev = device_info();
  const Plan v = plan_call(values, 1, dev);
  if (v.kernel == Kernel::NONE) return 0;
  const Plan c = plan_call(codes, 1, dev);
  if (c.kernel == Kernel::NONE) return 1; /* weights laid out by tile past the dp4a GEMV (can_run) */
  const Forced &f = forced();
  if (f.kernel != Kernel::NONE) return f.kernel == Kernel::W4A16 || f.kernel == Kernel::CUBLAS; /* tests */
  return values_pay(p, c.kernel, c.view, v.kernel, dev);
}

extern "C" int nvfp4_matmul_cuda_quantizes_in_kernel(const nvfp4_matmul *p) {
  /* p: 16-bit A, a_global set, not by expert; the caller validated the rest. 1 to 4 rows only (the GEMVs' can_run):
   * no planning for the others */
  if (p->k <= 0 || p->k % 16 || p->m < 1 || p->m > 4 || p->n < 0 || p->batch < 0 || p->a_type == NVFP4_E2M1 ||
      p->offs || !p->a_global)
    return 0;
  /* Hopper, where measured (H200, 2026-12-02, e620273, against the quantize kernel before the GEMV, one build,
   * 2 rounds; Llama-3 layers at M = 1): 8B qkv 0.96x the time, o 1.02x, gate_up 0.95x, down 0.97x; 70B qkv 0.96x,
   * o 0.99x, gate_up 0.98x, down 0.92x; the layer 0.96x both */
  const DeviceInfo &dev = device_info();
  if (dev.major != 9 || dev.minor != 0) return 0;
  const Kernel k = plan_call(p, 1, dev).kernel;
  const Forced &f = forced(); /* tests: another kernel forced takes the quantized codes */
  if (f.kernel != Kernel::NONE && k != f.kernel) return 0;
  return k == Kernel::GEMV_DP4A || k == Kernel::GEMV_MMA;
}

/* Rows by token (a_index) are read in place by w4a16.cu's tiles (MoE blocks at T = 8, 64: 0.96-1.00x the time
 * of gathered rows, one launch fewer) and gathered by the wgmma kernel's pre-pass where it has one
 * (expert_predecodes), which also quantizes rows (a_global); where the plan is the wgmma kernel otherwise, the
 * caller gathers them first: its producer took rows in place 1.08-1.15x the time (H200, 2026-11-30, against
 * dbefc1b's kernels, bench_moe W4A16 T = 4096: DeepSeek-V3 8554 -> 9445 us uniform, 6746 -> 7733 skewed;
 * Qwen3-30B-A3B 1047 -> 1131, 976 -> 1054). */
extern "C" int nvfp4_matmul_cuda_reads_rows(const nvfp4_matmul *p) {
  if (!p->a_index && !p->a_global) return 1;
  const DeviceInfo &dev = device_info();
  nvfp4_matmul q = *p; /* the kernel is the plain rows' (a wgmma launch for a_global alone at T = 64 took 1.2-1.4x) */
  q.a_index = nullptr, q.a_global = nullptr;
  const Plan plain = plan_call(&q, 1, dev);
  if (plain.kernel == Kernel::WGMMA) /* through its pre-pass, unless forced without it */
    return plain.option == 0 && can_run(Kernel::WGMMA, *p, dev);
  return plain.kernel == Kernel::W4A16 && !p->a_global;
}

extern "C" nvfp4_status nvfp4_matmul_cuda_describe(const nvfp4_matmul *problems, int count, char *buf, size_t len) {
  if (!buf || !len) return NVFP4_ERR_INVALID;
  buf[0] = 0;
  if (count <= 0) return NVFP4_ERR_INVALID;
  const Plan plan = plan_call(problems, count, device_info());
  if (plan.kernel == Kernel::NONE) return NVFP4_ERR_INVALID;
  char what[128] = "";
  const int n = std::min(count, NVFP4_LAUNCH_GROUPS); /* the first launch's */
  if (plan.kernel == Kernel::WGMMA) matmul_sm90_describe(problems, n, plan.option, true, what, sizeof what);
  if (plan.kernel == Kernel::MMA) matmul_mma_describe(problems, n, plan.option, what, sizeof what);
  if (plan.kernel == Kernel::W4A16) w4a16_describe(problems, n, true, what, sizeof what);
  if (plan.kernel == Kernel::CUBLAS) cublas_describe(problems[0], what, sizeof what);
  if (plan.view == View::SWAPPED)
    std::snprintf(what, sizeof what, plan.seen.a_global ? "roles swapped, x quantized in the kernel" : "roles swapped");
  std::snprintf(buf, len, what[0] ? "%s (%s)" : "%s", KERNEL_NAMES[(int)plan.kernel], what);
  return NVFP4_OK;
}
