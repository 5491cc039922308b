/*
 * matmul_mma.cu - the portable tensor-core path (sm_80+): GEMM, dual GEMM and
 * grouped GEMM on mma.sync m16n8k16, fp16 operands, fp32 accumulators.
 *
 * It serves every GPU without the wgmma kernel (Ampere, Ada, Blackwell: B200
 * runs sm_100a, where wgmma does not exist) and, on Hopper, the shapes that
 * kernel leaves (K not a multiple of 64, rows 8 but not 16 bytes aligned).
 * Until it came, all of those ran the SIMT kernel at ~0.02 of speed of light.
 *
 * Speed of light. The tensor work of C = A B^T is 2 M N K flops; on an A100
 * mma.sync is the peak path (312 TFLOP/s fp16 dense), on Hopper it reaches
 * about two thirds of wgmma's rate. The decode is paid per warp: a warp of a
 * 64 x 64 output tile decodes its 64 activation rows and 64 weight rows of
 * every K step (8 codes -> 4 fp16x2 in ~15 instructions), i.e. ~500
 * instructions against 128 mma per warp and K step of 64; a CTA's four warps
 * each decode their own rows, so a row is decoded twice per CTA (two warps
 * share it), in exchange for no fp16 tile in shared memory and no barrier
 * between the decode and the mma.
 *
 * Dataflow, per CTA = 128 threads = 4 warps (2 x 2), output tile 128
 * activation rows x TN weight rows (gemm TN = 128; dual 64 rows of B1 and the
 * same 64 of B2), K step 64:
 *   gmem codes (32 bytes of a row) + its 4 scale bytes --cp.async, a ring of
 *     STAGES slots shared by the CTA, zero-filled past M, N and K--> smem
 *   per warp and step: its 64 activation rows -> mma A fragments
 *     (nvfp4_wgmma_a_fragments, 64 registers), then per 8 weight rows their
 *     B fragments (nvfp4_e2m1x8_to_half2x4) and 16 mma (4 m16 x 4 k16)
 *   epilogue: fp32 x 2^12 (NVFP4_TC_UNSCALE) x alpha (or silu(C1) * C2) -> fp16.
 * The K order inside a step is numerics.h's (thread t of a quad owns bytes
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
#include <cstdlib>

#include "common.cuh"

namespace {

constexpr int THREADS = 128; /* 4 warps: 2 along M x 2 along N */
constexpr int TM = 128;           /* activation rows per CTA (2 warps x 64)       */
constexpr int TB = 128;           /* weight rows per CTA stage (dual: 64 + 64)    */
constexpr int KSTEP = 64;         /* K values per step: 32 bytes of a row         */
constexpr int STAGES = 4;
constexpr int ROWS = TM + TB;     /* rows of a stage                              */
constexpr int SF_BASE = ROWS * 32;
constexpr int STAGE_BYTES = SF_BASE + ROWS * 4;
static_assert(STAGES * STAGE_BYTES <= 48 * 1024, "static shared memory");

/* Output columns (weight rows) of a CTA: 128, or 64 of each matrix (dual). */
template <bool DUAL>
constexpr int tile_n() { return DUAL ? TB / 2 : TB; }

/* What a thread copies: whole rows, A's row `tid` and B's (dual: B1's or
 * B2's) row `TM + tid` of the stage, at K step 0; a step adds 32 bytes to the
 * codes and sf_step to the scales (4 linear, one 512-byte atom blocked). */
struct RowCopy {
  const uint8_t *codes, *sf;
  int64_t sf_step;
  bool ok; /* the row exists (else zero-filled) */
};

