/*
 * tools/wgmma_rate.cu - where the tensor-core kernel's K step loses the tensor
 * rate: wgmma alone, then the kernel's pipeline rebuilt piece by piece.
 * (development probe, never part of the extension; PERF.md, session 22)
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icsrc \
 *        tools/wgmma_rate.cu -o /tmp/wgmma_rate && /tmp/wgmma_rate [batches [pipe]]
 *
 * One CTA per SM. Cycles come from clock64 per warpgroup (median over CTAs);
 * printed per variant: FLOP per cycle and SM against the dense fp16 peak of
 * 4096, the kernel's TFLOP/s (events) and the clock that implies. Operands
 * are random (the data moves the power draw, so the clock).
 *
 * Part 1 (rate_kernel, skipped by "pipe"): NWG warpgroups, each repeating a
 * batch of 2.1 MFLOP (a 128 x 128 x 64 product, one K step of the kernel's
 * consumer) and waiting until at most WAIT batches are in flight.
 *   rs128: 8 x m64n128k16, A (2 m-tiles x 4 k16) from registers, B from
 *          shared memory: the kernel's consumer without its decode
 *   ss128: the same with A from shared memory
 *   rs256 / ss256: 4 x m64n256k16 (64 rows x 256 columns per warpgroup)
 *   +dec:  between batches, 4 dependent fp16x2 / integer operations on each
 *          A fragment register
 *   +kdec: between batches, the consumer's own loads (4 x 8 bytes and 4
 *          scale bytes, rotating over 4 raw slots) and decode (numerics.h)
 *   +prod: a free-running warpgroup decoding 8 words per thread and step
 *          into the B tile (its cycles per step printed beside; it finishes
 *          its steps long before the consumers, so their rate is mostly
 *          measured without it); "prod alone": no consumers
 *
 * Part 2 (pipe_kernel): the kernel's K loop at TM = 128 without its global
 * addressing: a producer warpgroup and two consumers on the same rings and
 * mbarriers (6 raw slots, 4 fp16 activation tiles), the same loads, decodes,
 * arrivals and waits; COPY and MODE (below) change one piece at a time.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/ptx_sm90.cuh"
#include "numerics.h"

#include "cuda_check.cuh"

#if NVFP4_SM90A
/* The wgmma forms the kernel does not use (its own m64n128k16 with A from
 * registers is ptx_sm90.cuh's wgmma_rs<128>): accumulator operands and
 * their register lists built by macros. */
#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define ACC64(i) ACC8(i), ACC8(i + 8), ACC8(i + 16), ACC8(i + 24), ACC8(i + 32), ACC8(i + 40), ACC8(i + 48), ACC8(i + 56)
#define REGS10(a) "%" #a "0, %" #a "1, %" #a "2, %" #a "3, %" #a "4, %" #a "5, %" #a "6, %" #a "7, %" #a "8, %" #a "9"
/* "%0".."%63" and "%64".."%127" as strings */
#define REGS_0_63 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, " REGS10(1) ", " REGS10(2) ", " REGS10(3) ", " REGS10(4) \
  ", " REGS10(5) ", %60, %61, %62, %63"
#define REGS_64_127 "%64, %65, %66, %67, %68, %69, " REGS10(7) ", " REGS10(8) ", " REGS10(9) ", " REGS10(10) \
  ", " REGS10(11) ", %120, %121, %122, %123, %124, %125, %126, %127"

__device__ __forceinline__ void mma_ss128(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" REGS_0_63 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : ACC64(0)
               : "l"(da), "l"(db));
}
__device__ __forceinline__ void mma_rs256(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" REGS_0_63 ", " REGS_64_127
               "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
               : ACC64(0), ACC64(64)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void mma_ss256(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" REGS_0_63 ", " REGS_64_127
               "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
               : ACC64(0), ACC64(64)
               : "l"(da), "l"(db));
}
#endif

__device__ __forceinline__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}
/* two random fp16 in (-1, 1) */
__device__ __forceinline__ uint32_t rand_h2(uint32_t seed) {
  const uint32_t h = hash32(seed);
  const __half2 v = __floats2half2_rn((float)(h & 0xFFFF) / 32768.f - 1.f, (float)(h >> 16) / 32768.f - 1.f);
  return *reinterpret_cast<const uint32_t *>(&v);
}

