/*
 * nvfp4.h - the C API of the nvfp4-kernels library.
 *
 * Every kernel (CPU and CUDA) sits behind this header: raw pointers, sizes,
 * strides, layout flags and a cudaStream_t. Nothing here includes torch, so the
 * kernels compile (and can be read with -Xptxas -v) without it, and C callers
 * can use them directly. The one file that knows about torch is
 * csrc/torch_binding.cpp.
 *
 * Numbers (see nvfp4_kernels/reference.py, the executable definition):
 *   value(r, k) = e2m1(code(r, k)) * e4m3(scale(r, k / 16))
 *   C[l, m, n]  = sum_k A[l, m, k] * B[l, n, k]      (fp32 accumulation)
 *   gemm:  out = c_type(fp32(alpha * C) + bias[n])   (the bias where given)
 *   dual:  out = c_type(silu(fp32(alpha * C1)) * fp32(alpha2 * C2)), in fp32
 * c_type is fp16 or bf16, rounded to nearest even. A W4A16 problem's A holds
 * fp16 or bf16 values instead of NVFP4 (a_type): every product is still exact
 * in fp32 (an e2m1 x e4m3 weight has at most 6 significant bits).
 *
 * Operand memory: row r of batch l starts at data + l*batch_stride + r*row_stride
 * (bytes) and holds K/2 bytes, two codes per byte, the LOW nibble first (even k);
 * weights laid out by tile (tile_rows) hold the same bytes in runs of 32.
 */
#ifndef NVFP4_H
#define NVFP4_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nvfp4_status {
  NVFP4_OK = 0,
  NVFP4_ERR_INVALID = 1,      /* sizes or pointers that no kernel accepts     */
  NVFP4_ERR_CUDA = 2,         /* a CUDA call failed (cudaGetLastError says)   */
  NVFP4_ERR_NO_MEMORY = 3     /* host scratch could not be allocated          */
} nvfp4_status;

/* Scale-factor layouts, both read in place.
 * LINEAR : byte (r, kb) at sf + l*sf_batch_stride + r*sf_row_stride + kb.
 * BLOCKED: the cuBLAS/CUTLASS 128x4 layout: per batch a contiguous
 *          [ceil(R/128)][ceil(KB/4)][32][4][4] array of 512-byte atoms; row r,
 *          scale column kb sit in atom (r/128, kb/4) at byte
 *          16*(r%32) + 4*((r%128)/32) + kb%4. Padding bytes are never read. */
enum nvfp4_sf_layout { NVFP4_SF_LINEAR = 0, NVFP4_SF_BLOCKED = 1 };

/* How a weight operand's code bytes are laid out. BYTES: the checkpoint's, two
 * codes a byte, low nibble = even k. BF16_PAIRS (W4A16 weights, bf16
 * activations only): each aligned 32-bit word of BYTES (codes 8j .. 8j + 7 of
 * a row) rewritten by nvfp4_pairs_pack (numerics.h) so that the GPU's bf16
 * decoder takes its adjacent codes in pairs with fewer instructions. */
enum nvfp4_codes { NVFP4_CODES_BYTES = 0, NVFP4_CODES_BF16_PAIRS = 1 };

/* One NVFP4 operand: rows x K values, K-major, batched. */
typedef struct nvfp4_operand {
  const uint8_t *data;        /* packed e2m1 codes                     */
  int64_t batch_stride;       /* bytes between batches                 */
  int64_t row_stride;         /* bytes between rows                    */
  const uint8_t *sf;          /* e4m3 scales, one per 16 values        */
  int64_t sf_batch_stride;    /* bytes between batches                 */
  int64_t sf_row_stride;      /* bytes between rows (LINEAR only)      */
  int32_t sf_layout;          /* enum nvfp4_sf_layout                  */
  int32_t codes;              /* enum nvfp4_codes                      */
  int32_t tile_rows;          /* 0, or laid out by tile (below)        */
} nvfp4_operand;

