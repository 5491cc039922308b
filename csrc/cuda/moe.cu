/*
 * moe.cu - a mixture of experts' token-expert pairs grouped by expert, and
 * their weighted sum back, on the GPU (nvfp4.h: nvfp4_moe_sort,
 * nvfp4_moe_combine; csrc/cpu/moe.c is the same on the CPU).
 *
 * Sort: the pairs in consecutive chunks, a warp each (one warp for a decode
 * step's 8-64 pairs), counts per (chunk, expert) by shared-memory atomics,
 * one exclusive scan in (expert, chunk) order (each thread a run of experts,
 * shuffle scans), then each warp its chunk's pairs in order, 32 at a time
 * (the ids of 8 such steps loaded at once): lanes of one expert find each
 * other (match.any), take rows next + their rank among them, and the lowest
 * moves the chunk's next row of the expert on, so rows keep pair order within
 * an expert. Up to 8191 pairs one CTA of up to 32 chunks, one launch instead
 * of the sort, gather, conversion and search of a torch sequence; from 8192
 * (a prefill: 4096 tokens x 8 = 32768 pairs as 8 CTAs of 32 chunks of 128)
 * two launches: the CTAs' counts to a scratch table, then each CTA scans the
 * whole table for its chunks' cursors and places its pairs (one SM's
 * scattered stores had taken 88 us for 32768 pairs on an H200).
 *
 * Route: a warp per token ranks its experts (softmax or DeepSeek's grouped
 * sigmoid), top_k rounds of a search and a warp-wide first; one launch for
 * torch's 5-12 (softmax, topk, sums, masks, gathers).
 *
 * Gather: a thread copies a 16-byte chunk of a row (grouped_mm's rows by
 * token where its kernel reads gathered rows, plan.cu); a row outside x:
 * zeros.
 *
 * Combine: a thread sums top_k products for 8 (16-bit y) or 4 (float32)
 * adjacent outputs of one token, read as one 16-byte load per pair where the
 * rows allow (else one value at a time). Speed of light: bytes / copy
 * bandwidth, tokens x top_k x hidden values read and tokens x hidden
 * written; at decode a launch's latency.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"

namespace {

/* The sort's warps: one a chunk of >= 64 pairs, at most 32 a CTA, and as
 * many as the chunks' cursors (warps x experts ints) leave in 48 KB of shared
 * memory beside the kernel's own (144 bytes). A lane reads SORT_IDS ids at
 * once. From SORT_SPLIT_PAIRS pairs, CTAs of chunks of >= SORT_SPLIT_CHUNK
 * pairs, at most SORT_MAX_CTAS. */
constexpr int SORT_MAX_WARPS = 32, SORT_CURSORS = 12000, SORT_IDS = 8;
constexpr int64_t SORT_SPLIT_PAIRS = 8192, SORT_SPLIT_CHUNK = 128, SORT_MAX_CTAS = 64;

int sort_warps(int64_t pairs, int64_t experts) {
  const int64_t w = std::min<int64_t>({SORT_MAX_WARPS, (pairs + 63) / 64, SORT_CURSORS / experts});
  return w > 1 ? (int)w : 1;
}

int sort_ctas(int64_t pairs, int warps) {
  if (pairs < SORT_SPLIT_PAIRS || warps < 8) return 1; /* few warps: many experts, whose scan would cost more */
  return (int)std::min<int64_t>(SORT_MAX_CTAS, (pairs + warps * SORT_SPLIT_CHUNK - 1) / (warps * SORT_SPLIT_CHUNK));
}

/* The chunks' layout: `chunks` of `chunk` pairs, this CTA's warps on chunks
 * first .. first + warps - 1; pair indices in 64 bits (a chunk's last steps
 * may pass 2^31 - 1). */
