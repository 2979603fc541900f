// LayerNormalization rows (layer_norm.h): the mean, then the variance around it (two passes over a row in cache, as
// stable as ATen's), then the affine output.
#include "model/ops/layer_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>

#include "model/ops/thread_pool.h"
#include "model/ops/vec_math.h"
#include "model/ops/winograd.h"

namespace softnpu::offline::layer_norm {

namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

void row(const float* x, const float* scale, const float* bias, float* y, int64_t n, float eps) {
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(vec::lanes(n - i), x + i));
  const float mean = _mm512_reduce_add_ps(sum) / static_cast<float>(n);
  const __m512 vmean = _mm512_set1_ps(mean);
  __m512 sq = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = vec::lanes(n - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vmean);
    sq = _mm512_fmadd_ps(d, d, sq);
  }
  const __m512 rstd = _mm512_set1_ps(1.f / std::sqrt(_mm512_reduce_add_ps(sq) / static_cast<float>(n) + eps));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = vec::lanes(n - i);
    const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmean), rstd);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(m, scale + i), b));
  }
}

#pragma GCC pop_options

}  // namespace

bool applies(const at::Tensor& x, int64_t axis, const at::Tensor& scale, const at::Tensor& bias) {
  if (!winograd::available() || x.is_meta() || x.scalar_type() != at::kFloat || x.dim() < 1 || axis != x.dim() - 1)
    return false;
  const int64_t n = x.size(-1);
  return n > 0 && scale.scalar_type() == at::kFloat && scale.numel() == n &&
         (!bias.defined() || (bias.scalar_type() == at::kFloat && bias.numel() == n));
}

at::Tensor normalize(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& bias, double eps) {
  auto xc = x.contiguous();
  auto y = at::empty_like(xc);
  const int64_t n = x.size(-1), rows = n ? xc.numel() / n : 0;
  auto s = scale.contiguous();
  auto b = bias.defined() ? bias.contiguous() : bias;
  const float *X = xc.const_data_ptr<float>(), *S = s.const_data_ptr<float>();
  const float* B = b.defined() ? b.const_data_ptr<float>() : nullptr;
  float* Y = y.data_ptr<float>();
  parallel_for(rows, at::get_num_threads(), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(X + r * n, S, B, Y + r * n, n, static_cast<float>(eps));
  });
  return y;
}

}  // namespace softnpu::offline::layer_norm
