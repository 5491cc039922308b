/*
 * skinny.cu - gemm of few activation rows (M = 2..16: a decode step's batch)
 * on mma.sync (sm_80+): C[l, m, n] = alpha * sum_k A[l, m, k] * B[l, n, k].
 * plan.cu sends it M = 5..16 where it measured fastest.
 *
 * Speed of light: streaming the weights B once. M = 8, 7168 x 16384: 66 MB,
 * 21.8 us at 3.03 TB/s (H100), against 1.9 GFLOP (2.5 us of tensor time).
 * The wgmma kernel's 32-row tile (matmul_sm90.cu) runs such shapes at ~0.35
 * of that: its producer / consumer step, not the decode, sets their pace
 * (~0.5 us per 256 x 64 step with both decodes removed). So here the warps
 * share nothing but the epilogue: as in the GEMV (gemv.cuh) every thread
 * copies exactly the bytes its warp reads into a ring of its warp, and
 * decodes its own fragments; no producer, no mbarriers.
 * Budget: at 3.03 TB/s an SM must take ~26 codes per clock; a warp spends
 * ~1200 instructions per item below (64 rows x 256 codes, M <= 8), ~14 codes
 * per instruction, so ~1.9 of the 4 issue slots per clock.
 * Measured (H100, M = 8, 7168 x 16384): 0.55-0.57 of the speed of light,
 * where a plain read of the same pattern, scales included, reaches ~0.8. Of
 * the rest, the math ~4 us, the split blocks' fence, tickets and partials
 * ~3 us, activation rows, barriers and sums ~5 us.
 *
 * Dataflow. An item is 64 weight rows (a row block) x 256 K values; a launch
 * has L x ceil(N / 64) row blocks of K / 256 items each. CTA c of C takes an
 * equal contiguous range of all items (a block's items, then the next
 * block's), its 4 warps each an equal contiguous quarter of that.
 *   gmem B, A rows and scales --cp.async, a 2-slot ring per warp--> smem
 *   per 64 K values: a thread's 16 codes of 8 weight rows and of its
 *     activation row(s) -> fp16 fragments (numerics.cuh: the decoder and K order
 *     of the wgmma kernel) -> mma.m16n8k16 into fp32 accumulators
 *   a block whole in one warp: fp16 out from its fragments as the warp
 *     leaves it; a warp's first block (begun before it) held in shared
 *     memory, its last (going on after it) in registers
 *   warps done: the held sums of each block added in shared memory (warp
 *     order) -> fp16 out, or, for a block split over CTAs (only the range's
 *     first and last can be), an fp32 partial in the workspace
 *   then one fence, a ticket per split block; a block's last CTA adds every
 *     partial in CTA order (four CTAs' loads in flight at once) and stores.
 *     Deterministic; no memset. Nothing waits inside the loop: a barrier
 *     per block's segment (warps dealt a quarter of each block, so unequal
 *     shares where blocks end) cost up to 5%, a fence and a ticket there
 *     ~4% at M = 8, the partials loaded one at a time ~5%.
 *
 * Thread (g, t) of a warp (g = lane / 4, t = lane % 4) holds weight rows
 * 16 j + g and 16 j + g + 8 of the block (m16 tiles j = 0..3: the mma's A,
 * roles swapped as in the wgmma kernel) and activation rows 8 i + g (n8 tiles
 * i < NT: the mma's B). Of each row's 128 bytes of an item it copies the
 * 16-byte chunks t and 4 + t (a quad's copy instruction covers 64 contiguous
 * bytes) and scale word t (blocks 4t..4t+3). Chunk c of thread t holds scale
 * blocks 8c + 2t and 8c + 2t + 1, the bytes 2(t % 2) of word 2c + t / 2 that
 * thread 2c + t / 2 of the quad copied: read after a __syncwarp (which also
 * keeps a slot from being refilled before every lane has read it).
 * Half h of chunk c (16 codes, one scale block) is one K step of 64 of the
 * wgmma kernel's K order for both operands, so the products pair up.
 * Activation rows past M read row M - 1 and weight rows past N row N - 1:
 * their output columns / rows are not stored.
 */
