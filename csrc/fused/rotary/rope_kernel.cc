// The rotary embeddings' row kernels (compiled once per CPU capability: fused/cpu_kernels.h); rope_kernel.h says what
// they compute and prepares their tensors.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>

#include "fused/cpu_kernels.h"
#include "fused/vectorized.h"

namespace softnpu::fused::CPU_CAPABILITY {

namespace {

// The table's element offset of x's row r.
int64_t table_offset(const RopeRows& g, int64_t r) {
  int64_t off = 0;
  for (int64_t d = g.lead - 1; d >= 0; --d) {
    off += (r % g.xs[d]) * g.tstride[d];
    r /= g.xs[d];
  }
  return off;
}

// The row of x that is the k-th of those table row t is broadcast to (k over the broadcast dims).
int64_t x_row(const RopeRows& g, int64_t t, int64_t k) {
  int64_t row = 0, scale = 1;
  for (int64_t d = g.lead - 1; d >= 0; --d) {
    int64_t i;
    if (g.ts[d] == 1) {
      i = k % g.xs[d];
      k /= g.xs[d];
    } else {
      i = t % g.ts[d];
      t /= g.ts[d];
    }
    row += i * scale;
    scale *= g.xs[d];
  }
  return row;
}

// One row: y = x * c + rotate(x) * s, blocks of `block`, halves of h = block / 2. y may be x.
template <typename L, typename T>
inline void rope_row(const T* x, const T* c, const T* s, T* y, int64_t D, int64_t h) {
  for (int64_t j = 0; j < D; j += 2 * h)
    for (int64_t i = j; i < j + h; i += L::kStep) {
      const int64_t m = std::min(L::kStep, j + h - i);
      const auto a = L::load(x + i, m), b = L::load(x + i + h, m);
      L::store(y + i, a * L::load(c + i, m) - b * L::load(s + i, m), m);
      L::store(y + i + h, b * L::load(c + i + h, m) + a * L::load(s + i + h, m), m);
    }
}

// One row of the backward: dx = g * c + rotate^T(g * s) (rotate^T: (a, b) -> (b, -a)); with x, also dc += g * x and
// ds += g * rotate(x) (accumulators of the compute type).
template <typename L, typename T, typename Acc>
inline void rope_row_backward(const T* g, const T* x, const T* c, const T* s, T* dx, Acc* dc, Acc* ds, int64_t D,
                              int64_t h) {
  using A = std::conditional_t<L::kStep == 1, ScalarLanes<Acc>, Lanes<Acc>>;
  for (int64_t j = 0; j < D; j += 2 * h)
    for (int64_t i = j; i < j + h; i += L::kStep) {
      const int64_t m = std::min(L::kStep, j + h - i);
      const auto ga = L::load(g + i, m), gb = L::load(g + i + h, m);
      L::store(dx + i, ga * L::load(c + i, m) + gb * L::load(s + i + h, m), m);
      L::store(dx + i + h, gb * L::load(c + i + h, m) - ga * L::load(s + i, m), m);
      if (x) {
        const auto a = L::load(x + i, m), b = L::load(x + i + h, m);
        A::store(dc + i, fmadd(ga, a, A::load(dc + i, m)), m);
        A::store(dc + i + h, fmadd(gb, b, A::load(dc + i + h, m)), m);
        A::store(ds + i, A::load(ds + i, m) - ga * b, m);
        A::store(ds + i + h, fmadd(gb, a, A::load(ds + i + h, m)), m);
      }
    }
}

// Rows whose halves are narrower than a vector go element by element.
template <typename T>
inline bool rope_vectorized(int64_t h) {
  return h >= Lanes<T>::kStep / 2;
}

// Rows per task: about 32K elements, so that a task outweighs waking a thread.
int64_t grain(int64_t elements_per_row) { return std::max<int64_t>(1, (int64_t{1} << 15) / elements_per_row); }

}  // namespace

void rope_forward(c10::ScalarType dtype, const RopeRows& rows, int64_t half, const void* x, const void* cos,
                  const void* sin, void* y) {
  const int64_t D = rows.D;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rope_forward", [&] {
    const auto *xp = static_cast<const scalar_t*>(x), *cp = static_cast<const scalar_t*>(cos),
               *sp = static_cast<const scalar_t*>(sin);
    auto* yp = static_cast<scalar_t*>(y);
    const bool vec = rope_vectorized<scalar_t>(half);
    at::parallel_for(0, rows.rows, grain(D), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t t = table_offset(rows, r);
        if (vec)
          rope_row<Lanes<scalar_t>>(xp + r * D, cp + t, sp + t, yp + r * D, D, half);
        else
          rope_row<ScalarLanes<scalar_t>>(xp + r * D, cp + t, sp + t, yp + r * D, D, half);
      }
    });
  });
}

void rope_backward(c10::ScalarType dtype, const RopeRows& rows, int64_t half, const void* grad, const void* x,
                   const void* cos, const void* sin, void* dx, void* dcos, void* dsin) {
  const int64_t D = rows.D;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "rope_backward", [&] {
    using Acc = at::opmath_type<scalar_t>;
    const auto *gp = static_cast<const scalar_t*>(grad), *xp = static_cast<const scalar_t*>(x),
               *cp = static_cast<const scalar_t*>(cos), *sp = static_cast<const scalar_t*>(sin);
    auto* dp = static_cast<scalar_t*>(dx);
    auto *dcp = static_cast<Acc*>(dcos), *dsp = static_cast<Acc*>(dsin);
    const bool vec = rope_vectorized<scalar_t>(half);
    const auto row = [&](int64_t r, int64_t t, const scalar_t* xr, Acc* dc, Acc* ds) {
      if (vec)
        rope_row_backward<Lanes<scalar_t>>(gp + r * D, xr, cp + t, sp + t, dp + r * D, dc, ds, D, half);
      else
        rope_row_backward<ScalarLanes<scalar_t>>(gp + r * D, xr, cp + t, sp + t, dp + r * D, dc, ds, D, half);
    };
    if (!xp) {
      at::parallel_for(0, rows.rows, grain(D), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) row(r, table_offset(rows, r), nullptr, nullptr, nullptr);
      });
      return;
    }
    // Per table row: its rows of x in order, summed into the row's accumulators (zeroed by the caller).
    const int64_t repeats = rows.table_rows == 0 ? 0 : rows.rows / rows.table_rows;
    at::parallel_for(0, rows.table_rows, grain(D * std::max<int64_t>(repeats, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        for (int64_t k = 0; k < repeats; ++k) {
          const int64_t r = x_row(rows, t, k);
          row(r, t * D, xp + r * D, dcp + t * D, dsp + t * D);
        }
    });
  });
}

}  // namespace softnpu::fused::CPU_CAPABILITY
