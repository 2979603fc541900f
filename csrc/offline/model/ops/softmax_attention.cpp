// softnpu:SoftmaxAttention, the attention core the lowering forms (passes.cpp) from what exporters write for scaled
// dot-product attention: MatMul(q, kt) -> Add(., mask) -> Softmax(last axis) -> [Where(IsNaN(.), 0, .)]
// -> MatMul(., v). Inputs q [.., S, D], kt [.., D, T], v [.., T, E], mask (optional, broadcast to [.., S, T]);
// attributes scale (of q x kt, default 1) and nan_to_zero (the Where: a row softmax makes NaN, a fully masked one,
// contributes zeros). On AVX-512F hosts one pass per query row, its scores kept in cache, instead of five ATen ops each
// writing an [.., S, T] tensor (the tiny BERT at batch 1: 73 us per layer in those ops, 39 us in this kernel); ATen's
// ops otherwise (meta inference, other dtypes, broadcast batch dims).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/ops/op.h"
#include "model/ops/thread_pool.h"
#include "model/ops/vec_math.h"
#include "model/ops/winograd.h"

namespace softnpu::offline {

namespace {

constexpr int kBlock = 64;  // columns (of the scores, of the output) per register block: four vectors

bool fused_applies(const at::Tensor& q, const at::Tensor& kt, const at::Tensor& v, const at::Tensor& mask) {
  if (!winograd::available() || q.is_meta() || q.dim() < 2 || kt.dim() != q.dim() || v.dim() != q.dim()) return false;
  for (const auto& t : {q, kt, v})
    if (t.scalar_type() != at::kFloat) return false;
  const auto batch = q.sizes().slice(0, q.dim() - 2);
  if (kt.sizes().slice(0, q.dim() - 2) != batch || v.sizes().slice(0, q.dim() - 2) != batch) return false;
  if (q.size(-1) != kt.size(-2) || kt.size(-1) != v.size(-2) || q.size(-1) == 0 || kt.size(-1) == 0) return false;
  return !mask.defined() || (mask.scalar_type() == at::kFloat && mask.dim() <= q.dim());
}

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

// out[0 .. width) = scale * sum over i < count of c[i] * rows[i * stride + 0 .. width), in blocks of four vectors,
// the last one's lanes masked: a fixed count keeps the accumulators in registers. Both products of a query row.
void scaled_products(const float* c, int64_t count, const float* rows, int64_t stride, int64_t width, float scale,
                     float* out) {
  for (int64_t c0 = 0; c0 < width; c0 += kBlock) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    __mmask16 m[4];
    for (int j = 0; j < 4; ++j) m[j] = vec::lanes(width - c0 - 16 * j);
    for (int64_t i = 0; i < count; ++i) {
      const __m512 a = _mm512_set1_ps(c[i]);
      for (int j = 0; j < 4; ++j)
        acc[j] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m[j], rows + i * stride + c0 + 16 * j), acc[j]);
    }
    const __m512 factor = _mm512_set1_ps(scale);
    for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(out + c0 + 16 * j, m[j], _mm512_mul_ps(acc[j], factor));
  }
}

// One query row: scores = qr x K + mask row, p = softmax(scores), out = p x V.
void attend_row(const float* qr, const float* K, const float* V, const float* mrow, int64_t mstride, float* out,
                float* scores, int64_t D, int64_t T, int64_t E, float scale, bool nan_to_zero) {
  scaled_products(qr, D, K, T, T, scale, scores);
  // The mask added (a row of it, or one value broadcast along the row), the maximum and whether any score is NaN.
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 vmax = lowest;
  __mmask16 unordered = 0;
  for (int64_t t = 0; t < T; t += 16) {
    const __mmask16 m = vec::lanes(T - t);
    __m512 s = _mm512_maskz_loadu_ps(m, scores + t);
    if (mrow && mstride == 1)
      s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, mrow + t));
    else if (mrow && mstride == 0)
      s = _mm512_add_ps(s, _mm512_set1_ps(mrow[0]));
    else if (mrow)
      for (int64_t k = t; k < std::min<int64_t>(T, t + 16); ++k) scores[k] += mrow[k * mstride];
    if (!mrow || mstride <= 1) _mm512_mask_storeu_ps(scores + t, m, s);
    else s = _mm512_maskz_loadu_ps(m, scores + t);
    unordered |= _mm512_mask_cmp_ps_mask(m, s, s, _CMP_UNORD_Q);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, s);
  }
  const float max = _mm512_reduce_max_ps(vmax);
  const bool nan = unordered != 0;
  if (nan || std::isinf(max)) {
    // Softmax of the row has NaNs (a NaN score, every score -inf, or one +inf), and so has every output of the row
    // unless the Where zeroes them: then only zeros remain.
    const float fill = nan_to_zero ? 0.f : std::numeric_limits<float>::quiet_NaN();
    for (int64_t e = 0; e < E; ++e) out[e] = fill;
    return;
  }
  __m512 sum = _mm512_setzero_ps();
  vmax = _mm512_set1_ps(max);
  for (int64_t t = 0; t < T; t += 16) {
    const __mmask16 m = vec::lanes(T - t);
    const __m512 p = _mm512_maskz_mov_ps(m, vec::exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), vmax)));
    _mm512_mask_storeu_ps(scores + t, m, p);
    sum = _mm512_add_ps(sum, p);
  }
  scaled_products(scores, T, V, E, E, 1.f / _mm512_reduce_add_ps(sum), out);
}