#include <algorithm>
#include <cstdlib>

#include "kernels.h"

namespace {

constexpr int THREADS = 128, WARPS = THREADS / 32;
constexpr int ROWS = 64;   /* weight rows of a block: 4 m16 tiles per warp */
constexpr int KITEM = 256; /* K values of an item: 128 bytes of a row      */
constexpr int STAGES = 2; /* the ring's slots */
static_assert(STAGES >= 2, "a slot in flight while one is read");

/* Shared memory of NT n8 tiles: per warp and slot [2 * RT chunks][32 lanes]
 * of 16 bytes, then [RT rows][32 lanes] scale words (RT = 8 weight rows + NT
 * activation rows per thread); then the epilogue's [warp][column][PITCH]
 * fp32 tile (a warp's held first block) and the tickets' verdicts and the
 * held blocks' numbers. */
template <int NT>
struct Smem {
  static constexpr int RT = 8 + NT;
  static constexpr int SLOT = 2 * RT * 512 + RT * 128;
  static constexpr int RING = WARPS * STAGES * SLOT;
  static constexpr int PITCH = ROWS + 4; /* conflict-free stores of the accumulators */
  static constexpr int COLS = 8 * NT;
  static constexpr int PART = RING;
  static constexpr int LAST = PART + WARPS * COLS * PITCH * 4;
  static constexpr int BYTES = LAST + 8 + 8 * WARPS; /* two verdicts, the held blocks */
};

/* What a launch's CTAs share: the item ranges (items = q * ctas + r: CTA c
 * starts at c q + min(c, r)) and, where a row block is split over CTAs, the
 * workspace: its partials (slot block + CTA: 64 x 8 NT floats) and a ticket per
 * block. A ticket holds the launch's epoch (48 bits) and a count; the block's
 * last CTA resets it, so a CUDA graph's replays (the same epoch) start from 0. */
struct Plan {
  float *ws;
  unsigned long long *tickets;
  unsigned long long epoch;
  int blocks; /* row blocks per batch */
  int steps;  /* items per row block: K / 256 */
  int q, r;
};

__device__ __forceinline__ int cta_of(const Plan &pl, int x) {
  const int big = pl.r * (pl.q + 1);
  return x < big ? x / (pl.q + 1) : pl.r + (x - big) / pl.q;
}

template <int NT>
__global__ void __launch_bounds__(THREADS) skinny_kernel(const __grid_constant__ nvfp4_matmul p, const Plan pl) {
  using S = Smem<NT>;
  extern __shared__ __align__(16) uint8_t smem[];
  const uint32_t smem_base = smem_addr(smem);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int cta = blockIdx.x;
  const int beg = cta * pl.q + min(cta, pl.r), end = beg + pl.q + (cta < pl.r);
  const int b0 = beg / pl.steps, b1 = (end - 1) / pl.steps; /* row blocks of the launch, with l */
  /* this warp's items: an equal contiguous quarter [wa, we) of the CTA's range */
  const int wa = beg + (end - beg) * warp / WARPS, we = beg + (end - beg) * (warp + 1) / WARPS;
  const int64_t kb = p.k / 16;
  const uint32_t ring = smem_base + (uint32_t)(warp * STAGES * S::SLOT);

  /* ---- the copies of item x into slot `slot` of this warp's ring. A row's
   * bytes and scales of item s sit at its bases (per row block) + s * 128 and
   * + the scale column's offset (numerics.h: separable in both layouts). */
  const uint8_t *dat[S::RT], *sfp[S::RT];
  auto rebase = [&](int blk) {
    const int l = blk / pl.blocks;
    const int64_t n0 = (int64_t)(blk - l * pl.blocks) * ROWS;
#pragma unroll
    for (int j = 0; j < S::RT; j++) {
      const bool act = j >= 8;
      const nvfp4_operand &o = act ? p.a : p.b;
      int64_t row = act ? 8 * (j - 8) + g : n0 + 16 * (j >> 1) + 8 * (j & 1) + g;
      const int64_t rows = act ? p.m : p.n;
      row = row < rows ? row : rows - 1;
      dat[j] = o.data + l * o.batch_stride + row * o.row_stride + 16 * t;
      sfp[j] = o.sf + l * o.sf_batch_stride + nvfp4_sf_offset(o.sf_layout, o.sf_row_stride, kb, row, 0);
    }
  };
  const uint32_t dst0 = ring + 16 * lane, dst_sf0 = ring + 2 * S::RT * 512 + 4 * lane;
  auto load = [&](int x, int slot) {
    const int s = x % pl.steps;
    /* scale word t of item s: blocks 16 s + 4 t .. + 3 */
    const int64_t col_b = nvfp4_sf_offset(p.b.sf_layout, 0, kb, 0, 16 * s + 4 * t);
    const int64_t col_a = nvfp4_sf_offset(p.a.sf_layout, 0, kb, 0, 16 * s + 4 * t);
    const uint32_t dst = dst0 + (uint32_t)(slot * S::SLOT), dst_sf = dst_sf0 + (uint32_t)(slot * S::SLOT);
#pragma unroll
    for (int j = 0; j < S::RT; j++) {
      const uint8_t *src = dat[j] + s * 128;
      cp_async_16(dst + (2 * j) * 512, src);
      cp_async_16(dst + (2 * j + 1) * 512, src + 64);
      cp_async_4(dst_sf + j * 128, sfp[j] + (j >= 8 ? col_a : col_b));
    }
  };
  /* the loader's cursor: next item lx, of block lb, which ends at item lend */
  int lx = wa, lb = wa / pl.steps, lend = (lb + 1) * pl.steps;
  rebase(lb);
  auto issue = [&](int slot) {
    if (lx < we) {
      if (lx == lend) rebase(++lb), lend += pl.steps;
      load(lx++, slot);
    }
    cp_async_commit();
  };

  pdl_wait();
#pragma unroll
  for (int i = 0; i < STAGES - 1; i++) issue(i);

  float *part = reinterpret_cast<float *>(smem + S::PART);
  int *last_flag = reinterpret_cast<int *>(smem + S::LAST);
  /* a row block whose items more than one CTA takes */
  auto first_cta = [&](int b) { return cta_of(pl, b * pl.steps); };
  auto last_cta = [&](int b) { return cta_of(pl, b * pl.steps + pl.steps - 1); };
  auto split = [&](int b) { return first_cta(b) != last_cta(b); };
  constexpr int PER = ROWS * S::COLS / THREADS; /* outputs per thread: thread tid has o = tid + THREADS q */
  /* the epilogue is built where it stores (its fields stay out of the main loop's registers) */
  auto store_block = [&](int b, const float *sum) {
    const Epilogue ep(p, NVFP4_TC_UNSCALE);
    const int l = b / pl.blocks;
    const int64_t n0 = (int64_t)(b - l * pl.blocks) * ROWS;
    uint16_t *cl = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
#pragma unroll
    for (int q = 0; q < PER; q++) {
      const int o = tid + THREADS * q, m = o / ROWS;
      const int64_t n = n0 + o % ROWS;
      if (m < p.m && n < p.n) ep.store(cl + m * p.c_row_stride + n, ep.gemm(sum[q], m, n));
    }
  };
  /* the tickets of the range's first and last block as they are now (threads 0
   * and 32): the CAS at the end usually finds them so, a round trip fewer */
  const bool split0 = split(b0), split1 = b1 != b0 && split(b1);
  unsigned long long guess = 0;
  if (lane == 0 && (warp ? warp == 1 && split1 : split0))
    guess = *reinterpret_cast<volatile unsigned long long *>(pl.tickets + (warp ? b1 : b0));
  /* ---- this warp's items in order; acc holds block cur's sums. A block the
   * warp holds whole is stored as the warp leaves it; its first block, if it
   * began before wa, waits in the warp's tile of `part`, its last, if it goes
   * on past we, in registers: both are added to the other warps' (and CTAs')
   * sums after the loop, so no warp waits for another inside it.
   * acc[j][i][v]: weight row 16 j + g + 8 (v / 2), activation row 8 i + 2 t + v % 2. */
  float acc[4][NT][4];
  auto clear = [&] {
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int i = 0; i < NT; i++)
#pragma unroll
        for (int v = 0; v < 4; v++) acc[j][i][v] = 0.f;
  };
  auto to_tile = [&](float *tile) { /* [column][PITCH] */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int i = 0; i < NT; i++)
#pragma unroll
        for (int v = 0; v < 4; v++)
          tile[(8 * i + 2 * t + (v & 1)) * S::PITCH + 16 * j + g + 8 * (v >> 1)] = acc[j][i][v];
  };
  auto store_acc = [&](int b) { /* block b whole in this warp: out from the fragments */
    const Epilogue ep(p, NVFP4_TC_UNSCALE);
    const int l = b / pl.blocks;
    const int64_t n0 = (int64_t)(b - l * pl.blocks) * ROWS;
    uint16_t *cl = static_cast<uint16_t *>(p.c) + l * p.c_batch_stride;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int i = 0; i < NT; i++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
          const int m = 8 * i + 2 * t + (v & 1);
          const int64_t n = n0 + 16 * j + g + 8 * (v >> 1);
          if (m < p.m && n < p.n) ep.store(cl + m * p.c_row_stride + n, ep.gemm(acc[j][i][v], m, n));
        }
  };
  clear();
  int cur = wa / pl.steps, cend = (cur + 1) * pl.steps; /* acc's block and its end */
  int held = -1;                                        /* the first block, if held in part */
  for (int x = wa, it = 0; x < we; x++, it++) {
    if (x == cend) { /* block cur ends inside this warp's items */
      if (cur * pl.steps < wa) {
        to_tile(part + warp * S::COLS * S::PITCH);
        held = cur;
      } else {
        store_acc(cur);
      }
      clear();
      cur++, cend += pl.steps;
    }
      const uint32_t slot = ring + (uint32_t)((it % STAGES) * S::SLOT);
      const uint32_t sf_row = slot + 2 * S::RT * 512 + 4 * (4 * g);
      cp_async_wait<STAGES - 2>(); /* this thread's copies of item `it` landed */
      __syncwarp();                /* ... every lane's; and slot it - 1 is read */
      issue((it + STAGES - 1) % STAGES);
#pragma unroll
      for (int c = 0; c < 2; c++) {
        /* scale bytes of blocks 8c + 2t, + 1 of each row: word 2c + t / 2 of the quad */
        const uint32_t sf_at = sf_row + 4 * (2 * c + (t >> 1)) + 2 * (t & 1);
        uint4 w[S::RT];
        uint32_t sf[S::RT];
#pragma unroll
        for (int j = 0; j < S::RT; j++) {
          w[j] = ld_shared_u4(slot + (2 * j + c) * 512 + 16 * lane);
          sf[j] = ld_shared_u16(sf_at + j * 128);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
          uint32_t bf[NT][4][2]; /* [n8 tile][k16 step][reg] */
#pragma unroll
          for (int i = 0; i < NT; i++) {
            const uint32_t s2 = nvfp4_e4m3x2_to_half2_bits(((sf[8 + i] >> (8 * h)) & 0xFFu) * 0x101u);
            uint32_t lo[4], hi[4];
            nvfp4_e2m1x8_to_half2x4(h ? w[8 + i].z : w[8 + i].x, s2, lo);
            nvfp4_e2m1x8_to_half2x4(h ? w[8 + i].w : w[8 + i].y, s2, hi);
#pragma unroll
            for (int s = 0; s < 4; s++) bf[i][s][0] = lo[s], bf[i][s][1] = hi[s];
          }
#pragma unroll
          for (int j = 0; j < 4; j++) {
            const uint4 r0 = w[2 * j], r8 = w[2 * j + 1];
            const uint32_t sb = prmt(sf[2 * j], sf[2 * j + 1], h ? 0x0051u : 0x0040u);
            uint32_t f[4][4];
            nvfp4_wgmma_a_fragments(h ? make_uint2(r0.z, r0.w) : make_uint2(r0.x, r0.y),
                                    h ? make_uint2(r8.z, r8.w) : make_uint2(r8.x, r8.y), sb, f);
#pragma unroll
            for (int s = 0; s < 4; s++)
#pragma unroll
              for (int i = 0; i < NT; i++) mma_16816(acc[j][i], f[s], bf[i][s][0], bf[i][s][1]);
          }
        }
      }
  }
  pdl_launch_dependents();
  const bool tail = we > wa && (cur * pl.steps < wa || cend > we); /* acc shared with others */
  if (we > wa && !tail) store_acc(cur);

  /* ---- the sums of blocks shared between warps or CTAs, added in warp order:
   * entry 2 w + h of `desc` is warp w's held first block (h = 0, its tile in
   * `part`) or its last (h = 1, its tile where its ring was); a block's
   * entries are consecutive. Whole blocks out as fp16; a block split over
   * CTAs as this CTA's fp32 partial. */
  cp_async_wait<0>();
  __syncthreads(); /* every warp is past its loop: the rings are free */
  int *desc = last_flag + 2;
  if (tail) to_tile(reinterpret_cast<float *>(smem + warp * STAGES * S::SLOT));
  if (lane == 0) desc[2 * warp] = held, desc[2 * warp + 1] = tail ? cur : -1;
  __syncthreads();
  {
    float sum[PER];
    int prev = -1;
    for (int e2 = 0; e2 < 2 * WARPS; e2++) {
      const int b = desc[e2];
      if (b < 0) continue;
      const float *tile = e2 & 1 ? reinterpret_cast<const float *>(smem + (e2 >> 1) * STAGES * S::SLOT)
                                 : part + (e2 >> 1) * S::COLS * S::PITCH;
#pragma unroll
      for (int q = 0; q < PER; q++) {
        const int o = tid + THREADS * q;
        const float x = tile[(o / ROWS) * S::PITCH + o % ROWS];
        sum[q] = b == prev ? sum[q] + x : x;
      }
      prev = b;
      int next = -1;
      for (int e3 = e2 + 1; e3 < 2 * WARPS && next < 0; e3++) next = desc[e3];
      if (next == b) continue;
      if (split(b)) { /* an fp32 partial; the block's last CTA adds them up below */
        float *mine = pl.ws + (int64_t)(b + cta) * ROWS * S::COLS;
#pragma unroll
        for (int q = 0; q < PER; q++) __stcg(mine + tid + THREADS * q, sum[q]);
      } else {
        store_block(b, sum);
      }
    }
  }

  /* ---- the split blocks of the range (only its first and last can be): a
   * ticket each (threads 0 and 32 at once), after the loop, where no copy
   * waits on them; the fence after the barrier publishes the CTA's partials. */
  if (split0 || split1) {
    __syncthreads();
    if (lane == 0 && warp < 2) {
      const int b = warp ? b1 : b0;
      bool mine = false;
      if (warp ? split1 : split0) {
        __threadfence();
        mine = take_ticket(pl.tickets + b, guess, pl.epoch, last_cta(b) - first_cta(b) + 1);
      }
      last_flag[warp] = mine;
    }
    __syncthreads();
    for (int h = 0; h < 2; h++) {
      if (!last_flag[h]) continue;
      __threadfence();
      const int blk = h ? b1 : b0;
      const int first = first_cta(blk), last = last_cta(blk);
      /* in CTA order, four CTAs' loads in flight at once */
      const float *src = pl.ws + (int64_t)(blk + first) * ROWS * S::COLS + tid;
      float sum[PER];
      for (int c0 = first; c0 <= last; c0 += 4) {
        float v[4][PER];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
          for (int q = 0; q < PER; q++)
            v[u][q] = c0 + u <= last ? __ldcg(src + (int64_t)(c0 + u - first) * ROWS * S::COLS + THREADS * q) : 0.f;
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
          for (int q = 0; q < PER; q++)
            if (c0 + u <= last) sum[q] = c0 + u == first ? v[u][q] : sum[q] + v[u][q];
      }
      store_block(blk, sum);
    }
  }
}

