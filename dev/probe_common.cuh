/* dev/probe_common.cuh - what the trace tool (dev/trace.cu) times around: the
 * device it runs on, CHECK(call) (print the failing CUDA call and exit), and
 * the kernels it times around (an L2 eviction by a
 * read sweep, a spin so the host has queued what follows, a stamp of the
 * global timer: ns, the same clock on every SM). */
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

struct ProbeDevice {
  int id, clock_khz, sms; /* clock_khz: the peak clock, cycles a ms */
  cudaDeviceProp prop;
};

/* The current device, its name, SMs, peak clock and L2 size printed. */
inline ProbeDevice probe_device() {
  ProbeDevice d;
  CHECK(cudaGetDevice(&d.id));
  CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, d.id));
  CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, d.id));
  CHECK(cudaGetDeviceProperties(&d.prop, d.id));
  printf("device %s, %d SMs, max clock %.0f MHz, L2 %d MB\n", d.prop.name, d.sms, d.clock_khz / 1e3,
         d.prop.l2CacheSize >> 20);
  return d;
}

__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Reads p[0, n) once (the sink keeps the loads). */
__global__ void sweep_kernel(const uint4 *p, size_t n, unsigned *sink) {
  unsigned x = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x12345678u) *sink = x;
}

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void stamp_kernel(unsigned long long *dst) { *dst = global_timer(); }

/* N FMAs of straight-line code (~16 N bytes of SASS) in 8 chains from seed,
 * summed: code whose size is the point (the instruction-cache probes); each V
 * gives an instantiation code of its own. */
template <int N, int V = 0>
__device__ __forceinline__ float straight_line_fmas(float seed) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; j++) x[j] = seed + (float)j;
#pragma unroll
  for (int i = 0; i < N; i++) {
    x[i % 8] = fmaf(x[i % 8], 1.0001f + V, (float)(i & 255));
    if (i % 8 == 7) asm volatile("" : "+f"(x[0]), "+f"(x[1]), "+f"(x[2]), "+f"(x[3]), "+f"(x[4]), "+f"(x[5]), "+f"(x[6]), "+f"(x[7]));
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 8; j++) s += x[j];
  return s;
}
