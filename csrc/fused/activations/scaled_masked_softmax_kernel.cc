// npu_scaled_masked_softmax's kernels (compiled once per CPU capability: fused/cpu_kernels.h): rows of n contiguous
// elements, in parallel over rows. Forward: each row read from memory once into a float32 row buffer (scaled, masked
// positions set to -10000, its maximum taken on the way), exponentiated and summed there in vectors, and written once
// normalized and rounded to the output's dtype, where the composite makes a pass and a temporary per ATen op.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fused/cpu_kernels.h"
#include "fused/vectorized.h"

namespace softnpu::fused::CPU_CAPABILITY {

namespace {

template <typename T>
void scaled_masked_softmax_rows(const T* x, const bool* mask, const int64_t* mask_rows, float scale, int64_t rows,
                                int64_t n, T* y) {
  using L = Lanes<T>;
  using F = Lanes<float>;
  using V = at::vec::Vectorized<float>;
  static_assert(L::kStep == F::kStep, "a vector of T holds as many elements as two of float");
  constexpr int64_t S = L::kStep;
  const int64_t full = n / S * S;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(n, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * n;
      const bool* mr = mask + mask_rows[r];
      // Masked lanes chosen by blend (no branch on the mask's random bits); the tail element by element.
      const V vscale(scale), vfill(-10000.f), vzero(0.f);
      V vmax(-std::numeric_limits<float>::infinity());  // scaled values may lie below the fill value
      for (int64_t j = 0; j < full; j += S) {
        alignas(64) float mf[S];
        for (int64_t k = 0; k < S; ++k) mf[k] = static_cast<float>(mr[j + k]);
        const auto v = L::load(xr + j);
        const V lo = V::blendv(v.lo * vscale, vfill, V::loadu(mf) != vzero);
        const V hi = V::blendv(v.hi * vscale, vfill, V::loadu(mf + S / 2) != vzero);
        lo.store(buf.data() + j);
        hi.store(buf.data() + j + S / 2);
        vmax = at::vec::maximum(vmax, at::vec::maximum(lo, hi));
      }
      float mx = at::vec::vec_reduce_all<float>([](const V& a, const V& b) { return at::vec::maximum(a, b); }, vmax);
      for (int64_t j = full; j < n; ++j) {
        buf[j] = mr[j] ? -10000.f : static_cast<float>(xr[j]) * scale;
        mx = std::max(mx, buf[j]);
      }
      const F::Val vmx(mx);
      F::Val vsum(0.f);
      for (int64_t j = 0; j < full; j += S) {
        F::Val e = F::load(buf.data() + j) - vmx;
        e = {e.lo.exp(), e.hi.exp()};
        F::store(buf.data() + j, e);
        vsum = vsum + e;
      }
      float sum = F::sum(vsum);
      for (int64_t j = full; j < n; ++j) {
        buf[j] = std::exp(buf[j] - mx);
        sum += buf[j];
      }
      const F::Val inv(1.f / sum);
      T* yr = y + r * n;
      for (int64_t j = 0; j < n; j += S) {
        const int64_t m = std::min(S, n - j);
        L::store(yr + j, F::load(buf.data() + j, m) * inv, m);
      }
    }
  });
}

// dx = scale * y * (dy - sum(dy * y)) per row, 0 at the masked positions: two passes over the row (the second from
// the cache).
template <typename T>
void scaled_masked_softmax_backward_rows(const T* dy, const T* y, const bool* mask, const int64_t* mask_rows,
                                         float scale, int64_t rows, int64_t n, T* dx) {
  using L = Lanes<T>;
  using V = at::vec::Vectorized<float>;
  constexpr int64_t S = L::kStep;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(n, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    const V vzero(0.f);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t off = r * n;
      const bool* mr = mask + mask_rows[r];
      typename L::Val dot(0.f);
      for (int64_t j = 0; j < n; j += S) {
        const int64_t m = std::min(S, n - j);
        dot = fmadd(L::load(dy + off + j, m), L::load(y + off + j, m), dot);
      }
      const typename L::Val vdot(L::sum(dot)), vscale(scale);
      for (int64_t j = 0; j < n; j += S) {
        const int64_t m = std::min(S, n - j);
        alignas(64) float mf[S] = {};
        for (int64_t k = 0; k < m; ++k) mf[k] = static_cast<float>(mr[j + k]);
        const auto d = vscale * L::load(y + off + j, m) * (L::load(dy + off + j, m) - vdot);
        const typename L::Val out(V::blendv(d.lo, vzero, V::loadu(mf) != vzero),
                                  V::blendv(d.hi, vzero, V::loadu(mf + S / 2) != vzero));
        L::store(dx + off + j, out, m);
      }
    }
  });
}

}  // namespace

void scaled_masked_softmax_backward(c10::ScalarType dtype, const void* dy, const void* y, const bool* mask,
                                    const int64_t* mask_rows, double scale, int64_t rows, int64_t n, void* dx) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "npu_scaled_masked_softmax_backward", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>)
      scaled_masked_softmax_backward_rows<scalar_t>(static_cast<const scalar_t*>(dy), static_cast<const scalar_t*>(y),
                                                    mask, mask_rows, static_cast<float>(scale), rows, n,
                                                    static_cast<scalar_t*>(dx));
  });
}

void scaled_masked_softmax(c10::ScalarType dtype, const void* x, const bool* mask, const int64_t* mask_rows,
                           double scale, int64_t rows, int64_t n, void* y) {
  // float16, float32, bfloat16: the dtypes the op accepts (checked by its caller).
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "npu_scaled_masked_softmax", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>)
      scaled_masked_softmax_rows<scalar_t>(static_cast<const scalar_t*>(x), mask, mask_rows,
                                           static_cast<float>(scale), rows, n, static_cast<scalar_t*>(y));
  });
}

}  // namespace softnpu::fused::CPU_CAPABILITY