template <bool DUAL>
__device__ __forceinline__ RowCopy row_copy(const nvfp4_matmul &p, int r, int64_t l, int64_t m0, int64_t n0) {
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
 * at the end of K, none for a row that does not exist. */
__device__ __forceinline__ int step_bytes(const RowCopy &rc, int64_t k, int step) {
  const int64_t left = k / 2 - (int64_t)step * 32;
  return !rc.ok ? 0 : left < 32 ? (int)left : 32;
}

/* A row's 32 code bytes of K step `step` into its place in `slot`, in
 * CW-byte cp.async, zero-filled past what exists. */
template <int CW>
__device__ __forceinline__ void copy_codes(const RowCopy &rc, int64_t k, int step, uint8_t *slot, int r) {
  const int bytes = step_bytes(rc, k, step);
  const uint8_t *src = rc.codes + (int64_t)step * 32;
#pragma unroll
  for (int c = 0; c < 32 / CW; c++) {
    const int n = bytes - c * CW < 0 ? 0 : bytes - c * CW > CW ? CW : bytes - c * CW;
    if (CW == 16)
      cp_async_16(slot + r * 32 + c * CW, n ? src + c * CW : rc.codes, (uint32_t)n);
    else
      cp_async_8(slot + r * 32 + c * CW, n ? src + c * CW : rc.codes, (uint32_t)n);
  }
}

/* Its 4 scale bytes, 4-byte aligned: one cp.async, zero-filled likewise. */
__device__ __forceinline__ void copy_scales(const RowCopy &rc, int64_t k, int step, uint8_t *slot, int r) {
  const int n = step_bytes(rc, k, step) / 8;
  cp_async_4(slot + SF_BASE + r * 4, n ? rc.sf + step * rc.sf_step : rc.sf, (uint32_t)n);
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

/* Accumulators of a warp: [matrix][m16 tile][n8 tile][4]. */
template <bool DUAL>
struct Acc {
  static constexpr int MATS = DUAL ? 2 : 1, NT = (DUAL ? 32 : 64) / 8;
  float v[MATS][4][NT][4];
};

/* One K step of a warp from a stage slot: rows 64 wm.. of A, and per matrix
 * the warp's weight rows (gemm: 64 wn..; dual: 32 wn.. of B1 and of B2). */
template <bool DUAL>
__device__ __forceinline__ void mma_step(uint32_t slot, int wm, int wn, int g, int t, Acc<DUAL> &acc) {
  uint32_t fa[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = 64 * wm + 16 * i + g;
    const uint2 v0 = ld_shared_u2(slot + r * 32 + 8 * t), v1 = ld_shared_u2(slot + (r + 8) * 32 + 8 * t);
    const uint32_t sb = ld_shared_u8(slot + SF_BASE + r * 4 + t) | ld_shared_u8(slot + SF_BASE + (r + 8) * 4 + t) << 8;
    nvfp4_wgmma_a_fragments(v0, v1, sb, fa[i]);
  }
#pragma unroll
  for (int j = 0; j < Acc<DUAL>::NT; j++)
#pragma unroll
    for (int mat = 0; mat < Acc<DUAL>::MATS; mat++) {
      const int r = TM + (DUAL ? mat * (TB / 2) + 32 * wn : 64 * wn) + 8 * j + g;
      const uint2 v = ld_shared_u2(slot + r * 32 + 8 * t);
      const uint32_t s2 = nvfp4_e4m3x2_to_half2_bits(ld_shared_u8(slot + SF_BASE + r * 4 + t) * 0x101u);
      uint32_t lo[4], hi[4];
      nvfp4_e2m1x8_to_half2x4(v.x, s2, lo);
      nvfp4_e2m1x8_to_half2x4(v.y, s2, hi);
#pragma unroll
      for (int s = 0; s < 4; s++)
#pragma unroll
        for (int i = 0; i < 4; i++) mma_16816(acc.v[mat][i][j], fa[i][s], lo[s], hi[s]);
    }
}

template <bool DUAL, int CW, bool SF_ALIGNED>
__global__ void __launch_bounds__(THREADS, 2) matmul_mma_kernel(const __grid_constant__ MatmulTable t) {
  __shared__ __align__(128) uint8_t smem[STAGES * STAGE_BYTES];

  int64_t tile = blockIdx.x;
  const nvfp4_matmul &p = t.p[table_find(t, tile)];
  const int64_t tiles_n = (p.n + tile_n<DUAL>() - 1) / tile_n<DUAL>(), tiles_m = (p.m + TM - 1) / TM;
  const int64_t l = tile / (tiles_m * tiles_n);
  const int64_t m0 = tile / tiles_n % tiles_m * TM, n0 = tile % tiles_n * tile_n<DUAL>();
  const int steps = (int)((p.k + KSTEP - 1) / KSTEP);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp & 1, wn = warp >> 1, g = lane / 4, tq = lane % 4;
  const uint32_t base = smem_addr(smem);

  Acc<DUAL> acc;
#pragma unroll
  for (int m = 0; m < Acc<DUAL>::MATS; m++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < Acc<DUAL>::NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc.v[m][i][j][e] = 0.f;

  /* The ring: a cp.async group per step (empty past the end, so the count
   * stays exact). Unaligned scales go through registers instead: step s's
   * are loaded when its codes are copied (iteration s - 3) and stored at
   * iteration s - 2, whose slot every warp left before that iteration's
   * barrier; the load has one step's mma to arrive. */
  static_assert(TM == THREADS && TB == THREADS, "a thread copies one row of A and one of B");
  static_assert(STAGES >= 3, "unaligned scales are stored two steps ahead");
  const int ra_r = threadIdx.x, rb_r = TM + threadIdx.x;
  const RowCopy ra = row_copy<DUAL>(p, ra_r, l, m0, n0), rb = row_copy<DUAL>(p, rb_r, l, m0, n0);
  uint32_t sfa = 0, sfb = 0; /* unaligned scales on their way to shared memory */
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    uint8_t *slot = smem + s * STAGE_BYTES;
    if (s < steps) {
      copy_codes<CW>(ra, p.k, s, slot, ra_r);
      copy_codes<CW>(rb, p.k, s, slot, rb_r);
      if (SF_ALIGNED) {
        copy_scales(ra, p.k, s, slot, ra_r);
        copy_scales(rb, p.k, s, slot, rb_r);
      } else {
        sfa = load_scales(ra, p.k, s), sfb = load_scales(rb, p.k, s);
        if (s < STAGES - 2) {
          *reinterpret_cast<uint32_t *>(slot + SF_BASE + ra_r * 4) = sfa;
          *reinterpret_cast<uint32_t *>(slot + SF_BASE + rb_r * 4) = sfb;
        }
      }
    }
    cp_async_commit();
  }
  for (int s = 0; s < steps; s++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads(); /* step s landed for every thread; every warp is done with step s - 1's slot */
    const int next = s + STAGES - 1;
    if (!SF_ALIGNED && s + STAGES - 2 < steps) {
      uint8_t *slot = smem + (s + STAGES - 2) % STAGES * STAGE_BYTES;
      *reinterpret_cast<uint32_t *>(slot + SF_BASE + ra_r * 4) = sfa;
      *reinterpret_cast<uint32_t *>(slot + SF_BASE + rb_r * 4) = sfb;
    }
    if (next < steps) {
      uint8_t *slot = smem + next % STAGES * STAGE_BYTES;
      copy_codes<CW>(ra, p.k, next, slot, ra_r);
      copy_codes<CW>(rb, p.k, next, slot, rb_r);
      if (SF_ALIGNED) {
        copy_scales(ra, p.k, next, slot, ra_r);
        copy_scales(rb, p.k, next, slot, rb_r);
      } else {
        sfa = load_scales(ra, p.k, next), sfb = load_scales(rb, p.k, next);
      }
    }
    cp_async_commit();
    mma_step<DUAL>(base + s % STAGES * STAGE_BYTES, wm, wn, g, tq, acc);
  }
  cp_async_wait<0>();

  /* d[e]: activation row g (e < 2) or g + 8, weight row 2 tq + e % 2 of the n8 tile. */
  const float scale = NVFP4_TC_UNSCALE * (DUAL ? 1.f : problem_alpha(p));
  uint16_t *c = p.c + l * p.c_batch_stride;
  const bool pairs = aligned(c, 4) && p.c_row_stride % 2 == 0;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < Acc<DUAL>::NT; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int64_t row = m0 + 64 * wm + 16 * i + g + 8 * h;
        const int64_t col = n0 + (DUAL ? 32 : 64) * wn + 8 * j + 2 * tq;
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float x = acc.v[0][i][j][2 * h + e] * scale;
          v[e] = DUAL ? silu(x) * (acc.v[Acc<DUAL>::MATS - 1][i][j][2 * h + e] * scale) : x;
        }
        if (row >= p.m || col >= p.n) continue;
        uint16_t *dst = c + row * p.c_row_stride + col;
        if (pairs && col + 1 < p.n)
          *reinterpret_cast<uint32_t *>(dst) = pack_half2(v[0], v[1]);
        else {
          store_half(dst, v[0]);
          if (col + 1 < p.n) store_half(dst + 1, v[1]);
        }
      }
}

