/*
 * numerics.h - the one home of NVFP4 decoding, encoding (quantization) and
 * scale addressing.
 *
 * Shared by the C CPU kernels (plain C99) and every CUDA kernel. The scalar
 * functions are exact by construction and serve as the definition the fast
 * device decoders below are tested against (tests/test_numerics.py runs every
 * code through both); the encoder nvfp4_quantize_block is the one both
 * quantize kernels run, by compares on the host and by saturated fused
 * multiply-adds in device code (the same bytes; tests/test_quantize.py
 * checks both against nvfp4_kernels/reference.py byte for byte).
 *
 *   e2m1 (fp4): s e1 e0 m. Codes 0..7 = +{0, .5, 1, 1.5, 2, 3, 4, 6}, 8..15 the
 *               same negated (8 is -0). No inf, no NaN.
 *   e4m3 (fp8): s e3..e0 m2..m0, bias 7, subnormals m * 2^-9, 0x7F/0xFF NaN,
 *               no inf, max 448.
 * e2m1 * e4m3 has at most 6 significant bits and lies in [2^-10, 2688]: exact
 * in fp16, bf16 and fp32, so the kernels' products equal the reference's.
 */
#ifndef NVFP4_NUMERICS_H
#define NVFP4_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nvfp4.h"

#if defined(__CUDACC__)
#define NVFP4_HD static __host__ __device__ __forceinline__
#else
#define NVFP4_HD static inline
#endif

NVFP4_HD float nvfp4_bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

/* e2m1 code (low 4 bits) -> float, exact. */
NVFP4_HD float nvfp4_e2m1_to_float(uint32_t code) {
  uint32_t e = (code >> 1) & 3u, m = code & 1u;
  /* e > 0: 2^(e-1) * (1 + m/2) -> fp32 exponent field 126 + e; e == 0: m * 0.5. */
  uint32_t bits = e ? ((126u + e) << 23) | (m << 22) : (m ? 0x3F000000u : 0u);
  return nvfp4_bits_to_float(bits | ((code & 8u) << 28));
}

/* e4m3 byte -> float, exact (subnormals, signed zero, NaN). */
NVFP4_HD float nvfp4_e4m3_to_float(uint32_t byte) {
  uint32_t sign = (byte & 0x80u) << 24, e = (byte >> 3) & 15u, m = byte & 7u;
  if (e == 15u && m == 7u) return nvfp4_bits_to_float(0x7FC00000u | sign);
  if (e == 0u) { /* m * 2^-9: exact, and m * 2^-9 is the fp32 value itself */
    float v = (float)m * 0.001953125f;
    return sign ? -v : v;
  }
  return nvfp4_bits_to_float(sign | ((e + 120u) << 23) | (m << 20));
}

/* Byte offset of scale (row, kb) of one batch: the single definition of both
 * layouts (nvfp4.h). k_blocks = K / 16, the scale columns of a row.
 * In both layouts the offset separates: offset(row, kb) = offset(row, 0) +
 * offset(0, kb), so kernels can keep a row's base and add the column part. */
NVFP4_HD int64_t nvfp4_sf_offset(int32_t layout, int64_t row_stride, int64_t k_blocks, int64_t row, int64_t kb) {
  if (layout == NVFP4_SF_LINEAR) return row * row_stride + kb;
  int64_t tiles_k = (k_blocks + 3) >> 2;              /* 4 scale columns per atom  */
  int64_t atom = (row >> 7) * tiles_k + (kb >> 2);    /* 128 rows per atom         */
  return (atom << 9) + ((row & 31) << 4) + (((row >> 5) & 3) << 2) + (kb & 3);
}

/* The scale grid a layout stores for `rows` rows of k_blocks scales: the
 * blocked layout pads rows to a multiple of 128 and columns to a multiple of
 * 4 (never read; the quantize kernels write the padding as 0). A batch holds
 * nvfp4_sf_grid_rows * nvfp4_sf_grid_cols bytes in either layout. */