struct SortPart {
  int64_t p0, p1; /* the warp's pairs */
  int lane;
  __device__ SortPart(const nvfp4_moe_sort &s, int chunk_index, int chunk, int lane_) : lane(lane_) {
    p0 = std::min<int64_t>(s.pairs, (int64_t)chunk_index * chunk), p1 = std::min<int64_t>(s.pairs, p0 + chunk);
  }
  __device__ int64_t id(const nvfp4_moe_sort &s, int64_t p) const {
    return s.ids64 ? static_cast<const int64_t *>(s.ids)[p] : static_cast<const int32_t *>(s.ids)[p];
  }
  /* ids of pairs base + 32 i + lane, i < SORT_IDS (-1 past the chunk), loaded before any is used */
  __device__ void ids_at(const nvfp4_moe_sort &s, int64_t base, int64_t (&e)[SORT_IDS]) const {
#pragma unroll
    for (int i = 0; i < SORT_IDS; i++) e[i] = base + 32 * i + lane < p1 ? id(s, base + 32 * i + lane) : -1;
  }
  /* mine[e] += the chunk's pairs of expert e (shared-memory atomics) */
  __device__ void count(const nvfp4_moe_sort &s, int *mine) const {
    for (int64_t base = p0; base < p1; base += 32 * SORT_IDS) {
      int64_t e[SORT_IDS];
      ids_at(s, base, e);
#pragma unroll
      for (int i = 0; i < SORT_IDS; i++)
        if (e[i] >= 0 && e[i] < s.experts) atomicAdd(&mine[e[i]], 1);
    }
  }
  /* the chunk's pairs in order, 32 at a time, mine[e] = the chunk's next row of
   * expert e: lanes of one expert find each other, take rows next + their rank
   * among them; the lowest moves it on */
  __device__ void place(const nvfp4_moe_sort &s, int *mine) const {
    const int experts = (int)s.experts;
    for (int64_t base = p0; base < p1; base += 32 * SORT_IDS) {
      int64_t ev[SORT_IDS];
      ids_at(s, base, ev);
#pragma unroll
      for (int i = 0; i < SORT_IDS; i++) {
        const int64_t p = base + 32 * i + lane;
        const bool ok = ev[i] >= 0 && ev[i] < experts;
        const int e = ok ? (int)ev[i] : experts + lane; /* lanes without an expert match nobody */
        const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
        const int start = ok ? mine[e] : 0;
        __syncwarp();
        if (ok && lane == __ffs(peers) - 1) mine[e] = start + __popc(peers);
        __syncwarp();
        if (ok) {
          const int r = start + __popc(peers & ((1u << lane) - 1u));
          s.token_of_row[r] = (int32_t)(p / s.top_k);
          s.expert_of_row[r] = e;
          s.row_of_pair[p] = r;
        } else if (p < p1) {
          s.row_of_pair[p] = -1;
        }
      }
    }
  }
};

/* The (expert, chunk) exclusive scan, chunks 0 .. chunks - 1 with counts
 * count(c, e): cur[w * experts + e] = the first row of expert e in chunk first
 * + w, for this CTA's warps w; offs written where `offs`; returns the rows in
 * all. Thread t holds experts [t run, (t + 1) run); every thread calls. */
template <class Count>
__device__ int sort_scan(const nvfp4_moe_sort &s, Count count, int chunks, int first, int warps, int *cur, bool offs) {
  __shared__ int warp_sum[SORT_MAX_WARPS], rows_total;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, experts = (int)s.experts;
  const int run = (experts + (int)blockDim.x - 1) / (int)blockDim.x, lo = std::min(experts, tid * run),
            hi = std::min(experts, lo + run);
  int total = 0;
  for (int e = lo; e < hi; e++)
    for (int c = 0; c < chunks; c++) total += count(c, e);
  int incl = total;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sum[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int w = lane < warps ? warp_sum[lane] : 0;
    int v = w;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int o = __shfl_up_sync(0xFFFFFFFFu, v, d);
      if (lane >= d) v += o;
    }
    if (lane < warps) warp_sum[lane] = v - w; /* the warps before */
    if (lane == 31) rows_total = v;
  }
  __syncthreads();
  int next = warp_sum[warp] + incl - total;
  for (int e = lo; e < hi; e++) {
    for (int c = 0; c < chunks; c++) {
      const int n = count(c, e); /* read before cur, which may be where it is */
      if (c >= first && c < first + warps) cur[(c - first) * experts + e] = next;
      next += n;
    }
    if (offs) s.offs[e] = next;
  }
  __syncthreads();
  return rows_total;
}

