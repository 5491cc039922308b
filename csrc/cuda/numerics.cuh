/*
 * numerics.cuh - the device side of numerics.h: the fast decoders the CUDA
 * kernels run (e2m1 codes to int8 or to fp16 times their scale, e4m3 pairs
 * to fp16x2) and the quantize kernel's encoder. Each computes exactly what
 * numerics.h's scalar C functions define; tests/test_numerics.py and
 * tests/test_quantize.py check every code and scale byte through both.
 */
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

#include "../numerics.h"
#include "ptx_sm80.cuh"

/* prmt tables of the e2m1 magnitudes as int8 2*|value|, byte i = index i:
 * indices 0..3 = 2*{0,.5,1,1.5}, 4..7 = 2*{2,3,4,6}; and the same negated. */
#define NVFP4_E2M1_MAG_03 0x03020100u
#define NVFP4_E2M1_MAG_47 0x0C080604u
#define NVFP4_E2M1_NEG_03 0xFDFEFF00u
#define NVFP4_E2M1_NEG_47 0xF4F8FAFCu
/* The four in the order of nvfp4_e2m1x8_to_s8x8's table arguments. */
#define NVFP4_E2M1_S8_TABLES {NVFP4_E2M1_MAG_03, NVFP4_E2M1_MAG_47, NVFP4_E2M1_NEG_03, NVFP4_E2M1_NEG_47}

/* 8 e2m1 codes (code i at bits 4i..4i+3 of w) -> 8 int8 holding 2*value
 * (integers in [-12, 12]), codes 0..3 in lo, 4..7 in hi, byte i = code i.
 * Two byte-permutes look up the positive and the negated magnitude of each
 * code; a third picks one of the two per byte by the code's sign bit. 11
 * integer instructions per 8 codes, no table in memory. A hot loop passes the
 * four tables (NVFP4_E2M1_S8_TABLES) as values read from shared memory, as
 * mag_03 below. */
__device__ __forceinline__ void nvfp4_e2m1x8_to_s8x8(uint32_t w, uint32_t &lo, uint32_t &hi,
                                                     uint32_t pos_03 = NVFP4_E2M1_MAG_03,
                                                     uint32_t pos_47 = NVFP4_E2M1_MAG_47,
                                                     uint32_t neg_03 = NVFP4_E2M1_NEG_03,
                                                     uint32_t neg_47 = NVFP4_E2M1_NEG_47) {
  uint32_t idx = w & 0x77777777u;                        /* magnitude index per code  */
  uint32_t sel = ((w >> 1) & 0x44444444u) | 0x32103210u; /* byte i, +4 when negative  */
  lo = __byte_perm(__byte_perm(pos_03, pos_47, idx), __byte_perm(neg_03, neg_47, idx), sel);
  idx >>= 16;
  sel >>= 16;
  hi = __byte_perm(__byte_perm(pos_03, pos_47, idx), __byte_perm(neg_03, neg_47, idx), sel);
}

/* 8 e2m1 codes (code i at bits 4i..4i+3 of w) split by sign, as int8 holding
 * 2*|value|: pos gets the codes whose sign bit is clear (0 where it is set), neg
 * the others; byte i of *_lo is code i, of *_hi code 4+i. So for int8 b,
 *   sum_i 2a_i * b_i = dp4a(pos, b) - dp4a(neg, b).
 * One prmt per 4 codes and sign: with the raw code as selector nibble, a set
 * sign bit makes prmt replicate the table byte's sign bit, and every table
 * byte is < 0x80, so those codes read 0. Flipping the sign bits swaps the roles.
 * 7 instructions per 8 codes. */
__device__ __forceinline__ void nvfp4_e2m1x8_split(uint32_t w, uint32_t &pos_lo, uint32_t &pos_hi, uint32_t &neg_lo,
                                                   uint32_t &neg_hi, uint32_t mag_03 = NVFP4_E2M1_MAG_03) {
  const uint32_t MAG_47 = NVFP4_E2M1_MAG_47;
  const uint32_t wn = w ^ 0x88888888u;
  pos_lo = prmt(mag_03, MAG_47, w);
  neg_lo = prmt(mag_03, MAG_47, wn);
  pos_hi = prmt(mag_03, MAG_47, w >> 16);
  neg_hi = prmt(mag_03, MAG_47, wn >> 16);
}

/* The value to pass as mag_03 above from a hot loop: read it from shared memory
 * at a lane-dependent address (written with NVFP4_E2M1_MAG_03). Given the
 * literal, or any value ptxas can prove uniform, it keeps it in a uniform
 * register and copies it out before every prmt (16 extra instructions per 32
 * codes in sm_90a SASS; a shuffle of the literal is folded too). */

