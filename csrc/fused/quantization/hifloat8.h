// HiFloat8 (torch_npu.hifloat8; Huawei's tapered-precision 8-bit float, "Ascend HiFloat8 Format for Deep Learning",
// arXiv 2409.16626), decoded to float32. After the sign bit, a prefix-coded dot field gives the exponent's width D:
// 11 -> 4, 10 -> 3, 01 -> 2, 001 -> 1, 0001 -> 0, and 0000 the denormal mode. The exponent is sign-magnitude with
// an implicit leading magnitude bit (D = 2 stores E in {+-2, +-3}); the bits left are the mantissa (3 bits for
// D <= 2, 2 for D = 3, 1 for D = 4). Denormals are 2^(m - 23) for the 3 bits m = 1..7; 0x00 is the only zero, 0x80
// the only NaN, and the largest-exponent pattern with mantissa 1 (0x6F, 0xEF) is +-infinity. Encoding rounds to the
// nearest value with ties away from zero (the format's TA rounding, as the CANN goldens' en_dtypes converts).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

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

// float -> HiFloat8 code: the nearest of the 128 non-negative codes' values (ties to the larger), the sign added
// unless the result is zero. Infinity rounds like the next step of the top binade (1.5 * 2^15), so magnitudes from
// 40960 on become infinity; NaN is 0x80.
inline uint8_t hifloat8_code(float x) {
  static const std::array<std::pair<double, uint8_t>, 128> magnitudes = [] {
    std::array<std::pair<double, uint8_t>, 128> t{};
    for (int c = 0; c < 128; ++c) {
      const float v = hifloat8_value(static_cast<uint8_t>(c));
      t[c] = {std::isinf(v) ? 49152. : static_cast<double>(v), static_cast<uint8_t>(c)};
    }
    std::sort(t.begin(), t.end());
    return t;
  }();
  if (std::isnan(x)) return 0x80;
  const double a = std::fabs(static_cast<double>(x));
  const auto above = std::lower_bound(magnitudes.begin(), magnitudes.end(), std::make_pair(a, uint8_t{0}));
  uint8_t code = 0x6F;  // past the top: infinity
  if (above != magnitudes.end()) {
    code = above->second;
    if (above != magnitudes.begin() && a - (above - 1)->first < above->first - a) code = (above - 1)->second;
  }
  return code == 0 ? 0 : static_cast<uint8_t>(code | (std::signbit(x) ? 0x80 : 0));
}

// float32 values -> uint8 HiFloat8 codes of the same shape.
inline at::Tensor encode_hifloat8(const at::Tensor& values) {
  const at::Tensor v = values.to(at::kFloat).contiguous();
  at::Tensor out = at::empty(v.sizes(), v.options().dtype(at::kByte));
  const float* in = v.const_data_ptr<float>();
  uint8_t* o = out.mutable_data_ptr<uint8_t>();
  for (int64_t i = 0, n = v.numel(); i < n; ++i) o[i] = hifloat8_code(in[i]);
  return out;
}

}  // namespace softnpu::fused