/* Rows past the pairs' (ids outside [0, experts)): token 0, expert 0. */
__device__ void sort_fill(const nvfp4_moe_sort &s, int rows, int64_t i, int64_t stride) {
  for (int64_t r = rows + i; r < s.pairs; r += stride) s.token_of_row[r] = 0, s.expert_of_row[r] = 0;
}

/* One CTA: warps = blockDim.x / 32 chunks of `chunk` pairs, warp c on chunk c. */
__global__ void __launch_bounds__(32 * SORT_MAX_WARPS) moe_sort_kernel(const nvfp4_moe_sort s, int chunk) {
  extern __shared__ int cur[]; /* [chunk][expert]: the chunk's count, then the expert's next row in it */
  pdl_wait();
  const int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32, experts = (int)s.experts;
  for (int i = tid; i < warps * experts; i += blockDim.x) cur[i] = 0;
  __syncthreads();
  const SortPart part(s, warp, chunk, tid % 32);
  part.count(s, cur + warp * experts);
  __syncthreads();
  const int rows = sort_scan(s, [&](int c, int e) { return cur[c * experts + e]; }, warps, 0, warps, cur, true);
  part.place(s, cur + warp * experts);
  sort_fill(s, rows, tid, blockDim.x);
  pdl_launch_dependents();
}

/* Several CTAs, two launches. First the counts of chunk blockIdx.x * warps +
 * w into scratch [chunks][experts]; */
__global__ void __launch_bounds__(32 * SORT_MAX_WARPS) moe_sort_count_kernel(const nvfp4_moe_sort s, int chunk) {
  extern __shared__ int cur[];
  pdl_wait();
  const int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32, experts = (int)s.experts;
  for (int i = tid; i < warps * experts; i += blockDim.x) cur[i] = 0;
  __syncthreads();
  SortPart(s, (int)blockIdx.x * warps + warp, chunk, tid % 32).count(s, cur + warp * experts);
  __syncthreads();
  pdl_launch_dependents(); /* the placing launch waits for this grid's end in its pdl_wait */
  int *const out = s.scratch + (int64_t)blockIdx.x * warps * experts;
  for (int i = tid; i < warps * experts; i += blockDim.x) out[i] = cur[i];
}

/* then each CTA scans them all for its chunks' cursors and places its pairs
 * (every CTA reads the whole table: chunks x experts ints from L2). */
__global__ void __launch_bounds__(32 * SORT_MAX_WARPS) moe_sort_place_kernel(const nvfp4_moe_sort s, int chunk) {
  extern __shared__ int cur[];
  pdl_wait();
  const int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32, experts = (int)s.experts;
  const int chunks = (int)gridDim.x * warps, first = (int)blockIdx.x * warps;
  const int *const counts = s.scratch;
  const int rows = sort_scan(s, [&](int c, int e) { return counts[(int64_t)c * experts + e]; }, chunks, first, warps,
                             cur, blockIdx.x == 0);
  SortPart(s, first + warp, chunk, tid % 32).place(s, cur + warp * experts);
  sort_fill(s, rows, (int64_t)blockIdx.x * blockDim.x + tid, (int64_t)gridDim.x * blockDim.x);
  pdl_launch_dependents();
}

constexpr int COMBINE_THREADS = 256;

/* Gather (grouped_mm's rows by token where its kernel reads gathered rows,
 * nvfp4_matmul_cuda_reads_rows): thread = one W-byte chunk of one row. */
