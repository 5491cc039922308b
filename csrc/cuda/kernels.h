/*
 * kernels.h - what each CUDA kernel file offers the planner (plan.cu): which
 * problems it can run on a device, and its launch. Nothing here says which
 * kernel is fastest: that policy lives in plan.cu alone.
 *
 *   w4a16.cu       W4A16 gemm / dual / grouped: 16-bit activations, mma.sync
 *   gemv_dp4a.cu   GEMV of 1 to 4 vectors, dp4a dot products (bandwidth-bound)
 *   gemv_mma.cu    GEMV of 2 to 8 vectors, integer mma.sync
 *   skinny.cu      gemm of 2 to 16 activation rows, mma.sync, split over CTAs
 *   matmul_sm90.cu gemm / dual / grouped, wgmma (Hopper, sm_90a)
 *   matmul_mma.cu  gemm / dual / grouped, mma.sync (sm_80+)
 *   matmul_simt.cu gemm / dual / grouped, CUDA cores (any shape and layout)
 *   cublas.cu      W4A16 gemm: weights decoded to 16 bits, then cuBLASLt
 *
 * A GEMV kernel takes its problem "as vectors": p.n vectors (b's rows)
 * against p.m streamed rows of a (and of a2 = p.b2 for a dual), result j of
 * row r at c + r * c_row_stride + j * c_vec_stride. The planner hands it
 * either the problem as given (the gemv op, a gemm of few weight rows) or
 * one with the roles swapped (a gemm of few activation rows); bias_by_row
 * says which (the epilogue's bias then goes by row, common.cuh).
 */
#pragma once
#include "common.cuh"

/* W4A16: 16-bit activations (a_type F16 / BF16) x NVFP4 weights. */
bool w4a16_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
cudaError_t w4a16_launch(const nvfp4_matmul *problems, int count, nvfp4_workspace_fn ws, void *ctx,
                         cudaStream_t stream);
void w4a16_describe(const nvfp4_matmul *problems, int count, bool workspace, char *what, size_t len);
/* How w4a16.cu runs p alone, given scratch: GEMV or tiles, its CTAs, the CTA
 * slots of one wave, and the K values each CTA takes (the planner's measure). */
struct W4A16Launch {
  bool gemv;
  int64_t ctas, slots, cta_k;
};
W4A16Launch w4a16_launch_of(const nvfp4_matmul &p);

/* W4A16 gemm (not dual) on cuBLASLt over weights decoded in slices (no rows
 * by expert). can_run: layouts and alignment; ready: cuBLASLt (loaded by the
 * process) has an algorithm for each slice's product (its heuristic, asked
 * once per shape). A launch without its scratch (ws NULL or failing) returns
 * cudaErrorNotSupported having launched nothing. */
bool cublas_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
bool cublas_ready(const nvfp4_matmul &p);
cudaError_t cublas_launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws, void *ctx, cudaStream_t stream);
void cublas_describe(const nvfp4_matmul &p, char *what, size_t len);

bool gemv_dp4a_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
cudaError_t gemv_dp4a_launch(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream);

bool gemv_mma_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
/* The 128-K steps of the busiest CTA (a CTA per SM, sets of 16 rows, 8 for
 * a dual): the measure of work the GEMV kernels' rules are stated in. */
int64_t gemv_mma_share_steps(const nvfp4_matmul &p, const DeviceInfo &dev);
cudaError_t gemv_mma_launch(const nvfp4_matmul &p, int64_t c_vec_stride, bool bias_by_row, cudaStream_t stream);

bool skinny_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
cudaError_t skinny_launch(const nvfp4_matmul &p, nvfp4_workspace_fn ws, void *ctx, cudaStream_t stream);

/* The tile kernels take up to NVFP4_LAUNCH_GROUPS problems per launch (all
 * dual or all not); empty problems get no tiles. */
bool matmul_sm90_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
/* no_pre: 1 never pre-decodes the activations (a test's forced variant: the
 * producer's decoding path); 0 where the plan says. The describe
 * functions write a launch's configuration as a short phrase into `what`. */
cudaError_t matmul_sm90_launch(const nvfp4_matmul *problems, int count, int no_pre, nvfp4_workspace_fn ws,
                               void *ctx, cudaStream_t stream);
void matmul_sm90_describe(const nvfp4_matmul *problems, int count, int no_pre, bool workspace, char *what,
                          size_t len);

bool matmul_mma_can_run(const nvfp4_matmul &p, const DeviceInfo &dev);
/* wk: 1 or 4 forces the CTA shape (a test's forced variant); 0 by its cost model. */
cudaError_t matmul_mma_launch(const nvfp4_matmul *problems, int count, int wk, cudaStream_t stream);
void matmul_mma_describe(const nvfp4_matmul *problems, int count, int wk, char *what, size_t len);

cudaError_t matmul_simt_launch(const nvfp4_matmul *problems, int count, cudaStream_t stream);
