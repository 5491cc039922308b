/*
 * common.cuh - what every CUDA kernel file shares: the launch table for one or
 * several problems, small load helpers, and the fp32 epilogue.
 */
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "numerics.cuh"

/* Problems per launch: the table of 16 is ~4.4 KB of kernel parameters
 * (every sm_80+ launch takes up to 32 KB with CUDA 12.1 and later); more
 * groups than this are split over several launches (plan.cu). */
#define NVFP4_LAUNCH_GROUPS 16

/* One launch's problems, passed by value as a __grid_constant__ parameter:
 * no device allocation and no host-to-device copy per call. tile_start[g] is
 * the first block of problem g; blocks walk problems in order. */
struct MatmulTable {
  nvfp4_matmul p[NVFP4_LAUNCH_GROUPS];
  int32_t tile_start[NVFP4_LAUNCH_GROUPS + 1];
  int32_t count;
};

/* Fills t with problems[0, count) and their first tiles, tile_m x tile_n
 * output tiles each (in every batch); returns the launch's tiles. Empty
 * problems get none. */
inline int64_t table_tiles(MatmulTable &t, const nvfp4_matmul *problems, int count, int64_t tile_m, int64_t tile_n) {
  int64_t tiles = 0;
  for (int g = 0; g < count; g++) {
    const nvfp4_matmul &p = problems[g];
    t.p[g] = p;
    t.tile_start[g] = (int32_t)tiles;
    tiles += ((p.m + tile_m - 1) / tile_m) * ((p.n + tile_n - 1) / tile_n) * p.batch;
  }
  t.tile_start[count] = (int32_t)tiles;
  t.count = count;
  return tiles;
}

/* Which problem a linear tile index falls into; the tile index becomes local. */
__device__ __forceinline__ int table_find(const MatmulTable &t, int64_t &tile) {
  int g = 0;
  while (g + 1 < t.count && tile >= t.tile_start[g + 1]) g++;
  tile -= t.tile_start[g];
  return g;
}

/* Rows grouped by expert (nvfp4.h), in tiles of TM rows: a launch counts a
 * bound on the (expert, TM rows) tiles. At most n = min(E, m) experts have
 * rows, sum ceil(rows / TM) <= (m + n (TM - 1)) / TM. */
__host__ __device__ __forceinline__ int64_t expert_row_tiles(const nvfp4_matmul &p, int64_t tm) {
  const int64_t n = p.batch < p.m ? p.batch : p.m;
  return n > 0 ? (p.m + n * (tm - 1)) / tm : 0;
}

/* Row tile r of such a launch is the r-th (expert, TM rows) pair in expert
 * order, an expert of more than TM rows in tiles of BUSY rows where BUSY >
 * TM (fewer tiles: the bound holds): found (in shared memory) = its expert,
 * first row and the row after its last; expert -1 where there is none
 * (past the bound's real tiles). Warp
 * 0 scans the offsets 256 experts a round, 8 consecutive a lane, their loads
 * issued together (one L2 round trip a round: an MoE's E <= 256 in one);
 * ends clamped to [0, m] and made non-decreasing (a prefix max), tiles by a
 * prefix sum. Every thread of the CTA calls, and waits. */