/* Two e4m3 bytes (low byte first) -> fp16x2 bits, exact (e4m3 fits in fp16),
 * NaN kept. One cvt on sm_89+. Below that (no e4m3 cvt; cuda_fp8.h's
 * fallback is ~80 instructions with branches a pair) each byte goes to the
 * high byte of its fp16 (prmt: 0, b0, 0, b1), its 7 magnitude bits shifted
 * down one into fp16's exponent and mantissa: value * 2^-8 exactly,
 * subnormals included (biases 7 and 15); magnitude 0x7F (e4m3's NaN) also
 * gets the exponent's top bit, an fp16 NaN; one multiply by 2^8 (0x5C00)
 * restores the value. 7 integer instructions and a multiply. */
__device__ __forceinline__ uint32_t nvfp4_e4m3x2_to_half2_bits(uint32_t two_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  const uint32_t y = prmt(two_bytes, 0u, 0x1404u);
  const uint32_t m = (y >> 1) & 0x3F803F80u;
  const uint32_t nan = (m + 0x00800080u) & 0x40004000u; /* 0x4000 where m is 0x3F80 */
  return mul_f16x2(m | nan | (y & 0x80008000u), 0x5C005C00u);
#else
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two_bytes, __NV_E4M3);
  return (uint32_t)h.x | ((uint32_t)h.y << 16);
#endif
}

/* Two e4m3 bytes (low byte first) -> two floats, exact, NaN kept. */
__device__ __forceinline__ float2 nvfp4_e4m3x2_to_float2(uint32_t two_bytes) {
  const uint32_t bits = nvfp4_e4m3x2_to_half2_bits(two_bytes);
  return __half22float2(*reinterpret_cast<const __half2 *>(&bits));
}

/* ---- fp16 decoder for the tensor-core kernels ---------------------------
 * Each code times its block's scale as one fp16, exact, by one of two ways
 * to the same products (NVFP4_TC_BITS picks, per target):
 * - sm_89+: a code's bits dropped into an e4m3 byte (s 0 0 e1 e0 m 0 0) read
 *   value * 2^-6 exactly, subnormal 0.5 included (e4m3's exponent bias is 7,
 *   e2m1's 1); the hardware cvt turns two such bytes into fp16x2, and one
 *   fp16 multiply by the scale gives value * scale * 2^-6: at most 6
 *   significant bits, the lowest no finer than 2^-16, magnitude at most 42.
 * - below sm_89 (no e4m3 cvt; cuda_fp8.h's fallback made the sm_80 code
 *   path ~10x slower): the bits dropped into the high
 *   byte of an fp16 (s 0 0 0 e1 e0 m 0) read value * 2^-14 exactly (fp16's
 *   bias 15), so the product is value * scale * 2^-14: a multiple of 2^-24
 *   (value * scale is one of 2^-10) no larger than 0.17, which fp16 holds
 *   exactly (its subnormals step by 2^-24).
 * Both: the same shifts and masks (5 operations in the source), then 4 cvt
 * or 4 prmt, and 4 multiplies per 8 codes. On an H100 the prmt way measured
 * 1-3% slower than the cvt on the M = 128 wgmma gemms and 1-4% faster on
 * large shapes and on the mma.sync kernel, so sm_89+ keeps the cvt.
 * A kernel multiplies its fp32 sums by NVFP4_TC_UNSCALE (2^12 or 2^28, the
 * square of the factor), a power of two, so the results are the unscaled
 * sums bit for bit (the smallest product, 2^-48, is far from fp32's
 * subnormals). NVFP4_TC_UNSCALE differs by target: device code only.
 * NVFP4_TC_UNSCALE_F16: the weights' factor alone (its square root), what the
 * sums carry where only the weights are decoded (16-bit activations). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#define NVFP4_TC_BITS 1
#define NVFP4_TC_UNSCALE 268435456.0f /* 2^28 */
#define NVFP4_TC_UNSCALE_F16 16384.0f /* 2^14 */
#else
#define NVFP4_TC_BITS 0
#define NVFP4_TC_UNSCALE 4096.0f /* 2^12 */
#define NVFP4_TC_UNSCALE_F16 64.0f /* 2^6 */
#endif
static_assert(NVFP4_TC_UNSCALE_F16 * NVFP4_TC_UNSCALE_F16 == NVFP4_TC_UNSCALE, "the weights' factor alone");

