/*
 * ptx_sm90.cuh - one small wrapper per Hopper instruction the tensor-core
 * kernel uses: wgmma (sm_90a only) and thread-block clusters (sm_90).
 * Include only from code compiled for sm_90a (guard with NVFP4_SM90A).
 * PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/
 */
#pragma once
#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NVFP4_SM90A 1
#else
#define NVFP4_SM90A 0
#endif

#if NVFP4_SM90A

/* Shared-memory matrix descriptor (ISA "Matrix Descriptor Format") of a
 * K-major fp16 tile in the 128-byte swizzle: rows of 64 values (128 bytes),
 * 16-byte chunk c of row r stored at chunk c ^ (r % 8), tile 1024-byte
 * aligned. Bits 0-13 address / 16; 16-29 leading offset (unused by this
 * layout: 1); 32-45 stride offset / 16 (1024 bytes between 8-row groups);
 * 62-63 swizzle mode (1 = 128 bytes). Stepping K by 16 values inside the row
 * adds 32 bytes to the address. */
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
  return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Make this thread's ordinary shared-memory stores visible to the async proxy
 * (wgmma reads its shared operand through it). */
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* D(64xN, fp32) += A(64x16, fp16 or bf16 (BF16), registers) * B(16xN, the
 * same type, shared, K-major), N = 32, 64, 96 or 128: a = the thread's 4
 * 16-bit x2 fragment registers (the mma.m16n8k16 A layout per warp, warp w of
 * the warpgroup holding rows 16w..16w+15); d = its N / 2 accumulators. */
template <int N, bool BF16 = false>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b);

#define NVFP4_WGMMA_RS(BF16_, TS_) \
template <> \
__device__ __forceinline__ void wgmma_rs<128, BF16_>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) { \
  asm volatile( \
      "{\n" \
      ".reg .pred p;\n" \
      "setp.ne.b32 p, %69, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TS_ "." TS_ " " \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n" \
      "}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)); \
} \
 \
template <> \
__device__ __forceinline__ void wgmma_rs<96, BF16_>(float (&d)[48], const uint32_t (&a)[4], uint64_t desc_b) { \
  asm volatile( \
      "{\n" \
      ".reg .pred p;\n" \
      "setp.ne.b32 p, %53, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n96k16.f32." TS_ "." TS_ " " \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, " \
      "{%48, %49, %50, %51}, %52, p, 1, 1, 0;\n" \
      "}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)); \
} \
 \
template <> \
__device__ __forceinline__ void wgmma_rs<64, BF16_>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) { \
  asm volatile( \
      "{\n" \
      ".reg .pred p;\n" \
      "setp.ne.b32 p, %37, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TS_ "." TS_ " " \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n" \
      "}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)); \
} \
 \
template <> \
__device__ __forceinline__ void wgmma_rs<32, BF16_>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) { \
  asm volatile( \
      "{\n" \
      ".reg .pred p;\n" \
      "setp.ne.b32 p, %21, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TS_ "." TS_ " " \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, " \
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n" \
      "}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)); \
}
NVFP4_WGMMA_RS(false, "f16")
NVFP4_WGMMA_RS(true, "bf16")
#undef NVFP4_WGMMA_RS

/* Barrier `id` (1..15; 0 is __syncthreads) among `count` threads, whole warps. */
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* ---- clusters ----------------------------------------------------------- */
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

/* Every thread of every CTA of the cluster arrives and waits; release/acquire
 * order the shared-memory writes before it against the reads after it. */
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* The address of this CTA's shared variable at `smem_addr` in CTA `rank` of
 * the cluster, and a 16-byte load from it (distributed shared memory). */
__device__ __forceinline__ uint32_t mapa_shared(uint32_t smem_addr, uint32_t rank) {
  uint32_t r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(rank));
  return r;
}

/* Not volatile: the loads may be batched; call only between cluster_sync()s,
 * which order them against the writes. */
__device__ __forceinline__ float4 ld_shared_cluster_f4(uint32_t addr) {
  float4 v;
  asm("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}

/* s += the float4 at `addr`, the add in the same asm as the load: the
 * thread's next load issues only once this one's data is back (one load in
 * flight), since volatile asm keeps its order. Between cluster_sync()s, as
 * above. */
__device__ __forceinline__ void ld_shared_cluster_add_f4(float4 &s, uint32_t addr) {
  asm volatile(
      "{\n.reg .f32 t0, t1, t2, t3;\n"
      "ld.shared::cluster.v4.f32 {t0, t1, t2, t3}, [%4];\n"
      "add.rn.f32 %0, %0, t0;\nadd.rn.f32 %1, %1, t1;\nadd.rn.f32 %2, %2, t2;\nadd.rn.f32 %3, %3, t3;\n}\n"
      : "+f"(s.x), "+f"(s.y), "+f"(s.z), "+f"(s.w)
      : "r"(addr)
      : "memory");
}


/* ---- flags between CTAs of one grid, in global memory ------------------ */
__device__ __forceinline__ void st_release_gpu(unsigned long long *flag, unsigned long long v) {
  asm volatile("st.release.gpu.global.b64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
}

/* Wait until *flag == v (acquire: the writes released before it are visible
 * to this thread). A flag that never comes (a bug, not a state a correct
 * launch reaches) traps after ~10 s instead of hanging the GPU. */
__device__ __forceinline__ void wait_flag_gpu(const unsigned long long *flag, unsigned long long v) {
  for (uint32_t n = 0;; n++) {
    unsigned long long x;
    asm volatile("ld.acquire.gpu.global.b64 %0, [%1];" : "=l"(x) : "l"(flag) : "memory");
    if (x == v) return;
    if (n > (1u << 26)) __trap();
    __nanosleep(128);
  }
}

/* ---- mbarriers (ISA "mbarrier"): CTA-local phase barriers in shared memory */
__device__ __forceinline__ void mbar_init(uint32_t addr, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(addr), "r"(count) : "memory");
}

/* One arrival (release: this thread's earlier writes are visible to whoever
 * waits for the phase). */
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory");
}

/* Block until the phase of parity `parity` has completed (acquire). */
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(addr),
      "r"(parity)
      : "memory");
}

/* One arrival that also raises the phase's expected transaction bytes by
 * `bytes` (what the bulk copies completing on it will deliver). */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t addr, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(addr), "r"(bytes) : "memory");
}

/* Bulk copy (TMA, 1-D) of `bytes` (a multiple of 16; both addresses 16-byte
 * aligned) from global memory into this CTA's shared memory, completing as
 * transaction bytes on the mbarrier at `bar`. */
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

/* Bulk copy (TMA, 1-D) of `bytes` from this CTA's shared memory to global
 * memory, in this thread's current bulk group; then the group's commit, and
 * the waits: until every committed group has read its source (.read: the
 * shared memory may be written again) or has completed. */
__device__ __forceinline__ void bulk_copy_s2g(void *dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

/* One arrival once all of this thread's earlier cp.async have landed; .noinc:
 * the barrier's count already includes it. */
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(addr) : "memory");
}


/* Re-split the register file between warpgroups (sm_90a): the calling
 * warpgroup's per-thread limit becomes N. Needs a register cap at entry
 * (__launch_bounds__(threads, 1)). */
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

#endif /* NVFP4_SM90A */