/* The code copies' width every operand of a problem allows: 16, 8, or 0
 * (rows not 8-byte aligned: the SIMT kernel's). */
int copy_width(const nvfp4_operand &o) {
  for (int w = 16; w >= 8; w /= 2)
    if (aligned(o.data, w) && o.row_stride % w == 0 && o.batch_stride % w == 0) return w;
  return 0;
}

int copy_width(const nvfp4_matmul &p) {
  int w = std::min(copy_width(p.a), copy_width(p.b));
  return p.b2.data ? std::min(w, copy_width(p.b2)) : w;
}

/* Whether a K step's 4 scale bytes of every row are one aligned word. */
bool scales_aligned(const nvfp4_operand &o) {
  return aligned(o.sf, 4) && o.sf_batch_stride % 4 == 0 && (o.sf_layout != NVFP4_SF_LINEAR || o.sf_row_stride % 4 == 0);
}

bool scales_aligned(const nvfp4_matmul &p) {
  return scales_aligned(p.a) && scales_aligned(p.b) && (!p.b2.data || scales_aligned(p.b2));
}

template <bool DUAL, int CW>
cudaError_t launch(const MatmulTable &t, unsigned tiles, bool sf_aligned, cudaStream_t stream) {
  if (sf_aligned)
    matmul_mma_kernel<DUAL, CW, true><<<tiles, THREADS, 0, stream>>>(t);
  else
    matmul_mma_kernel<DUAL, CW, false><<<tiles, THREADS, 0, stream>>>(t);
  return cudaGetLastError();
}