/* 8 e2m1 codes (code i at bits 4i..4i+3 of w) -> 4 fp16x2 of
 * value * scale * 2^-6 (2^-14 where NVFP4_TC_BITS), where s2 = {scale, scale},
 * low half first: h = {code 0, code 2}, {4, 6}, {1, 3}, {5, 7}. The even
 * codes (low nibbles) become the bytes of lo, the odd ones (whose sign
 * already sits at a byte's bit 7) those of hi; each cvt (or prmt) reads two
 * bytes of either. */
__device__ __forceinline__ void nvfp4_e2m1x8_to_half2x4(uint32_t w, uint32_t s2, uint32_t (&h)[4]) {
  uint32_t f[4];
#if NVFP4_TC_BITS
  const uint32_t lo = ((w << 1) & 0x0E0E0E0Eu) | ((w << 4) & 0x80808080u);
  const uint32_t hi = ((w >> 3) & 0x0E0E0E0Eu) | (w & 0x80808080u);
  f[0] = prmt(lo, 0u, 0x1404u), f[1] = prmt(lo, 0u, 0x3424u); /* bytes 0, 1 and 2, 3 as high bytes */
  f[2] = prmt(hi, 0u, 0x1404u), f[3] = prmt(hi, 0u, 0x3424u);
#else
  const uint32_t lo = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
  const uint32_t hi = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
  /* the halves as .b16 operands: ptxas reads them in place (R.H1) instead
   * of shifting the high ones down first */
  asm("{.reg .b16 a, b, c, d;\n\t"
      "mov.b32 {a, b}, %4;\n\t"
      "mov.b32 {c, d}, %5;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, a;\n\t"
      "cvt.rn.f16x2.e4m3x2 %1, b;\n\t"
      "cvt.rn.f16x2.e4m3x2 %2, c;\n\t"
      "cvt.rn.f16x2.e4m3x2 %3, d;\n\t}"
      : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
      : "r"(lo), "r"(hi));
#endif
#pragma unroll
  for (int i = 0; i < 4; i++) h[i] = mul_f16x2(f[i], s2);
}

/* The activations' side of the same K order: scale blocks t0 .. t0 + BPT - 1
 * of one row and K step of 64 as fp16, the words of matmul_sm90.cu's fp16
 * tile row (its shared-memory wgmma operand, built in shared memory by the
 * producer or in global memory by the pre-pass). sf: the blocks' scale bytes,
 * block t0 lowest; sc[q] = {scale of block t0 + q} twice. */
template <int BPT>
__device__ __forceinline__ void nvfp4_act_scales(uint32_t sf, uint32_t (&sc)[BPT]) {
  if constexpr (BPT == 1) {
    sc[0] = nvfp4_e4m3x2_to_half2_bits((sf & 0xFFu) * 0x101u);
  } else {
#pragma unroll
    for (int q = 0; q < BPT; q += 2) {
      const uint32_t s01 = nvfp4_e4m3x2_to_half2_bits((sf >> (8 * q)) & 0xFFFFu);
      sc[q] = prmt(s01, s01, 0x1010), sc[q + 1] = prmt(s01, s01, 0x3232);
    }
  }
}

/* w: the blocks' fp4 bytes as words in memory order (word 2q + h: bytes
 * 8(t0 + q) + 4h .. + 3, half h of block t0 + q). Half h (0, 1) of every
 * block: d[i][q] -> word t0 + q of the row's 16-byte chunk 2i + h (chunk c
 * holds fp16 positions 8c .. 8c + 7 of the 64, k16 step c / 2). */
template <int BPT>
__device__ __forceinline__ void nvfp4_act_half(const uint32_t (&w)[2 * BPT], int h, const uint32_t (&sc)[BPT],
                                               uint32_t (&d)[4][BPT]) {
#pragma unroll
  for (int q = 0; q < BPT; q++) {
    uint32_t v[4];
    nvfp4_e2m1x8_to_half2x4(w[2 * q + h], sc[q], v);
#pragma unroll
    for (int i = 0; i < 4; i++) d[i][q] = v[i];
  }
}

/* ---- bf16 weight fragments (W4A16 with bf16 activations on wgmma) --------
 * wgmma multiplies one type: bf16 activations need bf16 weight fragments.
 * Each code's bits placed straight into a bf16 (sign at bit 15, e1 e0 m at
 * bits 8..6: exponent field e1 e0, mantissa's top bit m) read value * 2^-126
 * exactly (code 0.5: the subnormal 2^-127); times its block's scale as a bf16
 * times 2^119 (<= 448 * 2^119 < bf16's max; >= 2^-9 * 2^119) the product is
 * value * scale * 2^-7: at most 6 significant bits, >= 2^-17, exact. The
 * kernel's sums carry 2^-7 (NVFP4_TC_UNSCALE_BF16 = 2^7, bf16 fragments times
 * 16-bit activations: one decoded operand). Pairs {i, i + 4} (not the fp16
 * decoder's): both codes of a pair sit 16 bits apart in the word, so one
 * multiply places both magnitudes and both signs, no prmt to gather them:
 * ~17 instructions per 8 codes with the scales' multiplies (sm_90a SASS). */