NVFP4_HD int64_t nvfp4_sf_grid_rows(int32_t layout, int64_t rows) {
  return layout == NVFP4_SF_LINEAR ? rows : (rows + 127) / 128 * 128;
}
NVFP4_HD int64_t nvfp4_sf_grid_cols(int32_t layout, int64_t k_blocks) {
  return layout == NVFP4_SF_LINEAR ? k_blocks : (k_blocks + 3) / 4 * 4;
}

/* Row r's global scale among rows grouped by expert (nvfp4_quantize.scale_offs; offs: the experts' cumulative row
 * ends, non-decreasing): the number of experts whose rows end at or before r (the first whose rows end past it),
 * the last where all do. quantize.cu counts the same by a warp. */
NVFP4_HD int64_t nvfp4_expert_of_row(const int32_t *offs, int64_t experts, int64_t r) {
  int64_t n = 0;
  for (int64_t e = 0; e < experts; e++) n += offs[e] <= r;
  return n < experts ? n : experts - 1;
}

/* Byte offset of code byte kbyte (codes 2 kbyte, 2 kbyte + 1) of row `row` of one batch of an operand: row_stride
 * apart, or laid out by tile (nvfp4.h). Separable as nvfp4_sf_offset: offset(row, 0) + offset(0, kbyte). */
NVFP4_HD int64_t nvfp4_codes_offset(const nvfp4_operand *op, int64_t row, int64_t kbyte) {
  if (!op->tile_rows) return row * op->row_stride + kbyte;
  const int shift = op->tile_rows == 64 ? 6 : 7; /* 64 or NVFP4_TILE_ROWS rows a tile */
  return (row >> shift) * op->row_stride + (row & (op->tile_rows - 1)) * 32 + (kbyte >> 5) * NVFP4_TILE_STEP +
         (kbyte & 31);
}

/* Byte offset of scale (row, kb) of one batch of an operand: its layout's, or laid out by tile. Separable. */
NVFP4_HD int64_t nvfp4_operand_sf_offset(const nvfp4_operand *op, int64_t k_blocks, int64_t row, int64_t kb) {
  if (!op->tile_rows) return nvfp4_sf_offset(op->sf_layout, op->sf_row_stride, k_blocks, row, kb);
  const int shift = op->tile_rows == 64 ? 6 : 7;
  return (row >> shift) * op->sf_row_stride + (row & (op->tile_rows - 1)) * 16 + (kb >> 4) * NVFP4_TILE_SF_GROUP +
         (kb & 15);
}

/* Scale (row, kb) of batch l of an operand, as a float. */
NVFP4_HD float nvfp4_scale(const nvfp4_operand *op, int64_t k_blocks, int64_t l, int64_t row, int64_t kb) {
  const uint8_t *sf = op->sf + l * op->sf_batch_stride;
  return nvfp4_e4m3_to_float(sf[nvfp4_operand_sf_offset(op, k_blocks, row, kb)]);
}

/* ---- encoding (quantization) ----------------------------------------------
 * The inverse direction, used by every quantize kernel (csrc/cpu/quantize.c,
 * csrc/cuda/quantize.cu) and defined in nvfp4_kernels/reference.py. */

/* f's bits (memcpy: a register move in device code too) */
NVFP4_HD uint32_t nvfp4_float_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

/* max(a, b), NaN if either is (one max.NaN on sm_80+, where a compare and a
 * select per value cost the quantize kernel 9% on an H100) */
NVFP4_HD float nvfp4_fmax_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  if (a != a) return a;
  return b > a || b != b ? b : a;
#endif
}

/* float -> e4m3 byte, round to nearest even, saturating: |f| > 448 gives
 * +-448 (0x7E / 0xFE), NaN gives 0x7F with f's sign. Subnormals (below 2^-6)
 * are multiples of 2^-9, rounded the same way. */
