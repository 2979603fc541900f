// Winograd F(m x m, 3 x 3) convolutions (winograd.h). Per block of output tiles: the input tiles' transforms V (one
// [tiles, C] matrix per tile element), one GEMM per element against the transformed filter U ([C, OC] in panels of
// 64 output channels), and the output transform with bias and ReLU. A block's V and products stay in L2.
#include "model/ops/winograd.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "model/ops/thread_pool.h"

namespace softnpu::offline::winograd {

namespace {

constexpr int64_t kPanel = 64;               // output channels per GEMM panel: four vectors of 16
constexpr int64_t kScratchBytes = 1 << 20;  // a block's V and products, per thread

// The 1-D transforms, applied along columns then rows, over elements s apart: the filter's G g (doubles, once at
// load), the input's B^T d and the output's A^T m (floats, sixteen channels a vector).
template <int M>
struct Transform;

template <>
struct Transform<2> {
  static constexpr int A = 4;
  static void filter(const double* g, double* u, int s) {
    u[0] = g[0];
    u[s] = 0.5 * (g[0] + g[s] + g[2 * s]);
    u[2 * s] = 0.5 * (g[0] - g[s] + g[2 * s]);
    u[3 * s] = g[2 * s];
  }
};

template <>
struct Transform<4> {
  static constexpr int A = 6;
  static void filter(const double* g, double* u, int s) {
    double g0 = g[0], g1 = g[s], g2 = g[2 * s];
    u[0] = g0 / 4;
    u[s] = -(g0 + g1 + g2) / 6;
    u[2 * s] = -(g0 - g1 + g2) / 6;
    u[3 * s] = g0 / 24 + g1 / 12 + g2 / 6;
    u[4 * s] = g0 / 24 - g1 / 12 + g2 / 6;
    u[5 * s] = g2;
  }
};

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

template <int M>
void input_transform(const __m512* d, __m512* v, int s);
template <int M>
void output_transform(const __m512* m, __m512* y, int s);

template <>
inline void input_transform<2>(const __m512* d, __m512* v, int s) {
  v[0] = _mm512_sub_ps(d[0], d[2 * s]);
  v[s] = _mm512_add_ps(d[s], d[2 * s]);
  v[2 * s] = _mm512_sub_ps(d[2 * s], d[s]);
  v[3 * s] = _mm512_sub_ps(d[s], d[3 * s]);
}

template <>
inline void output_transform<2>(const __m512* m, __m512* y, int s) {
  y[0] = _mm512_add_ps(_mm512_add_ps(m[0], m[s]), m[2 * s]);
  y[s] = _mm512_sub_ps(_mm512_sub_ps(m[s], m[2 * s]), m[3 * s]);
}

template <>
inline void input_transform<4>(const __m512* d, __m512* v, int s) {
  const __m512 four = _mm512_set1_ps(4.f), five = _mm512_set1_ps(5.f), two = _mm512_set1_ps(2.f);
  __m512 d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
  v[0] = _mm512_add_ps(_mm512_fnmadd_ps(five, d2, _mm512_mul_ps(four, d0)), d4);
  __m512 a = _mm512_fnmadd_ps(four, d2, d4), b = _mm512_fnmadd_ps(four, d1, d3);
  v[s] = _mm512_add_ps(a, b);
  v[2 * s] = _mm512_sub_ps(a, b);
  __m512 c = _mm512_sub_ps(d4, d2), e = _mm512_mul_ps(two, _mm512_sub_ps(d3, d1));
  v[3 * s] = _mm512_add_ps(c, e);
  v[4 * s] = _mm512_sub_ps(c, e);
  v[5 * s] = _mm512_add_ps(_mm512_fnmadd_ps(five, d3, _mm512_mul_ps(four, d1)), d5);
}

template <>
inline void output_transform<4>(const __m512* m, __m512* y, int s) {
  __m512 a = _mm512_add_ps(m[s], m[2 * s]), b = _mm512_sub_ps(m[s], m[2 * s]);
  __m512 c = _mm512_add_ps(m[3 * s], m[4 * s]), d = _mm512_sub_ps(m[3 * s], m[4 * s]);
  y[0] = _mm512_add_ps(_mm512_add_ps(m[0], a), c);
  y[s] = _mm512_fmadd_ps(_mm512_set1_ps(2.f), d, b);
  y[2 * s] = _mm512_fmadd_ps(_mm512_set1_ps(4.f), c, a);
  y[3 * s] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.f), d, b), m[5 * s]);
}

