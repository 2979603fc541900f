// Direct convolutions with packed filters (direct_conv.h). The output positions are flattened over batch, rows and
// columns and taken six at a time; for each filter tap each position reads its input pixel, or a pixel of zeros where
// the tap falls in the padding, so no input is padded or copied.
#include "model/ops/direct_conv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>

#include "model/ops/thread_pool.h"
#include "model/ops/vec_math.h"
#include "model/ops/winograd.h"

namespace softnpu::offline::direct {

namespace {

constexpr int64_t kPanel = 64;  // output channels per panel: four vectors of 16
constexpr int kTile = 6;        // output positions per register tile
// Multiply-adds per thread below which a product runs on fewer threads: handing a part to a helper (and the helper's
// reads of activations in the caller's cache) costs more than the part. Measured on the tiny BERT's pooler, a product
// of one row by 128x128: 3 us on one thread, 10 us on two; its 64-row products still gain from the second (24 -> 21).
constexpr int64_t kMacsPerThread = 1 << 18;

struct Shape {
  int64_t n, c, h, w, oc, kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, oh, ow;
};

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

__m512 activate(__m512 r, Activation act) {
  switch (act) {
    case Activation::kRelu: return _mm512_max_ps(r, _mm512_setzero_ps());
    case Activation::kGelu: return vec::gelu_ps(r, false);
    case Activation::kGeluTanh: return vec::gelu_ps(r, true);
    case Activation::kTanh: return vec::tanh_ps(r);
    default: return r;
  }
}

// Positions p0 .. p0 + count - 1 by one panel of 16 NB output channels.
template <int NB>
void tile(const Shape& s, const float* x, const float* zeros, int64_t p0, int64_t count, const float* panel,
          const float* bias, const float* residual, float* y, Activation act, bool half) {
  const int64_t hw = s.oh * s.ow;
  const float* image[kTile];
  int64_t iy0[kTile], ix0[kTile];
  for (int j = 0; j < kTile; ++j) {
    const int64_t p = p0 + std::min<int64_t>(j, count - 1), q = p % hw;
    image[j] = x + (p / hw) * s.h * s.w * s.c;
    iy0[j] = (q / s.ow) * s.stride_h - s.pad_top;
    ix0[j] = (q % s.ow) * s.stride_w - s.pad_left;
  }
  __m512 acc[kTile][NB];
  for (int q = 0; q < NB; ++q) {
    const __m512 b = bias ? _mm512_loadu_ps(bias + 16 * q) : _mm512_setzero_ps();
    for (int j = 0; j < kTile; ++j) acc[j][q] = b;
  }
  // acc += a[j][0 .. n) x f[0 .. n)
  auto accumulate = [&](const float* const* a, const float* f, int64_t n) {
    for (int64_t c = 0; c < n; ++c) {
      __m512 b[NB];
      for (int q = 0; q < NB; ++q) b[q] = _mm512_loadu_ps(f + c * 16 * NB + 16 * q);
      for (int j = 0; j < kTile; ++j) {
        const __m512 v = _mm512_set1_ps(a[j][c]);
        for (int q = 0; q < NB; ++q) acc[j][q] = _mm512_fmadd_ps(v, b[q], acc[j][q]);
      }
    }
  };
  const float* a[kTile];
  for (int64_t ky = 0; ky < s.kh; ++ky) {
    // A filter row's taps over every channel are contiguous in the input (and in the panel) when no position's row
    // crosses the left or right edge: one run of kw x C (a first layer's 7 x 3 instead of seven runs of 3).
    bool whole_rows = s.dil_w == 1;
    for (int j = 0; j < kTile && whole_rows; ++j) whole_rows = ix0[j] >= 0 && ix0[j] + s.kw <= s.w;
    if (whole_rows) {
      for (int j = 0; j < kTile; ++j) {
        const int64_t iy = iy0[j] + ky * s.dil_h;
        a[j] = iy >= 0 && iy < s.h ? image[j] + (iy * s.w + ix0[j]) * s.c : zeros;
      }
      accumulate(a, panel + ky * s.kw * s.c * 16 * NB, s.kw * s.c);
      continue;
    }
    for (int64_t kx = 0; kx < s.kw; ++kx) {
      for (int j = 0; j < kTile; ++j) {
        const int64_t iy = iy0[j] + ky * s.dil_h, ix = ix0[j] + kx * s.dil_w;
        a[j] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? image[j] + (iy * s.w + ix) * s.c : zeros;
      }
      accumulate(a, panel + (ky * s.kw + kx) * s.c * 16 * NB, s.c);
    }
  }
  for (int j = 0; j < count; ++j)
    for (int q = 0; q < NB; ++q) {
      __m512 r = acc[j][q];
      if (residual) r = _mm512_add_ps(r, _mm512_loadu_ps(residual + j * s.oc + 16 * q));
      r = activate(r, act);
      if (half) r = _mm512_cvtph_ps(_mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      _mm512_storeu_ps(y + j * s.oc + 16 * q, r);
    }
}

void run(const Shape& s, const float* x, const float* filter, const float* bias, const float* residual, float* y,
         Activation act, bool half) {
  const int64_t positions = s.n * s.oh * s.ow, tiles = (positions + kTile - 1) / kTile;
  const int64_t panels = (s.oc + kPanel - 1) / kPanel;
  const int64_t macs = positions * s.oc * s.kh * s.kw * s.c;
  const int threads = static_cast<int>(std::clamp<int64_t>(macs / kMacsPerThread, 1, at::get_num_threads()));
  // Consecutive items share a panel, so each thread reads its own part of the filter.
  parallel_for(panels * tiles, threads, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> zeros;
    if (zeros.size() < static_cast<size_t>(s.kw * s.c)) zeros.resize(s.kw * s.c, 0.f);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t p = item / tiles, p0 = (item % tiles) * kTile, count = std::min<int64_t>(kTile, positions - p0);
      const int64_t width = std::min(kPanel, s.oc - p * kPanel);
      const float* panel = filter + p * kPanel * s.kh * s.kw * s.c;
      const float* b = bias ? bias + p * kPanel : nullptr;
      float* out = y + p0 * s.oc + p * kPanel;
      const float* res = residual ? residual + p0 * s.oc + p * kPanel : nullptr;
      switch (width / 16) {
        case 4: tile<4>(s, x, zeros.data(), p0, count, panel, b, res, out, act, half); break;
        case 3: tile<3>(s, x, zeros.data(), p0, count, panel, b, res, out, act, half); break;
        case 2: tile<2>(s, x, zeros.data(), p0, count, panel, b, res, out, act, half); break;
        default: tile<1>(s, x, zeros.data(), p0, count, panel, b, res, out, act, half); break;
      }
    }
  });
}

#pragma GCC pop_options

}  // namespace

