/* The output layer's cross-entropy over logits [N, V] in one pass over each row each way (see
 * alignmt/loss.py), where PyTorch ops take the bias's own pass, log-softmax's three, the
 * gradient's exp and scatter, and a column sum for the bias's gradient:
 *   forward:  x += bias;  lse = log sum_j exp x_j;
 *             loss = (1 - eps) (lse - x_target) + eps (lse - mean_j x_j), 0 where ignored
 *   backward: x = scale (softmax(x) - (1 - eps) onehot(target) - eps / V), 0 where ignored;
 *             d_bias = sum over rows of x.
 * A row (V floats) is read from memory once per loop over it and stays in cache for the next.
 * Compiled with -ffast-math (so that expf vectorises), linked without it. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void cross_entropy_forward(float *logits, const float *bias, const int64_t *targets,
                           int64_t ignore_index, float smoothing, float *lse, float *loss,
                           int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float *x = logits + n * V;
    float max = -INFINITY, total = 0.0f, sum = 0.0f;
    if (bias) {
#pragma omp simd reduction(max : max) reduction(+ : total)
      for (int64_t j = 0; j < V; ++j) {
        x[j] += bias[j];
        max = fmaxf(max, x[j]);
        total += x[j];
      }
    } else {
#pragma omp simd reduction(max : max) reduction(+ : total)
      for (int64_t j = 0; j < V; ++j) {
        max = fmaxf(max, x[j]);
        total += x[j];
      }
    }
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += expf(x[j] - max);
    const float row_lse = max + logf(sum);
    const int64_t target = targets[n];
    lse[n] = row_lse;
    loss[n] = target == ignore_index ? 0.0f
                                     : (1.0f - smoothing) * (row_lse - x[target]) +
                                           smoothing * (row_lse - total / (float)V);
  }
}

/* Returns 0, or 1 where the per-thread column sums could not be allocated (nothing written). */
int cross_entropy_backward(float *logits, const float *lse, const int64_t *targets,
                           int64_t ignore_index, float smoothing, float scale, float *d_bias,
                           int64_t N, int64_t V) {
  const int threads = omp_get_max_threads();
  float *partial = d_bias ? calloc((size_t)threads * V, sizeof(float)) : NULL;
  if (d_bias && !partial) return 1;
  const float uniform = scale * smoothing / (float)V;
#pragma omp parallel num_threads(threads)
  {
    float *column_sums = partial ? partial + (int64_t)omp_get_thread_num() * V : NULL;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float *x = logits + n * V;
      const int64_t target = targets[n];
      if (target == ignore_index) {
        memset(x, 0, V * sizeof(float));
        continue;
      }
      const float row_lse = lse[n];
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) x[j] = scale * expf(x[j] - row_lse) - uniform;
      x[target] -= scale * (1.0f - smoothing);
      if (column_sums) {
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) column_sums[j] += x[j];
      }
    }
  }
  if (d_bias) {
    for (int64_t j = 0; j < V; ++j) {
      float sum = 0.0f;
      for (int i = 0; i < threads; ++i) sum += partial[(int64_t)i * V + j];
      d_bias[j] = sum;
    }
    free(partial);
  }
  return 0;
}