/* Weights laid out by tile (tile_rows 64 or 128 of an MoE's experts, rows
 * grouped by expert; 128 of a dense problem's weights, as NVFP4Linear holds
 * them on a GPU): the codes and scales of NVFP4_TILE_ROWS rows and
 * 4 K steps of 64 values are one run each, in the order the GPU kernels copy
 * them. Per batch, tile t (at t*row_stride codes, t*sf_row_stride scales)
 * holds operand rows [t*tile_rows, (t + 1)*tile_rows) at places 0.. (a gated
 * expert's W1 and W3: two operands of tile_rows 64, W3's data and sf 64
 * places on); place p, K step s (values 64s .. 64s + 63): 32 code bytes at
 * s*NVFP4_TILE_STEP + 32p, its 4 scales at (s/4)*NVFP4_TILE_SF_GROUP + 16p +
 * 4(s%4). K is padded to whole groups of 4 steps with zero codes and scales;
 * sf_layout is NVFP4_SF_LINEAR (a step's 4 scales lie together, as there).
 * nvfp4_codes_offset and nvfp4_operand_sf_offset (numerics.h) are the
 * addressing. */
#define NVFP4_TILE_ROWS 128
#define NVFP4_TILE_STEP (NVFP4_TILE_ROWS * 32)     /* code bytes of a tile's K step */
#define NVFP4_TILE_SF_GROUP (NVFP4_TILE_ROWS * 16) /* scale bytes of a tile's 4 K steps */

/* Element types: a problem's output (F16, BF16), its bias (F32, F16, BF16),
 * its activations (E2M1: NVFP4 codes and scales; F16 or BF16: W4A16), and
 * quantize's input (F32, F16, BF16). */
enum nvfp4_type { NVFP4_E2M1 = 0, NVFP4_F16 = 1, NVFP4_BF16 = 2, NVFP4_F32 = 3 };

/* One problem: C[l] = A[l] (m x k) times B[l]^T (k x n), l < batch. */
typedef struct nvfp4_matmul {
  int64_t m, n, k, batch;     /* k is a positive multiple of 16                 */
  nvfp4_operand a;            /* m rows (a_type F16 / BF16: k 2-byte values a
                                 row, sf unused; strides still in bytes)        */
  nvfp4_operand b;            /* n rows                                         */
  nvfp4_operand b2;           /* n rows; data == NULL unless dual               */
  void *c;                    /* c_type values                                  */
  int64_t c_batch_stride;     /* elements                                       */
  int64_t c_row_stride;       /* elements; columns are contiguous               */
  const float *alpha_ptr;     /* NULL, or one float in the kernel's memory      */
  const float *alpha2_ptr;    /* dual: the second product's, likewise           */
  const void *bias;           /* NULL, or n values of bias_type (not for dual)  */
  float alpha;                /* used when alpha_ptr is NULL                    */
  float alpha2;               /* used when alpha2_ptr is NULL (1 for none)      */
  int32_t a_type;             /* NVFP4_E2M1, or NVFP4_F16 / NVFP4_BF16 (W4A16)  */
  int32_t c_type;             /* NVFP4_F16 or NVFP4_BF16                        */
  int32_t bias_type;          /* NVFP4_F32, NVFP4_F16 or NVFP4_BF16             */
  const int32_t *offs;        /* NULL, or rows grouped by expert (below)        */
  const int32_t *a_index;     /* NULL, or (by expert) row r of A is a_index[r]  */
  int64_t a_rows;             /* with a_index: A's rows                         */
  const float *a_global;      /* NULL, or (by expert) rows quantized first      */
} nvfp4_matmul;

