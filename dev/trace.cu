/*
 * dev/trace.cu - where a kernel's time goes, phase by phase (development
 * tool; builds its own copy of the CUDA sources with -DNVFP4_TRACE, never part
 * of the extension). Build and run on a GPU machine:
 *
 *   bash dev/trace.sh gemm:128,7168,2048 gemv:7168,2048,4 ...
 *
 * Per case: L2 evicted by a read sweep, a spin kernel of ~100 ms (so the host
 * has queued everything), a stamp kernel writing the global timer, event, the call
 * through the C API (nvfp4_matmul_cuda), event, another stamp. The kernels
 * record the global timer (ns, same clock on every SM) and their SM's cycle
 * counter at named points (NVFP4_TRACE_POINT in the kernel files, numbered as
 * in the tables below). Printed: the event time, the gap from the stamp to the
 * first CTA's entry, and per point the spread over CTAs (min / median / max,
 * us after the first CTA's entry), and the median cycles since the CTA's
 * entry. Scales: blocked for gemm and dual, linear for gemv (as the
 * competition adapter passes them).
 *
 * read:M,K[,L] is the floor under gemv:M,K[,L]: a plain read of the same A
 * bytes and scales (no decode, no vector), split evenly over one wave of
 * 256-thread CTAs (READ_CTAS per SM, default 4), READ_UNROLL (default 8)
 * 16-byte loads in flight per thread, timed and traced the same way;
 * READ_SMEM=bytes gives its CTAs that much dynamic shared memory (unused: it
 * asks whether a larger carve-out delays the launch). READ_ROWS=1 reads the
 * same bytes in the W4A16 GEMV's pattern instead (w4a16.cu): a CTA of 8 warps
 * per 16 rows, 2 an SM, warp w on K steps of 128 w, w + 8, ..., lane (g, t)
 * 16 bytes of rows g and g + 8 at 16 t and their 2 scale bytes, 4 steps in
 * flight in registers: whether that pattern, not the decode, caps its rate;
 * READ_ROWS=2 the same tiles read a row's 512 bytes a warp instruction;
 * READ_SCALES=0 leaves the scales out of either; READ_X=1 adds READ_ROWS=1's
 * activation loads (one bf16 row in L2, a step ahead, as the GEMV at M = 1).
 * TRACE_DUMP=dir writes each CTA's SM and point times (us after the first
 * entry) as CSV, a file per case.
 *
 * TRACE_PRE says what runs between the sweep and the spin kernel, to tell
 * what a cold call waits on. Unset: nothing. The sweep and spin kernels are
 * tiny, so the SMs' instruction caches still hold the kernel's code from the
 * previous run: warmer than any call of the extension after a flush (torch's
 * reduction or fill kernels) or after other layers' kernels. "icache": ~256
 * KB of other code run on every SM first, so that the kernel's code is out of
 * those caches; it reproduced the extension's cold calls where unset did not:
 * use it to judge a kernel change's single calls.
 * "code": the same call on operands of its own (allocated 1 GB further on):
 * the kernel's code is then in L2 and the instruction caches, its operands
 * and their page-table entries not. "tlb": a read of one word per 64 KB of
 * the case's operand buffers: page tables walked, the data still in DRAM.
 * Neither moved an M = 128 gemm's start on an H100, but both were measured
 * against warm instruction caches. Steps join with '+' and run
 * in order: "code+icache" leaves the kernel's code in L2 but not in the
 * instruction caches (a cold call's misses then served by L2, not DRAM).
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "../csrc/cuda/common.cuh"
#include "../csrc/nvfp4.h"

extern "C" cudaError_t nvfp4_trace_attach_sm90(unsigned long long *buf);
extern "C" cudaError_t nvfp4_trace_attach_gemv_dp4a(unsigned long long *buf);

#include "probe_common.cuh"

__global__ void fill_kernel(uint8_t *p, size_t n, uint32_t seed, int scales) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = scales ? (uint8_t)(0x28 + (h & 0x1F)) : (uint8_t)h;  // scales: finite e4m3 of moderate size
  }
}

/* The read floor: CTA x reads 16-byte units [x n / G, (x + 1) n / G) of A and
 * of its scales, U loads in flight per thread. Trace points (common.cuh's, as
 * in the kernels): 0 entry, 2 first data (thread 0), 3 end (thread 0, after
 * the CTA's barrier). */
