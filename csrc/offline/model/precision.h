// force_fp16's storage on a host that computes in float32: float32 values rounded to the nearest float16 value.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace softnpu::offline {

// Rounds a float32 tensor's values to float16 precision in place (round to nearest even, overflow to infinity, as a
// float16 store does). One pass over the memory, vectorised with F16C where the host has it.
void round_to_half_(at::Tensor& t);

// The rounded values in a new tensor, `t` left as it is: for a value other nodes still read unrounded.
at::Tensor round_to_half(const at::Tensor& t);

// An op whose outputs are values of its inputs, or zeros (reshapes, transposes, gathers, slices, concatenation,
// max pooling, Relu, Max, Where, ...): from float16-representable inputs it makes representable outputs, so an fp16
// node of this type needs no output rounding (for a view, rounding was a copy).
bool keeps_half_values(const std::string& op_type);

}  // namespace softnpu::offline