#define NVFP4_TC_UNSCALE_BF16 128.0f /* 2^7 */
/* codes i, i + 4 of w as bf16 bits: magnitude bits 4i..4i+2 to 6..8, sign 4i+3 to 15 (+ 16: code i + 4). The
 * pair's two nibbles alone (at bits 4j, 4j + 16, j = i % 2, after a shift of 8 for i >= 2), times 2^(6 - 4j) +
 * 2^(12 - 4j): the magnitude lands at 6..8 and the sign at 15 (copies at 9 and 12..14, masked off), no carries:
 * a lop3, a multiply and a lop3 */
template <int I>
__device__ __forceinline__ uint32_t nvfp4_bf16_pair(uint32_t w) {
  constexpr int J = I & 1;
  const uint32_t x = (I >= 2 ? w >> 8 : w) & (0x000F000Fu << (4 * J));
  return (x * (0x1040u >> (4 * J))) & 0x81C081C0u;
}
__device__ __forceinline__ uint32_t nvfp4_mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
  return d;
}
/* h = {code 0, code 4}, {1, 5}, {2, 6}, {3, 7} times s2 (bf16 scale * 2^119, twice) */
__device__ __forceinline__ void nvfp4_e2m1x8_to_bf162x4(uint32_t w, uint32_t s2, uint32_t (&h)[4]) {
  h[0] = nvfp4_mul_bf16x2(nvfp4_bf16_pair<0>(w), s2);
  h[1] = nvfp4_mul_bf16x2(nvfp4_bf16_pair<1>(w), s2);
  h[2] = nvfp4_mul_bf16x2(nvfp4_bf16_pair<2>(w), s2);
  h[3] = nvfp4_mul_bf16x2(nvfp4_bf16_pair<3>(w), s2);
}
/* h = {code 0, code 1}, {2, 3}, {4, 5}, {6, 7} times s2, from a word repacked
 * by nvfp4_pairs_pack (numerics.h, NVFP4_PAIR_BIT): pair 0 masked in place,
 * pairs 1 and 2 rotated left by 10 and 13 then masked, pair 3 masked, times
 * 2^2 + 2^7 + 2^12 (no carries), masked: 8 instructions a word, 4 multiplies
 * by the scale. The bits land as nvfp4_bf16_pair's, so the same exactness. */
__device__ __forceinline__ void nvfp4_e2m1x8_pairs_to_bf162x4(uint32_t w, uint32_t s2, uint32_t (&h)[4]) {
  constexpr uint32_t BITS = 0x81C081C0u; /* sign 15, magnitude 6..8 of each half */
  h[0] = nvfp4_mul_bf16x2(w & BITS, s2);
  h[1] = nvfp4_mul_bf16x2(__funnelshift_l(w, w, 10) & BITS, s2);
  h[2] = nvfp4_mul_bf16x2(__funnelshift_l(w, w, 13) & BITS, s2);
  h[3] = nvfp4_mul_bf16x2(((w & 0x001B001Bu) * 0x1084u) & BITS, s2);
}
/* ---- a block's values in natural order (quantized values, nvfp4.h) -----
 * 8 codes of w and their block's scale -> 4 words of 16-bit values,
 * v[j] = {code 2j, code 2j + 1} x scale, exactly nvfp4_dequantize_block's
 * (at most 6 significant bits, 2^-10 .. 2688; a NaN scale makes every value
 * NaN). bf16: nvfp4_bf16_pair's bits (value x 2^-126) times 2^126, then times
 * s2 = {scale, scale}; fp16 (NVFP4_TC_BITS 0, sm_89+): the decoder above
 * with s2 = {scale x 2^6} (value x 2^-6 x that). A prmt a pair to the natural
 * order: ~3 instructions a value against ~12 through floats. */