// float32 lanes rounded to their nearest float16 values (ties to even), as the cube's half-precision storage.
inline __m512 to_half_values(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// out[T, 16 NB] = v[T, C] (rows C apart) x u[C, 16 NB], accumulated in registers.
template <int T, int NB>
inline void gemm(const float* v, int64_t C, const float* u, float* out, int64_t ldo) {
  __m512 acc[T][NB];
  for (int j = 0; j < T; ++j)
    for (int q = 0; q < NB; ++q) acc[j][q] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    __m512 b[NB];
    for (int q = 0; q < NB; ++q) b[q] = _mm512_loadu_ps(u + c * 16 * NB + 16 * q);
    for (int j = 0; j < T; ++j) {
      __m512 a = _mm512_set1_ps(v[j * C + c]);
      for (int q = 0; q < NB; ++q) acc[j][q] = _mm512_fmadd_ps(a, b[q], acc[j][q]);
    }
  }
  for (int j = 0; j < T; ++j)
    for (int q = 0; q < NB; ++q) _mm512_storeu_ps(out + j * ldo + 16 * q, acc[j][q]);
}

template <int NB>
void gemm_rows(const float* v, int64_t rows, int64_t C, const float* u, float* out, int64_t ldo) {
  int64_t t = 0;
  for (; t + 6 <= rows; t += 6) gemm<6, NB>(v + t * C, C, u, out + t * ldo, ldo);
  switch (rows - t) {
    case 5: gemm<5, NB>(v + t * C, C, u, out + t * ldo, ldo); break;
    case 4: gemm<4, NB>(v + t * C, C, u, out + t * ldo, ldo); break;
    case 3: gemm<3, NB>(v + t * C, C, u, out + t * ldo, ldo); break;
    case 2: gemm<2, NB>(v + t * C, C, u, out + t * ldo, ldo); break;
    case 1: gemm<1, NB>(v + t * C, C, u, out + t * ldo, ldo); break;
    default: break;
  }
}

struct Shape {
  int64_t n, c, h, w, oc, oh, ow, pad_top, pad_left;
};

template <int M>
void run(const Shape& s, const float* x, const float* filter, const float* bias, const float* residual, float* y,
         bool relu, bool half) {
  constexpr int A = Transform<M>::A, X = A * A;
  const int64_t th = (s.oh + M - 1) / M, tw = (s.ow + M - 1) / M, tiles = s.n * th * tw;
  const int64_t panels = (s.oc + kPanel - 1) / kPanel;
  const int threads = at::get_num_threads();
  // Tiles per block: within the scratch budget, and enough blocks to share among the threads.
  int64_t tb = std::max<int64_t>(1, kScratchBytes / (X * 4 * (s.c + s.oc)));
  tb = std::min(tb, std::max<int64_t>(6, ((tiles + 2 * threads - 1) / (2 * threads) + 5) / 6 * 6));
  tb = std::min(tb, tiles);
  const int64_t blocks = (tiles + tb - 1) / tb;
  // Few blocks (small maps): the threads share a block's panels, each transforming its input.
  const int64_t splits = std::min(panels, std::max<int64_t>(1, (2 * threads + blocks - 1) / blocks));
  const __mmask16 tail = static_cast<__mmask16>((1u << (s.c % 16)) - 1);
  parallel_for(blocks * splits, at::get_num_threads(), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(X * tb * (s.c + s.oc)));
    float* V = scratch.data();
    float* P = V + X * tb * s.c;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t block = item / splits, split = item % splits;
      const int64_t p0 = split * panels / splits, p1 = (split + 1) * panels / splits;
      const int64_t t0 = block * tb, nt = std::min(tb, tiles - t0);
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t tile = t0 + t, img = tile / (th * tw), r = tile % (th * tw);
        const int64_t iy0 = (r / tw) * M - s.pad_top, ix0 = (r % tw) * M - s.pad_left;
        const float* in = x + img * s.h * s.w * s.c;
        for (int64_t ch = 0; ch < s.c; ch += 16) {
          const __mmask16 mask = s.c - ch >= 16 ? __mmask16(0xFFFF) : tail;
          __m512 d[X], tmp[X], v[X];
          for (int i = 0; i < A; ++i)
            for (int j = 0; j < A; ++j) {
              const int64_t iy = iy0 + i, ix = ix0 + j;
              d[i * A + j] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w
                                 ? _mm512_maskz_loadu_ps(mask, in + (iy * s.w + ix) * s.c + ch)
                                 : _mm512_setzero_ps();
            }
          for (int j = 0; j < A; ++j) input_transform<M>(d + j, tmp + j, A);
          for (int i = 0; i < A; ++i) input_transform<M>(tmp + i * A, v + i * A, 1);
          for (int e = 0; e < X; ++e) _mm512_mask_storeu_ps(V + (e * tb + t) * s.c + ch, mask, v[e]);
        }
      }
      for (int e = 0; e < X; ++e)
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t width = std::min(kPanel, s.oc - p * kPanel);
          const float* u = filter + (e * s.oc + p * kPanel) * s.c;
          const float* v = V + e * tb * s.c;
          float* out = P + e * tb * s.oc + p * kPanel;
          switch (width / 16) {
            case 4: gemm_rows<4>(v, nt, s.c, u, out, s.oc); break;
            case 3: gemm_rows<3>(v, nt, s.c, u, out, s.oc); break;
            case 2: gemm_rows<2>(v, nt, s.c, u, out, s.oc); break;
            default: gemm_rows<1>(v, nt, s.c, u, out, s.oc); break;
          }
        }
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t tile = t0 + t, img = tile / (th * tw), r = tile % (th * tw);
        const int64_t oy0 = (r / tw) * M, ox0 = (r % tw) * M;
        float* out = y + img * s.oh * s.ow * s.oc;
        for (int64_t oc = p0 * kPanel; oc < std::min(s.oc, p1 * kPanel); oc += 16) {
          __m512 m[X], tmp[M * A], o[M * M];
          for (int e = 0; e < X; ++e) m[e] = _mm512_loadu_ps(P + (e * tb + t) * s.oc + oc);
          for (int j = 0; j < A; ++j) output_transform<M>(m + j, tmp + j, A);
          for (int i = 0; i < M; ++i) output_transform<M>(tmp + i * A, o + i * M, 1);
          const __m512 b = bias ? _mm512_loadu_ps(bias + oc) : _mm512_setzero_ps();
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < M; ++j) {
              if (oy0 + i >= s.oh || ox0 + j >= s.ow) continue;
              const int64_t at = ((oy0 + i) * s.ow + ox0 + j) * s.oc + oc;
              __m512 z = _mm512_add_ps(o[i * M + j], b);
              if (residual) z = _mm512_add_ps(z, _mm512_loadu_ps(residual + img * s.oh * s.ow * s.oc + at));
              if (relu) z = _mm512_max_ps(z, _mm512_setzero_ps());
              if (half) z = to_half_values(z);
              _mm512_storeu_ps(out + at, z);
            }
        }
      }
    }
  });
}