/* NVFP4_MMA in the environment (read once): 0 never (the SIMT kernel takes
 * what this one would); 1 ahead of every kernel but the gemv op's GEMV, on
 * every launch it can run (benchmarks, the tests' second pass); unset, where
 * the wgmma, GEMV and skinny kernels do not run (csrc/cuda/dispatch.cu). */
int mma_env() {
  static const int v = [] {
    const char *e = std::getenv("NVFP4_MMA");
    return !e ? -1 : e[0] == '0' ? 0 : 1;
  }();
  return v;
}

}  // namespace

bool matmul_mma_forced() { return mma_env() > 0; }

/* sm_80+, rows 8-byte aligned (copy_width); scales at any alignment. */
bool matmul_mma_supported(const nvfp4_matmul &p) {
  return mma_env() != 0 && device_info().major >= 8 && copy_width(p) > 0;
}

/* problems[0, count), count <= NVFP4_LAUNCH_GROUPS, all dual or all not, each
 * matmul_mma_supported. One launch; empty problems get no tiles. */
cudaError_t matmul_mma_launch(const nvfp4_matmul *problems, int count, cudaStream_t stream) {
  MatmulTable t;
  int64_t tiles = 0;
  int cw = 16;
  bool sf_aligned = true;
  const bool dual = problems[0].b2.data != nullptr;
  const int tn = dual ? tile_n<true>() : tile_n<false>();
  for (int g = 0; g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    t.p[g] = p;
    t.tile_start[g] = (int32_t)tiles;
    tiles += (p.m + TM - 1) / TM * ((p.n + tn - 1) / tn) * p.batch;
    cw = std::min(cw, copy_width(p));
    sf_aligned = sf_aligned && scales_aligned(p);
  }
  t.tile_start[count] = (int32_t)tiles;
  t.count = count;
  if (tiles == 0) return cudaSuccess;
  if (tiles > INT32_MAX || cw == 0) return cudaErrorInvalidConfiguration;
  if (dual) return cw == 16 ? launch<true, 16>(t, (unsigned)tiles, sf_aligned, stream)
                            : launch<true, 8>(t, (unsigned)tiles, sf_aligned, stream);
  return cw == 16 ? launch<false, 16>(t, (unsigned)tiles, sf_aligned, stream)
                  : launch<false, 8>(t, (unsigned)tiles, sf_aligned, stream);
}