__device__ __forceinline__ void nvfp4_values_bf16x8(uint32_t w, uint32_t s2, uint32_t (&v)[4]) {
  constexpr uint32_t P126 = 0x7E807E80u; /* bf16 2^126, twice */
  const uint32_t p0 = nvfp4_bf16_pair<0>(w), p1 = nvfp4_bf16_pair<1>(w), p2 = nvfp4_bf16_pair<2>(w),
                 p3 = nvfp4_bf16_pair<3>(w); /* {code i, code i + 4} */
  v[0] = prmt(p0, p1, 0x5410u), v[1] = prmt(p2, p3, 0x5410u), v[2] = prmt(p0, p1, 0x7632u),
  v[3] = prmt(p2, p3, 0x7632u);
#pragma unroll
  for (int j = 0; j < 4; j++) v[j] = nvfp4_mul_bf16x2(nvfp4_mul_bf16x2(v[j], P126), s2);
}
#if !NVFP4_TC_BITS
__device__ __forceinline__ void nvfp4_values_f16x8(uint32_t w, uint32_t s2, uint32_t (&v)[4]) {
  uint32_t h[4]; /* {code 0, 2}, {4, 6}, {1, 3}, {5, 7} */
  nvfp4_e2m1x8_to_half2x4(w, s2, h);
  v[0] = prmt(h[0], h[2], 0x5410u), v[1] = prmt(h[0], h[2], 0x7632u), v[2] = prmt(h[1], h[3], 0x5410u),
  v[3] = prmt(h[1], h[3], 0x7632u);
}

/* A block's 16 quantized values from its codes (8 bytes as two words) and
 * scale byte: 16-bit words in memory order, bf16 or fp16 (the two above). */
template <bool BF16>
__device__ __forceinline__ void nvfp4_block_values16(const uint32_t (&w)[2], uint32_t sf, uint32_t (&v)[8]) {
  const float s = nvfp4_e4m3x2_to_float2(sf).x;
  if constexpr (BF16) {
    const uint32_t sb = __float_as_uint(s) >> 16; /* exact: an e4m3 value has 4 significant bits */
    nvfp4_values_bf16x8(w[0], sb | sb << 16, *reinterpret_cast<uint32_t(*)[4]>(v));
    nvfp4_values_bf16x8(w[1], sb | sb << 16, *reinterpret_cast<uint32_t(*)[4]>(v + 4));
  } else {
    const __half2 h = __float2half2_rn(s * NVFP4_TC_UNSCALE_F16);
    uint32_t s2;
    memcpy(&s2, &h, 4);
    nvfp4_values_f16x8(w[0], s2, *reinterpret_cast<uint32_t(*)[4]>(v));
    nvfp4_values_f16x8(w[1], s2, *reinterpret_cast<uint32_t(*)[4]>(v + 4));
  }
}
#endif

/* The 16 values of a block whose codes are repacked (NVFP4_CODES_BF16_PAIRS: two words) and its scale byte, bf16 in
 * memory order, as nvfp4_block_values16 gives the checkpoint's: each pair decoded to value x 2^-126 (multiplied
 * by 2^126, exact), then times the scale. */
__device__ __forceinline__ void nvfp4_pairs_block_values16(const uint32_t (&w)[2], uint32_t sf, uint32_t (&v)[8]) {
  constexpr uint32_t P126 = 0x7E807E80u; /* bf16 2^126, twice */
  const uint32_t sb = __float_as_uint(nvfp4_e4m3x2_to_float2(sf).x) >> 16, s2 = sb | sb << 16;
  nvfp4_e2m1x8_pairs_to_bf162x4(w[0], P126, *reinterpret_cast<uint32_t(*)[4]>(v));
  nvfp4_e2m1x8_pairs_to_bf162x4(w[1], P126, *reinterpret_cast<uint32_t(*)[4]>(v + 4));
#pragma unroll
  for (int j = 0; j < 8; j++) v[j] = nvfp4_mul_bf16x2(v[j], s2);
}

/* Two e4m3 scale bytes -> bf16x2 {s0 * 2^119, s1 * 2^119}, exact, NaN kept. */
__device__ __forceinline__ uint32_t nvfp4_e4m3x2_to_bf162_x2p119(uint32_t two_bytes) {
  const float2 f = nvfp4_e4m3x2_to_float2(two_bytes);
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(f.y * 0x1p119f), "f"(f.x * 0x1p119f));
  return d;
}
/* A kernel's AT (the activations' type, nvfp4.h) for bf16 activations with
 * weights repacked (NVFP4_CODES_BF16_PAIRS): decoded by
 * nvfp4_e2m1x8_pairs_to_bf162x4 into adjacent values. */
constexpr int NVFP4_BF16_PAIRS = 4;
constexpr bool nvfp4_at_bf16(int at) { return at == NVFP4_BF16 || at == NVFP4_BF16_PAIRS; }

