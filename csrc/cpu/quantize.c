/*
 * cpu/quantize.c - float32 values to NVFP4 on the CPU, in C.
 *
 * Rows [r0, r1) of every batch, 16 values at a time through
 * nvfp4_quantize_block (numerics.h), the definition every quantize kernel
 * shares; or, where q->values is set, the values the codes and scales stand
 * for (nvfp4.h). The torch binding converts float16 / bfloat16 input to float32
 * first (exact) and splits the rows across its thread pool. Memory-bound:
 * 4 bytes read and 0.5625 written per value.
 */
#include "../numerics.h"

/* Row r's 16-value block kb as quantized values (nvfp4.h), in values_type. */
static void write_values(const nvfp4_quantize *q, int64_t l, int64_t r, int64_t kb, const float *x, float g) {
  uint8_t codes[8];
  float v[16];
  nvfp4_dequantize_block(codes, nvfp4_quantize_block(x, g, codes), v);
  const int64_t at = l * q->values_batch_stride + r * q->values_row_stride + kb * 16;
  for (int i = 0; i < 16; i++) {
    if (q->values_type == NVFP4_F32) ((float *)q->values)[at + i] = v[i];
    else if (q->values_type == NVFP4_BF16) ((uint16_t *)q->values)[at + i] = nvfp4_float_to_bf16_bits(v[i]);
    else ((uint16_t *)q->values)[at + i] = nvfp4_float_to_half_bits(v[i]);
  }
}

nvfp4_status nvfp4_quantize_cpu(const nvfp4_quantize *q, int64_t r0, int64_t r1) {
  if (q->x_type != NVFP4_F32 || q->k <= 0 || q->k % 16) return NVFP4_ERR_INVALID;
  if (q->values && q->values_type != NVFP4_F32 && q->values_type != NVFP4_F16 && q->values_type != NVFP4_BF16)
    return NVFP4_ERR_INVALID;
  if ((q->row_index && (!q->values || q->batch != 1)) || (q->scale_index && !q->row_scale) ||
      (q->scale_offs && (!q->row_scale || q->scale_index || q->batch != 1 || q->scales < 1)))
    return NVFP4_ERR_INVALID;
  for (int64_t l = 0; l < q->batch; l++)
    for (int64_t r = r0; r < r1 && r < q->rows; r++)
      if ((q->row_index && (q->row_index[r] < 0 || q->row_index[r] >= q->x_rows)) ||
          (q->scale_index && (q->scale_index[l * q->rows + r] < 0 || q->scale_index[l * q->rows + r] >= q->scales)))
        return NVFP4_ERR_INVALID;
  const int64_t k_blocks = q->k / 16;
  const int64_t kb_pad = nvfp4_sf_grid_cols(q->sf_layout, k_blocks); /* the blocked layout's padding too */
  for (int64_t l = 0; l < q->batch; l++) {
    const float *xl = (const float *)q->x + l * q->x_batch_stride;
    uint8_t *sf = q->values ? NULL : q->sf + l * q->sf_batch_stride;
    for (int64_t r = r0; r < r1; r++) {
      const int64_t scale_at = q->scale_index && r < q->rows ? q->scale_index[l * q->rows + r]
                               : q->scale_offs ? nvfp4_expert_of_row(q->scale_offs, q->scales, r)
                                               : l * q->rows + r;
      const float g = q->row_scale ? (r < q->rows ? q->row_scale[scale_at] : 1.0f)
                                   : q->scale_ptr ? *q->scale_ptr : q->scale;
      if (q->values) {
        const int64_t xr = q->row_index && r < q->rows ? q->row_index[r] : r;
        if (r < q->rows)
          for (int64_t kb = 0; kb < k_blocks; kb++) write_values(q, l, r, kb, xl + xr * q->x_row_stride + kb * 16, g);
        continue;
      }
      for (int64_t kb = 0; kb < kb_pad; kb++) {
        uint8_t *sf_at = sf + nvfp4_sf_offset(q->sf_layout, q->sf_row_stride, k_blocks, r, kb);
        if (r >= q->rows || kb >= k_blocks) { /* padding */
          *sf_at = 0;
          continue;
        }
        uint8_t *codes = q->data + l * q->data_batch_stride + r * q->data_row_stride + kb * 8;
        *sf_at = (uint8_t)nvfp4_quantize_block(xl + r * q->x_row_stride + kb * 16, g, codes);
      }
    }
  }
  return NVFP4_OK;
}
