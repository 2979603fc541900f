// HiFloat8 (torch_npu.hifloat8; Huawei's tapered-precision 8-bit float, "Ascend HiFloat8 Format for Deep Learning",
// arXiv 2409.16626), decoded to float32. After the sign bit, a prefix-coded dot field gives the exponent's width D:
// 11 -> 4, 10 -> 3, 01 -> 2, 001 -> 1, 0001 -> 0, and 0000 the denormal mode. The exponent is sign-magnitude with
// an implicit leading magnitude bit (D = 2 stores E in {+-2, +-3}); the bits left are the mantissa (3 bits for
// D <= 2, 2 for D = 3, 1 for D = 4). Denormals are 2^(m - 23) for the 3 bits m = 1..7; 0x00 is the only zero, 0x80
// the only NaN, and the largest-exponent pattern with mantissa 1 (0x6F, 0xEF) is +-infinity.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace softnpu::fused {

inline float hifloat8_value(uint8_t code) {
  if (code == 0x80) return std::numeric_limits<float>::quiet_NaN();
  const float sign = (code & 0x80) ? -1.f : 1.f;
  const int bits = code & 0x7F;
  if (bits < 0x08) return bits == 0 ? 0.f : sign * std::ldexp(1.f, bits - 23);  // denormal mode (or zero)
  // (dot prefix threshold, exponent width D, mantissa bits), widest exponent first.
  int width = 0, mantissa = 3, rest = bits & 0x7;
  if (bits >= 0x60) width = 4, mantissa = 1, rest = bits & 0x1F;
  else if (bits >= 0x40) width = 3, mantissa = 2, rest = bits & 0x1F;
  else if (bits >= 0x20) width = 2, rest = bits & 0x1F;
  else if (bits >= 0x10) width = 1, rest = bits & 0xF;
  const int m = rest & ((1 << mantissa) - 1), field = rest >> mantissa;
  int e = 0;
  if (width > 0) {
    const int magnitude = (1 << (width - 1)) | (field & ((1 << (width - 1)) - 1));
    e = (field >> (width - 1)) ? -magnitude : magnitude;
  }
  if (width == 4 && e == 15 && m == 1) return sign * std::numeric_limits<float>::infinity();
  return sign * std::ldexp(1.f + static_cast<float>(m) / static_cast<float>(1 << mantissa), e);
}

// 1-byte HiFloat8 codes (any 1-byte dtype) -> float32 values of the same shape.
inline at::Tensor decode_hifloat8(const at::Tensor& codes) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = hifloat8_value(static_cast<uint8_t>(c));
    return t;
  }();
  const at::Tensor lut = at::from_blob(const_cast<float*>(table.data()), {256}, at::kFloat).to(codes.device());
  const at::Tensor idx = codes.contiguous().view(at::kByte).to(at::kLong);
  return lut.index_select(0, idx.flatten()).view(codes.sizes());
}

}  // namespace softnpu::fused
