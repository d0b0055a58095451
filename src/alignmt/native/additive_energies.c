/* The [B, S, A] part of additive attention for one decoder step, in one pass over the keys
 * each way (see alignmt/models/native_energies.py):
 *   forward:  e[b,s] = sum_a 2 v_a sigmoid(2 k[b,s,a] + q2[b,a])
 *   backward: with g = dE/de[b,s] and s = that sigmoid,
 *             d_keys[b,s,a] += 4 v_a s (1 - s) g,  dq[b,a] = sum_s of the same,
 *             dv_rows[b,a] = sum_s s g  (the caller sums the rows).
 * and the weights' gradient from the context's, d_alpha[b,s] = sum_d values[b,s,d] d_c[b,d],
 * without the [B, S, D] product PyTorch would write and sum.
 * Compiled with -ffast-math (so that expf vectorises) but linked without it, which would
 * otherwise set flush-to-zero for the whole process. */
#include <math.h>
#include <stdint.h>

static inline float sigmoid(float x) {
  x = fminf(fmaxf(x, -80.0f), 80.0f); /* the same value in float32; no overflow in expf */
  return 1.0f / (1.0f + expf(-x));
}

void additive_energies(const float *keys, const float *q2, const float *two_v, float *energy,
                       int64_t B, int64_t S, int64_t A) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < B * S; ++row) {
    const float *k = keys + row * A, *q = q2 + (row / S) * A;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t a = 0; a < A; ++a) sum += two_v[a] * sigmoid(2.0f * k[a] + q[a]);
    energy[row] = sum;
  }
}

void additive_energies_backward(const float *keys, const float *q2, const float *four_v,
                                const float *d_energy, float *d_keys, float *dq,
                                float *dv_rows, int64_t B, int64_t S, int64_t A) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    const float *q = q2 + b * A;
    float *dq_b = dq + b * A, *dv_b = dv_rows + b * A;
    for (int64_t a = 0; a < A; ++a) dq_b[a] = dv_b[a] = 0.0f;
    for (int64_t s = 0; s < S; ++s) {
      const float g = d_energy[b * S + s];
      if (g == 0.0f) continue; /* masked positions: every term below is zero */
      const float *k = keys + (b * S + s) * A;
      float *dk = d_keys + (b * S + s) * A;
#pragma omp simd
      for (int64_t a = 0; a < A; ++a) {
        const float sg = sigmoid(2.0f * k[a] + q[a]);
        const float d = four_v[a] * sg * (1.0f - sg) * g;
        dv_b[a] += sg * g;
        dk[a] += d;
        dq_b[a] += d;
      }
    }
  }
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