template <int TM, int BUSY = TM>
__device__ __forceinline__ void expert_tile(const nvfp4_matmul &p, int64_t r, long long *found) {
  static_assert(BUSY >= TM, "busy experts' tiles are the larger");
  if (threadIdx.x < 32) {
    constexpr int R = 8; /* experts a lane, a round */
    const int lane = threadIdx.x;
    const unsigned all = 0xFFFFFFFFu;
    if (lane == 0) found[0] = -1;
    __syncwarp();
    const int m = (int)std::min<int64_t>(p.m, INT32_MAX);
    int end_before = 0;         /* the row end of the experts before this round */
    long long tiles_before = 0; /* and their tiles */
    for (long long e0 = 0; e0 < p.batch && tiles_before <= r; e0 += 32 * R) {
      const long long first = e0 + (long long)lane * R; /* the lane's experts: first .. first + R - 1 */
      int end[R], tiles[R];
#pragma unroll
      for (int i = 0; i < R; i++) end[i] = first + i < p.batch ? p.offs[first + i] : 0;
      int run = 0;
#pragma unroll
      for (int i = 0; i < R; i++) end[i] = run = std::max(run, std::min(std::max(end[i], 0), m));
      int pre = run; /* prefix max over the lanes */
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(all, pre, d);
        if (lane >= d) pre = std::max(pre, o);
      }
      int start = __shfl_up_sync(all, pre, 1);
      start = std::max(lane ? start : 0, end_before); /* the end before the lane's first expert */
      int sum = 0;
#pragma unroll
      for (int i = 0, s = start; i < R; i++) {
        end[i] = std::max(end[i], start);
        tiles[i] = end[i] - s <= TM ? (end[i] - s + TM - 1) / TM : (end[i] - s + BUSY - 1) / BUSY;
        sum += tiles[i], s = end[i];
      }
      int cum = sum; /* prefix sum over the lanes */
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(all, cum, d);
        if (lane >= d) cum += o;
      }
      long long before = tiles_before + cum - sum;
      if (r >= before && r < before + sum) {
#pragma unroll
        for (int i = 0, s = start; i < R; i++) {
          if (r >= before && r < before + tiles[i]) {
            const long long rows = end[i] - s <= TM ? TM : BUSY, m0 = s + (r - before) * rows;
            found[0] = first + i, found[1] = m0, found[2] = m0 + rows < end[i] ? m0 + rows : end[i];
          }
          before += tiles[i], s = end[i];
        }
      }
      end_before = __shfl_sync(all, end[R - 1], 31);
      tiles_before += __shfl_sync(all, cum, 31);
    }
  }
  __syncthreads();
}

/* x, as a value the compiler cannot see through: what is computed from it
 * again is not replaced by a copy kept alive since the first time, and x
 * itself is kept, not recomputed from what it was computed from. */
__device__ __forceinline__ int opaque(int x) {
  asm volatile("mov.b32 %0, %0;" : "+r"(x));
  return x;
}

/* silu(x) = x / (1 + e^-x) with the fast division (2 ulp): the IEEE one took
 * its slow path whenever e^-x overflowed (x < -88, half of all random sums),
 * ~40% of the dual epilogue on an H200. Where 1 + e^-x
 * exceeds 2^126 the quotient is 0; the true value is below 1e-36 there. */
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

/* The epilogue every kernel ends with (nvfp4.h): from fp32 sums x (and, for
 * a dual, y of the second product) to the stored value,
 *   gemm: fp32(alpha * x) + bias[n], the add in fp32;
 *   dual: silu(fp32(alpha * x)) * fp32(alpha2 * y);
 * rounded to c_type (fp16 or bf16, both 2 bytes). Built once per thread, it
 * reads the alphas (device pointers or values) then. `unscale`, a power of two
 * a kernel's sums carry (NVFP4_TC_UNSCALE), is folded into the alphas: exact.
 * The bias of output (row, col) is bias[col] as the problem is given; a GEMV
 * kernel that sees it with the roles swapped (plan.cu) has it by row. */
struct Epilogue {
  float alpha, alpha2;
  const void *bias;
  int32_t bias_type, c_type; /* nvfp4.h's; kept in one register each, as few live as the tile kernels can spare */
  bool bias_by_row;

  /* `expert`: rows grouped by expert (nvfp4.h) read that expert's alphas */
  __device__ __forceinline__ Epilogue(const nvfp4_matmul &p, float unscale = 1.f, bool by_row = false,
                                      int64_t expert = 0)
      : alpha(unscale * (p.alpha_ptr ? p.alpha_ptr[expert] : p.alpha)),
        alpha2(p.b2.data ? unscale * (p.alpha2_ptr ? p.alpha2_ptr[expert] : p.alpha2) : 0.f), bias(p.bias),
        bias_type(p.bias_type), c_type(p.c_type), bias_by_row(by_row) {}

