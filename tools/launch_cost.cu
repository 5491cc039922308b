/*
 * tools/launch_cost.cu - what a cold single call pays before its first CTA
 * runs, by launch property (development probe; standalone, no extension).
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/launch_cost tools/launch_cost.cu
 *   /tmp/launch_cost
 *
 * The tensor-core kernel differs from an empty launch in five ways at once:
 * ~4 KB of __grid_constant__ parameters, ~200 KB of dynamic shared memory,
 * clusters, the programmatic-dependent-launch attribute, and 66-106 KB of
 * code. A single call of it pays ~4.4 us from the previous kernel's end to
 * its first CTA (PERF.md session 43) where an empty launch is timed at ~4 us,
 * and larger builds of it were ~2 us slower in cold calls with equal loops
 * (session 44). Each variant below is an empty kernel with some of those
 * properties; per variant, median of 31 cold calls (L2 swept, a ~50 ms
 * spin so the host is ahead, a stamp kernel, event, the launch, event):
 * the event time, the gap from the stamp to the first CTA's entry (global
 * timer), and the time per launch of 50 launches back to back. "code exec"
 * runs ~64 KB of straight-line code once per CTA (cold instruction fetch);
 * "code idle" carries the same code behind a branch never taken.
 *
 * H100 (PERF.md, session 45): every variant but "code exec" 3.3-3.6 us by
 * events, 3.1-3.7 us from the stamp to the first entry: no property costs
 * more than ~0.3 us. The loop column is noisy (one sample per variant).
 */
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.cuh"
#include "probe_common.cuh"

template <int BYTES>
struct Param {
  unsigned char b[BYTES];
};

/* CODE: 0 none, 1 the block behind a branch never taken (sel < 0), 2 taken. */
template <int PBYTES, int CODE>
__global__ void probe_kernel(unsigned long long *entry, int sel, float *sink, const __grid_constant__ Param<PBYTES> prm) {
  if (threadIdx.x == 0) atomicMin(entry, global_timer());
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (CODE && sel >= 0) {
    const float s = straight_line_fmas<4096>((float)(threadIdx.x + prm.b[0]));
    if (s == 1234.5f) *sink = s;
  }
}

struct Variant {
  const char *name;
  int ctas, threads, smem, cluster, pdl, big_param, code;
};