__device__ __forceinline__ uint4 ld_shared_u4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

constexpr int BATCH_FLOP = 2 * 128 * 128 * 64;
constexpr int RAW_SLOT = 256 * 32 + 256 * 4; /* a K step's raw weight rows and scales */

/* shared memory: B (N rows x 64 fp16, 128-byte swizzled rows, swizzle
 * irrelevant for random data) then each warpgroup's A (128 * 128 / N rows) */
template <int N, bool RS, int WAIT, int NWG, int DEC, int PROD>
__global__ void __launch_bounds__((NWG + (PROD > 0)) * 128, 1) rate_kernel(int iters, long long *cycles, float *sink) {
#if NVFP4_SM90A
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int A_ROWS = 128 * 128 / N, B_BYTES = N * 128, A_BYTES = A_ROWS * 128;
  const int tid = threadIdx.x, wg = tid / 128;
  uint32_t *w = reinterpret_cast<uint32_t *>(smem);
  for (int i = tid; i < (B_BYTES + NWG * A_BYTES) / 4; i += blockDim.x) w[i] = rand_h2(i * 7919u + blockIdx.x);
  fence_proxy_async_smem();
  __syncthreads();
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
  const uint32_t b_addr = base, a_addr = base + B_BYTES + wg * A_BYTES;
  const uint32_t raw = base + B_BYTES + NWG * A_BYTES; /* DEC 2: 4 slots of RAW_SLOT bytes */
  if (PROD && wg == NWG) { /* producer stand-in: decode 8 words per thread per step into the B tile */
    if (NWG) setmaxnreg_dec<88>(); /* the GEMM kernel's split */
    const int t = tid - 128 * NWG;
    uint32_t acc_bits = 0;
    const long long p0 = clock64();
    for (int it = 0; it < iters; it++) {
      const uint32_t src = raw + (it & 3) * RAW_SLOT + t * 32;
      const uint4 w0 = ld_shared_u4(src), w1 = ld_shared_u4(src + 16);
      const uint32_t ws[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      const uint32_t s2 = 0x3C003C00u ^ ((uint32_t)it & 1u);
      uint32_t h[8][4];
#pragma unroll
      for (int q = 0; q < 8; q++) nvfp4_e2m1x8_to_half2x4(ws[q], s2, h[q]);
      const uint32_t dst = b_addr + (t & 127) * 128; /* one 128-byte row per thread */
#pragma unroll
      for (int q = 0; q < 8; q++) st_shared_u4(dst + 16 * (q ^ (t & 7)), make_uint4(h[q][0], h[q][1], h[q][2], h[q][3]));
      if (PROD == 1) fence_proxy_async_smem();
      acc_bits += h[0][0];
    }
    const long long p1 = clock64();
    if (acc_bits == 0x12345u) *sink = 1.f;
    if (t == 0) cycles[3 * gridDim.x + blockIdx.x] = p1 - p0;
    return;
  }
  if (PROD) setmaxnreg_inc<208>();
  if (NWG == 0) return;
  const int warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int r00 = wg * 128 + warp * 16 + g;
  const uint32_t b_at = raw + r00 * 32 + 16 * ((tq >> 1) ^ ((r00 >> 2) & 1)) + 8 * (tq & 1);
  const uint32_t sfb_at = raw + 256 * 32 + r00 * 4 + tq;
  constexpr int MT = 128 / (N / 2) / 1; /* m64 tiles per warpgroup: 2 (N = 128) or 1 (N = 256) */
  float acc[MT][N / 2];
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[m][i] = 0.f;
  uint32_t frag[MT][4][4];
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
      for (int r = 0; r < 4; r++) frag[m][s][r] = rand_h2(tid * 131u + m * 17u + s * 5u + r);
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; it++) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
      for (int m = 0; m < MT; m++) {
        const uint64_t db = wgmma_desc_sw128(b_addr + 32 * s);
        if constexpr (RS) {
          if constexpr (N == 128) wgmma_rs<128>(acc[m], frag[m][s], db);
          else mma_rs256(acc[m], frag[m][s], db);
        } else {
          const uint64_t da = wgmma_desc_sw128(a_addr + m * 64 * 128 + 32 * s);
          if constexpr (N == 128) mma_ss128(acc[m], da, db);
          else mma_ss256(acc[m], da, db);
        }
      }
    wgmma_commit();
    wgmma_wait<WAIT>();
    if constexpr (DEC == 2) { /* the GEMM consumer's loads and decode of 2 x 4 words */
      static_assert(N == 128 && RS, "the kernel's decode: rs128 only");
      const uint32_t off = ((it + 1) & 3) * RAW_SLOT;
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const uint2 v0 = ld_shared_u2(b_at + off + 2048 * hf), v1 = ld_shared_u2(b_at + off + 2048 * hf + 256);
        const uint32_t sb = ld_shared_u8(sfb_at + off + 256 * hf) | ld_shared_u8(sfb_at + off + 256 * hf + 32) << 8;
        nvfp4_wgmma_a_fragments(v0, v1, sb, frag[hf]);
      }
    }
    if constexpr (DEC == 1) { /* a stand-in for the fragments' decode: 4 dependent operations per register */
      const uint32_t k = (uint32_t)it & 0x00010001u, one = 0x3C003C00u;
#pragma unroll
      for (int m = 0; m < MT; m++)
#pragma unroll
        for (int s = 0; s < 4; s++)
#pragma unroll
          for (int r = 0; r < 4; r++) {
            uint32_t x = frag[m][s][r] ^ k;
            asm volatile("mul.rn.f16x2 %0, %0, %1;" : "+r"(x) : "r"(one));
            x ^= k;
            asm volatile("mul.rn.f16x2 %0, %0, %1;" : "+r"(x) : "r"(one));
            frag[m][s][r] = x;
          }
    }
  }
  wgmma_wait<0>();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int i = 0; i < N / 2; i++) s += acc[m][i];
  if (s == 12345.f) *sink = s;
  if (tid % 128 == 0) cycles[blockIdx.x * NWG + wg] = t1 - t0;