template <typename W>
__global__ void __launch_bounds__(COMBINE_THREADS)
    gather_rows_kernel(const uint8_t *x, int64_t x_rows, int64_t x_stride, const int32_t *index, int64_t rows,
                       uint8_t *out, int64_t out_stride, int64_t chunks) {
  pdl_wait();
  const int64_t item = (int64_t)blockIdx.x * COMBINE_THREADS + threadIdx.x, r = item / chunks;
  const int64_t c = (item - r * chunks) * (int64_t)sizeof(W);
  if (r < rows) {
    const int32_t i = index[r];
    W v{};
    if (i >= 0 && i < x_rows) v = *reinterpret_cast<const W *>(x + i * x_stride + c);
    *reinterpret_cast<W *>(out + r * out_stride + c) = v;
  }
  pdl_launch_dependents();
}

/* Thread: token t, outputs [h0, h0 + V) (V = 16 / sizeof(T) where VEC, else 1). */
template <typename T, typename W, bool VEC>
__global__ void __launch_bounds__(COMBINE_THREADS) moe_combine_kernel(const nvfp4_moe_combine c, int64_t chunks) {
  constexpr int V = VEC ? 16 / (int)sizeof(T) : 1;
  pdl_wait();
  const int64_t item = (int64_t)blockIdx.x * COMBINE_THREADS + threadIdx.x, t = item / chunks;
  const int64_t h0 = item % chunks * V;
  if (t >= c.tokens || h0 >= c.hidden) return;
  const T *y = static_cast<const T *>(c.y);
  const W *w = static_cast<const W *>(c.weights);
  float sum[V];
#pragma unroll
  for (int i = 0; i < V; i++) sum[i] = 0.f;
  for (int64_t j = 0; j < c.top_k; j++) {
    const int32_t r = c.row_of_pair[t * c.top_k + j];
    if (r < 0 || r >= c.rows) continue;
    const float wj = to_float(w[t * c.top_k + j]);
    const T *src = y + (int64_t)r * c.hidden + h0;
    uint4 raw = make_uint4(0u, 0u, 0u, 0u); /* the V values (VEC), or the one in its first bytes */
    if constexpr (VEC) raw = __ldg(reinterpret_cast<const uint4 *>(src));
    else *reinterpret_cast<T *>(&raw) = src[0];
    const T *v = reinterpret_cast<const T *>(&raw);
#pragma unroll
    for (int i = 0; i < V; i++) sum[i] = __fadd_rn(sum[i], __fmul_rn(wj, to_float(v[i])));
  }
  pdl_launch_dependents();
  uint4 raw;
  T *o = reinterpret_cast<T *>(&raw);
#pragma unroll
  for (int i = 0; i < V; i++) o[i] = from_float<T>(sum[i]);
  T *dst = static_cast<T *>(c.out) + t * c.hidden + h0;
  if constexpr (VEC) *reinterpret_cast<uint4 *>(dst) = raw;
  else dst[0] = o[0];
}

template <typename T, typename W>
cudaError_t combine(const nvfp4_moe_combine &c, cudaStream_t stream) {
  constexpr int V = 16 / (int)sizeof(T);
  const bool vec = c.hidden % V == 0 && aligned(c.y, 16) && aligned(c.out, 16);
  const int64_t chunks = vec ? c.hidden / V : c.hidden, items = c.tokens * chunks;
  const unsigned ctas = (unsigned)((items + COMBINE_THREADS - 1) / COMBINE_THREADS);
  return vec ? launch_pdl(moe_combine_kernel<T, W, true>, ctas, COMBINE_THREADS, 0, stream, c, chunks)
             : launch_pdl(moe_combine_kernel<T, W, false>, ctas, COMBINE_THREADS, 0, stream, c, chunks);
}

template <typename T>
cudaError_t combine_w(const nvfp4_moe_combine &c, cudaStream_t stream) {
  switch (c.weights_type) {
    case NVFP4_F32: return combine<T, float>(c, stream);
    case NVFP4_F16: return combine<T, __half>(c, stream);
    default: return combine<T, __nv_bfloat16>(c, stream);
  }
}

bool float_type(int32_t t) { return t == NVFP4_F32 || t == NVFP4_F16 || t == NVFP4_BF16; }

