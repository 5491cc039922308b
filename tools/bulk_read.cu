/*
 * tools/bulk_read.cu - how fast can the SMs pull a GEMV's bytes on chip, and by
 * which instructions? (development probe, never part of the extension)
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icsrc \
 *        tools/bulk_read.cu -o /tmp/bulk_read && /tmp/bulk_read [piece] 7168,16384 4096,7168,8
 *
 * For each case M,K[,L] it reads exactly the bytes a GEMV of that shape reads
 * (L*M*K/2 of fp4 codes, L*M*K/16 of scales; each CTA a contiguous share of
 * both) and touches every byte once in a register (xor), in four ways (name:
 * U = 16-byte loads in flight per thread, C = CTAs of 256 threads per SM):
 *   ldgUxC     __ldg (ld.global.nc) in batches of U, then their use
 *              (tools/trace.sh read:, the floor of session 7)
 *   ringUxC[na] U loads always in flight (a register ring, software
 *              pipelined); na: ld.global.nc.L1::no_allocate
 *   cpasyncUxC each thread its own U-deep ring of 16-byte cp.async.cg (the
 *              GEMV's copy path), read back from shared memory
 *   bulkCHxNS  one thread per CTA (one CTA per SM) issues cp.async.bulk (TMA,
 *              1-D) of CH bytes of codes + CH/8 of scales per stage into an
 *              NS-slot ring with mbarriers; 8 consumer warps read each stage
 *              from shared memory (N: they only wait and release)
 *   pieceRxPsSxC the skinny kernel's pattern (PERF.md session 25): CTAs of 4
 *              warps, each warp an S-slot ring of items of R rows x P bytes
 *              of codes (+ P/8 of each row's scales), 16-byte cp.async.cg,
 *              a warp's items contiguous (a row block's pieces in K order),
 *              CTAs equal contiguous ranges of all items; read back from
 *              shared memory. Only with `piece` first (then the two ldg
 *              variants as the reference; cases of L*M % 64 == 0, K % 4096 == 0)
 *   tilePsNS[sc] the Hopper tensor-core kernel's producer (matmul_sm90.cu):
 *              a CTA of 128 copying threads per 256 rows x a K range, an
 *              NS-slot ring of P bytes of each row (P = 32: its K step);
 *              sc: 16-byte scale copies. Only with `tile` first (cases of
 *              L*M % 256 == 0, K % 1024 == 0; PERF.md session 39)
 * Times: "call" = one launch after an L2 sweep (events, median of 9);
 * "loop" = 20 launches back to back over input sets rotated so L2 holds none
 * (events over the loop / 20, median of 5). Fractions are of bytes / the
 * device-to-device copy bandwidth measured in the same run.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/ptx_sm90.cuh"
#include "numerics.h"

#include "cuda_check.cuh"
#include "probe_common.cuh"

struct Src {
  const uint4 *a, *s;  /* codes and scales, in 16-byte units */
  size_t na, ns;
  size_t rows, row_bytes; /* the codes as L*M rows of K/2 bytes (piece) */
};

__device__ __forceinline__ void share(size_t n, size_t &lo, size_t &hi) {
  lo = n * blockIdx.x / gridDim.x, hi = n * (blockIdx.x + 1) / gridDim.x;
}

__host__ __device__ inline size_t umin(size_t a, size_t b) { return a < b ? a : b; }
__host__ __device__ inline size_t umax(size_t a, size_t b) { return a > b ? a : b; }