/* Rows grouped by expert (a mixture of experts; offs != NULL): batch = E
 * experts, B[l] = expert l's weights; A and C are not batched (batch strides
 * 0): expert l takes rows [offs[l - 1], offs[l]) of the m (offs[-1] = 0) and
 * writes them in C; alpha_ptr / alpha2_ptr, where given, hold one float per
 * expert. offs: batch int32 in the kernel's memory, the experts' cumulative
 * row ends, non-decreasing, at most m (a CUDA kernel cannot check: an entry
 * below its predecessor counts as an empty group, and rows end at m); rows
 * past offs[batch - 1] are not written. Not with a bias. a_index (16-bit A
 * only; NULL: row r is A's row r): m int32 in the kernel's memory, row r of
 * the problem is A's row a_index[r] (the rows of a mixture of experts' token
 * pairs, read where they are instead of gathered first); an index outside
 * [0, a_rows) reads as zeros (a CUDA kernel cannot report it). a_global
 * (16-bit A, by expert; batch floats in the kernel's memory): W4A4, row r of
 * expert l is multiplied as the values of its quantization with global scale
 * a_global[l] (nvfp4_quantize.values, scale_offs = offs), the alphas carrying
 * 1 / a_global[l]; with a_index, a row outside A is NaN (as there). Not by
 * expert (offs NULL, CUDA, where nvfp4_matmul_cuda_quantizes_in_kernel says):
 * the rows quantized with global scale a_global[0] inside the kernel. */

/* Quantization to NVFP4 (nvfp4_quantize_block in numerics.h, per 16 values):
 * x (rows x k float32 / float16 / bfloat16 values in batches, k contiguous,
 * k a positive multiple of 16) times the global scale -> e2m1 codes and e4m3
 * scales, written as an operand reads them (data K-major, low nibble first;
 * scales in either layout). The blocked layout's padding (rows up to a
 * multiple of 128, scale columns up to a multiple of 4) is written as 0. */

typedef struct nvfp4_quantize {
  int64_t rows, k, batch;
  const void *x;              /* element (l, r, i) at x + l*x_batch_stride + r*x_row_stride + i */
  int32_t x_type;             /* NVFP4_F32, NVFP4_F16 or NVFP4_BF16             */
  int64_t x_batch_stride;     /* elements                                       */
  int64_t x_row_stride;       /* elements                                       */
  uint8_t *data;              /* codes: as nvfp4_operand.data                   */
  int64_t data_batch_stride;  /* bytes                                          */
  int64_t data_row_stride;    /* bytes                                          */
  uint8_t *sf;                /* scales: as nvfp4_operand.sf                    */
  int64_t sf_batch_stride;    /* bytes                                          */
  int64_t sf_row_stride;      /* bytes (LINEAR only)                            */
  int32_t sf_layout;          /* enum nvfp4_sf_layout                           */
  const float *scale_ptr;     /* NULL, or the global scale in the kernel's memory */
  float scale;                /* the global scale when scale_ptr is NULL        */
  const float *row_scale;     /* NULL, or one global scale per row (batch x rows,
                                 in the kernel's memory), instead of the above  */
  void *values;               /* NULL, or the quantized values written here
                                 instead of codes and scales (below)            */
  int32_t values_type;        /* NVFP4_F32, NVFP4_F16 or NVFP4_BF16             */
  int64_t values_batch_stride; /* elements                                      */
  int64_t values_row_stride;  /* elements                                       */
  const int32_t *row_index;   /* NULL, or (values, batch 1) row r reads x's row
                                 row_index[r], one of x_rows                    */
  int64_t x_rows;
  const int32_t *scale_index; /* NULL, or (row_scale given) row r's global scale
                                 is row_scale[scale_index[r]], one of scales    */
  const int32_t *scale_offs;  /* NULL, or (row_scale given, batch 1) row r's is
                                 row_scale[e], e the first expert of offs (scales
                                 cumulative row ends) whose rows end past r (the
                                 last where none)                               */
  int64_t scales;
  int32_t early_trigger;      /* CUDA: 1 lets the next kernel (the gemm of these
                                 codes) launch as this one starts, 0 as it ends */
} nvfp4_quantize;