/* ---- routing: a warp per token (nvfp4.h's definition; csrc/cpu/moe.c) */
constexpr int ROUTE_WARPS = 4;
constexpr int ROUTE_HELD = 8; /* ranks a lane holds in registers: up to 256 experts (the tree below takes 8) */

/* nvfp4.h's ranking as one unsigned order, the first the largest: a
 * score's key (order-preserving bits, -0 as +0, NaN 0: after every number)
 * above an index's complement (equal scores: the lower index first). 0: no
 * candidate. */
__device__ __forceinline__ uint32_t score_key(float f) {
  if (f != f) return 0u;
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return u >> 31 ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float key_score(uint32_t key) {
  return key == 0u ? __uint_as_float(0x7FC00000u) : __uint_as_float(key >> 31 ? key & 0x7FFFFFFFu : ~key);
}
__device__ __forceinline__ uint64_t rank_of(uint32_t key, int i) { return (uint64_t)key << 32 | ~(uint32_t)i; }
__device__ __forceinline__ int rank_index(uint64_t r) { return (int)~(uint32_t)r; }

/* the first of the lanes' candidates, on every lane */
__device__ __forceinline__ uint64_t warp_first(uint64_t r) {
#pragma unroll
  for (int d = 16; d; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xFFFFFFFFu, r, d);
    r = o > r ? o : r;
  }
  return r;
}

/* Lane e % 32 owns expert e. Its scores (logits for softmax, sigmoid + bias
 * for groups) are computed once, coalesced, as keys into the warp's shared
 * row (padded a word per 32 so a lane per run reads distinct banks); softmax
 * takes the max and the sum of exp(x - max) by lane partials and a
 * butterfly; sigmoid groups: lane g scores run g by its two best; then top_k
 * rounds, each the best of the lane's open experts (their ranks held in
 * registers up to 256 experts: no shared-memory load, division or test a
 * round) and a warp-wide first; lane j keeps the j-th, and the weights' sum
 * is taken in rank order. */
__host__ __device__ __forceinline__ int route_slot(int e) { return e + e / 32; }

