/*
 * cublas.cu - W4A16 gemm of many activation rows (prefill): the weights
 * decoded to x's 16-bit type in slices of rows, each slice's product by
 * cuBLASLt, whose 16-bit GEMM outruns a kernel that decodes as it goes once
 * enough rows share each decoded weight.
 *
 * Dataflow, per slice of S weight rows (and per batch):
 *   decode_kernel: codes + scales (any layout: bytes or bf16 pairs, linear or
 *     blocked scales, by tile) -> S x K values in scratch, exact in 16 bits
 *     (e2m1 x e4m3: at most 6 significant bits; numerics.cuh's decoders);
 *   cuBLASLt: out[:, slice] = alpha * x @ W^T (+ bias) in its epilogue
 *     (alpha by device pointer or value), one rounding to c_type.
 * fp32 accumulation; split-K sums only in fp32 (the heuristic is asked for no
 * other reduction): what the other kernels compute, in cuBLAS's order.
 *
 * Speed of light: the GEMM's flops at the 16-bit tensor rate. The decode pass
 * adds 2.5625 bytes a weight at the copy rate: at 4.3 TB/s against 0.9 of
 * 790 TFLOP/s (H200), 207 / M of the GEMM's time. cuBLASLt is the library
 * the process has loaded (torch's), opened by the soname of the header's
 * major version; without it nothing runs here.
 */
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels.h"

#ifdef NVFP4_WITH_CUBLASLT
#include <cublasLt.h>

namespace {

constexpr int THREADS = 256;
constexpr size_t CUBLAS_WS = 32u << 20;     /* cuBLASLt's workspace (Hopper's split-K and stream-K kernels) */
constexpr int64_t WEIGHT_BYTES = 256ll << 20; /* decoded weights of a slice */
constexpr int64_t MAX_SLICE = 32768;          /* rows of a slice: grid y */

/* ---- the decode pass ------------------------------------------------------ */

/* Block kb of row row0 + blockIdx.y of w (one batch) -> 16 values at dst[blockIdx.y * k + 16 kb]. */
template <bool BF16, bool PAIRS>
__global__ void __launch_bounds__(THREADS) decode_kernel(nvfp4_operand w, int64_t row0, int64_t k, uint16_t *dst) {
  const int64_t kbs = k / 16, kb = (int64_t)blockIdx.x * THREADS + threadIdx.x, row = row0 + blockIdx.y;
  if (kb >= kbs) return;
  const uint2 c = __ldg(reinterpret_cast<const uint2 *>(w.data + nvfp4_codes_offset(&w, row, kb * 8)));
  const uint32_t sf = __ldg(w.sf + nvfp4_operand_sf_offset(&w, kbs, row, kb));
  uint16_t *out = dst + (int64_t)blockIdx.y * k + kb * 16;
  if constexpr (PAIRS) {
    uint32_t v[8];
    nvfp4_pairs_block_values16({c.x, c.y}, sf, v);
    reinterpret_cast<uint4 *>(out)[0] = make_uint4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<uint4 *>(out)[1] = make_uint4(v[4], v[5], v[6], v[7]);
  } else {
    uint8_t codes[8];
    memcpy(codes, &c, 8);
    using T = std::conditional_t<BF16, __nv_bfloat16, __half>;
    store_block_values<T, true>(reinterpret_cast<T *>(out), codes, sf);
  }
}

cudaError_t decode(const nvfp4_operand &w, int64_t row0, int64_t rows, int64_t k, bool bf16, uint16_t *dst,
                   cudaStream_t stream) {
  const dim3 grid((unsigned)((k / 16 + THREADS - 1) / THREADS), (unsigned)rows);
  if (w.codes == NVFP4_CODES_BF16_PAIRS) decode_kernel<true, true><<<grid, THREADS, 0, stream>>>(w, row0, k, dst);
  else if (bf16) decode_kernel<true, false><<<grid, THREADS, 0, stream>>>(w, row0, k, dst);
  else decode_kernel<false, false><<<grid, THREADS, 0, stream>>>(w, row0, k, dst);
  return cudaGetLastError();
}

/* ---- cuBLASLt --------------------------------------------------------------- */

#define NVFP4_STR2(x) #x
#define NVFP4_STR(x) NVFP4_STR2(x)

/* The functions used, from the library the process has loaded (torch's), or none. */
struct Lt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
  bool ok;
};

