// Max pooling of channels-last activations (pooling.h): each output pixel's window, sixteen channels a vector.
#include "model/ops/pooling.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "model/ops/thread_pool.h"
#include "model/ops/winograd.h"

namespace softnpu::offline::pooling {

namespace {

// ATen's pooling output size (dilation 1).
int64_t output_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t out = (in + 2 * p - k + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

#pragma GCC push_options
#pragma GCC target("avx512f")

void run(const float* x, float* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh,
         int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
  parallel_for(n * oh, at::get_num_threads(), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t img = row / oh, y0 = (row % oh) * sh - ph;
      const int64_t ky0 = std::max<int64_t>(0, -y0), ky1 = std::min(kh, h - y0);
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t x0 = ox * sw - pw;
        const int64_t kx0 = std::max<int64_t>(0, -x0), kx1 = std::min(kw, w - x0);
        float* out = y + (row * ow + ox) * c;
        for (int64_t ch = 0; ch < c; ch += 16) {
          __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
          __mmask16 nan = 0;
          for (int64_t ky = ky0; ky < ky1; ++ky)
            for (int64_t kx = kx0; kx < kx1; ++kx) {
              const __m512 v = _mm512_loadu_ps(x + ((img * h + y0 + ky) * w + x0 + kx) * c + ch);
              nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
              m = _mm512_max_ps(m, v);
            }
          _mm512_storeu_ps(out + ch, _mm512_mask_mov_ps(m, nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN())));
        }
      }
    }
  });
}

#pragma GCC pop_options

}  // namespace

bool supported(const at::Tensor& x) {
  return winograd::available() && x.dim() == 4 && x.scalar_type() == at::kFloat && x.size(1) % 16 == 0 &&
         x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor max_pool2d(const at::Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                      const std::vector<int64_t>& pads, bool ceil_mode) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = output_size(h, kernel[0], strides[0], pads[0], ceil_mode);
  const int64_t ow = output_size(w, kernel[1], strides[1], pads[1], ceil_mode);
  auto y = at::empty({n, c, oh, ow}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  if (y.numel() == 0) return y;
  run(x.const_data_ptr<float>(), y.data_ptr<float>(), n, h, w, c, kernel[0], kernel[1], strides[0], strides[1], pads[0],
      pads[1], oh, ow);
  return y;
}

}  // namespace softnpu::offline::pooling