template <typename T>
__global__ void __launch_bounds__(32 * ROUTE_WARPS) moe_route_kernel(const nvfp4_moe_route r) {
  extern __shared__ uint32_t route_keys[];
  pdl_wait();
  pdl_launch_dependents(); /* moe_sort launches now and waits for this grid's end in its pdl_wait */
  const unsigned all = 0xFFFFFFFFu;
  const int lane = threadIdx.x % 32, experts = (int)r.experts, k = (int)r.top_k, run = experts / (int)r.groups;
  const int64_t t = (int64_t)blockIdx.x * ROUTE_WARPS + threadIdx.x / 32;
  if (t >= r.tokens) return;
  const T *x = static_cast<const T *>(r.logits) + t * experts;
  uint32_t *key = route_keys + threadIdx.x / 32 * route_slot(experts);
  auto sig = [](float v) { return 1.0f / (1.0f + expf(-v)); };
  float hi = -INFINITY, z = 0.0f;
  for (int e = lane; e < experts; e += 32) {
    const float v = to_float(x[e]);
    hi = fmaxf(hi, v);
    key[route_slot(e)] = score_key(!r.sigmoid ? v : r.bias ? sig(v) + r.bias[e] : sig(v));
  }
  if (!r.sigmoid) {
#pragma unroll
    for (int d = 16; d; d >>= 1) hi = fmaxf(hi, __shfl_xor_sync(all, hi, d));
    for (int e = lane; e < experts; e += 32) z += expf(to_float(x[e]) - hi);
#pragma unroll
    for (int d = 16; d; d >>= 1) z += __shfl_xor_sync(all, z, d);
  }
  __syncwarp();
  uint32_t kept = 1u; /* bit g: run g competes (one run: bit 0) */
  if (r.groups > 1) {
    uint64_t gr = 0;
    if (lane < r.groups) { /* the run's two best, as the CPU picks them */
      uint64_t b1 = 0, b2 = 0;
      for (int e = lane * run; e < (lane + 1) * run; e++) {
        const uint64_t c = rank_of(key[route_slot(e)], e);
        if (c > b1) b2 = b1, b1 = c;
        else if (c > b2) b2 = c;
      }
      const float v1 = key_score((uint32_t)(b1 >> 32));
      gr = rank_of(score_key(run == 1 ? v1 : v1 + key_score((uint32_t)(b2 >> 32))), lane);
    }
    kept = 0u;
    for (int j = 0; j < r.top_groups; j++) {
      const int g = rank_index(warp_first(gr));
      kept |= 1u << g;
      if (lane == g) gr = 0;
    }
  }
  uint64_t open = 0; /* bit q: expert lane + 32 q competes (its run kept) and is not chosen yet */
  for (int q = 0, e = lane; e < experts; q++, e += 32)
    if (kept >> (e / run) & 1u) open |= 1ull << q;
  int id = -1; /* lane j < top_k: the j-th */
  auto top = [](uint64_t a, uint64_t b) { return a > b ? a : b; };
  if (experts <= 32 * ROUTE_HELD) { /* the lane's ranks held in registers (0: not open), a tree of maxima a round */
    uint64_t held[ROUTE_HELD];
#pragma unroll
    for (int q = 0; q < ROUTE_HELD; q++) {
      const int e = lane + 32 * q;
      held[q] = open >> q & 1 ? rank_of(key[route_slot(e)], e) : 0;
    }
    for (int j = 0; j < k; j++) {
      const uint64_t best = top(top(top(held[0], held[1]), top(held[2], held[3])),
                                top(top(held[4], held[5]), top(held[6], held[7])));
      const int i = rank_index(warp_first(best));
#pragma unroll
      for (int q = 0; q < ROUTE_HELD; q++)
        if (i == lane + 32 * q) held[q] = 0;
      if (lane == j) id = i;
    }
  } else {
    for (int j = 0; j < k; j++) {
      uint64_t best = 0;
      for (uint64_t m = open; m; m &= m - 1) { /* the lane's open experts */
        const int e = lane + 32 * (__ffsll((long long)m) - 1);
        best = top(best, rank_of(key[route_slot(e)], e));
      }
      const int i = rank_index(warp_first(best));
      if (i % 32 == lane) open &= ~(1ull << (i / 32));
      if (lane == j) id = i;
    }
  }
  const float w = lane < k ? (r.sigmoid ? sig(to_float(x[id])) : expf(to_float(x[id]) - hi) / z) : 0.0f;
  float sum = 0.0f;
  for (int j = 0; j < k; j++) sum += __shfl_sync(all, w, j);
  if (r.renormalize && r.sigmoid) sum += 1e-20f;
  if (lane < k) {
    const float v = r.renormalize ? w / sum : w;
    r.ids[t * k + lane] = id;
    r.weights[t * k + lane] = r.scale == 1.0f ? v : v * r.scale;
  }
}

}  // namespace

extern "C" nvfp4_status nvfp4_moe_sort_cuda(const nvfp4_moe_sort *s, cudaStream_t stream) {
  if (s->pairs < 0 || s->pairs > INT32_MAX || s->top_k <= 0 || s->pairs % s->top_k || s->experts <= 0 ||
      s->experts > NVFP4_MOE_MAX_EXPERTS)
    return NVFP4_ERR_INVALID;
  const int warps = sort_warps(s->pairs, s->experts), ctas = sort_ctas(s->pairs, warps);
  const int chunk = (int)((s->pairs + (int64_t)warps * ctas - 1) / ((int64_t)warps * ctas));
  const int smem = (int)(warps * s->experts * sizeof(int));
  cudaError_t e;
  if (ctas == 1) {
    e = launch_pdl(moe_sort_kernel, 1u, 32 * warps, smem, stream, *s, chunk);
  } else {
    if (!s->scratch) return NVFP4_ERR_INVALID;
    e = launch_pdl(moe_sort_count_kernel, (unsigned)ctas, 32 * warps, smem, stream, *s, chunk);
    if (e == cudaSuccess) e = launch_pdl(moe_sort_place_kernel, (unsigned)ctas, 32 * warps, smem, stream, *s, chunk);
  }
  return e == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}

