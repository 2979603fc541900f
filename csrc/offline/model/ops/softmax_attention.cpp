// softnpu:SoftmaxAttention, the attention core the lowering forms (passes.cpp) from what exporters write for scaled
// dot-product attention: MatMul(q, kt) -> Add(., mask) -> Softmax(last axis) -> [Where(IsNaN(.), 0, .)]
// -> MatMul(., v). Inputs q [.., S, D], kt [.., D, T], v [.., T, E], mask (optional, broadcast to [.., S, T]);
// attributes scale (of q x kt, default 1) and nan_to_zero (the Where: a row softmax makes NaN, a fully masked one,
// contributes zeros). With the attribute heads = H, the node also does the head split and merge around it: q
// [B, S, H*D], k [B, T, H*D] (keys as rows, not transposed), v [B, T, H*E], output [B, S, H*E], mask broadcast to
// [B, H, S, T]. On AVX-512F hosts one pass per query row, its scores kept in cache, instead of five ATen ops each
// writing an [.., S, T] tensor (the tiny BERT at batch 1: 73 us per layer in those ops, 29 us in this kernel); ATen's
// ops otherwise (meta inference, other dtypes, broadcast batch dims).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
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
constexpr int kRows = 4;    // query rows per register block

// The operands in the node's two forms. Batch form: q [.., S, D], kt [.., D, T], v [.., T, E], output [.., S, E].
// Heads form (attribute heads = H): q [B, S, H*D], k [B, T, H*D], v [B, T, H*E], output [B, S, H*E]; head h of a row
// is its columns h*D .. h*D + D, so the exporter's head split and merge (Reshape, Transpose) are not copies.
struct Shape {
  int64_t heads = 0;  // 0: batch form
  int64_t batch = 0, S = 0, D = 0, T = 0, E = 0;  // batch: B*H in the heads form
};

Shape shape_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t heads) {
  Shape s;
  s.heads = heads;
  if (heads) {
    s.batch = q.size(0) * heads, s.S = q.size(1), s.D = q.size(2) / heads, s.T = k.size(1), s.E = v.size(2) / heads;
  } else {
    s.S = q.size(-2), s.D = q.size(-1), s.T = k.size(-1), s.E = v.size(-1);
    s.batch = s.S ? q.numel() / (s.S * s.D) : 0;
  }
  return s;
}

bool shapes_agree(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t heads) {
  if (heads)
    return q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && q.size(0) == k.size(0) && q.size(0) == v.size(0) &&
           k.size(1) == v.size(1) && q.size(2) % heads == 0 && v.size(2) % heads == 0 && k.size(2) == q.size(2);
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim()) return false;
  const auto batch = q.sizes().slice(0, q.dim() - 2);
  return k.sizes().slice(0, q.dim() - 2) == batch && v.sizes().slice(0, q.dim() - 2) == batch &&
         q.size(-1) == k.size(-2) && k.size(-1) == v.size(-2);
}

bool fused_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                   int64_t heads) {
  if (!winograd::available() || q.is_meta() || !shapes_agree(q, k, v, heads)) return false;
  for (const auto& t : {q, k, v})
    if (t.scalar_type() != at::kFloat) return false;
  const Shape s = shape_of(q, k, v, heads);
  if (s.D == 0 || s.T == 0) return false;
  return !mask.defined() || (mask.scalar_type() == at::kFloat && mask.dim() <= (heads ? 4 : q.dim()));
}

// The rows of one (batch, head) of an operand: batch bh starts at base + (bh / heads) * batch_stride + (bh % heads)
// * head_stride, its rows row_stride apart, each row's values contiguous.
template <typename T>
struct Rows {
  T* base;
  int64_t heads, batch_stride, head_stride, row_stride;
  T* at(int64_t bh) const { return base + (bh / heads) * batch_stride + (bh % heads) * head_stride; }
};

template <typename T>
Rows<T> rows_of(T* base, const at::Tensor& t, const Shape& s, int64_t width) {
  if (s.heads) return {base, s.heads, t.stride(0), width, t.stride(1)};
  return {base, 1, t.size(-2) * t.size(-1), 0, t.size(-1)};
}

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

