// What the fused ops share: calling an npu op from C++ (below autograd, from an autograd kernel), the compute dtype
// of half inputs, and where the gradient of a broadcast input goes.
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace softnpu::fused {

// The typed handle of npu::<name> (looked up once per call site).
template <typename Signature>
c10::TypedOperatorHandle<Signature> npu_op(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).typed<Signature>();
}

// Half inputs compute in float32 (as the NPU's vector and cube units accumulate), float64 in float64.
inline c10::ScalarType compute_type(c10::ScalarType t) { return at::toOpMathType(t); }

// Whether a tensor of `sizes` broadcasts to `target` (without taking target's shape itself).
inline bool broadcasts_to(c10::IntArrayRef sizes, c10::IntArrayRef target) {
  if (sizes.size() > target.size()) return false;
  const size_t lead = target.size() - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] != 1 && sizes[i] != target[lead + i]) return false;
  return true;
}

inline bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

}  // namespace softnpu::fused