NVFP4_HD uint32_t nvfp4_float_to_e4m3(float f) {
  uint32_t x = nvfp4_float_bits(f), sign = (x >> 24) & 0x80u;
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return sign | 0x7Fu;        /* NaN */
  if (x > 0x43E80000u) return sign | 0x7Eu;        /* above 464 (the tie of 448 and 480, which rounds to even 448) */
  if (x < 0x3C800000u) {                           /* below 2^-6: m * 2^-9, m = 0..8 (8: the smallest normal) */
    float m = rintf(nvfp4_bits_to_float(x) * 512.0f); /* exact scaling; rintf rounds half to even */
    return sign | (uint32_t)m;
  }
  /* normal: 23 mantissa bits to 3, half to even, carrying into the exponent;
   * then the exponent rebiased from 127 to 7 */
  x += 0x7FFFFu + ((x >> 20) & 1u);
  return sign | ((x >> 20) - (120u << 3));
}

/* One block of 16 values (x times the global scale g) to NVFP4:
 *   scale  = e4m3(fp32(fp32(amax(|x|) * g) / 6))     (nvfp4_float_to_e4m3)
 *   code_i = e2m1 of y_i / scale, y_i = fp32(x_i * g)
 * where the e2m1 rounding is to nearest even of the exact quotient, saturating
 * to +-6, with y's sign (a negative y that rounds to 0 gives -0, code 8); a
 * block whose scale is 0 gets codes 0. The quotient is never formed: each
 * rounding boundary t (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) times the scale is
 * exact in fp32 (at most 3 + 4 significant bits, >= 2^-11), so |y| > t * scale
 * (>= where the tie goes up to the even code: 0.75 -> 1, 1.75 -> 2, 3.5 -> 4)
 * decides it exactly, without a division per value. codes[j] holds values 2j
 * (low nibble) and 2j + 1. Decoding gives back x * g to within e2m1's
 * precision; divide by g (a gemm's alpha) to undo it. Non-finite input: a NaN
 * makes its block's scale NaN (0x7F; the block decodes to NaN), +-inf
 * saturates (scale 448, code +-6). */
NVFP4_HD uint32_t nvfp4_quantize_block(const float x[16], float g, uint8_t codes[8]) {
  float amax = 0.0f; /* NaN once any value is (fmaxf would drop it) */
  for (int i = 0; i < 16; i++) amax = nvfp4_fmax_nan(amax, fabsf(x[i]));
  const uint32_t sf = nvfp4_float_to_e4m3((amax * g) / 6.0f);
  const float s = nvfp4_e4m3_to_float(sf);
  const float t0 = 0.25f * s, t1 = 0.75f * s, t2 = 1.25f * s, t3 = 1.75f * s, t4 = 2.5f * s, t5 = 3.5f * s,
              t6 = 5.0f * s;
  for (int j = 0; j < 8; j++) {
    uint32_t byte = 0;
    for (int h = 0; h < 2; h++) {
      const float y = x[2 * j + h] * g, a = fabsf(y);
      /* the magnitude code, a binary search over the boundaries: bit 2 by t3,
       * bit 1 by t5 or t1, bit 0 by t6, t4, t2 or t0 */
      const int b2 = a >= t3, b1 = a >= (b2 ? t5 : t1);
      const float last = b2 ? (b1 ? t6 : t4) : (b1 ? t2 : t0);
      const uint32_t m = (uint32_t)(4 * b2 + 2 * b1 + (a > last));
      const uint32_t code = s != 0.0f ? m | ((nvfp4_float_bits(y) >> 28) & 8u) : 0u;
      byte |= code << (4 * h);
    }
    codes[j] = (uint8_t)byte;
  }
  return sf;
}

/* The 16 values a block's codes (as nvfp4_quantize_block writes them) and
 * scale byte stand for, e2m1(code) x e4m3(scale): exact in fp32 (at most 6
 * significant bits). */
