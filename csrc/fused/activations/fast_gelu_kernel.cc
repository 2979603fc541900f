// npu_fast_gelu's forward and backward kernels (compiled once per CPU capability: fused/cpu_kernels.h): one pass over
// contiguous elements, in parallel over chunks, in vectors of the compute type (fused/vectorized.h), where the
// composite x * sigmoid(1.702 x) makes three passes and two temporaries. The sigmoid is computed from
// e = exp(-1.702 |x|) <= 1 (s = 1 / (1 + e) for x >= 0, e / (1 + e) below), as torch_npu's FastGelu avoids an
// overflowing exponential.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "fused/cpu_kernels.h"
#include "fused/vectorized.h"

namespace softnpu::fused::CPU_CAPABILITY {

namespace {

// Elements per task for at::parallel_for: a task outweighs waking a thread.
constexpr int64_t kGrain = int64_t{1} << 15;

template <typename V>
V sigmoid_1702(const V& x) {
  using Acc = typename V::value_type;
  const V one(Acc(1));
  const V e = (x.abs() * V(Acc(-1.702))).exp();
  return V::blendv(one, e, x < V(Acc(0))) / (one + e);
}

template <typename V>
Two<V> sigmoid_1702(const Two<V>& x) { return {sigmoid_1702(x.lo), sigmoid_1702(x.hi)}; }

template <typename T>
void fast_gelu_elements(const T* x, int64_t n, T* y) {
  using L = Lanes<T>;
  constexpr int64_t S = L::kStep;
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += S) {
      const int64_t m = std::min(S, end - i);
      const auto v = L::load(x + i, m);
      L::store(y + i, v * sigmoid_1702(v), m);
    }
  });
}

// dx = grad * (s + 1.702 x s (1 - s)), s = sigmoid(1.702 x).
template <typename T>
void fast_gelu_backward_elements(const T* grad, const T* x, int64_t n, T* dx) {
  using L = Lanes<T>;
  using Val = typename L::Val;
  using Acc = typename L::Acc;
  constexpr int64_t S = L::kStep;
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    const Val one(Acc(1)), k(Acc(1.702));
    for (int64_t i = begin; i < end; i += S) {
      const int64_t m = std::min(S, end - i);
      const auto v = L::load(x + i, m);
      const auto s = sigmoid_1702(v);
      L::store(dx + i, L::load(grad + i, m) * fmadd(k * v * s, one - s, s), m);
    }
  });
}

}  // namespace

void fast_gelu(c10::ScalarType dtype, const void* x, int64_t n, void* y) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "npu_fast_gelu", [&] {
    fast_gelu_elements<scalar_t>(static_cast<const scalar_t*>(x), n, static_cast<scalar_t*>(y));
  });
}

void fast_gelu_backward(c10::ScalarType dtype, const void* grad, const void* x, int64_t n, void* dx) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "npu_fast_gelu_backward", [&] {
    fast_gelu_backward_elements<scalar_t>(static_cast<const scalar_t*>(grad), static_cast<const scalar_t*>(x), n,
                                          static_cast<scalar_t*>(dx));
  });
}

}  // namespace softnpu::fused::CPU_CAPABILITY
