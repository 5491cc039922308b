/*
 * dev/moe_copies.cu - how fast the W4A16 16-row tiles' copies (csrc/cuda/w4a16.cu) bring an MoE stage's expert
 * weights in with no math at all, in two layouts (development tool, standalone, not part of the extension):
 *   rows:  the checkpoint's (and pack_bf16_pairs') layout, codes [E][N][K/2], scales [E][N][K/16]: a CTA's step is
 *          128 weight rows x 32 bytes (each miss filling 128 bytes of L2, as the kernel does) and, every 4 steps,
 *          16 bytes of each row's scales;
 *   tiled: the experts laid out by (128-row tile, K step): a step is one run of 4096 bytes of codes and the 512
 *          bytes of their scales.
 * Both as the kernel runs them: a CTA of 128 threads a tile (an expert's 128 weight rows over all of K), a ring of
 * 4 steps in shared memory (cp.async, a group a step, a barrier a step), 16 activation rows x 128 bytes a step read
 * from L2, 4 CTAs an SM; the tiles of `experts` experts, each CTA one tile, as the kernel's grid (its tile's expert
 * by arithmetic: no offset scan or row offsets, the kernel's start). Printed: each layout's time and rate, and a
 * plain read of the same bytes and a device-to-device copy (bytes read and written: the benchmarks' copy rate).
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o moe_copies dev/moe_copies.cu
 *   ./moe_copies 57 4096 7168    # DeepSeek-V3 gate/up at T = 8 (57 experts, 2 x 2048 rows), down: 57 7168 2048
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "../csrc/cuda/ptx_sm80.cuh" /* the kernels' cp.async wrappers */

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

constexpr int THREADS = 128, ROWS = 128, STAGES = 4, ACT_ROWS = 16;
constexpr int ACT_BYTES = 32 * 128;          /* the kernel's room for 32 activation rows of 128 bytes */
constexpr int CODE_BYTES = ROWS * 32;        /* a step's codes */
constexpr int SF_STEP = ROWS * 4;            /* a step's scales */
constexpr int SLOT = ACT_BYTES + CODE_BYTES; /* a step's slot; the scales' ring after the slots */
constexpr int SF_RING = 2 * ROWS * 16;       /* rows layout: 2 slots of 4 steps, [rows][16 bytes] */
constexpr int SMEM = STAGES * SLOT + (SF_RING > STAGES * SF_STEP ? SF_RING : STAGES * SF_STEP);

struct Stage {
  const uint8_t *codes, *scales, *act; /* rows: codes [E][N][K/2], scales [E][N][K/16]; tiled: blocks in codes */
  int n, k, tiles_n;
};