#endif
}


/* ---- the GEMM kernel's pipeline at TM = 128 without its global addressing:
 * a producer warpgroup and two consumers on the same rings and barriers
 * (6 raw slots: activation and weight rows and scales of a K step; 4 fp16
 * activation tiles), the same loads, decodes, arrivals and waits. COPY 0:
 * the producer "refills" a slot by arriving on its FULL barrier (no data
 * moves); 1: cp.async of the slot's 13.8 KB from 512 slots (7 MB,
 * L2-resident); 2: the activations' 4.6 KB so, the weights' 9.2 KB from a
 * 1.8 GB buffer, new bytes every step (DRAM, as at M = 128); 3 and 4: as 1
 * and 2 by four bulk copies (TMA, 1-D) issued by one thread; 5: as 4, but the
 * activations arrive decoded, one 16 KB fp16 tile per step by a bulk copy
 * (no producer decode); 6: as 5, the weights by one 32-byte bulk copy per row
 * (256, from the producer's warp 0) and their scales by two of 512 bytes
 * (the blocked layout's atoms), as strided rows would need; 7: as 5, the
 * weights by the kernel's cp.async (4 x 16 bytes of rows, 2 x 4 of scales
 * per producer thread). */
namespace pipe {
constexpr int STAGES = 6, NA16 = 4, A16_BYTES = 128 * 128;
constexpr int ACT = 0, W = ACT + 128 * 32, SFA = W + 256 * 32, SFB = SFA + 128 * 4, SLOT = SFB + 256 * 4;
constexpr int RAW = NA16 * A16_BYTES, BARS = RAW + STAGES * SLOT, SMEM = BARS + 8 * (2 * STAGES + 2 * NA16) + 1024;
__host__ __device__ constexpr int chunk(int r, int j) { return r * 32 + 16 * (j ^ ((r >> 2) & 1)); }
}  // namespace pipe

__global__ void fill_kernel(uint8_t *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n / 4; i += (size_t)gridDim.x * blockDim.x) {
    /* fp4 codes: any; scale bytes 0x30..0x3F (finite, moderate) */
    uint32_t v = hash32((uint32_t)i);
    if ((i * 4) % pipe::SLOT >= pipe::SFA) v = (v & 0x0F0F0F0Fu) | 0x30303030u;
    reinterpret_cast<uint32_t *>(p)[i] = v;
  }
}