/* Quantized values (values != NULL; data, sf and the layout unused): each
 * code's e2m1 value times its block's e4m3 scale, before the global scale is
 * divided out; exact in every values_type (at most 6 significant bits, 2^-10
 * .. 2688). A W4A4 activation as a 16-bit operand: a kernel of 16-bit
 * activations multiplies exactly what a gemm of the codes and scales would.
 * row_index and scale_index (a mixture of experts' rows, each its token's
 * activation with its expert's global scale, in one pass): an index outside
 * its range is an error on the CPU; on CUDA (checking would sync) that
 * row's values are NaN, nothing outside x or the scales is read. */

/* A mixture of experts' token-expert pairs as rows grouped by expert, and
 * their weighted sum back (NVFP4MoE). Pair p = t * top_k + j is token t's j-th
 * expert, ids[p].
 * Sort: rows in expert order, within an expert in pair order (stable):
 * token_of_row[r] and expert_of_row[r] (pairs rows), row_of_pair[p], and
 * offs[e] the cumulative row ends (as nvfp4_matmul.offs). A pair whose id is
 * outside [0, experts) gets no row (row_of_pair -1; on the CPU such an id is
 * refused: NVFP4_ERR_INVALID); the rows past offs[experts - 1] hold token 0,
 * expert 0 (an index that gathers safely). At most NVFP4_MOE_MAX_EXPERTS. */
#define NVFP4_MOE_MAX_EXPERTS 8192
typedef struct nvfp4_moe_sort {
  int64_t pairs, top_k, experts; /* pairs: tokens * top_k, below 2^31       */
  const void *ids;               /* pairs ids, contiguous                    */
  int32_t ids64;                 /* int64 ids (else int32)                   */
  int32_t *token_of_row, *expert_of_row, *row_of_pair, *offs;
  int32_t *scratch; /* CUDA: nvfp4_moe_sort_scratch(pairs, experts) ints (may be NULL where that is 0) */
} nvfp4_moe_sort;

/* Combine: out[t, h] = sum over j of weights[t, j] * y[row_of_pair[p], h],
 * fp32: each product rounded, added in j order to 0 (pairs of row -1
 * skipped), the sum rounded once to y_type. Contiguous: y [rows, hidden],
 * weights and row_of_pair [tokens, top_k], out [tokens, hidden]. */
typedef struct nvfp4_moe_combine {
  int64_t tokens, top_k, hidden, rows;
  const void *y;
  int32_t y_type;            /* NVFP4_F32, NVFP4_F16 or NVFP4_BF16; out's too */
  const int32_t *row_of_pair; /* rows of y, or -1                             */
  const void *weights;
  int32_t weights_type;      /* NVFP4_F32, NVFP4_F16 or NVFP4_BF16            */
  void *out;
} nvfp4_moe_combine;

/* Routing: each token's top_k experts and their weights from its router
 * logits, in float32 (as transformers' routers compute them).
 * Softmax (Qwen-MoE, Mixtral): experts ranked by logit; weight = the
 * softmax probability exp(x - max) / sum of exp(x - max) (the sum in expert
 * order on the CPU, lane partials then a butterfly on the GPU).
 * Sigmoid (DeepSeek-V3): s = 1 / (1 + exp(-x)), experts ranked by
 * c = s + bias (bias may be NULL); with groups > 1 the experts form `groups`
 * equal runs, each scored by the sum of its two largest c (its largest where
 * a run has one expert), and only the top_groups best runs compete; weight = s.
 * Ranking: larger first, equal values by lower index, NaN below every number.
 * Then, where renormalize, weights / their sum (added in rank order; sigmoid
 * + 1e-20), then times scale. ids[t, j] / weights[t, j]: token t's j-th
 * expert in rank order. Contiguous: logits [tokens, experts], bias [experts]
 * float32, ids int32 and weights float32 [tokens, top_k]. At most
 * NVFP4_MOE_ROUTE_MAX_EXPERTS experts and 32 groups; top_k <= 32 and no more
 * than the competing experts. */
