/*
 * race_ring.cu - the raw ring of csrc/cuda/matmul_sm90.cu reduced to its
 * synchronisation, for compute-sanitizer racecheck: does the tool report
 * this ring when its slots are refilled many times? (PERF.md, session 14:
 * racecheck reports the kernel's ring only on launches of 68 K steps.)
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icsrc tools/race_ring.cu -o /tmp/race_ring
 *   compute-sanitizer --tool racecheck /tmp/race_ring STEPS [CTAS [MODE]]
 *
 * One CTA of 384 threads, as the kernel's: warpgroup 0 produces, 1 and 2
 * consume. A ring of STAGES slots of 128 x 16 bytes, one 16-byte cp.async
 * per producer thread and step, landed by cp.async.mbarrier.arrive.noinc on
 * the slot's FULL barrier (128 arrivals). Every consumer warp and every
 * producer warp reads the slot (8 bytes per thread, as the fragments; the
 * producers 16, as the activation decode), then its lane 0 arrives on the
 * slot's EMPTY barrier (12 arrivals). The producer refills the slot of step
 * j - 1 during step j once EMPTY says every warp has read it: the kernel's
 * order, its waits and parities. MODE bit 0 set: the slots are filled with
 * plain loads and st.shared and a plain arrival on FULL instead of cp.async
 * (the same order); bit 1 set: every thread arrives on EMPTY after its read
 * (384 arrivals) instead of lane 0 of each warp after a __syncwarp.
 * Each thread sums what it read; the program checks the sums against the
 * host's, so a race that strikes shows as a wrong sum.
 */
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/ptx_sm80.cuh"
#include "cuda/ptx_sm90.cuh"

constexpr int STAGES = 6, THREADS = 384, SLOT = 128 * 16;

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1) ring(const uint4 *src, int steps, unsigned long long *sums) {
#if NVFP4_SM90A
  __shared__ __align__(128) uint8_t slots[STAGES * SLOT];
  __shared__ __align__(8) uint64_t bars[2 * STAGES];
  const int tid = threadIdx.x, lane = tid & 31;
  const uint32_t base = smem_addr(slots);
  auto full = [&](int s) { return smem_addr(&bars[s]); };
  auto empty = [&](int s) { return smem_addr(&bars[STAGES + s]); };
  if (tid == 0)
    for (int s = 0; s < STAGES; s++) mbar_init(full(s), 128), mbar_init(empty(s), MODE & 2 ? THREADS : 8 + 4);
  __syncthreads();
  const uint4 *cta_src = src + (size_t)blockIdx.x * steps * 128;
  unsigned long long sum = 0;
  if (tid < 128) {
    auto load = [&](int slot, int step) {
      if ((MODE & 1) == 0) {
        cp_async_16(base + slot * SLOT + tid * 16, cta_src + (size_t)step * 128 + tid);
        cp_async_mbar_arrive(full(slot));
      } else {
        *reinterpret_cast<uint4 *>(slots + slot * SLOT + tid * 16) = cta_src[(size_t)step * 128 + tid];
        mbar_arrive(full(slot));
      }
    };
    for (int j = 0; j < STAGES && j < steps; j++) load(j, j);
    for (int j = 0; j < steps; j++) {
      const int slot = j % STAGES;
      mbar_wait(full(slot), (j / STAGES) & 1);
      const uint4 v = *reinterpret_cast<const uint4 *>(slots + slot * SLOT + tid * 16);
      sum += (unsigned long long)v.x + v.y + v.z + v.w;
      if (MODE & 2) {
        mbar_arrive(empty(slot));
      } else {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(slot));
      }
      if (j >= 1 && j - 1 + STAGES < steps) {
        const int old = (j - 1) % STAGES;
        mbar_wait(empty(old), ((j - 1) / STAGES) & 1);
        load(old, j - 1 + STAGES);
      }
    }
  } else {
    const int ct = tid - 128; /* 256 consumers: 8 bytes each of the slot's 2 KB */
    for (int j = 0; j < steps; j++) {
      const int slot = j % STAGES;
      mbar_wait(full(slot), (j / STAGES) & 1);
      const uint2 v = ld_shared_u2(base + slot * SLOT + ct * 8);
      sum += (unsigned long long)v.x + v.y;
      if (MODE & 2) {
        mbar_arrive(empty(slot));
      } else {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(slot));
      }
    }
  }
  sums[(size_t)blockIdx.x * THREADS + tid] = sum;
#endif
}

int main(int argc, char **argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 68, ctas = argc > 2 ? atoi(argv[2]) : 4;
  const int mode = argc > 3 ? atoi(argv[3]) : 0;
  const size_t words = (size_t)ctas * steps * 128 * 4;
  std::vector<uint32_t> host(words);
  for (size_t i = 0; i < words; i++) host[i] = (uint32_t)(i * 2654435761u) >> 8;
  uint4 *src;
  unsigned long long *sums;
  cudaMalloc(&src, words * 4);
  cudaMalloc(&sums, (size_t)ctas * THREADS * 8);
  cudaMemcpy(src, host.data(), words * 4, cudaMemcpyHostToDevice);
  switch (mode) {
    case 0: ring<0><<<ctas, THREADS>>>(src, steps, sums); break;
    case 1: ring<1><<<ctas, THREADS>>>(src, steps, sums); break;
    case 2: ring<2><<<ctas, THREADS>>>(src, steps, sums); break;
    default: ring<3><<<ctas, THREADS>>>(src, steps, sums); break;
  }
  std::vector<unsigned long long> got((size_t)ctas * THREADS);
  if (cudaMemcpy(got.data(), sums, got.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  int bad = 0;
  for (int c = 0; c < ctas; c++)
    for (int t = 0; t < THREADS; t++) {
      unsigned long long want = 0;
      for (int j = 0; j < steps; j++) {
        const uint32_t *w = host.data() + (((size_t)c * steps + j) * 128) * 4;
        if (t < 128) want += (unsigned long long)w[4 * t] + w[4 * t + 1] + w[4 * t + 2] + w[4 * t + 3];
        else want += (unsigned long long)w[2 * (t - 128)] + w[2 * (t - 128) + 1];
      }
      bad += got[(size_t)c * THREADS + t] != want;
    }
  printf("ring (%s, %s): %d steps, %d CTAs, %d wrong sums\n", mode & 1 ? "st.shared" : "cp.async",
         mode & 2 ? "every thread arrives" : "lane 0 arrives", steps, ctas, bad);
  return bad ? 1 : 0;
}