/* MODE bits: 1 no proxy fence; 2 a consumer warp's EMPTY arrival by lane 0
 * after __syncwarp; 4 the producer refills step j-2's slot, not j-1's; 8
 * waits spin on test_wait instead of try_wait; 16 the consumers skip the
 * fp16 tile's FULL wait (timing only); 32 cycles spent in each wait, summed;
 * 64 the consumers wait for the fp16 tile first and not for the raw slot
 * (the producer's FULL wait on that slot precedes its tile arrival); 128 the
 * consumers read step j+1's raw words between step j's commit and wait; 256
 * the consumers skip the raw slot's FULL wait (timing only) */
__device__ __forceinline__ void mbar_wait_spin(uint32_t addr, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "SPIN:\n"
      "mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra SPIN;\n"
      "}\n" ::"r"(addr),
      "r"(parity)
      : "memory");
}

template <int COPY, int MODE>
__global__ void __launch_bounds__(384, 1) pipe_kernel(int steps, const uint8_t *src, long long nsrc, long long *cycles, float *sink) {
#if NVFP4_SM90A
  using namespace pipe;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
  const int tid = threadIdx.x;
  for (int i = tid; i < BARS / 4; i += 384) { /* random codes, scales in 0x30..0x3F */
    uint32_t v = hash32(i * 2654435761u + blockIdx.x);
    const int off = (i * 4 - RAW) % SLOT;
    if (i * 4 >= RAW && off >= SFA) v = (v & 0x0F0F0F0Fu) | 0x30303030u;
    reinterpret_cast<uint32_t *>(smem)[i] = v;
  }
  auto bar = [&](int i) { return base + BARS + 8 * i; };
  long long waited[3] = {0, 0, 0};
  auto wait = [&](int k, uint32_t addr, uint32_t parity) {
    const long long c0 = (MODE & 32) ? clock64() : 0;
    if (MODE & 8) mbar_wait_spin(addr, parity);
    else mbar_wait(addr, parity);
    if (MODE & 32) waited[k] += clock64() - c0;
  };
  enum { FULL = 0, EMPTY = STAGES, A16F = 2 * STAGES, A16E = 2 * STAGES + NA16 };
  if (tid == 0) {
    for (int i = 0; i < STAGES; i++) mbar_init(bar(FULL + i), COPY >= 3 && COPY <= 6 ? 1 : 128), mbar_init(bar(EMPTY + i), (MODE & 2) ? 136 : 384);
    for (int i = 0; i < NA16; i++) mbar_init(bar(A16F + i), COPY >= 5 ? 1 : 128), mbar_init(bar(A16E + i), 8);
  }
  fence_proxy_async_smem();
  __syncthreads();
  if (tid < 128) {
    setmaxnreg_dec<88>();
    auto load = [&](int slot, int step) {
      if (COPY == 0) {
        mbar_arrive(bar(FULL + slot));
      } else if (COPY == 7) { /* the kernel's weight copies: 4 x 16 bytes of rows and 2 x 4 of scales per thread */
        const uint8_t *g_w = src + (512 + ((long long)step * gridDim.x + blockIdx.x) % (nsrc - 512)) * SLOT;
        const uint32_t d = base + RAW + slot * SLOT;
#pragma unroll
        for (int c = 0; c < 4; c++) cp_async_16(d + W + 16 * (tid + 128 * c), g_w + W + 16 * (tid + 128 * c));
#pragma unroll
        for (int c = 0; c < 2; c++) {
          const uint32_t o = SFB + 4 * (tid + 128 * c);
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d + o), "l"(g_w + o) : "memory");
        }
        cp_async_mbar_arrive(bar(FULL + slot));
      } else if (COPY == 6) { /* warp 0: a 32-byte bulk copy per weight row, 2 x 512 bytes of scales */
        if (tid < 32) {
          const uint8_t *g_w = src + (512 + ((long long)step * gridDim.x + blockIdx.x) % (nsrc - 512)) * SLOT;
          const uint32_t d = base + RAW + slot * SLOT, b = bar(FULL + slot);
          if (tid == 0) mbar_arrive_expect_tx(b, SFA - W + SLOT - SFB);
          __syncwarp();
          for (int r = tid; r < 256; r += 32) bulk_copy_g2s(d + W + 32 * r, g_w + W + 32 * r, 32, b);
          if (tid < 2) bulk_copy_g2s(d + SFB + 512 * tid, g_w + SFB + 512 * tid, 512, b);
        }
      } else if (COPY >= 3) { /* one thread, bulk copies (TMA, 1-D) of the four regions */
        if (tid == 0) {
          const uint8_t *g_l2 = src + ((blockIdx.x * 7 + step) % 512) * (long long)SLOT;
          const uint8_t *g_w = COPY == 3 ? g_l2 : src + (512 + ((long long)step * gridDim.x + blockIdx.x) % (nsrc - 512)) * SLOT;
          const uint32_t d = base + RAW + slot * SLOT, b = bar(FULL + slot);
          if (COPY == 5) {
            mbar_arrive_expect_tx(b, SFA - W + SLOT - SFB);
          } else {
            mbar_arrive_expect_tx(b, SLOT);
            bulk_copy_g2s(d + ACT, g_l2 + ACT, W - ACT, b);
            bulk_copy_g2s(d + SFA, g_l2 + SFA, SFB - SFA, b);
          }
          bulk_copy_g2s(d + W, g_w + W, SFA - W, b);
          bulk_copy_g2s(d + SFB, g_w + SFB, SLOT - SFB, b);
        }
      } else {
        /* activations and their scales from the L2-resident slots; COPY 2:
         * the weights and theirs from DRAM, new bytes every step */
        const uint8_t *g_l2 = src + ((blockIdx.x * 7 + step) % 512) * (long long)SLOT;
        const uint8_t *g_w = COPY == 1 ? g_l2 : src + (512 + ((long long)step * gridDim.x + blockIdx.x) % (nsrc - 512)) * SLOT;
        for (int c = tid; c < SLOT / 16; c += 128) {
          const int o = 16 * c;
          const bool w = (o >= W && o < SFA) || o >= SFB;
          cp_async_16(base + RAW + slot * SLOT + o, (w ? g_w : g_l2) + o);
        }
        cp_async_mbar_arrive(bar(FULL + slot));
      }
    };
    for (int j = 0; j < STAGES && j < steps; j++) load(j, j);
    const int ar = tid;
    if (COPY >= 5) { /* activations decoded beforehand: a 16 KB fp16 tile per step, one bulk copy */
      for (int j = 0; j < steps; j++) {
        const int slot = j % STAGES, buf = j % NA16;
        if (j >= NA16) wait(1, bar(A16E + buf), ((j / NA16) - 1) & 1);
        if (tid == 0) {
          mbar_arrive_expect_tx(bar(A16F + buf), A16_BYTES);
          bulk_copy_g2s(base + buf * A16_BYTES, src + ((blockIdx.x * 3 + j) % 256) * (long long)A16_BYTES, A16_BYTES, bar(A16F + buf));
        }
        mbar_arrive(bar(EMPTY + slot));
        if (j >= 1 && j - 1 + STAGES < steps) {
          const int old = (j - 1) % STAGES;
          wait(2, bar(EMPTY + old), ((j - 1) / STAGES) & 1);
          load(old, j - 1 + STAGES);
        }
      }
    } else {
      for (int j = 0; j < steps; j++) {
        const int slot = j % STAGES, buf = j % NA16;
        wait(0, bar(FULL + slot), (j / STAGES) & 1);
        if (j >= NA16) wait(1, bar(A16E + buf), ((j / NA16) - 1) & 1);
        const uint32_t st = base + RAW + slot * SLOT;
        const uint4 c0 = ld_shared_u4(st + ACT + chunk(ar, 0)), c1 = ld_shared_u4(st + ACT + chunk(ar, 1));
        uint32_t sf;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(sf) : "r"(st + SFA + ar * 4) : "memory");
        const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
        mbar_arrive(bar(EMPTY + slot));
        constexpr int LAG = (MODE & 4) ? 2 : 1;
        if (j >= LAG && j - LAG + STAGES < steps) {
          const int old = (j - LAG) % STAGES;
          wait(2, bar(EMPTY + old), ((j - LAG) / STAGES) & 1);
          load(old, j - LAG + STAGES);
        }
        uint32_t sc[4];
        nvfp4_act_scales<4>(sf, sc); /* the kernel's producer decode (numerics.h) */
        const uint32_t a16 = base + buf * A16_BYTES + ar * 128;
#pragma unroll
        for (int h = 0; h < 2; h++) {
          uint32_t d[4][4];
          nvfp4_act_half<4>(w, h, sc, d);
#pragma unroll
          for (int i = 0; i < 4; i++) st_shared_u4(a16 + 16 * ((2 * i + h) ^ (ar & 7)), make_uint4(d[i][0], d[i][1], d[i][2], d[i][3]));
        }
        if (!(MODE & 1)) fence_proxy_async_smem();
        mbar_arrive(bar(A16F + buf));
      }
    }
    if ((MODE & 32) && tid == 0)
      for (int k = 0; k < 3; k++) cycles[10 * gridDim.x + 4 * blockIdx.x + k] = waited[k];
    return;
  }
  setmaxnreg_inc<208>();
  const int ct = tid - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31, g = lane >> 2, tq = lane & 3;
  const int r00 = wg * 128 + warp * 16 + g;
  const uint32_t b_at = base + RAW + W + chunk(r00, tq >> 1) + 8 * (tq & 1);
  const uint32_t sfb_at = base + RAW + SFB + r00 * 4 + tq;
  float acc[2][64];