#define NVFP4_MOE_ROUTE_MAX_EXPERTS 2048
typedef struct nvfp4_moe_route {
  int64_t tokens, experts, top_k, groups, top_groups;
  const void *logits;
  int32_t logits_type; /* NVFP4_F32, NVFP4_F16 or NVFP4_BF16 */
  int32_t sigmoid;     /* else softmax                         */
  int32_t renormalize;
  float scale;
  const float *bias;
  int32_t *ids;
  float *weights;
} nvfp4_moe_route;

/* CPU: the sort; the combine of tokens [t0, t1) and the routing of tokens
 * [t0, t1) (disjoint ranges may run at once). */
nvfp4_status nvfp4_moe_sort_cpu(const nvfp4_moe_sort *s);
nvfp4_status nvfp4_moe_combine_cpu(const nvfp4_moe_combine *c, int64_t t0, int64_t t1);
nvfp4_status nvfp4_moe_route_cpu(const nvfp4_moe_route *r, int64_t t0, int64_t t1);
/* The arguments every routing implementation accepts. */
static inline int nvfp4_moe_route_ok(const nvfp4_moe_route *r) {
  const int64_t runs = r->groups > 1 ? r->top_groups * (r->experts / (r->groups ? r->groups : 1)) : r->experts;
  return r->tokens >= 0 && r->experts > 0 && r->experts <= NVFP4_MOE_ROUTE_MAX_EXPERTS && r->top_k > 0 &&
         r->top_k <= 32 && r->groups >= 1 && r->groups <= 32 && r->experts % r->groups == 0 &&
         r->top_groups >= 1 && r->top_groups <= r->groups && (r->groups == 1 || r->sigmoid) && r->top_k <= runs &&
         (r->logits_type == NVFP4_F32 || r->logits_type == NVFP4_F16 || r->logits_type == NVFP4_BF16);
}

/* CPU (x_type NVFP4_F32 only): rows [r0, r1) of every batch, and the
 * padding rows among them (blocked: r1 may reach the padded row count). */
nvfp4_status nvfp4_quantize_cpu(const nvfp4_quantize *q, int64_t r0, int64_t r1);

/* CPU: rows [m0, m1) and columns [n0, n1) of every batch of one problem.
 * Thread-safe for disjoint ranges, so the caller can split the work. */