template <int U>
__global__ void __launch_bounds__(256) read_kernel(const uint4 *a, size_t na, const uint4 *s, size_t ns, unsigned *sink) {
  NVFP4_TRACE_POINT(threadIdx.x == 0, 0);
  unsigned x = 0;
  bool first = threadIdx.x == 0;
  for (int part = 0; part < 2; part++) {
    const uint4 *p = part ? s : a;
    const size_t n = part ? ns : na, lo = n * blockIdx.x / gridDim.x, hi = n * (blockIdx.x + 1) / gridDim.x;
    for (size_t i = lo + threadIdx.x; i < hi; i += 256 * U) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const size_t j = i + (size_t)u * 256;
        v[u] = j < hi ? __ldg(p + j) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      if (first) {
        if (x == 0x9e3779b9u) *sink = 1;  // keeps the first loads ahead of the point
        NVFP4_TRACE_POINT(true, 2);
        first = false;
      }
    }
  }
  if (x == 0x12345678u) *sink = x;
  __syncthreads();
  NVFP4_TRACE_POINT(threadIdx.x == 0, 3);
}
/* READ_ROWS=1: the W4A16 GEMV's loads alone (K % 128 == 0, linear scales),
 * 4 steps in flight a warp; SCALES = false leaves the scale loads out, X adds
 * the GEMV's activation loads at M = 1 (one bf16 row, L2-resident, a step
 * ahead). READ_ROWS=2: the same CTA tiles, but warp w reads rows 2 w, 2 w + 1
 * in 512-byte runs (lane l: 16 bytes at 16 l; scales: lanes 0-15 row 2 w,
 * 16-31 row 2 w + 1, 4 bytes each), as many bytes in flight. Options are
 * template parameters: runtime ones in the loop cost a quarter of the rate. */
