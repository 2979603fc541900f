// int4 values carried in int32 (torch_npu's int4 container, e.g. dst_type=torch.quint4x2 of npu_dynamic_quant, the
// weight of npu_weight_quant_batchmatmul after npu_convert_weight_to_int4pack): 8 signed nibbles per int32 along the
// last dim, element 8i + j in bits 4j..4j+3 (the first element in the lowest nibble).
#pragma once

#include <ATen/ATen.h>

namespace softnpu::fused {

constexpr int64_t kInt4PerInt32 = 8;

// [..., 8n] int values in [-8, 7] (any integer dtype) -> [..., n] int32.
inline at::Tensor pack_int4(const at::Tensor& values) {
  const at::Tensor nibbles = values.to(at::kLong).bitwise_and(0xF).unflatten(-1, {-1, kInt4PerInt32});
  const at::Tensor shifts = at::arange(0, 32, 4, values.options().dtype(at::kLong));
  // Summed in int64 (the nibbles do not overlap), then reinterpreted as the int32 bit pattern.
  return nibbles.bitwise_left_shift(shifts).sum(-1).to(at::kInt);
}

// [..., n] int32 -> [..., 8n] values in [-8, 7] as `dtype`: nibble j shifted to the top bits, then arithmetically
// back down, which sign-extends it (two passes over int32, no wider intermediate).
inline at::Tensor unpack_int4(const at::Tensor& packed, c10::ScalarType dtype = at::kChar) {
  const at::Tensor up = at::arange(28, -4, -4, packed.options().dtype(at::kInt));  // 28 - 4j for nibble j
  return packed.unsqueeze(-1).bitwise_left_shift(up).bitwise_right_shift_(28).flatten(-2).to(dtype);
}

}  // namespace softnpu::fused
