// npu_trans_quant_param's int64 packing of a float32 quantization scale and offset, which npu_quant_matmul and
// npu_weight_quant_batchmatmul take as `scale` / `antiquant_scale` / `quant_scale`:
//   bits 0..31  the scale's float32 bits truncated to FP19 (sign, 8 exponent bits, 10 mantissa bits: the 13 low
//               bits zero), as the chip's dequantization unit reads it,
//   bits 37..45 the offset, rounded and clamped to a 9-bit signed integer [-256, 255],
//   bit 46      set (the flag of a packed scale).
#pragma once

#include <ATen/ATen.h>

#include <utility>

namespace softnpu::fused {

constexpr int64_t kFp19Mask = 0xFFFFE000;
constexpr int64_t kScaleFlag = int64_t{1} << 46;

// float32 -> its FP19 bits in the low 32 bits of an int64; round_mode 1 rounds the 13 dropped bits half to even.
inline at::Tensor fp19_bits(const at::Tensor& scale, int64_t round_mode) {
  at::Tensor bits = scale.contiguous().view(at::kInt).to(at::kLong).bitwise_and(0xFFFFFFFF);
  if (round_mode == 1)
    bits = (bits + 0xFFF + bits.bitwise_right_shift(13).bitwise_and(1)).bitwise_and(0xFFFFFFFF);
  return bits.bitwise_and(kFp19Mask);
}

// (float32 scale, float32 offset or undefined) -> the int64 packing, broadcast to their common shape.
inline at::Tensor pack_quant_param(const at::Tensor& scale, const at::Tensor& offset, int64_t round_mode) {
  at::Tensor out = fp19_bits(scale, round_mode).bitwise_or(kScaleFlag);
  if (offset.defined()) {
    const at::Tensor off = offset.round().clamp(-256, 255).to(at::kLong).bitwise_and(0x1FF).bitwise_left_shift(37);
    out = out.bitwise_or(off);
  }
  return out.contiguous();
}

// The int64 packing -> (float32 scale, float32 offset).
inline std::pair<at::Tensor, at::Tensor> unpack_quant_param(const at::Tensor& packed) {
  const at::Tensor scale = packed.bitwise_and(kFp19Mask).to(at::kInt).contiguous().view(at::kFloat);
  at::Tensor off = packed.bitwise_right_shift(37).bitwise_and(0x1FF);
  off = off - off.ge(256).to(at::kLong) * 512;  // 9-bit two's complement
  return {scale, off.to(at::kFloat)};
}

}  // namespace softnpu::fused