/* A thread's register fragments of wgmma's A operand (16-bit, m64nNk16) for
 * one K step of 64 of two weight rows, g and g + 8 of its warp's 16: v0 and
 * v1 their 8 fp4 bytes that the thread owns (thread t of a quad: bytes
 * 8t..8t+7, one scale block), sb their two scale bytes (row g's low). f[s]:
 * the 4 registers of k16 step s, (g, 2t) (g+8, 2t) (g, 2t+8) (g+8, 2t+8),
 * in the K order of the decoder (matmul_sm90.cu, "K order"): AT = NVFP4_F16:
 * fp16 fragments (value * scale * 2^-6) in nvfp4_e2m1x8_to_half2x4's order;
 * NVFP4_BF16: bf16 ones (value * scale * 2^-7) in nvfp4_e2m1x8_to_bf162x4's;
 * NVFP4_BF16_PAIRS: bf16 ones of repacked words, step s = the block's values
 * 4s .. 4s + 3 (slots 2t, 2t + 1: 4s, 4s + 1; 2t + 8, 2t + 9: 4s + 2, 4s + 3),
 * so that each activation register pair is one natural 8-byte piece. */
template <int AT>
__device__ __forceinline__ void nvfp4_wgmma_a_fragments16(uint2 v0, uint2 v1, uint32_t sb, uint32_t (&f)[4][4]) {
  constexpr bool BF16 = nvfp4_at_bf16(AT);
  const uint32_t s01 = BF16 ? nvfp4_e4m3x2_to_bf162_x2p119(sb) : nvfp4_e4m3x2_to_half2_bits(sb);
  const uint32_t s0 = prmt(s01, s01, 0x1010), s1 = prmt(s01, s01, 0x3232);
  uint32_t h00[4], h01[4], h10[4], h11[4];
  auto decode = [](uint32_t w, uint32_t s2, uint32_t (&h)[4]) {
    if constexpr (AT == NVFP4_BF16_PAIRS) nvfp4_e2m1x8_pairs_to_bf162x4(w, s2, h);
    else if constexpr (BF16) nvfp4_e2m1x8_to_bf162x4(w, s2, h);
    else nvfp4_e2m1x8_to_half2x4(w, s2, h);
  };
  decode(v0.x, s0, h00);
  decode(v0.y, s0, h01);
  decode(v1.x, s1, h10);
  decode(v1.y, s1, h11);
  if constexpr (AT == NVFP4_BF16_PAIRS) {
#pragma unroll
    for (int s = 0; s < 2; s++) {
      f[s][0] = h00[2 * s], f[s][1] = h10[2 * s], f[s][2] = h00[2 * s + 1], f[s][3] = h10[2 * s + 1];
      f[s + 2][0] = h01[2 * s], f[s + 2][1] = h11[2 * s], f[s + 2][2] = h01[2 * s + 1], f[s + 2][3] = h11[2 * s + 1];
    }
  } else {
#pragma unroll
    for (int s = 0; s < 4; s++) {
      f[s][0] = h00[s];
      f[s][1] = h10[s];
      f[s][2] = h01[s];
      f[s][3] = h11[s];
    }
  }
}
__device__ __forceinline__ void nvfp4_wgmma_a_fragments(uint2 v0, uint2 v1, uint32_t sb, uint32_t (&f)[4][4]) {
  nvfp4_wgmma_a_fragments16<NVFP4_F16>(v0, v1, sb, f);
}

/* ---- 16-bit activations into the decoders' K orders -------------------------
 * The weight fragments hold, in k16 step s of a 64-wide K step, slots
 * (2t, 2t + 1) = values 16t + o_s + (0, 2), slots (2t + 8, 2t + 9) the same
 * + 8, o_s = 0, 4, 1, 5 (nvfp4_e2m1x8_to_half2x4's pairs). A 16-bit row's
 * natural 16-byte chunk n = 2t + h (values 16t + 8h .. + 7, words {x0, x1},
 * {x2, x3}, {x4, x5}, {x6, x7}) gives word t of tile chunks 2s + h: {x0, x2},
 * {x4, x6}, {x1, x3}, {x5, x7} for s = 0..3: one prmt per word (the pairing
 * w4a16.cu builds its B fragments with). d[s] = the word for chunk
 * nvfp4_act16_chunk(s, h) (2s + h). NVFP4_BF16 (nvfp4_e2m1x8_to_bf162x4's
 * pairs, o_s = 0, 1, 2, 3 and + 4 instead of + 2): {x0, x4}, {x1, x5}, {x2,
 * x6}, {x3, x7}. NVFP4_BF16_PAIRS (slots 2t, 2t + 1 of step s = values 16t +
 * 4s, + 1; 2t + 8, 2t + 9: 16t + 4s + 2, + 3): word i of chunk 2t + h as it
 * is, to tile chunk 4h + i. */