const Lt &lt() {
  static const Lt lib = [] {
    Lt l = {};
    void *h = dlopen("libcublasLt.so." NVFP4_STR(CUBLAS_VER_MAJOR), RTLD_LAZY | RTLD_LOCAL);
    if (!h) return l;
    bool all = true;
    auto get = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      all = all && fn;
    };
    get(l.create, "cublasLtCreate");
    get(l.desc_create, "cublasLtMatmulDescCreate");
    get(l.desc_destroy, "cublasLtMatmulDescDestroy");
    get(l.desc_set, "cublasLtMatmulDescSetAttribute");
    get(l.layout_create, "cublasLtMatrixLayoutCreate");
    get(l.layout_destroy, "cublasLtMatrixLayoutDestroy");
    get(l.pref_create, "cublasLtMatmulPreferenceCreate");
    get(l.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    get(l.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    get(l.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    get(l.matmul, "cublasLtMatmul");
    l.ok = all;
    return l;
  }();
  return lib;
}

std::mutex lt_mutex; /* the handles and the algorithm cache */

cublasLtHandle_t handle(int device) {
  static cublasLtHandle_t handles[64] = {};
  if (device < 0 || device >= 64 || !lt().ok) return nullptr;
  std::lock_guard<std::mutex> lock(lt_mutex);
  if (!handles[device] && lt().create(&handles[device]) != CUBLAS_STATUS_SUCCESS) handles[device] = nullptr;
  return handles[device];
}

__device__ float zero_beta; /* beta where alpha is a device pointer */

const float *device_zero(int device) {
  static const float *ptr[64] = {};
  if (!ptr[device]) {
    void *p = nullptr;
    if (cudaGetSymbolAddress(&p, zero_beta) != cudaSuccess) return cudaGetLastError(), nullptr;
    ptr[device] = static_cast<const float *>(p);
  }
  return ptr[device];
}

cudaDataType_t cuda_type(int32_t t) { return t == NVFP4_BF16 ? CUDA_R_16BF : t == NVFP4_F16 ? CUDA_R_16F : CUDA_R_32F; }

int32_t align_of(const void *p, int64_t ld_bytes) {
  int32_t a = 256;
  while (a > 2 && ((uintptr_t)p % a || ld_bytes % a)) a /= 2;
  return a;
}

/* One slice's product: D (s x m, column-major, ld ldd) = alpha * op(W) x op(X) (+ bias), W the decoded slice
 * (k x s, ld k), X the activations (k x m, ld ldx): its sizes and types (the cache's key) and algorithm. */
struct Gemm {
  int64_t s, m, k, ldx, ldd;
  int32_t x_type, d_type, bias_type;
  bool bias, alpha_device;
  int32_t align_x, align_d;
  int device;
  cublasLtMatmulAlgo_t algo;
  bool found;

  bool same(const Gemm &o) const {
    return s == o.s && m == o.m && k == o.k && ldx == o.ldx && ldd == o.ldd && x_type == o.x_type &&
           d_type == o.d_type && bias_type == o.bias_type && bias == o.bias && alpha_device == o.alpha_device &&
           align_x == o.align_x && align_d == o.align_d && device == o.device;
  }
};

struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, d = nullptr;
  bool ok = false;
  explicit Descs(const Gemm &g) {
    const Lt &l = lt();
    if (l.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return;
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    const int32_t mode = g.alpha_device ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
    bool good = l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t) == CUBLAS_STATUS_SUCCESS &&
                l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n) == CUBLAS_STATUS_SUCCESS &&
                l.desc_set(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode) == CUBLAS_STATUS_SUCCESS;
    if (g.bias) {
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bt = cuda_type(g.bias_type);
      good = good && l.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e) == CUBLAS_STATUS_SUCCESS &&
             l.desc_set(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == CUBLAS_STATUS_SUCCESS;
    }
    const cudaDataType_t xt = cuda_type(g.x_type);
    ok = good && l.layout_create(&w, xt, g.k, g.s, g.k) == CUBLAS_STATUS_SUCCESS &&
         l.layout_create(&x, xt, g.k, g.m, g.ldx) == CUBLAS_STATUS_SUCCESS &&
         l.layout_create(&d, cuda_type(g.d_type), g.s, g.m, g.ldd) == CUBLAS_STATUS_SUCCESS;
  }
  ~Descs() {
    const Lt &l = lt();
    if (d) l.layout_destroy(d);
    if (x) l.layout_destroy(x);
    if (w) l.layout_destroy(w);
    if (op) l.desc_destroy(op);
  }
};

