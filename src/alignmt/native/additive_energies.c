/* The [B, S, A] part of additive attention for one decoder step, in one pass over the keys
 * each way (see alignmt/models/native_energies.py), with p = 2 (k[b,s] + W_cov c[b,s]) + q2[b]
 * (c the step's coverage, n units per source word; n = 0 without coverage):
 *   forward:  e[b,s] = sum_a 2 v_a sigmoid(p_a)
 *   backward: with g = dE/de[b,s], s = that sigmoid and d_a = 4 v_a s (1 - s) g,
 *             d_keys[b,s,a] += d_a,  dq[b,a] = sum_s d_a,  dv_rows[b,a] = sum_s s g (the
 *             caller sums the rows),  d_cov[b,s,j] += sum_a W_cov[a,j] d_a,
 *             d_w_cov_t[j,a] += sum_{b,s} c[b,s,j] d_a.
 * and the weights' gradient from the context's, d_alpha[b,s] = sum_d values[b,s,d] d_c[b,d],
 * without the [B, S, D] product PyTorch would write and sum.
 * Compiled with -ffast-math (so that expf vectorises) but linked without it, which would
 * otherwise set flush-to-zero for the whole process. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float sigmoid(float x) {
  x = fminf(fmaxf(x, -80.0f), 80.0f); /* the same value in float32; no overflow in expf */
  return 1.0f / (1.0f + expf(-x));
}

/* p[a] = 2 (k[a] + sum_j c[j] w_t[j, a]) + q[a] for one source word. */
static void preactivations(const float *k, const float *q, const float *c, const float *w_t,
                           int64_t n, int64_t A, float *p) {
#pragma omp simd
  for (int64_t a = 0; a < A; ++a) p[a] = 2.0f * k[a] + q[a];
  for (int64_t j = 0; j < n; ++j) {
    const float cj = 2.0f * c[j], *w = w_t + j * A;
#pragma omp simd
    for (int64_t a = 0; a < A; ++a) p[a] += cj * w[a];
  }
}

/* Returns sum_a w[a] d[a] and adds c d to y, in one pass: the sum in LANES independent
 * partial sums, since one would wait on its own latency every step. */
static float dot_and_axpy(const float *w, const float *d, float c, float *y, int64_t A) {
  enum { LANES = 32 };
  float partial[LANES] = {0.0f}, sum = 0.0f;
  int64_t a = 0;
  for (; a + LANES <= A; a += LANES) {
#pragma omp simd
    for (int i = 0; i < LANES; ++i) {
      partial[i] += w[a + i] * d[a + i];
      y[a + i] += c * d[a + i];
    }
  }
  for (; a < A; ++a) {
    sum += w[a] * d[a];
    y[a] += c * d[a];
  }
  for (int i = 0; i < LANES; ++i) sum += partial[i];
  return sum;
}

void additive_energies(const float *keys, const float *q2, const float *two_v,
                       const float *cov, const float *w_cov_t, float *energy, int64_t B,
                       int64_t S, int64_t A, int64_t n) {
#pragma omp parallel
  {
    float *p = malloc(A * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < B * S; ++row) {
      preactivations(keys + row * A, q2 + (row / S) * A, n ? cov + row * n : NULL, w_cov_t, n, A,
                     p);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t a = 0; a < A; ++a) sum += two_v[a] * sigmoid(p[a]);
      energy[row] = sum;
    }
    free(p);
  }
}

/* A search step's energies for T queries per batch row (greedy: 1, a beam: its hypotheses),
 * without coverage: e[b,t,s] = sum_a v[a] tanh(k[b,s,a] + q[b,t,a]), tanh as
 * 2 sigmoid(2x) - 1, each key row read once for its T queries. */
void query_energies(const float *keys, const float *queries, const float *v, float *energy,
                    int64_t B, int64_t T, int64_t S, int64_t A) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < B * S; ++row) {
    const int64_t b = row / S, s = row % S;
    const float *k = keys + row * A;
    for (int64_t t = 0; t < T; ++t) {
      const float *q = queries + (b * T + t) * A;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t a = 0; a < A; ++a)
        sum += v[a] * (2.0f * sigmoid(2.0f * (k[a] + q[a])) - 1.0f);
      energy[(b * T + t) * S + s] = sum;
    }
  }
}

void additive_energies_backward(const float *keys, const float *q2, const float *four_v,
                                const float *cov, const float *w_cov_t,
                                const float *d_energy, float *d_keys, float *dq,
                                float *dv_rows, float *d_cov, float *d_w_cov_t, int64_t B,
                                int64_t S, int64_t A, int64_t n) {
  /* d W_cov summed per thread, then over threads in a fixed order: the same bits every run */
  const int threads = n ? omp_get_max_threads() : 0;
  float *partial = n ? calloc((size_t)threads * n * A, sizeof(float)) : NULL;
#pragma omp parallel
  {
    float *p = malloc(A * sizeof(float));
    float *dw = n ? partial + (int64_t)omp_get_thread_num() * n * A : NULL;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      const float *q = q2 + b * A;
      float *dq_b = dq + b * A, *dv_b = dv_rows + b * A;
      memset(dq_b, 0, A * sizeof(float));
      memset(dv_b, 0, A * sizeof(float));
      for (int64_t s = 0; s < S; ++s) {
        const int64_t row = b * S + s;
        const float g = d_energy[row];
        if (g == 0.0f) continue; /* masked positions: every term below is zero */
        preactivations(keys + row * A, q, n ? cov + row * n : NULL, w_cov_t, n, A, p);
        float *dk = d_keys + row * A;
#pragma omp simd
        for (int64_t a = 0; a < A; ++a) {
          const float sg = sigmoid(p[a]);
          const float d = four_v[a] * sg * (1.0f - sg) * g;
          dv_b[a] += sg * g;
          dk[a] += d;
          dq_b[a] += d;
          p[a] = d;
        }
        for (int64_t j = 0; j < n; ++j) {
          const float cj = cov[row * n + j], *w = w_cov_t + j * A;
          float *dw_j = dw + j * A;
          d_cov[row * n + j] += dot_and_axpy(w, p, cj, dw_j, A);
        }
      }
    }
    free(p);
  }
  for (int t = 0; t < threads; ++t)
    for (int64_t i = 0; i < n * A; ++i) d_w_cov_t[i] += partial[(int64_t)t * n * A + i];
  free(partial);
}

void weights_grad(const float *values, const float *d_c, float *d_alpha, int64_t B, int64_t S,
                  int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < B * S; ++row) {
    const float *v = values + row * D, *g = d_c + (row / S) * D;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < D; ++d) sum += v[d] * g[d];
    d_alpha[row] = sum;
  }
}
