/*
 * cpu/matmul.c - NVFP4 GEMV / GEMM / dual GEMM on the CPU, in C.
 *
 * Computes rows [m0, m1) x columns [n0, n1) of every batch of one problem
 * (nvfp4.h; rows grouped by expert: each expert's rows among them); the torch binding splits a call into such ranges across its
 * thread pool. This is the correct-everywhere path, not the fast one.
 *
 * Dataflow: a block of MB rows of A is dequantized to fp32 once (exact:
 * e2m1 * e4m3 has at most 6 significant bits; W4A16's fp16 / bf16 values
 * convert exactly); for it, tiles of NB rows of B (and B2)
 * are dequantized in turn, and every (A row pair, B row pair) is dotted. The
 * dot keeps 8 independent fp32 lanes per output, so the compiler vectorizes it
 * without reassociating anything: fp32 accumulation, as the reference says
 * (each product is exact, so a fused multiply-add rounds exactly as an add).
 * dot2x2 is also built for AVX2+FMA and picked at load time where the CPU has it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../numerics.h"

enum { MB = 64, NB = 16, LANES = 8 };

/* Row `row` of batch l of op, dequantized into out[0, k). */
static void dequant_row(const nvfp4_operand *op, int64_t k, int64_t l, int64_t row, const float lut[16],
                        float *out) {
  const uint8_t *codes = op->data + l * op->batch_stride + nvfp4_codes_offset(op, row, 0);
  int64_t k_blocks = k / 16;
  for (int64_t kb = 0; kb < k_blocks; kb++) {
    float s = nvfp4_scale(op, k_blocks, l, row, kb);
    const uint8_t *bytes = codes + nvfp4_codes_offset(op, 0, kb * 8);
    uint8_t block[8];
    if (op->codes == NVFP4_CODES_BF16_PAIRS) { /* each word back to the checkpoint's bytes (little-endian) */
      for (int h = 0; h < 2; h++) {
        uint32_t w = 0;
        for (int b = 0; b < 4; b++) w |= (uint32_t)bytes[4 * h + b] << (8 * b);
        w = nvfp4_pairs_unpack(w);
        for (int b = 0; b < 4; b++) block[4 * h + b] = (uint8_t)(w >> (8 * b));
      }
      bytes = block;
    }
    for (int j = 0; j < 8; j++) {
      uint8_t byte = bytes[j];
      out[kb * 16 + 2 * j] = lut[byte & 15] * s;   /* low nibble: even k */
      out[kb * 16 + 2 * j + 1] = lut[byte >> 4] * s;
    }
  }
}