/* g with its algorithm (found: cuBLASLt has one), from the heuristic once per distinct g (the last CACHED). */
constexpr size_t CACHED = 1024;
bool find_algo(Gemm &g) {
  static std::vector<Gemm> cache;
  static size_t next = 0; /* the entry a full cache replaces */
  {
    std::lock_guard<std::mutex> lock(lt_mutex);
    for (const Gemm &c : cache)
      if (c.same(g)) return g.algo = c.algo, g.found = c.found;
  }
  cublasLtHandle_t h = handle(g.device);
  g.found = false;
  if (h) {
    const Lt &l = lt();
    Descs d(g);
    cublasLtMatmulPreference_t pref = nullptr;
    if (d.ok && l.pref_create(&pref) == CUBLAS_STATUS_SUCCESS) {
      const uint64_t ws = CUBLAS_WS;
      const uint32_t reduce = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; /* split-K sums in fp32 only */
      const uint32_t aw = 256, ax = g.align_x, ad = g.align_d;
      l.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      l.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduce, sizeof reduce);
      l.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw, sizeof aw);
      l.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax, sizeof ax);
      l.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad);
      l.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad);
      cublasLtMatmulHeuristicResult_t r = {};
      int found = 0;
      if (l.heuristic(h, d.op, d.w, d.x, d.d, d.d, pref, 1, &r, &found) == CUBLAS_STATUS_SUCCESS && found > 0 &&
          r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= CUBLAS_WS)
        g.algo = r.algo, g.found = true;
      l.pref_destroy(pref);
    }
  }
  std::lock_guard<std::mutex> lock(lt_mutex);
  if (cache.size() < CACHED) cache.push_back(g);
  else cache[next++ % CACHED] = g;
  return g.found;
}

/* How a problem is cut: rows a slice (the last may have fewer), and the scratch it needs. */
struct Slicing {
  int64_t rows, slices;
  size_t total;
};

constexpr size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

Slicing slicing(const nvfp4_matmul &p) {
  const int64_t most = std::min<int64_t>(std::max<int64_t>(WEIGHT_BYTES / (2 * p.k) / 128 * 128, 128), MAX_SLICE);
  Slicing s;
  s.slices = (p.n + most - 1) / most;
  s.rows = std::min<int64_t>(p.n, round_up((p.n + s.slices - 1) / s.slices, 128));
  s.total = 256 + CUBLAS_WS + round_up((size_t)s.rows * p.k * 2, 256); /* from a 16-byte aligned start */
  return s;
}

/* The product of a slice of s rows (the whole problem's other sizes). */
Gemm gemm_of(const nvfp4_matmul &p, int64_t s, int device) {
  Gemm g = {};
  g.s = s, g.m = p.m, g.k = p.k, g.ldx = p.a.row_stride / 2;
  g.x_type = p.a_type, g.d_type = p.c_type, g.ldd = p.c_row_stride;
  g.bias = p.bias != nullptr, g.bias_type = g.bias ? p.bias_type : 0;
  g.alpha_device = p.alpha_ptr != nullptr;
  g.align_x = align_of(p.a.data, p.a.row_stride);
  g.align_d = align_of(p.c, p.c_row_stride * 2);
  g.device = device;
  return g;
}

}  // namespace

bool cublas_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (p.a_type == NVFP4_E2M1 || p.b2.data || p.offs || p.a_index || p.a_global || dev.major < 8 || !lt().ok)
    return false;
  if (p.b.codes == NVFP4_CODES_BF16_PAIRS && p.a_type != NVFP4_BF16) return false;
  /* 16-byte rows and batches; the result in x's type (cuBLASLt's 16-bit GEMMs write their own) */
  return p.c_type == p.a_type && aligned(p.a.data, 16) && p.a.row_stride % 16 == 0 && p.a.batch_stride % 16 == 0 &&
         aligned(p.c, 16) && (2 * p.c_row_stride) % 16 == 0 && (2 * p.c_batch_stride) % 16 == 0 &&
         rows_aligned(p.b, 8);
}