/* ---- ldg: the plain read ---- */
template <int U>
__global__ void __launch_bounds__(256) ldg_kernel(Src src, unsigned *sink) {
  unsigned x = 0;
  for (int part = 0; part < 2; part++) {
    const uint4 *p = part ? src.s : src.a;
    size_t lo, hi;
    share(part ? src.ns : src.na, lo, hi);
    for (size_t i = lo + threadIdx.x; i < hi; i += 256 * U) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const size_t j = i + (size_t)u * 256;
        v[u] = j < hi ? __ldg(p + j) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  if (x == 0x12345678u) *sink = x;
}

/* ---- ring: U loads always in flight per thread (software pipeline in registers);
 * NA: ld.global.nc.L1::no_allocate instead of __ldg ---- */
template <bool NA>
__device__ __forceinline__ uint4 load16(const uint4 *p) {
  if (!NA) return __ldg(p);
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <int U, bool NA>
__global__ void __launch_bounds__(256) ring_kernel(Src src, unsigned *sink) {
  unsigned x = 0;
  for (int part = 0; part < 2; part++) {
    const uint4 *p = part ? src.s : src.a;
    size_t lo, hi;
    share(part ? src.ns : src.na, lo, hi);
    const int64_t mine = hi > lo + threadIdx.x ? (int64_t)((hi - lo - threadIdx.x + 255) / 256) : 0;
    const uint4 *q = p + lo + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = u < mine ? load16<NA>(q + 256 * u) : make_uint4(0, 0, 0, 0);
    for (int64_t j = 0; j < mine; j += U) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        const int64_t n = j + u + U;
        v[u] = n < mine ? load16<NA>(q + 256 * n) : make_uint4(0, 0, 0, 0);
      }
    }
  }
  if (x == 0x12345678u) *sink = x;
}

