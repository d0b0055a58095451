/* A GRU step from its pre-activations, forward and backward, one pass over a [B, H] batch each
 * way (see alignmt/models/native_gru.py), where PyTorch ops take six passes forward and eleven
 * backward, each a call with its own overhead:
 *   forward:  r, z = sigmoid(gx_rz + gh_rz);  n = tanh(gx_n + r gh_n);  s' = n + z (s - n),
 *             keeping r, z, n and gh_n for the backward pass;
 *   backward: for ds = dL/ds', d gx = [d_r, d_z, d_n] and d gh = [d_r, d_z, d_n r] of the
 *             pre-activations, and ds z, the gradient into s through s' directly.
 * Rows of gh, s and d_gh may be strided (slices of wider buffers); every other array is
 * contiguous. Compiled with -ffast-math (so that expf and tanhf vectorise), linked without. */
#include <math.h>
#include <stdint.h>

static inline float sigmoid(float x) {
  x = fminf(fmaxf(x, -80.0f), 80.0f); /* the same value in float32; no overflow in expf */
  return 1.0f / (1.0f + expf(-x));
}

void gru_update(const float *gx, const float *gh, int64_t gh_stride, const float *s,
                int64_t s_stride, float *gates, float *gh_n, float *out, int64_t B, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    const float *x = gx + b * 3 * H, *h = gh + b * gh_stride, *prev = s + b * s_stride;
    float *g = gates + b * 3 * H, *hn = gh_n + b * H, *next = out + b * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const float r = sigmoid(x[j] + h[j]), z = sigmoid(x[H + j] + h[H + j]);
      const float n = tanhf(x[2 * H + j] + r * h[2 * H + j]);
      g[j] = r;
      g[H + j] = z;
      g[2 * H + j] = n;
      hn[j] = h[2 * H + j];
      next[j] = n + z * (prev[j] - n);
    }
  }
}

void gru_update_backward(const float *ds, const float *s, int64_t s_stride, const float *gates,
                         const float *gh_n, float *d_gx, float *d_gh, int64_t d_gh_stride,
                         float *d_s, int64_t B, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    const float *d = ds + b * H, *prev = s + b * s_stride, *g = gates + b * 3 * H;
    const float *hn = gh_n + b * H;
    float *dx = d_gx + b * 3 * H, *dh = d_gh + b * d_gh_stride, *direct = d_s + b * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const float r = g[j], z = g[H + j], n = g[2 * H + j];
      const float d_n = d[j] * (1.0f - z) * (1.0f - n * n);
      const float d_r = d_n * hn[j] * r * (1.0f - r);
      const float d_z = d[j] * (prev[j] - n) * z * (1.0f - z);
      dx[j] = dh[j] = d_r;
      dx[H + j] = dh[H + j] = d_z;
      dx[2 * H + j] = d_n;
      dh[2 * H + j] = d_n * r;
      direct[j] = d[j] * z;
    }
  }
}
