// Row kernels' element access: elements of any floating dtype loaded as, and stored from, values of their compute type
// (float32 for float16/bfloat16, converted per vector, never as whole tensors). Lanes<T> works on vectors through
// ATen's at::vec, whose width is fixed when a file is compiled: included only by the CPU kernels compiled once per
// CPU capability (cpu_kernels.h), each build in its own namespace softnpu::fused::<capability>, as ATen's kernels
// are. ScalarLanes<T> is the same interface one element at a time, for rows too short for a vector. A kernel written
// against the interface (Val, kStep, load, store, round, sum, fmadd) runs with either.
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>

namespace softnpu::fused::CPU_CAPABILITY {

// Two vectors of the compute type: as many elements as one vector of a reduced-precision type holds.
template <typename V>
struct Two {
  V lo, hi;
  Two(V l, V h) : lo(l), hi(h) {}
  explicit Two(typename V::value_type s) : lo(s), hi(s) {}
};
template <typename V>
Two<V> operator+(const Two<V>& a, const Two<V>& b) { return {a.lo + b.lo, a.hi + b.hi}; }
template <typename V>
Two<V> operator-(const Two<V>& a, const Two<V>& b) { return {a.lo - b.lo, a.hi - b.hi}; }
template <typename V>
Two<V> operator*(const Two<V>& a, const Two<V>& b) { return {a.lo * b.lo, a.hi * b.hi}; }
template <typename V>
Two<V> fmadd(const Two<V>& a, const Two<V>& b, const Two<V>& c) {
  return {at::vec::fmadd(a.lo, b.lo, c.lo), at::vec::fmadd(a.hi, b.hi, c.hi)};
}
template <typename Acc>
Acc fmadd(Acc a, Acc b, Acc c) { return a * b + c; }

template <typename T>
struct Lanes {
  using Acc = at::opmath_type<T>;
  using V = at::vec::Vectorized<Acc>;
  using Val = Two<V>;
  static constexpr int64_t kHalf = V::size();
  static constexpr int64_t kStep = 2 * kHalf;

  // The first n (<= kStep) elements at p; the rest of the lanes are zero.
  static Val load(const T* p, int64_t n = kStep) {
    if constexpr (at::is_reduced_floating_point_v<T>) {
      using R = at::vec::Vectorized<T>;
      auto [a, b] = at::vec::convert_to_float<T>(n == kStep ? R::loadu(p) : R::loadu(p, n));
      return {a, b};
    } else {
      if (n == kStep) return {V::loadu(p), V::loadu(p + kHalf)};
      return {V::loadu(p, std::min(n, kHalf)), n > kHalf ? V::loadu(p + kHalf, n - kHalf) : V(Acc(0))};
    }
  }

  // Stores the first n (<= kStep) lanes of v at p, rounded to T.
  static void store(T* p, const Val& v, int64_t n = kStep) {
    if constexpr (at::is_reduced_floating_point_v<T>) {
      const auto r = at::vec::convert_from_float<T>(v.lo, v.hi);
      if (n == kStep)
        r.store(p);
      else
        r.store(p, static_cast<int>(n));
    } else if (n == kStep) {
      v.lo.store(p);
      v.hi.store(p + kHalf);
    } else {
      v.lo.store(p, static_cast<int>(std::min(n, kHalf)));
      if (n > kHalf) v.hi.store(p + kHalf, static_cast<int>(n - kHalf));
    }
  }

  // v rounded to T and back: the values a kernel stored, as later kernels read them.
  static Val round(const Val& v) {
    if constexpr (at::is_reduced_floating_point_v<T>) {
      auto [a, b] = at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(v.lo, v.hi));
      return {a, b};
    } else {
      return v;
    }
  }

  static Acc sum(const Val& v) {
    return at::vec::vec_reduce_all<Acc>([](const V& x, const V& y) { return x + y; }, v.lo + v.hi);
  }
};

template <typename T>
struct ScalarLanes {
  using Acc = at::opmath_type<T>;
  using Val = Acc;
  static constexpr int64_t kStep = 1;
  static Val load(const T* p, int64_t = 1) { return static_cast<Acc>(*p); }
  static void store(T* p, Val v, int64_t = 1) { *p = static_cast<T>(v); }
  static Val round(Val v) { return static_cast<Acc>(static_cast<T>(v)); }
  static Acc sum(Val v) { return v; }
};

}  // namespace softnpu::fused::CPU_CAPABILITY