template <int AT>
__device__ __forceinline__ void nvfp4_act16_words(uint4 n, uint32_t (&d)[4]) {
  if constexpr (AT == NVFP4_BF16_PAIRS) {
    d[0] = n.x, d[1] = n.y, d[2] = n.z, d[3] = n.w;
  } else if constexpr (AT == NVFP4_BF16) {
    d[0] = prmt(n.x, n.z, 0x5410), d[1] = prmt(n.x, n.z, 0x7632);
    d[2] = prmt(n.y, n.w, 0x5410), d[3] = prmt(n.y, n.w, 0x7632);
  } else {
    d[0] = prmt(n.x, n.y, 0x5410), d[1] = prmt(n.z, n.w, 0x5410);
    d[2] = prmt(n.x, n.y, 0x7632), d[3] = prmt(n.z, n.w, 0x7632);
  }
}
/* the tile chunk that word i of a row's natural chunk 2t + h goes to (as word t) */
template <int AT>
__host__ __device__ constexpr int nvfp4_act16_chunk(int i, int h) {
  return AT == NVFP4_BF16_PAIRS ? 4 * h + i : 2 * i + h;
}
/* mma's B fragments of a thread's block (its natural chunks x: values 0..7,
 * y: 8..15) for k16 steps s = 0..3: b0[s] = tile chunk 2s's word, b1[s] =
 * chunk 2s + 1's. For repacked weights each pair {b0[s], b1[s]} is one
 * natural 8-byte piece (x's or y's words 2 (s % 2), + 1), no instruction. */
template <int AT>
__device__ __forceinline__ void nvfp4_act16_b(uint4 x, uint4 y, uint32_t (&b0)[4], uint32_t (&b1)[4]) {
  if constexpr (AT == NVFP4_BF16_PAIRS) {
    b0[0] = x.x, b1[0] = x.y, b0[1] = x.z, b1[1] = x.w;
    b0[2] = y.x, b1[2] = y.y, b0[3] = y.z, b1[3] = y.w;
  } else {
    nvfp4_act16_words<AT>(x, b0);
    nvfp4_act16_words<AT>(y, b1);
  }
}

/* ---- encoding ---------------------------------------------------------------
 * nvfp4_quantize_block (numerics.h) on the device: the same scale byte and
 * codes, by the hardware's e4m3 conversion (sm_89+) and fused multiply-adds
 * instead of compares. In three pieces, so that a block may be quantized by
 * one thread (nvfp4_quantize_block_device) or by four, each with 4 values and
 * the block's amax (nvfp4_quantize_scale_device, nvfp4_quantize4_device). */

/* The scale byte of a block whose largest magnitude is amax (NaN once any
 * value is), under global scale g, and its value s. */
__device__ __forceinline__ uint32_t nvfp4_quantize_scale_device(float amax, float g, float &s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  /* sm_89+: the hardware conversion, the same rounding as
   * nvfp4_float_to_e4m3 for this scale (nearest even, saturating at 448, NaN
   * to 0x7F) in one instruction instead of ~60 with branches; the e4m3 byte
   * is the low one of the pair (the high one encodes 0), decoded back by the
   * decoder above. */
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"((amax * g) / 6.0f));
  s = nvfp4_e4m3x2_to_float2(pair).x;
  return pair & 0xFFu;
#else
  const uint32_t sf = nvfp4_float_to_e4m3((amax * g) / 6.0f);
  s = nvfp4_e4m3_to_float(sf);
  return sf;
#endif
}

/* The magnitude codes of 4 values x (y = x * g, kept for their signs) in a
 * block of scale value s, as the bits of the float 2^23 + sum 16^i m_i.
 * The compares and selects of a plain encoder run on the ALU pipe, at half the
 * FMA pipe's rate, and bound the quantize kernel (H100: 1182 ALU instructions
 * a warp per 64 values, ~140 us at 7168 x 16384 against the measured 139).
 * Here each boundary test is one fused multiply-add, saturated to [0, 1]: with
 * B = 2^40, fma(a, -B, t * B) is (t - a) * B rounded once, >= 1 when a < t
 * (floats a != t differ by at least 2^-35 for t >= 2^-11, the smallest
 * boundary of a nonzero scale), <= 0 otherwise; an infinite a gives +-inf, a
 * NaN 0 (such blocks are fixed by the callers). Every t * B and each sum of
 * them below has at most 8 significant bits, so the selections as products of
 * 0 / 1 are exact. The sum starts at 2^23 + 6 (1 + 16 + 256 + 4096) and each
 * m_i - 6 = b0 - 4 n2 - 2 n1 is added by one multiply-add, every step an exact
 * integer below 2^24, so the bits are 0x4B000000 + the four nibbles. */