#pragma GCC pop_options

at::Tensor fused(const at::Tensor& q, const at::Tensor& kt, const at::Tensor& v, const at::Tensor& mask, float scale,
                 bool nan_to_zero) {
  const int64_t S = q.size(-2), D = q.size(-1), T = kt.size(-1), E = v.size(-1);
  auto qc = q.contiguous(), kc = kt.contiguous(), vc = v.contiguous();
  auto out_sizes = q.sizes().vec();
  out_sizes.back() = E;
  auto y = at::empty(out_sizes, q.options());
  const int64_t batch = S ? q.numel() / (S * D) : 0;
  if (y.numel() == 0 || batch == 0) return y;
  // The mask as a strided view of [.., S, T]: each batch's row offset, broadcast dims with stride 0.
  at::Tensor m;
  std::vector<int64_t> mask_offset(batch, 0);
  if (mask.defined()) {
    auto scores_sizes = q.sizes().vec();
    scores_sizes.back() = T;
    m = mask.expand(scores_sizes);
    if (m.stride(-1) > 1) m = m.contiguous();
    for (int64_t b = 0; b < batch; ++b) {
      int64_t rest = b, offset = 0;
      for (int64_t d = q.dim() - 3; d >= 0; --d) {
        offset += (rest % m.size(d)) * m.stride(d);
        rest /= m.size(d);
      }
      mask_offset[b] = offset;
    }
  }
  const float *Q = qc.const_data_ptr<float>(), *K = kc.const_data_ptr<float>(), *V = vc.const_data_ptr<float>();
  const float* M = m.defined() ? m.const_data_ptr<float>() : nullptr;
  const int64_t mrow = m.defined() ? m.stride(-2) : 0, mcol = m.defined() ? m.stride(-1) : 0;
  float* Y = y.data_ptr<float>();
  parallel_for(batch * S, at::get_num_threads(), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(T)) scores.resize(T);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / S, i = r % S;
      attend_row(Q + r * D, K + b * D * T, V + b * T * E, M ? M + mask_offset[b] + i * mrow : nullptr, mcol,
                 Y + r * E, scores.data(), D, T, E, scale, nan_to_zero);
    }
  });
  return y;
}

Kernel softmax_attention(const OpContext& ctx) {
  bool nan_to_zero = ctx.attrs.i("nan_to_zero", 0);
  float scale = ctx.attrs.f("scale", 1.f);
  return [nan_to_zero, scale](const Tensors& in, Tensors& out) {
    const auto &q = in[0], &kt = in[1], &v = in[2];
    const at::Tensor mask = in.size() > 3 ? in[3] : at::Tensor();
    if (fused_applies(q, kt, v, mask)) {
      out[0] = fused(q, kt, v, mask, scale, nan_to_zero);
      return;
    }
    auto scores = at::matmul(q, kt);
    if (scale != 1.f) scores = scores * scale;
    if (mask.defined()) scores = scores + mask;
    auto p = at::softmax(scores, -1);
    if (nan_to_zero) p.masked_fill_(p.isnan(), 0);
    out[0] = at::matmul(p, v);
  };
}

const bool registered = register_ops({{"softnpu:SoftmaxAttention", softmax_attention}});

}  // namespace

}  // namespace softnpu::offline