bool supported(const at::Tensor& weight, int64_t group) {
  return winograd::available() && weight.dim() == 4 && weight.scalar_type() == at::kFloat && weight.size(0) % 16 == 0 &&
         group == 1;
}

at::Tensor pack_filter(const at::Tensor& weight) {
  const int64_t oc = weight.size(0), c = weight.size(1), kh = weight.size(2), kw = weight.size(3);
  auto w = weight.contiguous();
  auto packed = at::empty({oc, kh, kw, c}, w.options());
  const float* src = w.const_data_ptr<float>();
  float* dst = packed.data_ptr<float>();
  for (int64_t o = 0; o < oc; ++o) {
    const int64_t panel = o / kPanel, width = std::min(kPanel, oc - panel * kPanel);
    float* base = dst + panel * kPanel * kh * kw * c;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t t = 0; t < kh * kw; ++t)
        base[(t * c + ch) * width + o - panel * kPanel] = src[(o * c + ch) * kh * kw + t];
  }
  return packed;
}

at::Tensor conv(const at::Tensor& x, const at::Tensor& filter, const at::Tensor& bias, const at::Tensor& residual,
                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations, int64_t pad_top,
                int64_t pad_left, int64_t out_h, int64_t out_w, Activation act, bool half) {
  auto in = x.contiguous(at::MemoryFormat::ChannelsLast);
  Shape s{in.size(0), in.size(1), in.size(2), in.size(3), filter.size(0), filter.size(1), filter.size(2),
          strides[0], strides[1], dilations[0], dilations[1], pad_top, pad_left, out_h, out_w};
  auto y = at::empty({s.n, s.oc, s.oh, s.ow}, in.options().memory_format(at::MemoryFormat::ChannelsLast));
  if (y.numel() == 0) return y;
  auto b = bias.defined() ? bias.to(at::kFloat).contiguous() : bias;
  auto r = residual.defined() ? residual.to(at::kFloat).contiguous(at::MemoryFormat::ChannelsLast) : residual;
  run(s, in.const_data_ptr<float>(), filter.const_data_ptr<float>(), b.defined() ? b.const_data_ptr<float>() : nullptr,
      r.defined() ? r.const_data_ptr<float>() : nullptr, y.data_ptr<float>(), act, half);
  return y;
}

bool matrix_supported(const at::Tensor& b, bool transposed) {
  return winograd::available() && b.dim() == 2 && b.scalar_type() == at::kFloat && b.size(transposed ? 0 : 1) % 16 == 0;
}

at::Tensor pack_matrix(const at::Tensor& b, bool transposed) {
  auto nk = transposed ? b : b.t();
  return pack_filter(nk.reshape({nk.size(0), nk.size(1), 1, 1}));
}

// A float32 contiguous operand as it is, without a dispatcher call (the common case: each call costs ~1 us on a
// small product), else converted.
at::Tensor dense_float(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat && t.is_contiguous() ? t : t.to(at::kFloat).contiguous();
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& bias, const at::Tensor& residual,
                  Activation act, bool half) {
  const int64_t k = packed.size(3), n = packed.size(0);
  TORCH_CHECK(a.dim() >= 1 && a.size(-1) == k, "MatMul: the input's last dim is ", a.dim() ? a.size(-1) : 0,
              ", the matrix has ", k, " rows");
  auto rows = dense_float(a);
  auto sizes = a.sizes().vec();
  sizes.back() = n;  // [..., N]; a vector times a matrix is [N]
  auto y = at::empty(sizes, rows.options());
  if (y.numel() == 0) return y;
  auto b = bias.defined() ? dense_float(bias) : bias;
  auto r = !residual.defined() ? residual : dense_float(residual.sizes() == y.sizes() ? residual : residual.expand(sizes));
  Shape s{c10::multiply_integers(a.sizes().begin(), a.sizes().end() - 1), k, 1, 1, n, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
  run(s, rows.const_data_ptr<float>(), packed.const_data_ptr<float>(), b.defined() ? b.const_data_ptr<float>() : nullptr,
      r.defined() ? r.const_data_ptr<float>() : nullptr, y.data_ptr<float>(), act, half);
  return y;
}

}  // namespace softnpu::offline::direct
