/*
 * moe.c - a mixture of experts' token-expert pairs grouped by expert and their
 * weighted sum back, on the CPU (nvfp4.h: nvfp4_moe_sort, nvfp4_moe_combine).
 * The sort counts each expert's pairs, turns the counts into first rows, then
 * places the pairs in pair order, each at its expert's next row (stable); the
 * first rows have then become the row ends, offs. The routing ranks each
 * token's experts by repeated search for the best still open (nvfp4_moe_route).
 */
#include <math.h>
#include <string.h>

#include "../nvfp4.h"
#include "../numerics.h"

static int64_t moe_id(const nvfp4_moe_sort *s, int64_t p) {
  return s->ids64 ? ((const int64_t *)s->ids)[p] : (int64_t)((const int32_t *)s->ids)[p];
}

nvfp4_status nvfp4_moe_sort_cpu(const nvfp4_moe_sort *s) {
  if (s->pairs < 0 || s->pairs > INT32_MAX || s->top_k <= 0 || s->pairs % s->top_k || s->experts <= 0 ||
      s->experts > NVFP4_MOE_MAX_EXPERTS)
    return NVFP4_ERR_INVALID;
  for (int64_t p = 0; p < s->pairs; p++) {
    const int64_t e = moe_id(s, p);
    if (e < 0 || e >= s->experts) return NVFP4_ERR_INVALID;
  }
  int32_t *next = s->offs; /* counts, then each expert's next row, finally its row end */
  memset(next, 0, (size_t)s->experts * sizeof *next);
  for (int64_t p = 0; p < s->pairs; p++) next[moe_id(s, p)]++;
  int32_t first = 0;
  for (int64_t e = 0; e < s->experts; e++) {
    const int32_t n = next[e];
    next[e] = first;
    first += n;
  }
  for (int64_t p = 0; p < s->pairs; p++) {
    const int64_t e = moe_id(s, p);
    const int32_t r = next[e]++;
    s->token_of_row[r] = (int32_t)(p / s->top_k);
    s->expert_of_row[r] = (int32_t)e;
    s->row_of_pair[p] = r;
  }
  return NVFP4_OK;
}

static float moe_load(const void *v, int32_t type, int64_t i) {
  if (type == NVFP4_F32) return ((const float *)v)[i];
  const uint16_t h = ((const uint16_t *)v)[i];
  return type == NVFP4_BF16 ? nvfp4_bf16_bits_to_float(h) : nvfp4_half_bits_to_float(h);
}

static int moe_float_type(int32_t t) { return t == NVFP4_F32 || t == NVFP4_F16 || t == NVFP4_BF16; }

nvfp4_status nvfp4_moe_combine_cpu(const nvfp4_moe_combine *c, int64_t t0, int64_t t1) {
  if (c->tokens < 0 || c->top_k <= 0 || c->hidden < 0 || c->rows < 0 || !moe_float_type(c->y_type) ||
      !moe_float_type(c->weights_type) || t0 < 0 || t1 > c->tokens)
    return NVFP4_ERR_INVALID;
  for (int64_t t = t0; t < t1; t++) {
    for (int64_t j = 0; j < c->top_k; j++) {
      const int32_t r = c->row_of_pair[t * c->top_k + j];
      if (r >= c->rows) return NVFP4_ERR_INVALID;
    }
    for (int64_t h = 0; h < c->hidden; h++) {
      float sum = 0.0f;
      for (int64_t j = 0; j < c->top_k; j++) {
        const int32_t r = c->row_of_pair[t * c->top_k + j];
        if (r < 0) continue;
        const float prod = moe_load(c->weights, c->weights_type, t * c->top_k + j) *
                           moe_load(c->y, c->y_type, (int64_t)r * c->hidden + h);
        sum += prod;
      }
      const int64_t o = t * c->hidden + h;
      if (c->y_type == NVFP4_F32)
        ((float *)c->out)[o] = sum;
      else
        ((uint16_t *)c->out)[o] =
            c->y_type == NVFP4_BF16 ? nvfp4_float_to_bf16_bits(sum) : nvfp4_float_to_half_bits(sum);
    }
  }
  return NVFP4_OK;
}

