/* A search step's most probable words from the logits x [N, V] (row stride ld) in two passes
 * over each row (see alignmt/decoding/top_words.py), where PyTorch ops take log-softmax's three
 * passes, a masking pass and a top-k that sorts as it scans:
 *   lse[n] = log sum_j exp x[n, j], over every word (the model's distribution);
 *   values[n, :k], words[n, :k]: the k largest x[n, j] - lse[n] over the words not ruled out,
 *     largest first, the lower word first on ties;
 *   eos[n] = x[n, eos_id] - lse[n] where eos_id >= 0 (the caller rules [EOS] out of the k
 *     where it ranks it apart).
 * The first pass finds the row's maximum and the k best a block at a time: only a block whose
 * maximum beats the k-th best so far is read word by word. The second sums the exponentials
 * of a row still in cache. Compiled with -ffast-math (so that expf vectorises), linked without
 * it. Logits of -inf (words a model gives no probability) never enter the k: a row with fewer
 * finite words than k gets -inf for word 0 in the places left. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>

enum { BLOCK = 64 };

static int is_ruled_out(int64_t j, const int64_t *ruled_out, int64_t R) {
  for (int64_t r = 0; r < R; ++r)
    if (ruled_out[r] == j) return 1;
  return 0;
}

/* e^x for x <= 0 (Cephes' expf: a degree-6 polynomial on [-ln 2 / 2, ln 2 / 2] times 2^n),
 * inlined so that the sum below vectorises without a call per vector; within a few ulp, and
 * 2^-126 below -87 (the sum, at least 1, does not see it), -inf included. */
static inline float exp_nonpositive(float x) {
  x = fmaxf(x, -87.0f);
  const float n = rintf(x * 1.44269504088896341f);
  float r = fmaf(n, -0.693359375f, x);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p, r * r, r) + 1.0f;
  union {
    int32_t i;
    float f;
  } scale = {.i = ((int32_t)n + 127) << 23};
  return p * scale.f;
}

/* Inserts (v, j) into the descending list (tv, tj) of k, whose last entry v beats. */
static void insert(float v, int64_t j, float *tv, int64_t *tj, int64_t k) {
  int64_t i = k - 1;
  for (; i > 0 && v > tv[i - 1]; --i) {
    tv[i] = tv[i - 1];
    tj[i] = tj[i - 1];
  }
  tv[i] = v;
  tj[i] = j;
}

/* Words j in [from, to) that beat the k-th best, in order, so that ties keep the lower word. */
static void scan(const float *x, int64_t from, int64_t to, const int64_t *ruled_out, int64_t R,
                 float *tv, int64_t *tj, int64_t k) {
  for (int64_t j = from; j < to; ++j)
    if (x[j] > tv[k - 1] && !is_ruled_out(j, ruled_out, R)) insert(x[j], j, tv, tj, k);
}

void top_words(const float *logits, int64_t ld, const int64_t *ruled_out, int64_t R,
               int64_t eos_id, int64_t k, float *lse, float *values, int64_t *words,
               float *eos, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * ld;
    float *tv = values + n * k;
    int64_t *tj = words + n * k;
    for (int64_t i = 0; i < k; ++i) {
      tv[i] = -FLT_MAX; /* beaten by any finite logit */
      tj[i] = -1;
    }
    float max = -FLT_MAX;
    int64_t j = 0;
    for (; j + BLOCK <= V; j += BLOCK) {
      float block = -FLT_MAX;
#pragma omp simd reduction(max : block)
      for (int64_t i = 0; i < BLOCK; ++i) block = fmaxf(block, x[j + i]);
      max = fmaxf(max, block);
      if (block > tv[k - 1]) scan(x, j, j + BLOCK, ruled_out, R, tv, tj, k);
    }
    for (int64_t i = j; i < V; ++i) max = fmaxf(max, x[i]);
    scan(x, j, V, ruled_out, R, tv, tj, k);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < V; ++i) sum += exp_nonpositive(x[i] - max);
    const float row_lse = max + logf(sum);
    lse[n] = row_lse;
    for (int64_t i = 0; i < k; ++i) {
      tv[i] = tj[i] < 0 ? -INFINITY : tv[i] - row_lse; /* fewer finite words than k */
      tj[i] = tj[i] < 0 ? 0 : tj[i];
    }
    if (eos_id >= 0) eos[n] = x[eos_id] - row_lse;
  }
}