bool cublas_ready(const nvfp4_matmul &p) {
  const DeviceInfo &dev = device_info();
  if (dev.id >= 64) return false;
  const Slicing s = slicing(p);
  Gemm g = gemm_of(p, s.rows, dev.id), t = gemm_of(p, p.n - (s.slices - 1) * s.rows, dev.id);
  return handle(dev.id) && device_zero(dev.id) && find_algo(g) && find_algo(t);
}

cudaError_t cublas_launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws, void *ctx, cudaStream_t stream) {
  const DeviceInfo &dev = device_info();
  if (dev.id >= 64) return cudaErrorNotSupported;
  const Slicing s = slicing(p);
  const int64_t last_rows = p.n - (s.slices - 1) * s.rows;
  Gemm full = gemm_of(p, s.rows, dev.id), last = gemm_of(p, last_rows, dev.id);
  cublasLtHandle_t h = handle(dev.id);
  const float *zero = device_zero(dev.id);
  if (!h || !zero || !find_algo(full) || !find_algo(last)) return cudaErrorNotSupported;
  Descs df(full), dl(last);
  void *got = df.ok && dl.ok && ws ? ws(s.total, ctx) : nullptr;
  if (!got) return cudaErrorNotSupported; /* the caller plans again without this kernel */
  uint8_t *scratch = reinterpret_cast<uint8_t *>(round_up(reinterpret_cast<uintptr_t>(got), 256));
  uint16_t *w = reinterpret_cast<uint16_t *>(scratch + CUBLAS_WS); /* 256-byte aligned, as the heuristic assumed */
  const Lt &l = lt();
  const float zero_host = 0.f;
  const void *alpha = p.alpha_ptr ? (const void *)p.alpha_ptr : (const void *)&p.alpha;
  const void *beta = p.alpha_ptr ? (const void *)zero : (const void *)&zero_host;
  for (int64_t b = 0; b < p.batch; b++) {
    nvfp4_operand wb = p.b;
    wb.data += b * p.b.batch_stride, wb.sf += b * p.b.sf_batch_stride;
    const uint8_t *x = p.a.data + b * p.a.batch_stride;
    uint16_t *c = static_cast<uint16_t *>(p.c) + b * p.c_batch_stride;
    for (int64_t i = 0; i < s.slices; i++) {
      const int64_t n0 = i * s.rows, rows = i + 1 < s.slices ? s.rows : last_rows;
      const Gemm &g = rows == s.rows ? full : last;
      const Descs &d = rows == s.rows ? df : dl;
      const cudaError_t err = decode(wb, n0, rows, p.k, p.a_type == NVFP4_BF16, w, stream);
      if (err != cudaSuccess) return err;
      if (p.bias) {
        const void *bias = static_cast<const uint8_t *>(p.bias) + n0 * (p.bias_type == NVFP4_F32 ? 4 : 2);
        if (l.desc_set(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) != CUBLAS_STATUS_SUCCESS)
          return cudaErrorUnknown;
      }
      if (l.matmul(h, d.op, alpha, w, d.w, x, d.x, beta, c + n0, d.d, c + n0, d.d, &g.algo, scratch, CUBLAS_WS,
                   stream) != CUBLAS_STATUS_SUCCESS)
        return cudaErrorUnknown;
    }
  }
  return cudaSuccess;
}

void cublas_describe(const nvfp4_matmul &p, char *what, size_t len) {
  const Slicing s = slicing(p);
  if (s.slices == 1) std::snprintf(what, len, "weights decoded to %s, cuBLASLt", p.a_type == NVFP4_BF16 ? "bf16" : "fp16");
  else
    std::snprintf(what, len, "weights decoded to %s in %lld slices of %lld rows, cuBLASLt",
                  p.a_type == NVFP4_BF16 ? "bf16" : "fp16", (long long)s.slices, (long long)s.rows);
}

#else /* built without cublasLt.h (setup.py found none; competition bundles): nothing runs here */

bool cublas_can_run(const nvfp4_matmul &, const DeviceInfo &) { return false; }
bool cublas_ready(const nvfp4_matmul &) { return false; }
cudaError_t cublas_launch(const nvfp4_matmul &, nvfp4_workspace_fn, void *, cudaStream_t) {
  return cudaErrorNotSupported;
}
void cublas_describe(const nvfp4_matmul &, char *what, size_t len) {
  if (len) what[0] = 0;
}

#endif