// out[r][0 .. width) = scale[r] * sum over i < count of c[r][i] * rows[i * stride + 0 .. width), for R rows at a
// time, in blocks of four vectors, the last one's lanes masked. The R rows share each load of `rows`, and their R x 4
// accumulators are independent chains: one row's four alone wait on the FMA's latency (the tiny BERT's layer at batch
// 1, on one thread: ~60 us with one row at a time, 39 us with four). Both products of the query rows.
template <int R>
void scaled_products(const float* const* c, int64_t count, const float* rows, int64_t stride, int64_t width,
                     const float* scale, float* const* out) {
  for (int64_t c0 = 0; c0 < width; c0 += kBlock) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
    __mmask16 m[4];
    for (int j = 0; j < 4; ++j) m[j] = vec::lanes(width - c0 - 16 * j);
    for (int64_t i = 0; i < count; ++i) {
      __m512 x[4];
      for (int j = 0; j < 4; ++j) x[j] = _mm512_maskz_loadu_ps(m[j], rows + i * stride + c0 + 16 * j);
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(c[r][i]);
        for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(a, x[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 factor = _mm512_set1_ps(scale[r]);
      for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(out[r] + c0 + 16 * j, m[j], _mm512_mul_ps(acc[r][j], factor));
    }
  }
}

// One row of scores: the mask row added (or one value broadcast along it), then softmax's numerators e^(s - max) in
// place. Returns 1 / their sum, or NaN where the row's softmax has NaNs (a NaN score, every score -inf, or one +inf).
float softmax_numerators(float* scores, const float* mrow, int64_t mstride, int64_t T) {
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
  if (unordered || std::isinf(max)) return std::numeric_limits<float>::quiet_NaN();
  __m512 sum = _mm512_setzero_ps();
  vmax = _mm512_set1_ps(max);
  for (int64_t t = 0; t < T; t += 16) {
    const __mmask16 m = vec::lanes(T - t);
    const __m512 p = _mm512_maskz_mov_ps(m, vec::exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), vmax)));
    _mm512_mask_storeu_ps(scores + t, m, p);
    sum = _mm512_add_ps(sum, p);
  }
  return 1.f / _mm512_reduce_add_ps(sum);
}

// R query rows: scores = q x kt (D rows of T, kt_stride apart) + mask rows, p = softmax(scores), out = p x V (T rows
// of E, v_stride apart). A row whose softmax has NaNs has NaN outputs, or zeros under the Where (nan_to_zero).
template <int R>
void attend_rows(const float* const* q, const float* kt, int64_t kt_stride, const float* V, int64_t v_stride,
                 const float* const* mrows, int64_t mstride, float* const* out, float* scores, int64_t D, int64_t T,
                 int64_t E, float scale, bool nan_to_zero) {
  float* s[R];
  float scales[R], inverse[R];
  for (int r = 0; r < R; ++r) s[r] = scores + r * T, scales[r] = scale;
  scaled_products<R>(q, D, kt, kt_stride, T, scales, s);
  for (int r = 0; r < R; ++r) inverse[r] = softmax_numerators(s[r], mrows[r], mstride, T);
  scaled_products<R>(s, T, V, v_stride, E, inverse, out);
  for (int r = 0; r < R; ++r)
    if (std::isnan(inverse[r]))
      std::fill(out[r], out[r] + E, nan_to_zero ? 0.f : std::numeric_limits<float>::quiet_NaN());
}

#pragma GCC pop_options

// The scores' shape ([.., S, T]; [B, H, S, T] in the heads form), which the mask broadcasts to.
std::vector<int64_t> scores_sizes(const at::Tensor& q, const Shape& s) {
  if (s.heads) return {q.size(0), s.heads, s.S, s.T};
  auto sizes = q.sizes().vec();
  sizes.back() = s.T;
  return sizes;
}