/* ---- cpasync: per-thread rings of 16-byte cp.async ---- */
template <int CPA_STAGES>
__global__ void __launch_bounds__(256) cpasync_kernel(Src src, unsigned *sink) {
  __shared__ uint4 ring[CPA_STAGES][256];
  unsigned x = 0;
  for (int part = 0; part < 2; part++) {
    const uint4 *p = part ? src.s : src.a;
    size_t lo, hi;
    share(part ? src.ns : src.na, lo, hi);
    const size_t mine = hi > lo + threadIdx.x ? (hi - lo - threadIdx.x + 255) / 256 : 0;
    auto issue = [&](size_t j) {
      if (j < mine) {
        const uint32_t d = (uint32_t)__cvta_generic_to_shared(&ring[j % CPA_STAGES][threadIdx.x]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(p + lo + threadIdx.x + 256 * j) : "memory");
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int j = 0; j < CPA_STAGES - 1; j++) issue(j);
    for (size_t j = 0; j < mine; j++) {
      issue(j + CPA_STAGES - 1);
      asm volatile("cp.async.wait_group %0;" ::"n"(CPA_STAGES - 1) : "memory");
      const uint4 v = ring[j % CPA_STAGES][threadIdx.x];
      x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
  if (x == 0x12345678u) *sink = x;
}

/* ---- piece: a warp's ring of R rows x P bytes items (the skinny kernel's reads) ---- */
/* MODE 0: a warp instruction copies 4 rows x 128 bytes (lane / 8, lane % 8),
 * scales 16 bytes of a row per lane. MODE 1: the MMA GEMV's copies at CPL = 2
 * (R = 16, P = 128): lane (g, t) copies 16 bytes at 64 c + 16 t of rows g and
 * g + 8 (an instruction covers 8 rows x 64 bytes) and 4-byte scale words
 * (cp.async.ca) 8 c + 4 (t / 2) of each; MODE 2: MODE 1's code copies, MODE 0's
 * scale copies. */
template <int R, int P, int S, int MODE = 0, int WARPS = 4>
__global__ void __launch_bounds__(32 * WARPS) piece_kernel(Src src, unsigned *sink) {
  extern __shared__ __align__(1024) uint8_t smem[]; /* one declaration for all kernels here */
  constexpr int CU = R * P / 16, SU = (MODE == 1 ? 2 : 1) * R * P / 128; /* 16-byte units of codes, scales per item */
  constexpr int SLOT = 16 * (CU + SU);
  static_assert(CU % 32 == 0 && P % 128 == 0, "whole chunks per lane");
  static_assert(MODE == 0 || (R == 16 && P == 128), "the MMA GEMV's item");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t steps = src.row_bytes / P, items = src.rows / R * steps;
  size_t lo, hi;
  share(items, lo, hi);
  const size_t n = hi - lo, a = lo + n * warp / WARPS, e = lo + n * (warp + 1) / WARPS;
  const uint32_t ring = (uint32_t)__cvta_generic_to_shared(smem) + warp * S * SLOT;
  const uint8_t *codes = reinterpret_cast<const uint8_t *>(src.a), *scales = reinterpret_cast<const uint8_t *>(src.s);
  auto issue = [&](size_t x, int slot) {
    if (x < e) {
      const size_t row0 = x / steps * R, off = x % steps * P;
      if (MODE) {
        const int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int c = 0; c < 2; c++) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ring + slot * SLOT + 16 * ((c * 2 + h) * 32 + lane)),
                         "l"(codes + (row0 + g + 8 * h) * src.row_bytes + off + 64 * c + 16 * t)
                         : "memory");
            if (MODE == 1)
              asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(ring + slot * SLOT + 16 * CU + 4 * ((c * 2 + h) * 32 + lane)),
                           "l"(scales + (row0 + g + 8 * h) * (src.row_bytes / 8) + off / 8 + 8 * c + 4 * (t / 2))
                           : "memory");
          }
      }
#pragma unroll
      for (int u = 0; u < (MODE ? 0 : CU / 32); u++) {
        const int c = lane + 32 * u, r = c / (P / 16), k = c % (P / 16);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ring + slot * SLOT + 16 * c),
                     "l"(codes + (row0 + r) * src.row_bytes + off + 16 * k)
                     : "memory");
      }
      for (int c = lane; c < (MODE == 1 ? 0 : SU); c += 32) {
        const int r = c / (P / 128), k = c % (P / 128);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ring + slot * SLOT + 16 * (CU + c)),
                     "l"(scales + (row0 + r) * (src.row_bytes / 8) + off / 8 + 16 * k)
                     : "memory");
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int j = 0; j < S - 1; j++) issue(a + j, j);
  unsigned x = 0;
  for (size_t i = a; i < e; i++) {
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
    __syncwarp();
    issue(i + S - 1, (int)((i - a + S - 1) % S));
    const uint4 *st = reinterpret_cast<const uint4 *>(smem + warp * S * SLOT + (i - a) % S * SLOT);
#pragma unroll
    for (int c = lane; c < CU + SU; c += 32) {
      const uint4 v = st[c];
      x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncwarp();
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  if (x == 0x12345678u) *sink = x;
}

/* ---- tile: the Hopper tensor-core kernel's producer reads (matmul_sm90.cu,
 * StageCopies): a CTA of 128 copying threads per unit of 256 weight rows x a
 * K range (units = row tiles x split, as split-K deals them; one CTA per SM),
 * an NS-slot ring of items of P bytes of each of the 256 rows, and their
 * scales; each thread reads its own copies back. P = 32 is the kernel's K step
 * (a warp instruction 16 rows x 32 bytes, thread t chunk t % 2 of rows t / 2
 * + 64 u) with a 4-byte cp.async.ca per row (the linear scale layout) or, SC,
 * the blocked layout's two contiguous 512-byte atoms per step by 16-byte
 * copies. P = 128 is four steps at once: a warp instruction 4 rows x 128
 * bytes (whole lines), scales by 4-byte copies or (SC) one 16-byte copy per
 * row. ---- */
template <int P, int NS, bool SC>
__global__ void __launch_bounds__(128) tile_kernel(Src src, int split, unsigned *sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int CPR = P / 16, CU = 256 * CPR / 128; /* 16-byte chunks per row; code copies per thread */
  constexpr int SLOT = 256 * P + 256 * P / 8;
  const int t = threadIdx.x;
  const size_t row0 = (size_t)(blockIdx.x / split) * 256, part = blockIdx.x % split;
  const size_t kb0 = src.row_bytes * part / split / P * P, kb1 = src.row_bytes * (part + 1) / split / P * P;
  const size_t items = (kb1 - kb0) / P, k_blocks = src.row_bytes / 8; /* scale columns of a row */
  const uint8_t *codes = reinterpret_cast<const uint8_t *>(src.a), *scales = reinterpret_cast<const uint8_t *>(src.s);
  const uint32_t ring = (uint32_t)__cvta_generic_to_shared(smem);
  auto issue = [&](size_t x) {
    if (x < items) {
      const uint32_t slot = ring + (uint32_t)(x % NS) * SLOT;
      const size_t off = kb0 + x * P;
#pragma unroll
      for (int u = 0; u < CU; u++) {
        const int c = t + 128 * u, r = c / CPR, k = c % CPR;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(slot + 16 * c),
                     "l"(codes + (row0 + r) * src.row_bytes + off + 16 * k)
                     : "memory");
      }
      const uint32_t ss = slot + 256 * P;
      if (SC && P == 32) { /* blocked: atoms of 128 rows x one step's 4 columns, 512 bytes */
        if (t < 64) {
          const int64_t atom = nvfp4_sf_offset(NVFP4_SF_BLOCKED, 0, k_blocks, row0 + 128 * (t / 32), off / 8);
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ss + 16 * t), "l"(scales + atom + 16 * (t % 32)) : "memory");
        }
      } else { /* linear: each row's P / 8 bytes by copies of W bytes */
        constexpr int W = SC ? 16 : 4;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int j = 0; j < P / 8 / W; j++) {
            const uint32_t d = ss + (t + 128 * h) * (P / 8) + W * j;
            const uint8_t *g = scales + nvfp4_sf_offset(NVFP4_SF_LINEAR, k_blocks, k_blocks, row0 + t + 128 * h, off / 8) + W * j;
            if (SC) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(g) : "memory");
            else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(g) : "memory");
          }
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int j = 0; j < NS - 1; j++) issue(j);
  unsigned x = 0;
  for (size_t i = 0; i < items; i++) {
    asm volatile("cp.async.wait_group %0;" ::"n"(NS - 2) : "memory");
    issue(i + NS - 1); /* the slot of item i - 1, read by this thread alone */
    const uint8_t *st = smem + (i % NS) * SLOT;
#pragma unroll
    for (int u = 0; u < CU; u++) {
      const uint4 v = *reinterpret_cast<const uint4 *>(st + 16 * (t + 128 * u));
      x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (!(SC && P == 32) || t < 64) /* a word of this thread's own scale copies */
      x ^= *reinterpret_cast<const uint32_t *>(st + 256 * P + (SC && P == 32 ? 16 : P / 8) * t);
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  if (x == 0x12345678u) *sink = x;
}

/* ---- bulk: TMA 1-D copies into a shared ring (mbarriers: ptx_sm90.cuh) ---- */
__device__ __forceinline__ void mbar_expect(uint32_t a, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
template <bool HINT>
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, uint64_t pol) {
  if (HINT)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
  else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
                 "r"(bytes), "r"(bar)
                 : "memory");
}