  __device__ __forceinline__ float bias_at(int64_t row, int64_t col) const {
    const int64_t i = bias_by_row ? row : col;
    if (bias_type == NVFP4_F32) return static_cast<const float *>(bias)[i];
    if (bias_type == NVFP4_BF16) return __bfloat162float(static_cast<const __nv_bfloat16 *>(bias)[i]);
    return __half2float(static_cast<const __half *>(bias)[i]);
  }
  /* gemm's value of output (row, col); __fmul_rn keeps the product and the
   * add two roundings (no fused multiply-add) */
  __device__ __forceinline__ float gemm(float x, int64_t row, int64_t col) const {
    const float v = __fmul_rn(x, alpha);
    return bias ? __fadd_rn(v, bias_at(row, col)) : v;
  }
  __device__ __forceinline__ float dual(float x, float y) const { return silu(x * alpha) * (y * alpha2); }
  /* a value's 2 bytes */
  __device__ __forceinline__ uint16_t bits(float v) const {
    return c_type == NVFP4_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
  __device__ __forceinline__ void store(uint16_t *dst, float v) const { *dst = bits(v); }
  /* two values' bits, lo first: one 4-byte store */
  __device__ __forceinline__ uint32_t pack2(float lo, float hi) const {
    if (c_type == NVFP4_BF16) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t *>(&h);
    }
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
  }
};

/* One 8-byte store (dst 8-byte aligned): the compiler split a uint2 store of
 * two separately packed halves into two 4-byte stores. */
__device__ __forceinline__ void st_global_v2(void *dst, uint32_t x, uint32_t y) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(x), "r"(y) : "memory");
}

/* A 16-bit (or float) value as float, and back rounded to nearest even:
 * the kernels' one pair of conversions by type. */
template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}
template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}

/* The two 16-bit values of a word (bf16 or fp16, the low half first) as floats: bf16 is fp32's high half, one shift
 * or mask a value (the intrinsic per half took a byte permute and a shift each). */
__device__ __forceinline__ void x16x2_to_floats(uint32_t w, bool bf16, float *x) {
  if (bf16) {
    x[0] = __uint_as_float(w << 16), x[1] = __uint_as_float(w & 0xFFFF0000u);
  } else {
    const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w));
    x[0] = f.x, x[1] = f.y;
  }
}

/* The 16 values at p as floats; VEC: p is 16-byte aligned. (Loading all of a
 * lane's four blocks before quantizing any took 128 registers and measured
 * 3-6% slower on large inputs, H100.) */
template <typename T, bool VEC>
__device__ __forceinline__ void load16(const T *p, float (&x)[16]) {
  if constexpr (VEC) {
    constexpr int PER_LOAD = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < 16 / PER_LOAD; c++) {
      const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p) + c);
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) x16x2_to_floats(wd[i], true, x + c * 8 + 2 * i);
      } else {
        const T *v = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int i = 0; i < PER_LOAD; i++) x[c * PER_LOAD + i] = to_float<T>(v[i]);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; i++) x[i] = to_float<T>(p[i]);
  }
}

/* A block's values (nvfp4.h: code value x scale, exact in T) at p;
 * VEC: p is 16-byte aligned. 16-bit values on sm_89+ from the codes' words
 * (numerics.cuh, nvfp4_values_bf16x8: a quarter of the float path's
 * instructions), else through floats. */