extern "C" int64_t nvfp4_moe_sort_scratch(int64_t pairs, int64_t experts) {
  if (pairs <= 0 || experts <= 0 || experts > NVFP4_MOE_MAX_EXPERTS) return 0;
  const int warps = sort_warps(pairs, experts), ctas = sort_ctas(pairs, warps);
  return ctas > 1 ? (int64_t)ctas * warps * experts : 0;
}

extern "C" nvfp4_status nvfp4_moe_route_cuda(const nvfp4_moe_route *r, cudaStream_t stream) {
  if (!nvfp4_moe_route_ok(r)) return NVFP4_ERR_INVALID;
  if (r->tokens == 0) return NVFP4_OK;
  const unsigned ctas = (unsigned)((r->tokens + ROUTE_WARPS - 1) / ROUTE_WARPS);
  const int smem = ROUTE_WARPS * route_slot((int)r->experts) * (int)sizeof(uint32_t);
  cudaError_t e;
  switch (r->logits_type) {
    case NVFP4_F32: e = launch_pdl(moe_route_kernel<float>, ctas, 32 * ROUTE_WARPS, smem, stream, *r); break;
    case NVFP4_F16: e = launch_pdl(moe_route_kernel<__half>, ctas, 32 * ROUTE_WARPS, smem, stream, *r); break;
    default: e = launch_pdl(moe_route_kernel<__nv_bfloat16>, ctas, 32 * ROUTE_WARPS, smem, stream, *r); break;
  }
  return e == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}

extern "C" nvfp4_status nvfp4_gather_rows_cuda(const void *x, int64_t x_rows, int64_t x_stride, int64_t row_bytes,
                                               const int32_t *index, int64_t rows, void *out, int64_t out_stride,
                                               cudaStream_t stream) {
  if (rows < 0 || row_bytes < 0 || row_bytes % 2 || x_rows < 0) return NVFP4_ERR_INVALID;
  if (rows == 0 || row_bytes == 0) return NVFP4_OK;
  const bool vec = row_bytes % 16 == 0 && aligned(x, 16) && aligned(out, 16) && x_stride % 16 == 0 &&
                   out_stride % 16 == 0;
  const int64_t chunks = row_bytes / (vec ? 16 : 2), items = rows * chunks;
  const unsigned ctas = (unsigned)((items + COMBINE_THREADS - 1) / COMBINE_THREADS);
  const auto *xb = static_cast<const uint8_t *>(x);
  auto *ob = static_cast<uint8_t *>(out);
  const cudaError_t e =
      vec ? launch_pdl(gather_rows_kernel<uint4>, ctas, COMBINE_THREADS, 0, stream, xb, x_rows, x_stride, index, rows,
                       ob, out_stride, chunks)
          : launch_pdl(gather_rows_kernel<uint16_t>, ctas, COMBINE_THREADS, 0, stream, xb, x_rows, x_stride, index,
                       rows, ob, out_stride, chunks);
  return e == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}

extern "C" nvfp4_status nvfp4_moe_combine_cuda(const nvfp4_moe_combine *c, cudaStream_t stream) {
  if (c->tokens < 0 || c->top_k <= 0 || c->hidden < 0 || c->rows < 0 || !float_type(c->y_type) ||
      !float_type(c->weights_type))
    return NVFP4_ERR_INVALID;
  if (c->tokens == 0 || c->hidden == 0) return NVFP4_OK;
  cudaError_t e;
  switch (c->y_type) {
    case NVFP4_F32: e = combine_w<float>(*c, stream); break;
    case NVFP4_F16: e = combine_w<__half>(*c, stream); break;
    default: e = combine_w<__nv_bfloat16>(*c, stream); break;
  }
  return e == cudaSuccess ? NVFP4_OK : NVFP4_ERR_CUDA;
}