#pragma GCC pop_options

template <int M>
at::Tensor transform(const at::Tensor& weight) {
  constexpr int A = Transform<M>::A;
  const int64_t oc = weight.size(0), c = weight.size(1);
  auto w = weight.to(at::kDouble).contiguous();
  auto u = at::empty({A * A, oc, c}, weight.options().dtype(at::kFloat));
  const double* g = w.const_data_ptr<double>();
  float* out = u.data_ptr<float>();
  for (int64_t o = 0; o < oc; ++o) {
    const int64_t panel = o / kPanel, width = std::min(kPanel, oc - panel * kPanel);
    for (int64_t ch = 0; ch < c; ++ch) {
      double t[A * 3], f[A * A];
      const double* k = g + (o * c + ch) * 9;
      for (int j = 0; j < 3; ++j) Transform<M>::filter(k + j, t + j, 3);
      for (int i = 0; i < A; ++i) Transform<M>::filter(t + i * 3, f + i * A, 1);
      for (int e = 0; e < A * A; ++e)
        out[(e * oc + panel * kPanel) * c + ch * width + (o - panel * kPanel)] = static_cast<float>(f[e]);
    }
  }
  return u;
}

}  // namespace

bool available() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return has;
}

int tile_size(const at::Tensor& weight, int64_t group, const std::vector<int64_t>& strides,
              const std::vector<int64_t>& dilations, int64_t positions) {
  auto ones = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t i) { return i == 1; });
  };
  if (weight.dim() != 4 || weight.scalar_type() != at::kFloat || weight.size(2) != 3 || weight.size(3) != 3 ||
      weight.size(0) % 16 || group != 1 || !ones(strides) || !ones(dilations))
    return 0;
  // resnet18 at batch 1: F(4x4) on its 56x56 and 28x28 maps, F(2x2) on 14x14, ATen's direct kernel on 7x7.
  return positions >= 512 ? 4 : positions >= 128 ? 2 : 0;
}

at::Tensor transform_filter(const at::Tensor& weight, int m) { return m == 2 ? transform<2>(weight) : transform<4>(weight); }

at::Tensor conv(const at::Tensor& x, const at::Tensor& filter, int m, const at::Tensor& bias,
                const at::Tensor& residual, int64_t pad_top, int64_t pad_left, int64_t out_h, int64_t out_w, bool relu,
                bool half) {
  auto in = x.contiguous(at::MemoryFormat::ChannelsLast);
  Shape s{in.size(0), in.size(1), in.size(2), in.size(3), filter.size(1), out_h, out_w, pad_top, pad_left};
  auto y = at::empty({s.n, s.oc, s.oh, s.ow}, in.options().memory_format(at::MemoryFormat::ChannelsLast));
  if (y.numel() == 0) return y;
  auto b = bias.defined() ? bias.to(at::kFloat).contiguous() : bias;
  const float* bp = b.defined() ? b.const_data_ptr<float>() : nullptr;
  auto r = residual.defined() ? residual.to(at::kFloat).contiguous(at::MemoryFormat::ChannelsLast) : residual;
  const float* rp = r.defined() ? r.const_data_ptr<float>() : nullptr;
  if (m == 2)
    run<2>(s, in.const_data_ptr<float>(), filter.const_data_ptr<float>(), bp, rp, y.data_ptr<float>(), relu, half);
  else
    run<4>(s, in.const_data_ptr<float>(), filter.const_data_ptr<float>(), bp, rp, y.data_ptr<float>(), relu, half);
  return y;
}

}  // namespace softnpu::offline::winograd