NVFP4_HD void nvfp4_dequantize_block(const uint8_t codes[8], uint32_t sf, float v[16]) {
  const float s = nvfp4_e4m3_to_float(sf);
  for (int i = 0; i < 16; i++) v[i] = nvfp4_e2m1_to_float((codes[i / 2] >> (4 * (i % 2))) & 15u) * s;
}

/* ---- weights repacked for bf16 (NVFP4_CODES_BF16_PAIRS, nvfp4.h) ----------
 * A word of 8 codes (code i at bits 4i..4i+3) rewritten so that pair p =
 * codes 2p (bits j of it, j = 0..3: m, e0, e1, sign) and 2p + 1 (j = 4..7)
 * sits at NVFP4_PAIR_BIT[p][j]: pair 0 at the bits of a bf16x2 (each code's
 * m, e0, e1 at 6..8 and sign at 15 of its half: numerics.cuh), pairs 1 and 2
 * that rotated right by 10 and 13, pair 3 where one multiply by 2^2 + 2^7 +
 * 2^12 puts them without carries (dev/pack_search.py found the layout):
 * numerics.cuh's nvfp4_e2m1x8_pairs_to_bf162x4 decodes a word in 8
 * instructions, the checkpoint's in 13. A permutation of the word's bits. */
static const uint8_t NVFP4_PAIR_BIT[4][8] = {
    {6, 7, 8, 15, 22, 23, 24, 31}, {28, 29, 30, 5, 12, 13, 14, 21},
    {25, 26, 27, 2, 9, 10, 11, 18}, {4, 0, 1, 3, 20, 16, 17, 19}};

/* a checkpoint word -> its repacked word */
static inline uint32_t nvfp4_pairs_pack(uint32_t w) {
  uint32_t out = 0;
  for (int p = 0; p < 4; p++)
    for (int j = 0; j < 8; j++) out |= ((w >> (8 * p + j)) & 1u) << NVFP4_PAIR_BIT[p][j];
  return out;
}

/* a repacked word -> the checkpoint's; inverse of nvfp4_pairs_pack */
static inline uint32_t nvfp4_pairs_unpack(uint32_t w) {
  uint32_t out = 0;
  for (int p = 0; p < 4; p++)
    for (int j = 0; j < 8; j++) out |= ((w >> NVFP4_PAIR_BIT[p][j]) & 1u) << (8 * p + j);
  return out;
}


/* ---- 16-bit floats on the host (the CPU kernels; device code uses
 * cuda_fp16.h / cuda_bf16.h) ------------------------------------------------ */

/* fp16 bits -> float, exact. */
static inline float nvfp4_half_bits_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3FFu;
  if (e == 0) { /* zero or subnormal: m * 2^-24 */
    float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return nvfp4_bits_to_float(sign | 0x7F800000u | (m << 13)); /* inf, NaN */
  return nvfp4_bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* bf16 bits -> float, exact. */
static inline float nvfp4_bf16_bits_to_float(uint16_t h) { return nvfp4_bits_to_float((uint32_t)h << 16); }

/* fp32 -> bf16 bits, round to nearest even, NaN kept (quiet). */
static inline uint16_t nvfp4_float_to_bf16_bits(float f) {
  uint32_t x = nvfp4_float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* fp32 -> fp16 bits, round to nearest even, overflow to inf, NaN kept. */
static inline uint16_t nvfp4_float_to_half_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu)); /* NaN */
  if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520: inf */
  if (ax < 0x38800000u) { /* below 2^-14: fp16 subnormal (or zero) */
    if (ax < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal */
    uint32_t e = ax >> 23, mant = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e; /* value = mant * 2^(e-150), want units of 2^-24 */
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t q = ((ax >> 13) - (112u << 10)), rem = ax & 0x1FFFu; /* rebias 127 -> 15 */
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

#endif /* NVFP4_NUMERICS_H */
