/*
 * ptx_sm80.cuh - one small wrapper per sm_80+ instruction the kernels use.
 * PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/
 */
#pragma once
#include <stdint.h>

/* prmt.b32 in its default mode (ISA "prmt"): byte i of the result is selected
 * by nibble i of `sel`: bits 0-2 pick one of the 8 bytes of {b, a}; when bit 3
 * is set the selected byte's sign bit is replicated instead (0x00 or 0xFF).
 * Written out because __byte_perm documents only the 3-bit selection. */
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

/* ld.global.cs with an L2 prefetch size (ISA "ld", .level::prefetch_size): 16 bytes (2) at p, streamed
 * (evict first), the miss filling 256 (128) bytes of L2 around them. A GEMV warp reads 64 bytes of a row a step
 * and the next warps its neighbours: one DRAM fetch of the run, 3-5% faster than __ldcs (H200, W4A16 decode). */
__device__ __forceinline__ uint4 ld_cs_l2_256(const void *p) {
  uint4 v;
  asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_cs_l2_128_u16(const void *p) {
  unsigned short v;
  asm volatile("ld.global.cs.L2::128B.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

/* cp.async (ISA "cp.async") at a shared-memory address already converted (smem_addr): copy `src_bytes` (0..16) of 16
 * from global to shared memory, zero-filling the rest, bypassing L1 (.cg); 4 bytes (.ca: copies under 16 bytes may
 * not bypass L1). A loop that issues many copies then does no address conversion per copy. */
__device__ __forceinline__ uint32_t smem_addr(const void *smem) { return (uint32_t)__cvta_generic_to_shared(smem); }
__device__ __forceinline__ void cp_async_16(uint32_t s, const void *gmem, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_4(uint32_t s, const void *gmem, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
/* ... all bytes read (no source size) */
__device__ __forceinline__ void cp_async_16(uint32_t s, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_4(uint32_t s, const void *gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(gmem) : "memory");
}
/* ... at a generic pointer into shared memory; and 8 bytes (.ca). */
__device__ __forceinline__ void cp_async_16(void *smem, const void *gmem, uint32_t src_bytes) {
  cp_async_16(smem_addr(smem), gmem, src_bytes);
}
__device__ __forceinline__ void cp_async_4(void *smem, const void *gmem, uint32_t src_bytes) {
  cp_async_4(smem_addr(smem), gmem, src_bytes);
}
__device__ __forceinline__ void cp_async_8(void *smem, const void *gmem, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes)
               : "memory");
}

/* ... and the miss filling 128 bytes of L2 around them (.L2::128B): a row read 32 bytes a step by rows 3.5 KB apart
 * reaches DRAM in runs of 128 bytes, not sectors of 32 (MoE experts' 16-row tiles, H200: DeepSeek-V3 T = 8 0.78x the
 * time; 256 bytes: as fast there, 1.04x at Qwen3-30B-A3B T = 1; docs/PERF.md). */
__device__ __forceinline__ void cp_async_16_l2_128(uint32_t s, const void *gmem, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

/* Close the group of this thread's cp.async issued so far. */
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/* Wait until at most N of this thread's groups are still in flight; the data
 * of the completed ones is then visible to this thread. */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Two fp16 products in one instruction, round to nearest, subnormals kept
 * (no .ftz): the fp16x2 bits a * b. */
__device__ __forceinline__ uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/* ld.shared of 8 bytes / 1 byte at a 32-bit shared address. Volatile with a
 * memory clobber: a read of a ring slot must stay after the mbarrier wait
 * that makes the slot's data visible. */
__device__ __forceinline__ uint2 ld_shared_u2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_shared_u8(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u8 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
  return v;
}

/* ld.shared of 4 bytes, as ld_shared_u2. */
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

/* ld.shared of 16 bytes / 2 bytes, as ld_shared_u2. */
__device__ __forceinline__ uint4 ld_shared_u4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_shared_u16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
  return v;
}

/* mma.sync m16n8k16, fp16 inputs, fp32 accumulators in place (ISA "mma",
 * warp-level). a: the A fragment (rows g, g + 8 of 16; k 2t, 2t + 8 of 16, as
 * nvfp4_wgmma_a_fragments gives it), b0 / b1: B's k 2t.. / 2t + 8.. of
 * column g; d: (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). */
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* mma.sync m16n8k16 with bf16 inputs, fp32 accumulators in place: the
 * fragments as mma_16816's (fp16). */
__device__ __forceinline__ void mma_16816_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* mma.sync m16n8k32, A unsigned 8-bit, B signed 8-bit, int32 accumulators in
 * place (ISA "mma", integer types). a: rows g (a[0], a[2]) and g + 8 (a[1],
 * a[3]) of 16, k 4t..4t+3 (a[0], a[1]) and 16 + 4t.. (a[2], a[3]) of 32, byte
 * i = k + i; b0 / b1: B's k 4t.. / 16 + 4t.. of column g; d as mma_16816's. */
__device__ __forceinline__ void mma_16832_u8s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