/* Row `row` of batch l of a 16-bit activation operand (W4A16), as fp32. */
static void convert_row(const nvfp4_operand *op, int32_t type, int64_t k, int64_t l, int64_t row, float *out) {
  const uint8_t *bytes = op->data + l * op->batch_stride + row * op->row_stride;
  for (int64_t i = 0; i < k; i++) {
    uint16_t h;
    memcpy(&h, bytes + 2 * i, 2);
    out[i] = type == NVFP4_BF16 ? nvfp4_bf16_bits_to_float(h) : nvfp4_half_bits_to_float(h);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NVFP4_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define NVFP4_CPU_CLONES
#endif

/* 8 fp32 lanes: a GCC/Clang vector type, so the accumulators stay in registers
 * (an array of lanes went through the stack on every step). */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline float hsum8(v8f v) {
  float l[LANES];
  memcpy(l, &v, sizeof l);
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

/* out[i][j] = a_i . b_j for i, j < 2; k is a multiple of 16. */
NVFP4_CPU_CLONES static void dot2x2(const float *a0, const float *a1, const float *b0, const float *b1, int64_t k,
                                    float out[2][2]) {
  v8f s00 = {0}, s01 = {0}, s10 = {0}, s11 = {0};
  for (int64_t i = 0; i < k; i += LANES) {
    v8f x0 = load8(a0 + i), x1 = load8(a1 + i), y0 = load8(b0 + i), y1 = load8(b1 + i);
    s00 += x0 * y0;
    s01 += x0 * y1;
    s10 += x1 * y0;
    s11 += x1 * y1;
  }
  out[0][0] = hsum8(s00), out[0][1] = hsum8(s01), out[1][0] = hsum8(s10), out[1][1] = hsum8(s11);
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* Bias element n as fp32. */
static float bias_at(const nvfp4_matmul *p, int64_t n) {
  uint16_t h;
  if (p->bias_type == NVFP4_F32) return ((const float *)p->bias)[n];
  memcpy(&h, (const uint8_t *)p->bias + 2 * n, 2);
  return p->bias_type == NVFP4_BF16 ? nvfp4_bf16_bits_to_float(h) : nvfp4_half_bits_to_float(h);
}

nvfp4_status nvfp4_matmul_cpu(const nvfp4_matmul *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (p->k <= 0 || p->k % 16 || m0 < 0 || n0 < 0 || m1 > p->m || n1 > p->n) return NVFP4_ERR_INVALID;
  if (p->c_type != NVFP4_F16 && p->c_type != NVFP4_BF16) return NVFP4_ERR_INVALID;
  if (p->a_type != NVFP4_E2M1 && p->a_type != NVFP4_F16 && p->a_type != NVFP4_BF16) return NVFP4_ERR_INVALID;
  if (p->a.tile_rows || (p->b.tile_rows && p->b.tile_rows != 64 && p->b.tile_rows != NVFP4_TILE_ROWS) ||
      (p->b2.data && p->b2.tile_rows != p->b.tile_rows))
    return NVFP4_ERR_INVALID;
  if (m0 >= m1 || n0 >= n1 || p->batch <= 0) return NVFP4_OK;
  const int dual = p->b2.data != NULL;
  const int64_t k = p->k;
  float lut[16];
  for (uint32_t code = 0; code < 16; code++) lut[code] = nvfp4_e2m1_to_float(code);

  /* scratch: up to MB A rows, NB B rows and NB B2 rows, as many as the range has */
  const int64_t mb_max = m1 - m0 < MB ? m1 - m0 : MB, nb_max = n1 - n0 < NB ? n1 - n0 : NB;
  float *buf = (float *)malloc(sizeof(float) * (size_t)k * (size_t)(mb_max + nb_max * (dual ? 2 : 1)));
  if (!buf) return NVFP4_ERR_NO_MEMORY;
  float *a_rows = buf, *b_rows = buf + mb_max * k, *b2_rows = b_rows + nb_max * k;

  int64_t row_end = 0; /* grouped rows: the previous expert's end */
  for (int64_t l = 0; l < p->batch; l++) {
    uint16_t *c = (uint16_t *)p->c + l * p->c_batch_stride;
    /* the rows of batch l in the range: all of them, or expert l's */
    int64_t r0 = m0, r1 = m1;
    if (p->offs) {
      const int64_t start = row_end, end = p->offs[l] < start ? start : p->offs[l] > p->m ? p->m : p->offs[l];
      row_end = end;
      r0 = start > m0 ? start : m0, r1 = end < m1 ? end : m1;
    }
    const int64_t per = p->offs ? l : 0; /* grouped rows: one alpha per expert */
    const float alpha = p->alpha_ptr ? p->alpha_ptr[per] : p->alpha;
    const float alpha2 = !dual ? 0.0f : p->alpha2_ptr ? p->alpha2_ptr[per] : p->alpha2;
    for (int64_t mt = r0; mt < r1; mt += MB) {
      int64_t mb = r1 - mt < MB ? r1 - mt : MB;
      for (int64_t i = 0; i < mb; i++) {
        if (p->a_type == NVFP4_E2M1)
          dequant_row(&p->a, k, l, mt + i, lut, a_rows + i * k);
        else if (!p->a_index)
          convert_row(&p->a, p->a_type, k, l, mt + i, a_rows + i * k);
        else if (p->a_index[mt + i] >= 0 && p->a_index[mt + i] < p->a_rows) /* rows by token: nvfp4.h */
          convert_row(&p->a, p->a_type, k, l, p->a_index[mt + i], a_rows + i * k);
        else
          memset(a_rows + i * k, 0, sizeof(float) * (size_t)k);
      }
      for (int64_t nt = n0; nt < n1; nt += NB) {
        int64_t nb = n1 - nt < NB ? n1 - nt : NB;
        for (int64_t j = 0; j < nb; j++) {
          dequant_row(&p->b, k, l, nt + j, lut, b_rows + j * k);
          if (dual) dequant_row(&p->b2, k, l, nt + j, lut, b2_rows + j * k);
        }
        for (int64_t i = 0; i < mb; i += 2) {
          int rows = i + 1 < mb ? 2 : 1;
          const float *a0 = a_rows + i * k, *a1 = a_rows + (i + rows - 1) * k;
          for (int64_t j = 0; j < nb; j += 2) {
            int cols = j + 1 < nb ? 2 : 1;
            float acc[2][2], acc2[2][2];
            dot2x2(a0, a1, b_rows + j * k, b_rows + (j + cols - 1) * k, k, acc);
            if (dual) dot2x2(a0, a1, b2_rows + j * k, b2_rows + (j + cols - 1) * k, k, acc2);
            for (int r = 0; r < rows; r++)
              for (int s = 0; s < cols; s++) {
                /* the epilogue (nvfp4.h), each step rounded to fp32 (-std=c11 contracts no a * b + c) */
                const int64_t col = nt + j + s;
                float v = acc[r][s] * alpha;
                if (dual)
                  v = silu(v) * (acc2[r][s] * alpha2);
                else if (p->bias)
                  v = v + bias_at(p, col);
                c[(mt + i + r) * p->c_row_stride + col] =
                    p->c_type == NVFP4_BF16 ? nvfp4_float_to_bf16_bits(v) : nvfp4_float_to_half_bits(v);
              }
          }
        }
      }
    }
  }
  free(buf);
  return NVFP4_OK;
}