/* Per device and NT: CTAs per SM (the kernel opened up to its shared memory). */
template <int NT>
cudaError_t occupancy(const DeviceInfo &dev, int &per_sm) {
  static int cache[64] = {};
  if (dev.id >= 64) return cudaErrorInvalidDevice;
  if (!cache[dev.id]) {
    cudaError_t e = cudaFuncSetAttribute(skinny_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<NT>::BYTES);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cache[dev.id], skinny_kernel<NT>, THREADS,
                                                                           Smem<NT>::BYTES);
    if (e != cudaSuccess) return e;
    if (!cache[dev.id]) return cudaErrorInvalidConfiguration;
  }
  per_sm = cache[dev.id];
  return cudaSuccess;
}

template <int NT>
cudaError_t launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws_fn, void *ctx, cudaStream_t stream) {
  const DeviceInfo &dev = device_info();
  int per_sm = 0;
  if (cudaError_t e = occupancy<NT>(dev, per_sm)) return e;
  Plan pl = {};
  pl.blocks = (int)((p.n + ROWS - 1) / ROWS);
  pl.steps = (int)(p.k / KITEM);
  const int64_t blocks = p.batch * pl.blocks, items = blocks * pl.steps;
  /* every SM's CTAs, each at least 2 items (a warp per item at least half the
   * time); a range that splits a row block needs the workspace, without it a
   * CTA per row block */
  int64_t ctas = std::min<int64_t>((int64_t)per_sm * dev.sms, std::max<int64_t>(1, items / 2));
  ctas = std::min<int64_t>(ctas, 65535);
  if (ctas != blocks) {
    const size_t part = (size_t)(blocks + ctas) * ROWS * 8 * NT * sizeof(float);
    void *ws = ws_fn ? ws_fn(part + (size_t)blocks * sizeof(unsigned long long), ctx) : nullptr;
    if (ws && aligned(ws, 16)) {
      pl.ws = static_cast<float *>(ws);
      pl.tickets = reinterpret_cast<unsigned long long *>(static_cast<uint8_t *>(ws) + part);
      pl.epoch = ticket_epoch();
    } else {
      ctas = blocks;
    }
  }
  pl.q = (int)(items / ctas);
  pl.r = (int)(items % ctas);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)ctas);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = Smem<NT>::BYTES;
  cfg.stream = stream;
  cudaLaunchAttribute attr = pdl_attribute();
  cfg.attrs = &attr;
  cfg.numAttrs = dev.sm90_code ? 1 : 0; /* its pdl_wait exists */
  return cudaLaunchKernelEx(&cfg, skinny_kernel<NT>, p, pl);
}

}  // namespace

/* sm_80+; not dual; M = 2..16; K a multiple of 256; data 16-byte and scales
 * 4-byte aligned (every copy one cp.async); the items of a launch countable
 * in 32 bits. */
bool skinny_can_run(const nvfp4_matmul &p, const DeviceInfo &dev) {
  if (dev.major < 8 || p.b2.data || p.m > 16 || p.m < 2) return false;
  if (p.k % KITEM || p.batch * ((p.n + ROWS - 1) / ROWS) * (p.k / KITEM) > INT32_MAX / 2) return false;
  return cp_async_ok(p.a) && cp_async_ok(p.b);
}

cudaError_t skinny_launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws, void *ctx, cudaStream_t stream) {
  return p.m <= 8 ? launch<1>(p, ws, ctx, stream) : launch<2>(p, ws, ctx, stream);
}