#pragma unroll
  for (int i = 0; i < 64; i++) acc[0][i] = acc[1][i] = 0.f;
  /* step j's raw weight words and scale bytes, then this thread's EMPTY arrival */
  auto load_raw = [&](int j, uint2 (&v)[2][2], uint32_t (&sb)[2]) {
    const int slot = j % STAGES;
    const uint32_t off = slot * SLOT;
    if (!(MODE & (64 | 256))) wait(0, bar(FULL + slot), (j / STAGES) & 1);
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      v[hf][0] = ld_shared_u2(b_at + off + 2048 * hf);
      v[hf][1] = ld_shared_u2(b_at + off + 2048 * hf + 256);
      sb[hf] = ld_shared_u8(sfb_at + off + 256 * hf) | ld_shared_u8(sfb_at + off + 256 * hf + 32) << 8;
    }
    if (MODE & 2) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar(EMPTY + slot));
    } else {
      mbar_arrive(bar(EMPTY + slot));
    }
  };
  uint2 v[2][2];
  uint32_t sb[2];
  const long long t0 = clock64();
  if (MODE & 128) load_raw(0, v, sb);
  for (int j = 0; j < steps; j++) {
    const int buf = j % NA16;
    /* 64: the fp16 tile's FULL wait first, standing in for the raw slot's too
     * (the producer read that slot, after its own FULL wait, before it arrived) */
    if ((MODE & 64) && !(MODE & 16)) wait(1, bar(A16F + buf), (j / NA16) & 1);
    if (!(MODE & 128)) load_raw(j, v, sb);
    uint32_t f[2][4][4];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) nvfp4_wgmma_a_fragments(v[hf][0], v[hf][1], sb[hf], f[hf]);
    const uint32_t a16 = base + buf * A16_BYTES;
    if (!(MODE & (16 | 64))) wait(1, bar(A16F + buf), (j / NA16) & 1);
    wgmma_fence();
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
#pragma unroll
      for (int q = 0; q < 4; q++) wgmma_rs<128>(acc[hf], f[hf][q], wgmma_desc_sw128(a16 + 32 * q));
    wgmma_commit();
    /* 128: step j+1's raw words while this step's wgmma runs (session 20's LA) */
    if ((MODE & 128) && j + 1 < steps) load_raw(j + 1, v, sb);
    {
      const long long c0 = (MODE & 32) ? clock64() : 0;
      wgmma_wait<0>();
      if (MODE & 32) waited[2] += clock64() - c0;
    }
    if (lane == 0) mbar_arrive(bar(A16E + buf));
  }
  const long long t1 = clock64();
  if ((MODE & 32) && ct % 128 == 0)
    for (int k = 0; k < 3; k++) cycles[2 * gridDim.x + 4 * (blockIdx.x * 2 + wg) + k] = waited[k];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; i++) s += acc[0][i] + acc[1][i];
  if (s == 12345.f) *sink = s;
  if (ct % 128 == 0) cycles[blockIdx.x * 2 + wg] = t1 - t0;