nvfp4_status nvfp4_matmul_cpu(const nvfp4_matmul *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

#ifdef NVFP4_WITH_CUDA
#include <cuda_runtime_api.h>

/* One or several independent problems (dual or not, all alike) on `stream`,
 * no host synchronisation. Grouped problems share one launch per
 * NVFP4_LAUNCH_GROUPS (16) of them (csrc/cuda/common.cuh); csrc/cuda/plan.cu
 * picks the kernel. */
nvfp4_status nvfp4_matmul_cuda(const nvfp4_matmul *problems, int count, cudaStream_t stream);

/* Device scratch for a launch that can use it (the Hopper tensor-core
 * kernel: stream-K partials where whole tiles would leave SMs idle, and the
 * activations pre-decoded to fp16 where that pays, 2 bytes per value of
 * 128-row tiles, at most 1 GiB per launch; the skinny kernel of M <= 16:
 * fp32 partials of row blocks split over CTAs, 2-4 KB per CTA; the W4A16
 * kernel: fp32 partials of tiles whose K is split over CTAs, 4-32 KB per
 * CTA, and a ticket per tile). Called with the
 * bytes the launch's plan needs; returns 16-byte aligned device memory that
 * the launch may use in stream order on its stream (contents not kept), or
 * NULL: the launch then runs without it. */
typedef void *(*nvfp4_workspace_fn)(size_t bytes, void *ctx);

/* nvfp4_matmul_cuda with `workspace` (may be NULL) asked for scratch where a
 * launch can use it, at most once per launch: the same results either way, to
 * within fp32 summation order. Stream-K launches are planned for one CTA per
 * SM of the device; where the process gets fewer SMs (MPS limits, green
 * contexts) they stay correct but run in waves: NVFP4_STREAM_K=0 in the
 * environment before the first call turns them off. */
nvfp4_status nvfp4_matmul_cuda_ws(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn workspace, void *ctx,
                                  cudaStream_t stream);

/* A W4A4 problem whose activations come unquantized (the gemm_w4a4 ops):
 * they are quantized with one global scale, then either to codes and
 * scales for a kernel of NVFP4 activations, or to the values those stand
 * for (nvfp4_quantize.values) for a kernel of 16-bit activations: the same
 * products either way. `values`: the problem with a = those values (a_type
 * F16 / BF16); `codes`: with a = the codes (a_type E2M1). Planning reads no
 * memory: a's addresses may stand in for tensors not yet allocated. 1: the
 * values run faster on the current device (csrc/cuda/plan.cu says where);
 * 0: the codes. */
int nvfp4_matmul_cuda_prefers_values(const nvfp4_matmul *values, const nvfp4_matmul *codes);
/* Whether the kernel quantizes p's rows itself (p: 16-bit A, a_global set, not by expert: W4A4 of 1 to 4 activation
 * rows on the GEMVs), so that the caller launches no quantize kernel. */
int nvfp4_matmul_cuda_quantizes_in_kernel(const nvfp4_matmul *p);

/* Rows by token (a_index) or quantized first (a_global): 1 where the planned
 * kernel reads them as given (csrc/cuda/plan.cu); 0: the caller makes them
 * first (nvfp4_gather_rows_cuda, or nvfp4_quantize_cuda's values with
 * scale_offs) and passes the problem without a_index and a_global. */
int nvfp4_matmul_cuda_reads_rows(const nvfp4_matmul *p);
/* out row r (row_bytes, rows out_stride bytes apart) = x's row index[r]
 * (x_rows rows, x_stride bytes apart), zeros where index[r] is outside
 * [0, x_rows); r < rows. On `stream`, no host synchronisation. */
nvfp4_status nvfp4_gather_rows_cuda(const void *x, int64_t x_rows, int64_t x_stride, int64_t row_bytes,
                                    const int32_t *index, int64_t rows, void *out, int64_t out_stride,
                                    cudaStream_t stream);

/* Quantization on `stream` (any x_type), no host synchronisation. */
nvfp4_status nvfp4_quantize_cuda(const nvfp4_quantize *q, cudaStream_t stream);

/* The sort, the combine and the routing on `stream` (csrc/cuda/moe.cu), no
 * host synchronisation. */
nvfp4_status nvfp4_moe_sort_cuda(const nvfp4_moe_sort *s, cudaStream_t stream);
/* The scratch ints the CUDA sort of `pairs` pairs over `experts` needs (0: none). */
int64_t nvfp4_moe_sort_scratch(int64_t pairs, int64_t experts);
nvfp4_status nvfp4_moe_combine_cuda(const nvfp4_moe_combine *c, cudaStream_t stream);
nvfp4_status nvfp4_moe_route_cuda(const nvfp4_moe_route *r, cudaStream_t stream);

/* The plan nvfp4_matmul_cuda_ws (with a workspace) would launch for these
 * problems on the current device, as text into buf (at most len bytes): the
 * kernel's name (w4a16, gemv_dp4a, gemv_mma, skinny, wgmma, mma, simt), then its
 * configuration in brackets where it has one, e.g. "wgmma (128-row tiles,
 * split-K 2)". csrc/cuda/plan.cu says how it is chosen. */
nvfp4_status nvfp4_matmul_cuda_describe(const nvfp4_matmul *problems, int count, char *buf, size_t len);
#endif

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_H */