template <typename T, bool VEC>
__device__ __forceinline__ void store_block_values(T *p, const uint8_t (&codes)[8], uint32_t sf) {
#if !NVFP4_TC_BITS
  if constexpr (VEC && !std::is_same_v<T, float>) {
    uint32_t w[2], v[8];
    memcpy(w, codes, 8);
    nvfp4_block_values16<std::is_same_v<T, __nv_bfloat16>>(w, sf, v);
    reinterpret_cast<uint4 *>(p)[0] = make_uint4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<uint4 *>(p)[1] = make_uint4(v[4], v[5], v[6], v[7]);
    return;
  }
#endif
  float f[16];
  nvfp4_dequantize_block(codes, sf, f);
  T v[16];
#pragma unroll
  for (int i = 0; i < 16; i++) v[i] = from_float<T>(f[i]);
  if constexpr (VEC) {
#pragma unroll
    for (int c = 0; c < (int)sizeof(v) / 16; c++) reinterpret_cast<uint4 *>(p)[c] = reinterpret_cast<const uint4 *>(v)[c];
  } else {
#pragma unroll
    for (int i = 0; i < 16; i++) p[i] = v[i];
  }
}

/* Programmatic dependent launch (sm_90+; nothing below). A kernel launched
 * with cudaLaunchAttributeProgrammaticStreamSerialization may start while the
 * kernel before it in the stream is finishing: pdl_wait() then blocks until
 * that kernel has completed and its writes are visible. Every thread calls it
 * before its first global read or write. pdl_launch_dependents() lets the next
 * such kernel launch before this one ends (its CTAs start as SMs free up and
 * wait in pdl_wait). */
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The launch attribute that goes with them. */
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

/* A launch's flag value (matmul_sm90.cu's stream-K flags, skinny.cu's
 * tickets): a process-wide counter from a random 64-bit start, never 0. */
inline unsigned long long launch_epoch() {
  static std::atomic<unsigned long long> next{[] {
    std::random_device rd;
    return ((unsigned long long)rd() << 32) ^ rd();
  }()};
  unsigned long long e;
  while (!(e = next.fetch_add(1, std::memory_order_relaxed))) {
  }
  return e;
}

/* Split sums' tickets (skinny.cu, w4a16.cu): whether this CTA is the last of
 * the `n` that share a ticket to take it. A ticket holds a launch's epoch
 * (launch_epoch(), 48 bits) and a count; one of another epoch (a workspace's
 * earlier contents) counts as 0; the last CTA resets it to 0, so a CUDA
 * graph's replays (the same epoch) start afresh. `old` is the ticket as read
 * earlier, a guess (0 will do): the CAS tells the truth. The caller fences its
 * partials before and after (__threadfence). ticket_epoch(): a launch's. */
inline unsigned long long ticket_epoch() {
  const unsigned long long e = launch_epoch() & 0xFFFFFFFFFFFFull;
  return e ? e : 1;
}

__device__ __forceinline__ bool take_ticket(unsigned long long *ticket, unsigned long long old,
                                            unsigned long long epoch, int n) {
  unsigned long long next;
  for (;;) {
    next = (old >> 16) == epoch ? old + 1 : (epoch << 16) | 1u;
    const unsigned long long seen = atomicCAS(ticket, old, next);
    if (seen == old) break;
    old = seen;
  }
  if ((int)(next & 0xFFFFu) != n) return false;
  *ticket = 0; /* every other CTA sharing it has taken its ticket */
  return true;
}

__host__ __device__ inline bool aligned(const void *ptr, int64_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; }

/* Every row (and batch) of an operand's codes starts `w`-byte aligned. */
inline bool rows_aligned(const nvfp4_operand &o, int64_t w) {
  return aligned(o.data, w) && o.row_stride % w == 0 && o.batch_stride % w == 0;
}

/* A row's 4 scales of a K step of 64 are one aligned word (either layout). */
inline bool scales_aligned(const nvfp4_operand &o) {
  return aligned(o.sf, 4) && o.sf_batch_stride % 4 == 0 && (o.sf_layout != NVFP4_SF_LINEAR || o.sf_row_stride % 4 == 0);
}

/* An operand whose every row piece is one cp.async: data 16-byte aligned
 * (rows and batches too), scales 4-byte aligned (either layout). */
inline bool cp_async_ok(const nvfp4_operand &o) { return rows_aligned(o, 16) && scales_aligned(o); }

/* An environment switch, read by the caller once: -1 unset, 0 where it
 * starts with '0', else 1. */