template <int PBYTES, int CODE>
static void launch(const Variant &v, unsigned long long *entry, float *sink, cudaStream_t s) {
  Param<PBYTES> prm;
  memset(&prm, 1, sizeof(prm));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(v.ctas);
  cfg.blockDim = dim3(v.threads);
  cfg.dynamicSmemBytes = v.smem;
  cfg.stream = s;
  cudaLaunchAttribute attrs[2];
  int n = 0;
  if (v.cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = v.cluster, attrs[n].val.clusterDim.y = 1, attrs[n].val.clusterDim.z = 1;
    n++;
  }
  if (v.pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    n++;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  const int sel = CODE == 2 ? 0 : -1;
  CHECK(cudaLaunchKernelEx(&cfg, probe_kernel<PBYTES, CODE>, entry, sel, sink, prm));
}

template <int PBYTES, int CODE>
static void setup() {
  CHECK(cudaFuncSetAttribute(probe_kernel<PBYTES, CODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CHECK(cudaFuncSetAttribute(probe_kernel<PBYTES, CODE>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

static void launch_any(const Variant &v, unsigned long long *entry, float *sink, cudaStream_t s) {
  if (v.big_param) {
    if (v.code == 0) launch<4032, 0>(v, entry, sink, s);
    if (v.code == 1) launch<4032, 1>(v, entry, sink, s);
    if (v.code == 2) launch<4032, 2>(v, entry, sink, s);
  } else {
    if (v.code == 0) launch<8, 0>(v, entry, sink, s);
    if (v.code == 1) launch<8, 1>(v, entry, sink, s);
    if (v.code == 2) launch<8, 2>(v, entry, sink, s);
  }
}

int main() {
  const ProbeDevice d = probe_device();
  const int clock_khz = d.clock_khz, sms = d.sms;
  const cudaDeviceProp &prop = d.prop;
  setup<8, 0>(), setup<8, 1>(), setup<8, 2>(), setup<4032, 0>(), setup<4032, 1>(), setup<4032, 2>();

  const size_t sweep_n = (size_t)std::max(2 * prop.l2CacheSize, 64 << 20) / 16;
  uint4 *sweep;
  unsigned *usink;
  float *sink;
  unsigned long long *entry, *stamp;
  CHECK(cudaMalloc(&sweep, sweep_n * 16));
  CHECK(cudaMemset(sweep, 1, sweep_n * 16));
  CHECK(cudaMalloc(&usink, 4));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&entry, 8));
  CHECK(cudaMalloc(&stamp, 8));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  const int C = sms / 4 * 4;  // a whole number of 4-CTA clusters
  const Variant vs[] = {
      {"1 CTA x 32", 1, 32, 0, 1, 0, 0, 0},
      {"C x 384", C, 384, 0, 1, 0, 0, 0},
      {"C x 384, 4 KB param", C, 384, 0, 1, 0, 1, 0},
      {"C x 384, 200 KB smem", C, 384, 200 * 1024, 1, 0, 0, 0},
      {"C x 384, cluster 4", C, 384, 0, 4, 0, 0, 0},
      {"C x 384, pdl", C, 384, 0, 1, 1, 0, 0},
      {"C x 384, code idle", C, 384, 0, 1, 0, 0, 1},
      {"C x 384, code exec", C, 384, 0, 1, 0, 0, 2},
      {"all but code", C, 384, 200 * 1024, 4, 1, 1, 0},
      {"all, code idle", C, 384, 200 * 1024, 4, 1, 1, 1},
      {"all, code exec", C, 384, 200 * 1024, 4, 1, 1, 2},
      {"1 CTA x 32 (again)", 1, 32, 0, 1, 0, 0, 0},
  };
  const int reps = 31, loop = 50;
  printf("%-26s %10s %14s %12s\n", "variant (C = %d CTAs)", "event us", "stamp->entry", "loop us/call");
  for (int round = 0; round < 2; round++) {
    for (const Variant &v : vs) {
      std::vector<double> ev(reps), gap(reps);
      for (int r = 0; r < reps + 2; r++) {
        CHECK(cudaMemsetAsync(entry, 0xff, 8, s));
        sweep_kernel<<<4 * sms, 512, 0, s>>>(sweep, sweep_n, usink);
        spin_kernel<<<1, 32, 0, s>>>((long long)clock_khz * 50);  // 50 ms at the peak clock
        stamp_kernel<<<1, 1, 0, s>>>(stamp);
        CHECK(cudaEventRecord(e0, s));
        launch_any(v, entry, sink, s);
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaStreamSynchronize(s));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        unsigned long long t[2];
        CHECK(cudaMemcpy(&t[0], stamp, 8, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(&t[1], entry, 8, cudaMemcpyDeviceToHost));
        if (r >= 2) ev[r - 2] = ms * 1e3, gap[r - 2] = (double)(long long)(t[1] - t[0]) / 1e3;
      }
      std::sort(ev.begin(), ev.end());
      std::sort(gap.begin(), gap.end());
      sweep_kernel<<<4 * sms, 512, 0, s>>>(sweep, sweep_n, usink);
      CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < loop; i++) launch_any(v, entry, sink, s);
      CHECK(cudaEventRecord(e1, s));
      CHECK(cudaStreamSynchronize(s));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      char name[64];
      snprintf(name, sizeof name, "%s", v.name);
      printf("%-26s %10.2f %14.2f %12.2f\n", name, ev[reps / 2], gap[reps / 2], ms * 1e3 / loop);
    }
    printf("\n");
  }
  return 0;
}