__device__ uint4 read_x_row[8 * 1024];  // one bf16 activation row (K <= 65536)
template <int ROWS, bool SCALES, bool X>
__global__ void __launch_bounds__(256, 2) read_rows_kernel(const uint8_t *a, const uint8_t *s, int64_t m, int64_t k,
                                                           unsigned *sink) {
  NVFP4_TRACE_POINT(threadIdx.x == 0, 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  unsigned x = 0;
  if constexpr (ROWS == 1) {
    const int n = (int)((k / 128 - warp + 7) / 8);  // the warp's steps
    const uint8_t *w[2], *sf[2];
    for (int h = 0; h < 2; h++) {
      const int64_t r = std::min<int64_t>(blockIdx.x * 16 + g + 8 * h, m - 1);
      w[h] = a + r * (k / 2) + warp * 64 + 16 * t;
      sf[h] = s + r * (k / 16) + warp * 8 + 2 * t;
    }
    uint4 ring[4][2], xs[2][4] = {};
    unsigned short rs[4][2] = {};
    const uint4 *xr = read_x_row + warp * 16 + 4 * t;  // the step's 128 values: 16 chunks, 4 a lane
    auto load = [&](int d, int i) {
      for (int h = 0; h < 2; h++) {
        ring[d][h] = __ldcs(reinterpret_cast<const uint4 *>(w[h] + (int64_t)i * 512));
        if (SCALES) rs[d][h] = __ldcs(reinterpret_cast<const unsigned short *>(sf[h] + (int64_t)i * 64));
      }
    };
    auto load_x = [&](int b, int i) {
      if (X)
        for (int c = 0; c < 4; c++) xs[b][c] = __ldg(xr + (int64_t)i * 128 + c);
    };
#pragma unroll
    for (int d = 0; d < 4; d++)
      if (d < n) load(d, d);
    load_x(0, 0);
    for (int i = 0; i < n; i += 4) {
#pragma unroll
      for (int d = 0; d < 4; d++)
        if (i + d < n) {
          if (i + d + 1 < n) load_x((d + 1) % 2, i + d + 1);  // the next step's activations, as the GEMV
          for (int c = 0; c < 4; c++) x ^= xs[d % 2][c].x ^ xs[d % 2][c].w;
          for (int h = 0; h < 2; h++) x ^= ring[d][h].x ^ ring[d][h].y ^ ring[d][h].z ^ ring[d][h].w ^ rs[d][h];
          if (i == 0 && d == 0) NVFP4_TRACE_POINT(threadIdx.x == 0, 2);
          if (i + d + 4 < n) load(d, i + d + 4);
        }
    }
  } else {
    const int n = (int)(k / 1024);  // rounds of 512 bytes a row (K % 1024 == 0)
    const uint8_t *w[2];
    for (int h = 0; h < 2; h++) {
      const int64_t r = std::min<int64_t>(blockIdx.x * 16 + 2 * warp + h, m - 1);
      w[h] = a + r * (k / 2) + 16 * lane;
    }
    const int64_t rs_row = std::min<int64_t>(blockIdx.x * 16 + 2 * warp + lane / 16, m - 1);
    const uint8_t *sf = s + rs_row * (k / 16) + 4 * (lane % 16);
    uint4 ring[4][2];
    unsigned rs[4] = {};
    auto load = [&](int d, int i) {
      for (int h = 0; h < 2; h++) ring[d][h] = __ldcs(reinterpret_cast<const uint4 *>(w[h] + (int64_t)i * 512));
      if (SCALES) rs[d] = __ldcs(reinterpret_cast<const unsigned *>(sf + (int64_t)i * 64));
    };
#pragma unroll
    for (int d = 0; d < 4; d++)
      if (d < n) load(d, d);
    for (int i = 0; i < n; i += 4) {
#pragma unroll
      for (int d = 0; d < 4; d++)
        if (i + d < n) {
          for (int h = 0; h < 2; h++) x ^= ring[d][h].x ^ ring[d][h].y ^ ring[d][h].z ^ ring[d][h].w;
          x ^= rs[d];
          if (i == 0 && d == 0) NVFP4_TRACE_POINT(threadIdx.x == 0, 2);
          if (i + d + 4 < n) load(d, i + d + 4);
        }
    }
  }
  if (x == 0x12345678u) *sink = x;
  __syncthreads();
  NVFP4_TRACE_POINT(threadIdx.x == 0, 3);
}
NVFP4_TRACE_ATTACH(read)
#ifndef NVFP4_TRACE
/* A plain build (TRACE_PLAIN=1 bash dev/trace.sh): the kernels without their
 * points, exactly as the extension builds them, so only the event times are
 * printed. Compare kernel variants this way: the points change the code
 * around them and cost time, 2-4 us in a single wave and ~10 us over the four
 * waves of a 4096^3 gemm (272 us traced, 262 plain). */
extern "C" cudaError_t nvfp4_trace_attach_sm90(unsigned long long *) { return cudaSuccess; }
extern "C" cudaError_t nvfp4_trace_attach_gemv_dp4a(unsigned long long *) { return cudaSuccess; }
extern "C" cudaError_t nvfp4_trace_attach_read(unsigned long long *) { return cudaSuccess; }
#endif

/* TRACE_PRE=tlb: one word per 64 KB of every operand buffer, read after the
 * sweep (page-table walks done, 0.2% of the lines in L2). */
__global__ void touch_kernel(const unsigned *p, size_t words, size_t stride, unsigned *sink) {
  unsigned x = 0;
  for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * stride; i < words;
       i += (size_t)gridDim.x * blockDim.x * stride)
    x ^= __ldcg(p + i);
  if (x == 0x12345678u) *sink = x;
}

/* TRACE_PRE=icache: every SM runs ~256 KB of straight-line code (8 kernels of
 * 2048 FMAs each), more than its instruction caches hold, so the timed call
 * starts with its code out of them (as after a large kernel such as torch's
 * reduction, the flush of benchmarks/ and of the competition). */