inline int env_flag(const char *name) {
  const char *e = std::getenv(name);
  return !e ? -1 : e[0] == '0' ? 0 : 1;
}

/* An empty kernel (plan.cu) whose attributes say which code the device
 * runs: every kernel is built for the same targets (setup.py). */
__global__ void nvfp4_arch_probe_kernel();

/* The current device's properties that launches need, queried once per device
 * (host side; at most 64 devices, id >= 64 gets zeros and no fast path).
 * sm90_code: the device runs code compiled for sm_90 or later (the probe's
 * PTX version, cudaFuncAttributes::ptxVersion >= 90), so the sm_90 parts
 * exist (the wgmma kernel's body, griddepcontrol for programmatic dependent
 * launch). False on a GPU that JIT-compiles the compute_80 PTX: one that no
 * built SASS fits (sm_120, sm_103), or Hopper under a build without sm_90a
 * (NVFP4_GENCODE). */
struct DeviceInfo {
  int id, sms, major, minor;
  int64_t smem_optin;
  bool sm90_code;
};

inline const DeviceInfo &device_info() {
  static DeviceInfo cache[64] = {};
  static DeviceInfo none = {64, 0, 0, 0, 0, false};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) return none;
  DeviceInfo &d = cache[device];
  if (!d.sms) {
    int smem = 0;
    cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    d.smem_optin = smem;
    d.id = device;
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, nvfp4_arch_probe_kernel) == cudaSuccess)
      d.sm90_code = fa.ptxVersion >= 90;
    else
      cudaGetLastError(); /* no error left for the next launch's check */
    cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
  }
  return d;
}

/* A launch with programmatic dependent launch where the device runs the sm_90
 * code (whose pdl_wait exists), as the matmul kernels'. */
template <typename... P, typename... A>
cudaError_t launch_pdl(void (*kernel)(P...), unsigned ctas, int threads, int smem, cudaStream_t stream, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = pdl_attribute();
  cfg.attrs = &attr;
  cfg.numAttrs = device_info().sm90_code ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* ---- development tracing (tools/trace.cu; off in every normal build) ------
 * With -DNVFP4_TRACE a kernel records, at points it names, the global timer
 * (ns, comparable across SMs) and the SM's cycle counter into a buffer the
 * tool attaches: TRACE_SLOTS 64-bit words per CTA, point i at 2i and 2i + 1,
 * the SM id in the last word. Without it NVFP4_TRACE_POINT compiles to nothing. */
#define NVFP4_TRACE_SLOTS 26
#ifdef NVFP4_TRACE
static __device__ unsigned long long *nvfp4_trace_buf;
__device__ __forceinline__ void nvfp4_trace_point(int i) {
  /* the clocks before the buffer's address: that is a global load, cold at a
   * kernel's first point, and read first it delayed "entry" */
  unsigned long long t, c;
  unsigned sm;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  c = clock64();
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (!nvfp4_trace_buf) return;
  unsigned long long *row =
      nvfp4_trace_buf + (blockIdx.x + (unsigned long long)gridDim.x * blockIdx.y) * NVFP4_TRACE_SLOTS;
  row[2 * i] = t;
  row[2 * i + 1] = c;
  row[NVFP4_TRACE_SLOTS - 1] = sm;
}
#define NVFP4_TRACE_POINT(cond, i) \
  do {                             \
    if (cond) nvfp4_trace_point(i); \
  } while (0)
/* The host hook of one file's kernels: nvfp4_trace_attach_<name>(device buffer or NULL). */
#define NVFP4_TRACE_ATTACH(name)                                                    \
  extern "C" cudaError_t nvfp4_trace_attach_##name(unsigned long long *buf) {       \
    return cudaMemcpyToSymbol(nvfp4_trace_buf, &buf, sizeof buf);                   \
  }
#else
#define NVFP4_TRACE_POINT(cond, i) ((void)0)
#define NVFP4_TRACE_ATTACH(name)
#endif