/* Ranking (nvfp4.h): a before b where a is larger, or equal with the lower
 * index; NaN after every number. */
static int moe_ranks_before(float a, int64_t ia, float b, int64_t ib) {
  if (a != a) return b != b && ia < ib;
  if (b != b) return 1;
  return a > b || (a == b && ia < ib);
}

nvfp4_status nvfp4_moe_route_cpu(const nvfp4_moe_route *r, int64_t t0, int64_t t1) {
  if (!nvfp4_moe_route_ok(r) || t0 < 0 || t1 > r->tokens) return NVFP4_ERR_INVALID;
  const int64_t e_n = r->experts, k = r->top_k, run = e_n / r->groups;
  float score[NVFP4_MOE_ROUTE_MAX_EXPERTS]; /* what ranks an expert */
  float value[NVFP4_MOE_ROUTE_MAX_EXPERTS]; /* what its weight is   */
  unsigned char open[NVFP4_MOE_ROUTE_MAX_EXPERTS];
  for (int64_t t = t0; t < t1; t++) {
    float hi = -INFINITY;
    for (int64_t e = 0; e < e_n; e++) {
      const float x = moe_load(r->logits, r->logits_type, t * e_n + e);
      if (r->sigmoid) {
        value[e] = 1.0f / (1.0f + expf(-x));
        score[e] = r->bias ? value[e] + r->bias[e] : value[e];
      } else {
        score[e] = value[e] = x;
        hi = x > hi ? x : hi; /* fmaxf would skip NaN the same way; the GPU's max.f32 too */
      }
      open[e] = 1;
    }
    if (!r->sigmoid) {
      float z = 0.0f;
      for (int64_t e = 0; e < e_n; e++) z += expf(value[e] - hi);
      for (int64_t e = 0; e < e_n; e++) value[e] = expf(value[e] - hi) / z;
    }
    if (r->groups > 1) { /* runs scored by their two best; the top_groups best stay open */
      float run_score[32];
      unsigned char kept[32] = {0};
      for (int64_t g = 0; g < r->groups; g++) {
        int64_t b1 = -1, b2 = -1;
        for (int64_t e = g * run; e < (g + 1) * run; e++) {
          if (b1 < 0 || moe_ranks_before(score[e], e, score[b1], b1)) b2 = b1, b1 = e;
          else if (b2 < 0 || moe_ranks_before(score[e], e, score[b2], b2)) b2 = e;
        }
        run_score[g] = b2 < 0 ? score[b1] : score[b1] + score[b2];
      }
      for (int64_t j = 0; j < r->top_groups; j++) {
        int64_t best = -1;
        for (int64_t g = 0; g < r->groups; g++)
          if (!kept[g] && (best < 0 || moe_ranks_before(run_score[g], g, run_score[best], best))) best = g;
        kept[best] = 1;
      }
      for (int64_t e = 0; e < e_n; e++) open[e] = kept[e / run];
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < k; j++) {
      int64_t best = -1;
      for (int64_t e = 0; e < e_n; e++)
        if (open[e] && (best < 0 || moe_ranks_before(score[e], e, score[best], best))) best = e;
      open[best] = 0;
      r->ids[t * k + j] = (int32_t)best;
      r->weights[t * k + j] = value[best];
      sum += value[best];
    }
    if (r->renormalize && r->sigmoid) sum += 1e-20f;
    for (int64_t j = 0; j < k; j++) {
      float w = r->weights[t * k + j];
      if (r->renormalize) w /= sum;
      r->weights[t * k + j] = r->scale == 1.0f ? w : w * r->scale;
    }
  }
  return NVFP4_OK;
}