at::Tensor fused(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& mask,
                 float scale, bool nan_to_zero, int64_t heads) {
  const Shape s = shape_of(q_in, k_in, v_in, heads);
  // The heads form reads any rows whose values are contiguous (a slice of a wider product); the batch form reads
  // contiguous tensors.
  auto dense = [&](const at::Tensor& t) { return heads && t.stride(-1) == 1 ? t : t.contiguous(); };
  auto q = dense(q_in), k = dense(k_in), v = dense(v_in);
  std::vector<int64_t> out_sizes;
  if (heads) {
    out_sizes = {q.size(0), s.S, heads * s.E};
  } else {
    out_sizes = q.sizes().vec();
    out_sizes.back() = s.E;
  }
  auto y = at::empty(out_sizes, q.options());
  if (y.numel() == 0 || s.batch == 0) return y;
  // The mask as a strided view of the scores: each batch's row offset, broadcast dims with stride 0.
  at::Tensor m;
  std::vector<int64_t> mask_offset(s.batch, 0);
  if (mask.defined()) {
    const auto sizes = scores_sizes(q, s);
    m = mask.expand(sizes);
    if (m.stride(-1) > 1) m = m.contiguous();
    for (int64_t b = 0; b < s.batch; ++b) {
      int64_t rest = b, offset = 0;
      for (int64_t d = static_cast<int64_t>(sizes.size()) - 3; d >= 0; --d) {
        offset += (rest % m.size(d)) * m.stride(d);
        rest /= m.size(d);
      }
      mask_offset[b] = offset;
    }
  }
  const auto Q = rows_of(q.const_data_ptr<float>(), q, s, s.D), K = rows_of(k.const_data_ptr<float>(), k, s, s.D);
  const auto V = rows_of(v.const_data_ptr<float>(), v, s, s.E);
  const auto Y = rows_of(y.data_ptr<float>(), y, s, s.E);
  const float* M = m.defined() ? m.const_data_ptr<float>() : nullptr;
  const int64_t mrow = m.defined() ? m.stride(-2) : 0, mcol = m.defined() ? m.stride(-1) : 0;
  // A work item is a (batch, head)'s query rows, split only where there are fewer (batch, head)s than threads: the heads
  // form transposes a (batch, head)'s keys once per item, so items are as few as the threads allow.
  const int threads = at::get_num_threads();
  const int64_t chunks = std::max<int64_t>(1, (threads + s.batch - 1) / s.batch), rows = (s.S + chunks - 1) / chunks;
  parallel_for(s.batch * chunks, threads, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores, keys;
    if (scores.size() < static_cast<size_t>(kRows * s.T)) scores.resize(kRows * s.T);
    int64_t transposed = -1;  // the batch whose keys are in `keys`
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / chunks, i0 = (item % chunks) * rows, i1 = std::min(s.S, i0 + rows);
      // The heads form's keys are rows (T of D): their transpose, D rows of T, makes the scores' product.
      const float* kt = K.at(b);
      int64_t kt_stride = K.row_stride;
      if (s.heads) {
        if (keys.size() < static_cast<size_t>(s.D * s.T)) keys.resize(s.D * s.T);
        if (transposed != b)
          for (int64_t t = 0; t < s.T; ++t)
            for (int64_t d = 0; d < s.D; ++d) keys[d * s.T + t] = kt[t * K.row_stride + d];
        transposed = b;
        kt = keys.data(), kt_stride = s.T;
      }
      for (int64_t i = i0; i < i1; i += kRows) {
        const int n = static_cast<int>(std::min<int64_t>(kRows, i1 - i));
        const float* q[kRows];
        const float* mrows[kRows];
        float* out[kRows];
        for (int r = 0; r < n; ++r) {
          q[r] = Q.at(b) + (i + r) * Q.row_stride;
          mrows[r] = M ? M + mask_offset[b] + (i + r) * mrow : nullptr;
          out[r] = Y.at(b) + (i + r) * Y.row_stride;
        }
        const auto rows_fn = n == 4 ? attend_rows<4> : n == 3 ? attend_rows<3> : n == 2 ? attend_rows<2> : attend_rows<1>;
        rows_fn(q, kt, kt_stride, V.at(b), V.row_stride, mrows, mcol, out, scores.data(), s.D, s.T, s.E, scale,
                nan_to_zero);
      }
    }
  });
  return y;
}

// ATen's ops, each writing its [.., S, T] or [.., S, E] result.
at::Tensor unfused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, float scale,
                   bool nan_to_zero, int64_t heads) {
  at::Tensor q4 = q, kt = k, v4 = v;
  if (heads) {
    const int64_t B = q.size(0);
    q4 = q.reshape({B, q.size(1), heads, -1}).transpose(1, 2);
    kt = k.reshape({B, k.size(1), heads, -1}).permute({0, 2, 3, 1});
    v4 = v.reshape({B, v.size(1), heads, -1}).transpose(1, 2);
  }
  auto scores = at::matmul(q4, kt);
  if (scale != 1.f) scores = scores * scale;
  if (mask.defined()) scores = scores + mask;
  auto p = at::softmax(scores, -1);
  if (nan_to_zero) p.masked_fill_(p.isnan(), 0);
  auto y = at::matmul(p, v4);
  return heads ? y.transpose(1, 2).reshape({q.size(0), q.size(1), -1}) : y;
}

Kernel softmax_attention(const OpContext& ctx) {
  bool nan_to_zero = ctx.attrs.i("nan_to_zero", 0);
  float scale = ctx.attrs.f("scale", 1.f);
  int64_t heads = ctx.attrs.i("heads", 0);
  if (heads < 0) throw Unsupported("heads must be positive, not " + std::to_string(heads));
  return [nan_to_zero, scale, heads](const Tensors& in, Tensors& out) {
    const auto &q = in[0], &k = in[1], &v = in[2];
    const at::Tensor mask = in.size() > 3 ? in[3] : at::Tensor();
    out[0] = fused_applies(q, k, v, mask, heads) ? fused(q, k, v, mask, scale, nan_to_zero, heads)
                                                 : unfused(q, k, v, mask, scale, nan_to_zero, heads);
  };
}

const bool registered = register_ops({{"softnpu:SoftmaxAttention", softmax_attention}});

}  // namespace

}  // namespace softnpu::offline