/* Stage j of a CTA: codes [lo + j CH, ...) and scales [slo + j CH/8, ...), in
 * 16-byte units, both clipped to the CTA's share (scales may run out first or
 * last: each part has its own count of stages; the stage count is the larger). */
template <int CH, int NS, bool READ, bool HINT>
__global__ void __launch_bounds__(288, 1) bulk_kernel(Src src, unsigned *sink) {
#if NVFP4_SM90A /* ptx_sm90.cuh's mbarriers exist in the sm_90a device pass only */
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int CU = CH / 16, SU = CH / 128; /* 16-byte units per stage */
  constexpr int STAGE = CH + CH / 8;
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
  const uint32_t full = base + NS * STAGE, empty = full + 8 * NS;
  size_t lo, hi, slo, shi;
  share(src.na, lo, hi);
  share(src.ns, slo, shi);
  const size_t steps = umax((hi - lo + CU - 1) / CU, (shi - slo + SU - 1) / SU);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0)
    for (int s = 0; s < NS; s++) mbar_init(full + 8 * s, 1), mbar_init(empty + 8 * s, 8);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  if (warp == 8) { /* producer */
    if (lane == 0) {
      uint64_t pol = 0;
      if (HINT) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
      for (size_t j = 0; j < steps; j++) {
        const int s = j % NS;
        if (j >= NS) mbar_wait(empty + 8 * s, ((j / NS) - 1) & 1);
        const size_t a0 = umin(lo + j * CU, hi), a1 = umin(a0 + CU, hi);
        const size_t s0 = umin(slo + j * SU, shi), s1 = umin(s0 + SU, shi);
        mbar_expect(full + 8 * s, (uint32_t)(16 * (a1 - a0 + s1 - s0)));
        if (a1 > a0) bulk_copy<HINT>(base + s * STAGE, src.a + a0, (uint32_t)(16 * (a1 - a0)), full + 8 * s, pol);
        if (s1 > s0) bulk_copy<HINT>(base + s * STAGE + CH, src.s + s0, (uint32_t)(16 * (s1 - s0)), full + 8 * s, pol);
      }
    }
    return;
  }
  unsigned x = 0;
  for (size_t j = 0; j < steps; j++) {
    const int s = j % NS;
    mbar_wait(full + 8 * s, (j / NS) & 1);
    if (READ) {
      const uint4 *st = reinterpret_cast<const uint4 *>(smem + s * STAGE);
#pragma unroll
      for (int u = threadIdx.x; u < CU + SU; u += 256) {
        const uint4 v = st[u];
        x ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * s);
  }
  if (x == 0x12345678u) *sink = x;
#endif
}