#endif
}

struct Variant {
  const char *name;
  void (*fn)(int, long long *, float *);
  int threads, smem;
};

template <int N, bool RS, int WAIT, int NWG, int DEC = 0, int PROD = 0>
Variant variant(const char *name) {
  return {name, rate_kernel<N, RS, WAIT, NWG, DEC, PROD>, (NWG + (PROD > 0)) * 128,
          N * 128 + NWG * (128 * 128 / N) * 128 + 4 * RAW_SLOT + 1024};
}

int main(int argc, char **argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 4000;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  printf("device: %s, %d SMs; %d batches of %.2f MFLOP per warpgroup\n", prop.name, sms, iters, BATCH_FLOP / 1e6);
  const Variant vs[] = {
      variant<128, true, 0, 1>("rs128 wait0 1wg"), variant<128, true, 0, 2>("rs128 wait0 2wg"),
      variant<128, true, 1, 2>("rs128 wait1 2wg"), variant<128, false, 0, 2>("ss128 wait0 2wg"),
      variant<128, false, 1, 2>("ss128 wait1 2wg"), variant<256, true, 0, 1>("rs256 wait0 1wg"),
      variant<256, true, 0, 2>("rs256 wait0 2wg"), variant<256, true, 1, 2>("rs256 wait1 2wg"),
      variant<256, false, 0, 2>("ss256 wait0 2wg"), variant<256, false, 1, 2>("ss256 wait1 2wg"),
      variant<128, true, 0, 2, 1>("rs128 wait0 2wg +dec"), variant<256, true, 0, 2, 1>("rs256 wait0 2wg +dec"),
      variant<128, true, 0, 2, 2>("rs128 wait0 2wg +kdec"), variant<128, true, 0, 2, 0, 1>("rs128 wait0 2wg +prod"),
      variant<128, true, 0, 2, 2, 1>("rs128 2wg +kdec +prod"), variant<128, true, 0, 2, 2, 2>("rs128 2wg +kdec +prod nofence"),
      variant<128, true, 0, 0, 0, 1>("prod alone"), variant<128, true, 0, 0, 0, 2>("prod alone nofence"),
  };
  long long *d_cycles;
  float *d_sink;
  CHECK(cudaMalloc(&d_cycles, sizeof(long long) * sms * 14));
  CHECK(cudaMemset(d_cycles, 0, sizeof(long long) * sms * 14));
  CHECK(cudaMalloc(&d_sink, sizeof(float)));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  printf("%-30s %12s %8s %10s %8s\n", "variant", "FLOP/cyc/SM", "of 4096", "TFLOP/s", "MHz");
  const bool pipe_only = argc > 2 && strcmp(argv[2], "pipe") == 0;
  for (int round = 0; round < 2 && !pipe_only; round++)
    for (const Variant &v : vs) {
      CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
      void (*fn)(int, long long *, float *) = v.fn;
      fn<<<sms, v.threads, v.smem>>>(iters / 4, d_cycles, d_sink); /* warm-up */
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(e0));
      fn<<<sms, v.threads, v.smem>>>(iters, d_cycles, d_sink);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      const bool prod = strstr(v.name, "prod") != nullptr;
      const int nwg = v.threads / 128 - (prod ? 1 : 0);
      std::vector<long long> all(sms * 4);
      CHECK(cudaMemcpy(all.data(), d_cycles, sizeof(long long) * all.size(), cudaMemcpyDeviceToHost));
      auto median = [](std::vector<long long> v) { std::sort(v.begin(), v.end()); return (double)v[v.size() / 2]; };
      if (nwg) {
        const double c = median(std::vector<long long>(all.begin(), all.begin() + sms * nwg));
        const double flop_sm = (double)nwg * iters * BATCH_FLOP;
        const double tflops = flop_sm * sms / (ms * 1e-3) / 1e12;
        printf("%-30s %12.0f %8.3f %10.1f %8.0f", v.name, flop_sm / c, flop_sm / c / 4096, tflops, c / (ms * 1e3));
      } else {
        printf("%-30s %12s %8s %10s %8s", v.name, "", "", "", "");
      }
      if (prod) printf("   producer %.0f cycles / step", median(std::vector<long long>(all.begin() + 3 * sms, all.begin() + 4 * sms)) / iters);
      printf("\n");
    }
  /* the pipeline */
  {
    const long long n_dram = (1800ll << 20) / pipe::SLOT;
    uint8_t *src;
    CHECK(cudaMalloc(&src, (size_t)n_dram * pipe::SLOT));
    fill_kernel<<<4 * sms, 256>>>(src, (size_t)n_dram * pipe::SLOT);
    CHECK(cudaGetLastError());
    struct P {
      const char *name;
      void (*fn)(int, const uint8_t *, long long, long long *, float *);
    };
    const P ps[] = {
        {"pipe, no copies", pipe_kernel<0, 0>},          {"pipe, no copies, timed waits", pipe_kernel<0, 32>},
        {"pipe, no copies, no fence", pipe_kernel<0, 1>}, {"pipe, no copies, lane-0 EMPTY", pipe_kernel<0, 2>},
        {"pipe, no copies, refill lag 2", pipe_kernel<0, 4>}, {"pipe, no copies, spin waits", pipe_kernel<0, 8>},
        {"pipe, no copies, no A16 wait", pipe_kernel<0, 16>}, {"pipe, no copies, no FULL wait", pipe_kernel<0, 256>},
        {"pipe, no copies, no waits", pipe_kernel<0, 16 | 256>}, {"pipe, no copies, one wait", pipe_kernel<0, 64>},
        {"pipe, no copies, load ahead", pipe_kernel<0, 128>}, {"pipe, no copies, one wait, timed", pipe_kernel<0, 64 | 32>},
        {"pipe, copies from L2", pipe_kernel<1, 0>},           {"pipe, L2, one wait", pipe_kernel<1, 64>},
        {"pipe, L2, timed waits", pipe_kernel<1, 32>},       {"pipe, copies from DRAM", pipe_kernel<2, 0>},
        {"pipe, DRAM, one wait", pipe_kernel<2, 64>},          {"pipe, bulk copies from L2", pipe_kernel<3, 0>},
        {"pipe, bulk, weights from DRAM", pipe_kernel<4, 0>},  {"pipe, bulk L2, timed waits", pipe_kernel<3, 32>},
        {"pipe, bulk, fp16 activations", pipe_kernel<5, 0>},   {"pipe, row copies, fp16 act.", pipe_kernel<6, 0>},
        {"pipe, bulk, fp16 act., timed", pipe_kernel<5, 32>},
        {"pipe, cp.async W, fp16 act.", pipe_kernel<7, 0>},   {"pipe, cp.async W, fp16, timed", pipe_kernel<7, 32>},
    };
    const int steps = iters / 4;
    std::vector<long long> all(sms * 14);
    for (int round = 0; round < 2; round++)
      for (const P &q : ps) {
        CHECK(cudaFuncSetAttribute(q.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, pipe::SMEM));
        q.fn<<<sms, 384, pipe::SMEM>>>(steps / 4, src, n_dram, d_cycles, d_sink);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(e0));
        q.fn<<<sms, 384, pipe::SMEM>>>(steps, src, n_dram, d_cycles, d_sink);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        CHECK(cudaMemcpy(all.data(), d_cycles, sizeof(long long) * all.size(), cudaMemcpyDeviceToHost));
        auto med = [&](int at, int stride, int n) {
          std::vector<long long> v;
          for (int i = 0; i < n; i++) v.push_back(all[at + i * stride]);
          std::sort(v.begin(), v.end());
          return (double)v[v.size() / 2];
        };
        const double cy = med(0, 1, 2 * sms), flop_sm = 2.0 * steps * BATCH_FLOP;
        printf("%-30s %12.0f %8.3f %10.1f %8.0f   %.0f cycles / step", q.name, flop_sm / cy, flop_sm / cy / 4096,
               flop_sm * sms / (ms * 1e-3) / 1e12, cy / (ms * 1e3), cy / steps);
        if (strstr(q.name, "timed"))
          printf("\n    per step: consumer waits FULL %.0f, A16 FULL %.0f, own wgmma %.0f; producer FULL %.0f, A16 EMPTY %.0f, refill EMPTY %.0f",
                 med(2 * sms, 4, 2 * sms) / steps, med(2 * sms + 1, 4, 2 * sms) / steps, med(2 * sms + 2, 4, 2 * sms) / steps,
                 med(10 * sms, 4, sms) / steps, med(10 * sms + 1, 4, sms) / steps, med(10 * sms + 2, 4, sms) / steps);
        printf("\n");
      }
    CHECK(cudaFree(src));
  }
  return 0;
}