__device__ __forceinline__ uint32_t nvfp4_quantize_mags4(const float x[4], float g, float s, float y[4]) {
  const float B = 0x1p40f, sb = s * B;
  const float p3 = 1.75f * sb, p5 = 3.5f * sb, p15 = -2.75f * sb; /* inclusive boundaries t3, t5, t1 - t5 */
  /* strict boundaries: -t6, t6 - t2, t6 - t4, t2 + t4 - t0 - t6 */
  const float m6 = -5.0f * sb, e26 = 3.75f * sb, e46 = 2.5f * sb, e0 = -1.5f * sb;
  float acc = 8388608.0f + 6.0f * 4369.0f;
  for (int i = 0; i < 4; i++) {
    y[i] = x[i] * g;
    const float a = fabsf(y[i]);
    const float n2 = __saturatef(fmaf(a, -B, p3));               /* a < t3 */
    const float n1 = __saturatef(fmaf(a, -B, fmaf(n2, p15, p5))); /* a < (t1 or t5) */
    /* -t6, -t2, -t4 or -t0 by (n2, n1) = (0, 0), (1, 0), (0, 1), (1, 1) */
    const float last = fmaf(n1, fmaf(n2, e0, e46), fmaf(n2, e26, m6));
    const float b0 = __saturatef(fmaf(a, B, last)); /* a > that boundary */
    acc = fmaf(fmaf(n2, -4.0f, fmaf(n1, -2.0f, b0)), (float)(1 << (4 * i)), acc);
  }
  return nvfp4_float_bits(acc);
}

/* Bytes 3 of a and b (their signs), sign-replicated, in bytes 0 and 1. */
__device__ __forceinline__ uint32_t nvfp4_signs2(float a, float b) {
  return prmt(nvfp4_float_bits(a), nvfp4_float_bits(b), 0xFB);
}

/* Codes of a scale 0 (all 0) or NaN (the signs alone) block; w as it is otherwise. */
__device__ __forceinline__ uint32_t nvfp4_quantize_fix(uint32_t w, float s) {
  return s > 0.0f ? w : s == 0.0f ? 0u : w & 0x88888888u;
}

/* One block of 16 values: its scale byte, its codes in codes[8]. */
__device__ __forceinline__ uint32_t nvfp4_quantize_block_device(const float x[16], float g, uint8_t codes[8]) {
  float amax = 0.0f; /* NaN once any value is (fmaxf would drop it) */
  for (int i = 0; i < 16; i++) amax = nvfp4_fmax_nan(amax, fabsf(x[i]));
  float s;
  const uint32_t sf = nvfp4_quantize_scale_device(amax, g, s);
  /* Eight values a word: two magnitude sums; the signs by prmt, even values'
   * into one word and odd values' into another, masked to bits 4i + 3. */
  uint32_t w[2];
  for (int h = 0; h < 2; h++) {
    float y[8];
    const uint32_t q0 = nvfp4_quantize_mags4(x + 8 * h, g, s, y);
    const uint32_t q1 = nvfp4_quantize_mags4(x + 8 * h + 4, g, s, y + 4);
    /* two words' low halves in one */
    auto low_halves = [](uint32_t a, uint32_t b) { return prmt(a, b, 0x5410); };
    const uint32_t ev = low_halves(nvfp4_signs2(y[0], y[2]), nvfp4_signs2(y[4], y[6])); /* values 0, 2, 4, 6 */
    const uint32_t od = low_halves(nvfp4_signs2(y[1], y[3]), nvfp4_signs2(y[5], y[7])); /* values 1, 3, 5, 7 */
    /* (0x4B000000 << 16) vanishes mod 2^32: one subtraction for both halves */
    w[h] = nvfp4_quantize_fix(((q1 << 16) + q0 - 0x4B000000u) | (ev & 0x08080808u) | (od & 0x80808080u), s);
  }
  memcpy(codes, w, 8);
  return sf;
}

/* 4 values of a block of scale value s (nvfp4_quantize_scale_device of the
 * block's amax under g): their codes, value i at bits 4i..4i+3. */
__device__ __forceinline__ uint32_t nvfp4_quantize4_device(const float x[4], float g, float s) {
  float y[4];
  const uint32_t q = nvfp4_quantize_mags4(x, g, s, y);
  const uint32_t sign = (nvfp4_signs2(y[0], y[2]) & 0x0808u) | (nvfp4_signs2(y[1], y[3]) & 0x8080u);
  return nvfp4_quantize_fix((q - 0x4B000000u) | sign, s);
}