struct Variant {
  const char *name;
  void (*launch)(Src, unsigned *, int sms, cudaStream_t);
};

template <int CH, int NS, bool READ, bool HINT, int CPS>
void launch_bulk(Src s, unsigned *sink, int sms, cudaStream_t st) {
  constexpr int SMEM = NS * (CH + CH / 8) + 16 * NS;
  static bool once = [] {
    CHECK(cudaFuncSetAttribute(bulk_kernel<CH, NS, READ, HINT>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    return true;
  }();
  (void)once;
  bulk_kernel<CH, NS, READ, HINT><<<sms * CPS, 288, SMEM, st>>>(s, sink);
}
template <int R, int P, int S, int CPS, int MODE = 0>
void launch_piece(Src s, unsigned *sink, int sms, cudaStream_t st) {
  constexpr int SMEM = 4 * S * (R * P + (MODE == 1 ? 2 : 1) * R * P / 8);
  static bool once = [] {
    CHECK(cudaFuncSetAttribute(piece_kernel<R, P, S, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    return true;
  }();
  (void)once;
  piece_kernel<R, P, S, MODE><<<sms * CPS, 128, SMEM, st>>>(s, sink);
}
/* One CTA of 16 warps on each of the first NSM SMs (the MMA GEMV's grid of 112
 * CTAs on 132 SMs: PERF.md session 34). */
template <int R, int P, int S, int MODE, int NSM>
void launch_piece16(Src s, unsigned *sink, int, cudaStream_t st) {
  constexpr int SMEM = 16 * S * (R * P + (MODE == 1 ? 2 : 1) * R * P / 8);
  static bool once = [] {
    CHECK(cudaFuncSetAttribute(piece_kernel<R, P, S, MODE, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    return true;
  }();
  (void)once;
  piece_kernel<R, P, S, MODE, 16><<<NSM, 512, SMEM, st>>>(s, sink);
}
/* The tensor-core kernel's grid: tiles of 256 rows, split-K to fill the SMs
 * (at most 8), one CTA per SM (shared memory asked for accordingly). */
template <int P, int NS, bool SC>
void launch_tile(Src s, unsigned *sink, int sms, cudaStream_t st) {
  constexpr int SMEM = std::max(NS * (256 * P + 256 * P / 8), 120 << 10);
  static bool once = [] {
    CHECK(cudaFuncSetAttribute(tile_kernel<P, NS, SC>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    return true;
  }();
  (void)once;
  const int tiles = (int)(s.rows / 256), split = std::max(1, std::min(8, sms / std::max(tiles, 1)));
  tile_kernel<P, NS, SC><<<tiles * split, 128, SMEM, st>>>(s, split, sink);
}
template <int U, int CPS>
void launch_ldg(Src s, unsigned *sink, int sms, cudaStream_t st) { ldg_kernel<U><<<sms * CPS, 256, 0, st>>>(s, sink); }
template <int U, bool NA, int CPS>
void launch_ring(Src s, unsigned *sink, int sms, cudaStream_t st) { ring_kernel<U, NA><<<sms * CPS, 256, 0, st>>>(s, sink); }
template <int STAGES, int CPS>
void launch_cpasync(Src s, unsigned *sink, int sms, cudaStream_t st) { cpasync_kernel<STAGES><<<sms * CPS, 256, 0, st>>>(s, sink); }

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned *sink;
  CHECK(cudaMalloc(&sink, 4));
  const size_t sweep_bytes = 256u << 20;
  uint4 *sweep;
  CHECK(cudaMalloc(&sweep, sweep_bytes));
  CHECK(cudaMemset(sweep, 1, sweep_bytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  /* copy bandwidth: device to device, bytes read + written */
  float copy_bw;
  {
    uint8_t *d;
    CHECK(cudaMalloc(&d, sweep_bytes));
    std::vector<float> t;
    for (int i = 0; i < 7; i++) {
      CHECK(cudaEventRecord(e0));
      CHECK(cudaMemcpyAsync(d, sweep, sweep_bytes, cudaMemcpyDeviceToDevice));
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    copy_bw = 2.0f * sweep_bytes / (median(t) * 1e-3f) / 1e12f;
    CHECK(cudaFree(d));
  }
  printf("device SMs %d, copy %.2f TB/s\n", sms, copy_bw);
  const Variant variants[] = {
      /* name: loads (or stages) in flight per thread x CTAs of 256 per SM */
      {"ldg8x4", launch_ldg<8, 4>},
      {"ldg4x4", launch_ldg<4, 4>},
      {"ldg4x8", launch_ldg<4, 8>},
      {"ring4x4", launch_ring<4, false, 4>},
      {"ring6x4", launch_ring<6, false, 4>},
      {"ring4x4na", launch_ring<4, true, 4>},
      {"ring6x3na", launch_ring<6, true, 3>},
      {"ring2x8", launch_ring<2, false, 8>},
      {"cpasync6x4", launch_cpasync<6, 4>},
      {"cpasync3x8", launch_cpasync<3, 8>},
      {"bulk16Kx8", launch_bulk<16384, 8, true, false, 1>},
      {"bulk16Kx8N", launch_bulk<16384, 8, false, false, 1>},
      {"bulk32Kx5", launch_bulk<32768, 5, true, false, 1>},
  };
  const Variant pieces[] = {
      /* name: rows x bytes of an item, ring slots per warp, CTAs of 4 warps per SM */
      {"piece64x128s2x2", launch_piece<64, 128, 2, 2>},
      {"piece64x128s3x2", launch_piece<64, 128, 3, 2>},
      {"piece64x128s2x3", launch_piece<64, 128, 2, 3>},
      {"piece32x128s4x2", launch_piece<32, 128, 4, 2>},
      {"piece32x256s2x2", launch_piece<32, 256, 2, 2>},
      {"piece16x512s2x2", launch_piece<16, 512, 2, 2>},
      {"piece16x512s3x2", launch_piece<16, 512, 3, 2>},
      {"piece8x1024s2x2", launch_piece<8, 1024, 2, 2>},
      {"piece8x1024s2x3", launch_piece<8, 1024, 2, 3>},
      {"piece4x2048s2x2", launch_piece<4, 2048, 2, 2>},
      /* the MMA GEMV of 4 vectors (gemv.cu, session 34): 16 warps per SM, a
         warp's item 16 rows x 128 bytes (CPL = 2), and longer pieces */
      {"piece16x128s3x4", launch_piece<16, 128, 3, 4>},
      {"piece16x128s5x4", launch_piece<16, 128, 5, 4>},
      {"mma16x128s3x4", launch_piece<16, 128, 3, 4, 1>},   /* MODE 1 */
      {"mmacode16x128s3x4", launch_piece<16, 128, 3, 4, 2>},  /* MODE 2 */
      /* CTAs of 16 warps, one per SM, on 132 or 112 SMs */
      {"mma16x128s3g132", launch_piece16<16, 128, 3, 1, 132>},
      {"mma16x128s3g112", launch_piece16<16, 128, 3, 1, 112>},
      {"piece16x128s3g132", launch_piece16<16, 128, 3, 0, 132>},
      {"piece16x128s3g112", launch_piece16<16, 128, 3, 0, 112>},
      {"piece16x256s2x4", launch_piece<16, 256, 2, 4>},
      {"piece16x256s3x4", launch_piece<16, 256, 3, 4>},
  };
  const Variant tiles[] = {
      /* name: bytes of each row per item, ring slots, sc = 16-byte scale copies */
      {"tile32s10", launch_tile<32, 10, false>},
      {"tile32s6", launch_tile<32, 6, false>},
      {"tile32s10sc", launch_tile<32, 10, true>},
      {"tile128s3", launch_tile<128, 3, false>},
      {"tile128s3sc", launch_tile<128, 3, true>},
      {"tile128s4sc", launch_tile<128, 4, true>},
  };
  const bool piece_only = argc > 1 && std::string(argv[1]) == "piece";
  const bool tile_only = argc > 1 && std::string(argv[1]) == "tile";
  for (int c = 1 + (piece_only || tile_only); c < argc; c++) {
    long m = 0, k = 0, l = 1;
    if (sscanf(argv[c], "%ld,%ld,%ld", &m, &k, &l) < 2) {
      fprintf(stderr, "case M,K[,L]\n");
      return 2;
    }
    const size_t na = (size_t)l * m * k / 2 / 16, ns = (size_t)l * m * k / 16 / 16;
    const size_t bytes = 16 * (na + ns);
    const int sets = (int)std::max<size_t>(2, (200u << 20) / bytes + 1);
    std::vector<Src> srcs(sets);
    for (auto &s : srcs) {
      uint4 *a, *sc;
      CHECK(cudaMalloc(&a, 16 * na));
      CHECK(cudaMalloc(&sc, 16 * ns));
      CHECK(cudaMemset(a, 0x35, 16 * na));
      CHECK(cudaMemset(sc, 0x38, 16 * ns));
      s = {a, sc, na, ns, (size_t)(l * m), (size_t)k / 2};
    }
    const float sol_us = bytes / (copy_bw * 1e12f) * 1e6f;
    printf("\ncase %ldx%ld L%ld: %.1f MB, SOL %.2f us (%d input sets)\n", m, k, l, bytes / 1e6, sol_us, sets);
    printf("%-12s %9s %6s %9s %6s\n", "variant", "call us", "frac", "loop us", "frac");
    std::vector<Variant> run(variants, variants + (piece_only || tile_only ? 2 : sizeof variants / sizeof *variants));
    for (const Variant &v : pieces)
      if (piece_only && l * m % 64 == 0 && k % 4096 == 0) run.push_back(v);
    for (const Variant &v : tiles)
      if (tile_only && l * m % 256 == 0 && k % 1024 == 0) run.push_back(v);
    for (const Variant &v : run) {
      std::vector<float> call, loop;
      for (int r = 0; r < 9; r++) {
        sweep_kernel<<<sms * 4, 256>>>(sweep, sweep_bytes / 16, sink);
        CHECK(cudaEventRecord(e0));
        v.launch(srcs[r % sets], sink, sms, 0);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        call.push_back(ms * 1e3f);
      }
      for (int r = 0; r < 5; r++) {
        sweep_kernel<<<sms * 4, 256>>>(sweep, sweep_bytes / 16, sink);
        CHECK(cudaEventRecord(e0));
        for (int i = 0; i < 20; i++) v.launch(srcs[i % sets], sink, sms, 0);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        loop.push_back(ms * 1e3f / 20);
      }
      CHECK(cudaGetLastError());
      const float tc = median(call), tl = median(loop);
      printf("%-12s %9.2f %6.3f %9.2f %6.3f\n", v.name, tc, sol_us / tc, tl, sol_us / tl);
    }
    for (auto &s : srcs) {
      CHECK(cudaFree((void *)s.a));
      CHECK(cudaFree((void *)s.s));
    }
  }
  return 0;
}
