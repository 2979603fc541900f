// The RMSNorm kernels npu_rms_norm, npu_add_rms_norm and npu_rms_norm_backward share (compiled once per CPU
// capability: fused/cpu_kernels.h): rows of n contiguous elements (n the elements gamma covers), in parallel over
// rows, each row read from memory once (its second pass reads it from the cache: a LLaMA row of 4096 bfloat16 is
// 8 KiB), in vectors of the compute type (fused/vectorized.h), outputs written where the caller points (the device
// outputs, through the ops' .out overloads).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "fused/cpu_kernels.h"
#include "fused/vectorized.h"

namespace softnpu::fused::CPU_CAPABILITY {

namespace {

// Rows per task for at::parallel_for: about 32K elements, so a task outweighs waking a thread.
inline int64_t rows_grain(int64_t n) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(n, 1)); }

// y = x * rstd * gamma with rstd = 1 / sqrt(mean(x^2) + eps) per row, where x = x1 (x2 null) or x = x1 + x2 rounded
// to T and written to sum (npu_add_rms_norm normalizes the sum as stored, as the chip does).
template <typename T>
void rms_norm_rows(const T* x1, const T* x2, const at::opmath_type<T>* gamma, double eps, int64_t rows, int64_t n,
                   T* y, at::opmath_type<T>* rstd, T* sum) {
  using L = Lanes<T>;
  using G = Lanes<at::opmath_type<T>>;
  using Acc = typename L::Acc;
  using Val = typename L::Val;
  constexpr int64_t S = L::kStep;
  at::parallel_for(0, rows, rows_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t off = r * n;
      Val sq(Acc(0));
      for (int64_t i = 0; i < n; i += S) {
        const int64_t m = std::min(S, n - i);
        Val a = L::load(x1 + off + i, m);
        if (x2) {
          a = a + L::load(x2 + off + i, m);
          L::store(sum + off + i, a, m);
          a = L::round(a);
        }
        sq = fmadd(a, a, sq);
      }
      const Acc inv = Acc(1) / std::sqrt(L::sum(sq) / static_cast<Acc>(n) + static_cast<Acc>(eps));
      rstd[r] = inv;
      const T* x = x2 ? sum : x1;
      const Val vinv(inv);
      for (int64_t i = 0; i < n; i += S) {
        const int64_t m = std::min(S, n - i);
        L::store(y + off + i, L::load(x + off + i, m) * vinv * G::load(gamma + i, m), m);
      }
    }
  });
}

// With xh = x * rstd: dx = rstd * (dy * gamma - xh * mean(dy * gamma * xh)) = rstd * dy * gamma - x * rstd^3 *
// mean(dy * gamma * x) per row, and dgamma = sum over rows of dy * xh, returned in the compute type. dgamma sums rows
// in a fixed number of chunks, each into its own accumulator, added in order: the result does not depend on the
// number of threads.
template <typename T>
void rms_norm_backward_rows(const T* dy, const T* x, const at::opmath_type<T>* gamma, const at::opmath_type<T>* rstd,
                            int64_t rows, int64_t n, T* dx, at::opmath_type<T>* dgamma) {
  using L = Lanes<T>;
  using G = Lanes<at::opmath_type<T>>;
  using Acc = typename L::Acc;
  using Val = typename L::Val;
  constexpr int64_t S = L::kStep;
  constexpr int64_t kChunks = 16;
  const int64_t chunks = std::max<int64_t>(1, std::min(rows, kChunks));
  std::vector<Acc> partial(static_cast<size_t>(chunks * n), Acc(0));
  at::parallel_for(0, chunks, 1, [&](int64_t cbegin, int64_t cend) {
    for (int64_t c = cbegin; c < cend; ++c) {
      Acc* dg = partial.data() + c * n;
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        const int64_t off = r * n;
        Val s(Acc(0));
        for (int64_t i = 0; i < n; i += S) {
          const int64_t m = std::min(S, n - i);
          s = fmadd(L::load(dy + off + i, m) * G::load(gamma + i, m), L::load(x + off + i, m), s);
        }
        const Acc rs = rstd[r];
        const Val vr(rs), vc(rs * rs * rs * L::sum(s) / static_cast<Acc>(n));
        for (int64_t i = 0; i < n; i += S) {
          const int64_t m = std::min(S, n - i);
          const Val d = L::load(dy + off + i, m), xv = L::load(x + off + i, m);
          L::store(dx + off + i, vr * d * G::load(gamma + i, m) - xv * vc, m);
          G::store(dg + i, fmadd(d * xv, vr, G::load(dg + i, m)), m);
        }
      }
    }
  });
  std::memcpy(dgamma, partial.data(), sizeof(Acc) * n);
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t i = 0; i < n; ++i) dgamma[i] += partial[c * n + i];
}

}  // namespace

void rms_norm(c10::ScalarType dtype, const void* x1, const void* x2, const void* gamma, double eps, int64_t rows,
              int64_t n, void* y, void* rstd, void* sum) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rms_norm", [&] {
    using Acc = at::opmath_type<scalar_t>;
    rms_norm_rows<scalar_t>(static_cast<const scalar_t*>(x1), static_cast<const scalar_t*>(x2),
                            static_cast<const Acc*>(gamma), eps, rows, n, static_cast<scalar_t*>(y),
                            static_cast<Acc*>(rstd), static_cast<scalar_t*>(sum));
  });
}

void rms_norm_backward(c10::ScalarType dtype, const void* dy, const void* x, const void* gamma, const void* rstd,
                       int64_t rows, int64_t n, void* dx, void* dgamma) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rms_norm_backward", [&] {
    using Acc = at::opmath_type<scalar_t>;
    rms_norm_backward_rows<scalar_t>(static_cast<const scalar_t*>(dy), static_cast<const scalar_t*>(x),
                                     static_cast<const Acc*>(gamma), static_cast<const Acc*>(rstd), rows, n,
                                     static_cast<scalar_t*>(dx), static_cast<Acc*>(dgamma));
  });
}

}  // namespace softnpu::fused::CPU_CAPABILITY