template <int V>
__global__ void icache_kernel(float *sink) {
  const float s = straight_line_fmas<2048, V>((float)(threadIdx.x + V));
  if (s == 1234.5f) *sink = s;
}

template <int... V>
static void evict_icache(int ctas, float *sink, std::integer_sequence<int, V...>) {
  ((icache_kernel<V><<<ctas, 128>>>(sink)), ...);
}

static std::vector<std::pair<uint8_t *, size_t>> g_buffers;  // this case's operand buffers (TRACE_PRE=tlb)

static uint8_t *random_bytes(size_t n, uint32_t seed, bool scales) {
  uint8_t *p;
  CHECK(cudaMalloc(&p, n));
  g_buffers.push_back({p, n});
  fill_kernel<<<1024, 256>>>(p, n, seed, scales);
  CHECK(cudaGetLastError());
  return p;
}

/* Random codes and scales; the blocked scale layout (as the competition's
 * gemm problems pass them) or the linear one (its gemv). */
static nvfp4_operand operand(int64_t batch, int64_t rows, int64_t k, uint32_t seed, bool blocked) {
  nvfp4_operand o = {};
  o.data = random_bytes((size_t)(batch * rows * k / 2), seed, false);
  o.row_stride = k / 2;
  o.batch_stride = rows * k / 2;
  const int64_t sf_batch = blocked ? (rows + 127) / 128 * 128 * ((k / 16 + 3) / 4 * 4) : rows * k / 16;
  o.sf = random_bytes((size_t)(batch * sf_batch), seed + 1, true);
  o.sf_row_stride = blocked ? 0 : k / 16;
  o.sf_batch_stride = sf_batch;
  o.sf_layout = blocked ? NVFP4_SF_BLOCKED : NVFP4_SF_LINEAR;
  return o;
}

struct Case {
  std::string kind;  // gemm, dual or gemv
  int64_t m, n, k, batch;
};

static const char *point_names_sm90[] = {"entry", "barriers init", "P first data", "P loop end", "C0 first wgmma",
                                         "C0 loop end", "C0 epilogue tile", "C0 end", "C1 loop end", "P loads issued",
                                         "C0 part stored", "C0 sums done", ""};