/* One tile a CTA: `copy(s, slot)` issues step s's copies; the ring as w4a16.cu's fast path runs it. */
template <bool TILED>
__global__ void __launch_bounds__(THREADS, 4) copies_kernel(const Stage st, int *sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, steps = st.k / 64;
  const int64_t tile = blockIdx.x, e = tile / st.tiles_n, n0 = tile % st.tiles_n * ROWS;
  const uint32_t base = smem_addr(smem), sf_base = base + STAGES * SLOT;
  const uint8_t *act = st.act + (tid / 8) * (int64_t)st.k * 2 + 16 * (tid % 8);
  auto copy = [&](int s) {
    const uint32_t slot = base + s % STAGES * SLOT;
    cp_async_16(slot + 16 * tid, act + s * 128); /* 16 rows x 128 bytes of activations, L2 hits */
    if (TILED) {
      const uint8_t *block = st.codes + ((tile * steps) + s) * (int64_t)(CODE_BYTES + SF_STEP);
      cp_async_16(slot + ACT_BYTES + 16 * tid, block + 16 * tid);
      cp_async_16(slot + ACT_BYTES + 16 * (tid + THREADS), block + 16 * (tid + THREADS));
      if (tid < SF_STEP / 16) cp_async_16(sf_base + s % STAGES * SF_STEP + 16 * tid, block + CODE_BYTES + 16 * tid);
    } else {
#pragma unroll
      for (int q = 0; q < 2; q++) {
        const int64_t row = n0 + tid / 2 + 64 * q;
        cp_async_16_l2_128(slot + ACT_BYTES + 16 * (tid + THREADS * q),
                           st.codes + (e * st.n + row) * (int64_t)(st.k / 2) + s * 32 + 16 * (tid % 2), 16);
      }
      if (s % 4 == 0) /* the row's scales of 4 steps */
        cp_async_16(sf_base + (s / 4) % 2 * (ROWS * 16) + 16 * tid,
             st.scales + (e * st.n + n0 + tid) * (int64_t)(st.k / 16) + s * 4);
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < steps) copy(s);
    cp_async_commit();
  }
  for (int s = 0; s < steps; s++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (s + STAGES - 1 < steps) copy(s + STAGES - 1);
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();
  if (tid == 0 && smem[SLOT - 1] == 0x5A && smem[SMEM - 1] == 0xA5) atomicAdd(sink, 1); /* keep the copies */
}

/* A plain read of `bytes` (16-byte loads, 4 in flight a thread), for scale. */
__global__ void read_kernel(const uint4 *p, int64_t n, int *sink) {
  uint32_t x = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) v[u] = i + u * stride < n ? __ldcs(p + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (x == 0x12345678u) atomicAdd(sink, 1);
}

float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: moe_copies EXPERTS N K   (N %% 128 == 0, K %% 256 == 0)\n");
    return 2;
  }
  const int experts = std::atoi(argv[1]), n = std::atoi(argv[2]), k = std::atoi(argv[3]);
  if (experts < 1 || n < ROWS || n % ROWS || k < 256 || k % 256) {
    std::fprintf(stderr, "EXPERTS >= 1, N a multiple of 128, K a multiple of 256\n");
    return 2;
  }
  const int64_t codes = (int64_t)experts * n * k / 2, scales = codes / 8, bytes = codes + scales;
  const int tiles_n = n / ROWS, tiles = experts * tiles_n, reps = 5;
  uint8_t *rows_codes, *rows_scales, *tiled, *act, *copy_dst;
  int *sink;
  CHECK(cudaMalloc(&rows_codes, codes));
  CHECK(cudaMalloc(&rows_scales, scales));
  CHECK(cudaMalloc(&tiled, bytes));
  CHECK(cudaMalloc(&copy_dst, bytes));
  CHECK(cudaMalloc(&act, (int64_t)ACT_ROWS * k * 2));
  CHECK(cudaMalloc(&sink, sizeof(int)));
  CHECK(cudaMemset(rows_codes, 1, codes));
  CHECK(cudaMemset(rows_scales, 2, scales));
  CHECK(cudaMemset(tiled, 3, bytes));
  CHECK(cudaMemset(act, 0, (int64_t)ACT_ROWS * k * 2));
  CHECK(cudaFuncSetAttribute(copies_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  CHECK(cudaFuncSetAttribute(copies_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  int per_sm = 0, sms = 0, dev = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, copies_kernel<false>, THREADS, SMEM));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto run = [&](const char *name, int64_t moved, auto &&launch) {
    launch();
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int r = 0; r < reps; r++) {
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      ms.push_back(time_ms(a, b));
    }
    float best = ms[0];
    for (float m : ms) best = m < best ? m : best;
    std::printf("%-34s %9.1f us  %6.2f TB/s\n", name, best * 1e3, moved / (best * 1e-3) / 1e12);
  };
  std::printf("%d experts x %d x %d: %.0f MB of codes and scales, %d tiles of 128 rows, %d CTAs an SM x %d SMs\n",
              experts, n, k, bytes / 1e6, tiles, per_sm, sms);
  const Stage rows{rows_codes, rows_scales, act, n, k, tiles_n}, blocks{tiled, nullptr, act, n, k, tiles_n};
  run("rows (checkpoint layout)", bytes, [&] { copies_kernel<false><<<tiles, THREADS, SMEM>>>(rows, sink); });
  run("tiled (tile, K step runs)", bytes, [&] { copies_kernel<true><<<tiles, THREADS, SMEM>>>(blocks, sink); });
  run("plain read of the bytes", bytes,
      [&] { read_kernel<<<sms * 8, 256>>>(reinterpret_cast<const uint4 *>(tiled), bytes / 16, sink); });
  run("device copy (read + write)", 2 * bytes, /* as nvfp4_kernels.timing's copy rate, the SOL's */
      [&] { CHECK(cudaMemcpyAsync(copy_dst, tiled, bytes, cudaMemcpyDeviceToDevice)); });
  CHECK(cudaGetLastError());
  return 0;
}