static const char *point_names_read[] = {"entry", "", "first data", "end", "", "", "", "", "", "", "", "", ""};
static const char *point_names_gemv[] = {"entry", "b decoded", "first data", "t0 loop end", "last t loop end",
                                         "prefetch issued", "pdl wait done", "b loads issued", "", "", "", "", ""};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: trace gemm:M,N,K[,L] | dual:M,N,K[,L] | gemv:M,K[,L] | read:M,K[,L] ...\n");
    return 2;
  }
  const ProbeDevice d = probe_device();
  const int clock_khz = d.clock_khz, sms = d.sms;
  const cudaDeviceProp &prop = d.prop;

  const size_t sweep_n = (size_t)std::max(2 * prop.l2CacheSize, 64 << 20) / 16;
  uint4 *sweep;
  unsigned *sink;
  unsigned long long *stamps, *trace;
  const int max_ctas = 1 << 16;
  CHECK(cudaMalloc(&sweep, sweep_n * 16));
  CHECK(cudaMemset(sweep, 1, sweep_n * 16));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&stamps, 16));
  CHECK(cudaMalloc(&trace, (size_t)max_ctas * NVFP4_TRACE_SLOTS * 8));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  for (int ai = 1; ai < argc; ai++) {
    Case c;
    char kind[16] = {};
    long long v[4] = {0, 0, 0, 1};
    const int got = sscanf(argv[ai], "%15[a-z]:%lld,%lld,%lld,%lld", kind, &v[0], &v[1], &v[2], &v[3]);
    c.kind = kind;
    const bool is_read = c.kind == "read";
    if (c.kind == "gemv" || is_read) {
      if (got < 3) return 2;
      c.m = v[0], c.n = 1, c.k = v[1], c.batch = got >= 4 ? v[2] : 1;
    } else {
      if (got < 4) return 2;
      c.m = v[0], c.n = v[1], c.k = v[2], c.batch = got >= 5 ? v[3] : 1;
    }
    const bool dual = c.kind == "dual";
    const char *pre_env = getenv("TRACE_PRE");
    const std::string pre = pre_env ? pre_env : "";
    std::vector<std::string> pre_steps;  // TRACE_PRE's steps, '+' between them, run in order
    for (size_t i = 0; i < pre.size();) {
      const size_t j = std::min(pre.find('+', i), pre.size());
      pre_steps.push_back(pre.substr(i, j - i));
      if (pre_steps.back() != "code" && pre_steps.back() != "icache" && pre_steps.back() != "tlb") {
        fprintf(stderr, "TRACE_PRE: unknown step '%s' (code, icache, tlb, joined by '+')\n", pre_steps.back().c_str());
        return 2;
      }
      i = j + 1;
    }
    const bool pre_code = std::find(pre_steps.begin(), pre_steps.end(), "code") != pre_steps.end();
    g_buffers.clear();
    nvfp4_matmul p = {};
    p.m = c.m, p.n = c.n, p.k = c.k, p.batch = c.batch, p.alpha = p.alpha2 = 1.f, p.c_type = NVFP4_F16;
    const bool blocked = c.kind != "gemv" && !is_read;
    p.a = operand(c.batch, c.m, c.k, 11, blocked);
    p.b = operand(c.batch, c.n, c.k, 23, blocked);
    if (dual) p.b2 = operand(c.batch, c.n, c.k, 37, blocked);
    CHECK(cudaMalloc(&p.c, (size_t)(c.batch * c.m * c.n * 2)));
    p.c_batch_stride = c.m * c.n;
    p.c_row_stride = c.n;
    const std::vector<std::pair<uint8_t *, size_t>> buffers = g_buffers;
    nvfp4_matmul pw = p;  // TRACE_PRE=code: the same call on operands 1 GB further on
    if (pre_code && !is_read) {
      void *spacer;
      CHECK(cudaMalloc(&spacer, (size_t)1 << 30));
      pw.a = operand(c.batch, c.m, c.k, 12, blocked);
      pw.b = operand(c.batch, c.n, c.k, 24, blocked);
      if (dual) pw.b2 = operand(c.batch, c.n, c.k, 38, blocked);
      CHECK(cudaMalloc(&pw.c, (size_t)(c.batch * c.m * c.n * 2)));
      CHECK(cudaFree(spacer));
    }
    char plan[160] = "";
    CHECK(nvfp4_matmul_cuda_describe(&p, 1, plan, sizeof plan) == NVFP4_OK ? cudaSuccess : cudaErrorInvalidValue);
    const bool is_gemv = std::string(plan).rfind("gemv_dp4a", 0) == 0;
    const char **names = is_read ? point_names_read : is_gemv ? point_names_gemv : point_names_sm90;
    // the trace buffer to the case's kernel (off: to none, for TRACE_PRE=code's untraced call)
    auto attach = [&](bool on) {
      CHECK(nvfp4_trace_attach_sm90(on && !is_gemv && !is_read ? trace : nullptr));
      CHECK(nvfp4_trace_attach_gemv_dp4a(on && is_gemv && !is_read ? trace : nullptr));
      CHECK(nvfp4_trace_attach_read(on && is_read ? trace : nullptr));
    };
    attach(true);
    const int read_ctas = sms * (getenv("READ_CTAS") ? atoi(getenv("READ_CTAS")) : 4);
    const int read_unroll = getenv("READ_UNROLL") ? atoi(getenv("READ_UNROLL")) : 8;
    const int read_smem = getenv("READ_SMEM") ? atoi(getenv("READ_SMEM")) : 0;  // dynamic smem per CTA (launch cost)
    const int read_rows = getenv("READ_ROWS") ? atoi(getenv("READ_ROWS")) : 0;
    const bool read_scales = !getenv("READ_SCALES") || atoi(getenv("READ_SCALES")) != 0;
    const bool read_x = getenv("READ_X") && atoi(getenv("READ_X")) == 1;
    if (read_rows < 0 || read_rows > 2) {
      fprintf(stderr, "READ_ROWS is 0 (a plain read), 1 (the W4A16 GEMV's pattern) or 2 (512-byte runs a warp)\n");
      return 2;
    }
    if (read_x && (read_rows != 1 || !read_scales || c.k > 65536)) {
      fprintf(stderr, "READ_X=1 goes with READ_ROWS=1, the scales and K <= 65536\n");
      return 2;
    }
    if (read_rows && c.k % (read_rows == 2 ? 1024 : 128) != 0) {
      fprintf(stderr, "READ_ROWS=%d reads K in steps of %d\n", read_rows, read_rows == 2 ? 1024 : 128);
      return 2;
    }
    if (read_smem > 48 * 1024) {
      CHECK(cudaFuncSetAttribute(read_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, read_smem));
      CHECK(cudaFuncSetAttribute(read_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, read_smem));
      CHECK(cudaFuncSetAttribute(read_kernel<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, read_smem));
    }
    const size_t read_na = (size_t)(c.batch * c.m * c.k / 2) / 16, read_ns = (size_t)(c.batch * c.m * c.k / 16) / 16;

    const int reps = 21;
    std::vector<float> ms(reps);
    std::vector<std::vector<unsigned long long>> runs(reps);
    std::vector<unsigned long long> st(2 * reps);
    for (int r = 0; r < reps; r++) {
      CHECK(cudaMemset(trace, 0, (size_t)max_ctas * NVFP4_TRACE_SLOTS * 8));
      sweep_kernel<<<4 * sms, 512>>>(sweep, sweep_n, sink);
      for (const std::string &step : pre_steps) {
        if (step == "code" && !is_read) {
          attach(false);
          if (nvfp4_matmul_cuda(&pw, 1, 0) != NVFP4_OK) return 1;
          attach(true);
        } else if (step == "icache") {
          evict_icache(2 * sms, reinterpret_cast<float *>(sink), std::make_integer_sequence<int, 8>{});
        } else if (step == "tlb") {
          for (const auto &b : buffers) touch_kernel<<<64, 256>>>(reinterpret_cast<const unsigned *>(b.first), b.second / 4, 16384, sink);
        }
      }
      spin_kernel<<<1, 32>>>((long long)clock_khz * 100);  // 100 ms at the peak clock (clock_khz: cycles a ms)
      stamp_kernel<<<1, 1>>>(stamps);
      CHECK(cudaEventRecord(e0));
      if (is_read) {
        const uint4 *ra = reinterpret_cast<const uint4 *>(p.a.data), *rs = reinterpret_cast<const uint4 *>(p.a.sf);
        if (read_rows) {
          const unsigned grid = (unsigned)((c.batch * c.m + 15) / 16);
          const uint8_t *ra8 = static_cast<const uint8_t *>(p.a.data), *rs8 = static_cast<const uint8_t *>(p.a.sf);
          auto kern = read_rows_kernel<1, false, false>;  // READ_SCALES=0
          if (read_rows == 2) kern = read_scales ? read_rows_kernel<2, true, false> : read_rows_kernel<2, false, false>;
          else if (read_x) kern = read_rows_kernel<1, true, true>;
          else if (read_scales) kern = read_rows_kernel<1, true, false>;
          kern<<<grid, 256>>>(ra8, rs8, c.batch * c.m, c.k, sink);
        }
        else if (read_unroll == 4)
          read_kernel<4><<<read_ctas, 256, read_smem>>>(ra, read_na, rs, read_ns, sink);
        else if (read_unroll == 16)
          read_kernel<16><<<read_ctas, 256, read_smem>>>(ra, read_na, rs, read_ns, sink);
        else
          read_kernel<8><<<read_ctas, 256, read_smem>>>(ra, read_na, rs, read_ns, sink);
        CHECK(cudaGetLastError());
      } else if (nvfp4_matmul_cuda(&p, 1, 0) != NVFP4_OK) {
        fprintf(stderr, "launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      CHECK(cudaEventRecord(e1));
      stamp_kernel<<<1, 1>>>(stamps + 1);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
      CHECK(cudaMemcpy(&st[2 * r], stamps, 16, cudaMemcpyDeviceToHost));
      runs[r].resize((size_t)max_ctas * NVFP4_TRACE_SLOTS);
      CHECK(cudaMemcpy(runs[r].data(), trace, runs[r].size() * 8, cudaMemcpyDeviceToHost));
    }
    // the run with the median event time
    std::vector<int> order(reps);
    for (int r = 0; r < reps; r++) order[r] = r;
    std::sort(order.begin(), order.end(), [&](int x, int y) { return ms[x] < ms[y]; });
    const int r = order[reps / 2];
    const std::vector<unsigned long long> &tr = runs[r];
    int ctas = 0;
    while (ctas < max_ctas && tr[(size_t)ctas * NVFP4_TRACE_SLOTS] != 0) ctas++;
    printf("\n== %s%s %lldx%lldx%lld L%lld (%s): event %.2f us (min %.2f), %d CTAs\n", c.kind.c_str(), pre.empty() ? "" : (" pre=" + pre).c_str(),
           (long long)c.m, (long long)c.n, (long long)c.k, (long long)c.batch, is_read ? "plain read" : plan, ms[r] * 1e3,
           ms[order[0]] * 1e3, ctas);
    if (!ctas) continue;
    unsigned long long t0 = ~0ull, tend = 0;
    for (int i = 0; i < ctas; i++) t0 = std::min(t0, tr[(size_t)i * NVFP4_TRACE_SLOTS]);
    if (const char *dir = getenv("TRACE_DUMP")) {  // per CTA: sm, then each point's time (us after the first entry)
      std::string name = argv[ai];
      for (char &ch : name)
        if (ch == ':' || ch == ',') ch = '_';
      const std::string path = std::string(dir) + "/" + name + ".csv";
      if (FILE *f = fopen(path.c_str(), "w")) {
        for (int i = 0; i < ctas; i++) {
          const unsigned long long *row = &tr[(size_t)i * NVFP4_TRACE_SLOTS];
          fprintf(f, "%d,%llu", i, row[NVFP4_TRACE_SLOTS - 1]);
          for (int q = 0; q < (NVFP4_TRACE_SLOTS - 1) / 2; q++)
            fprintf(f, ",%.3f", row[2 * q] ? (double)((long long)row[2 * q] - (long long)t0) / 1e3 : -1.0);
          fprintf(f, "\n");
        }
        fclose(f);
      }
    }
    for (int i = 0; i < ctas; i++)
      for (int q = 0; q < (NVFP4_TRACE_SLOTS - 1) / 2; q++) tend = std::max(tend, tr[(size_t)i * NVFP4_TRACE_SLOTS + 2 * q]);
    printf("stamp -> first CTA entry %.2f us; first entry -> last point %.2f us; last point -> stamp %.2f us\n",
           (double)((long long)t0 - (long long)st[2 * r]) / 1e3, (double)(tend - t0) / 1e3,
           (double)((long long)st[2 * r + 1] - (long long)tend) / 1e3);
    printf("%-18s %9s %9s %9s   %s\n", "point", "min us", "median", "max us", "median cycles since entry");
    for (int q = 0; q < (NVFP4_TRACE_SLOTS - 1) / 2; q++) {
      std::vector<double> ts, cy;
      for (int i = 0; i < ctas; i++) {
        const unsigned long long *row = &tr[(size_t)i * NVFP4_TRACE_SLOTS];
        if (!row[2 * q]) continue;
        ts.push_back((double)(row[2 * q] - t0) / 1e3);
        cy.push_back((double)(row[2 * q + 1] - row[1]));
      }
      if (ts.empty()) continue;
      std::sort(ts.begin(), ts.end());
      std::sort(cy.begin(), cy.end());
      printf("%2d %-15s %9.2f %9.2f %9.2f   %.0f\n", q, names[q], ts.front(), ts[ts.size() / 2], ts.back(),
             cy[cy.size() / 2]);
    }
  }
  return 0;
}
