// npu_moe_init_routing_v2's quant modes beyond int8 (init_routing_v2.cpp does -1, 0 and 1 row by row), applied to the
// routed rows [R, H] once they are gathered, as op-plugin's reference for the op computes them
// (test/test_custom_ops/test_npu_moe_init_routing_v2.py; the modes' list is in torch_npu's documentation,
// docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing_v2.md):
//   2 / 3 (16 / 17 clamp amax to at least 1e-4 first): MXFP8 "RoundScale", per block of 32 values of a row
//     (the last block zero padded): amax = max|v| (float16 x: of v truncated to bfloat16), e = the exponent of
//     amax / fp8_max rounded up (at least -126), y = fp8(v * 2^-e) rounded to nearest even; expanded_scale float8_e8m0
//     (e + 127) [R, ceil_align(ceil(H / 32), 2)], a block with amax 0 or not finite and the padding column 0xFF (NaN,
//     as the reference's zero scale converts). y: float8_e5m2 (2, 16) or float8_e4m3fn (3, 17).
//   4 / 5 (14 / 15 clamp): the same scale per group of 128 values, kept as float32 (0 for an all-zero group)
//     [R, ceil(H / 128)], y = fp8(clip(v / scale, +-fp8_max)), NaN to 0.
//   9: MXFP4 e2m1, npu_dynamic_mx_quant's OCP scale (2^(floor(log2 amax) - 2) per 32 values): y uint8 [R, H / 2],
//     two values per byte, expanded_scale uint8 (e8m0) [R, ceil(H / 64), 2].
//   6 / 7 / 8: HiFloat8 (uint8 codes, quantization/hifloat8.h's rounding: nearest, ties away from zero) of v (6), of
//     v * scale clipped to +-32768 with a float32 (1,) scale (7, per tensor), or of v / s clipped with
//     s = max|v| / 32768 per row (8, expanded_scale s; an all-zero row divides by 1).
//   13: int4 dynamic, per row: v = x * scale (a (1, H) smooth scale, optional), s = max|v| / 7, y = round(v / s)
//     half to even in [-8, 7], two per byte (the first in the low nibble, as every int4 container here),
//     expanded_scale s [R] (CANN's feature request ops-transformer#2977 defines the denominator 7 and the packing).
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "fused/common.h"
#include "fused/quantization/hifloat8.h"

namespace softnpu::fused::routing_quant {

enum class Kind { kMxfp8RoundScale, kMxfp8Group, kMxfp4, kInt4, kHiF8Cast, kHiF8Tensor, kHiF8Token };

struct Mode {
  Kind kind;
  bool clamp_amax = false;
  c10::ScalarType fp8 = at::kFloat8_e4m3fn;
  float fp8_max = 448.f;
};

constexpr int64_t kMxBlock = 32, kGroup = 128;
constexpr float kAmaxFloor = 1e-4f, kHiF8Max = 32768.f;

// The mode of a quant_mode this header computes (quantized() says which).
inline bool quantized(int64_t quant_mode) {
  return (quant_mode >= 2 && quant_mode <= 9) || (quant_mode >= 13 && quant_mode <= 17);
}

inline Mode mode_of(int64_t quant_mode) {
  const bool e5m2 = quant_mode == 2 || quant_mode == 4 || quant_mode == 14 || quant_mode == 16;
  Mode m{};
  m.fp8 = e5m2 ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn;
  m.fp8_max = e5m2 ? 57344.f : 448.f;
  m.clamp_amax = quant_mode >= 14;
  if (quant_mode == 6) m.kind = Kind::kHiF8Cast;
  else if (quant_mode == 7) m.kind = Kind::kHiF8Tensor;
  else if (quant_mode == 8) m.kind = Kind::kHiF8Token;
  else if (quant_mode == 9) m.kind = Kind::kMxfp4;
  else if (quant_mode == 13) m.kind = Kind::kInt4;
  else if (quant_mode == 2 || quant_mode == 3 || quant_mode == 16 || quant_mode == 17) m.kind = Kind::kMxfp8RoundScale;
  else m.kind = Kind::kMxfp8Group;
  return m;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline bool hifloat8(const Mode& m) {
  return m.kind == Kind::kHiF8Cast || m.kind == Kind::kHiF8Tensor || m.kind == Kind::kHiF8Token;
}
inline c10::ScalarType x_type(const Mode& m) {
  return m.kind == Kind::kMxfp4 || m.kind == Kind::kInt4 || hifloat8(m) ? at::kByte : m.fp8;
}
inline int64_t x_cols(const Mode& m, int64_t h) { return m.kind == Kind::kMxfp4 || m.kind == Kind::kInt4 ? h / 2 : h; }

inline c10::ScalarType scale_type(const Mode& m) {
  switch (m.kind) {
    case Kind::kMxfp8RoundScale: return at::kFloat8_e8m0fnu;
    case Kind::kMxfp4: return at::kByte;
    default: return at::kFloat;
  }
}

inline std::vector<int64_t> scale_shape(const Mode& m, int64_t rows, int64_t h) {
  switch (m.kind) {
    case Kind::kMxfp8RoundScale: return {rows, ceil_div(ceil_div(h, kMxBlock), 2) * 2};
    case Kind::kMxfp8Group: return {rows, ceil_div(h, kGroup)};
    case Kind::kMxfp4: return {rows, ceil_div(h, 2 * kMxBlock), 2};
    default: return {rows};
  }
}

// The power-of-two exponent of amax / fp8_max rounded up (float32 bits: the exponent, plus one when any mantissa bit
// is set), at least -126, for finite positive amax.
inline at::Tensor round_scale_exponent(const at::Tensor& amax, float fp8_max) {
  const at::Tensor bits = (amax / fp8_max).contiguous().view(at::kInt);
  const at::Tensor exponent = bits.bitwise_right_shift(23).bitwise_and(0xFF) - 127;
  return (exponent + bits.bitwise_and(0x7FFFFF).ne(0).to(at::kInt)).clamp_min(-126);
}

// rows [R, H] (x's dtype) -> (expanded_x rows, expanded_scale rows). scale: mode 13's (1, H) smooth scale, mode 7's
// (1,) scale, or undefined.
inline std::pair<at::Tensor, at::Tensor> quantize_rows(const Mode& m, const at::Tensor& rows,
                                                       const at::Tensor& smooth) {
  const int64_t r = rows.size(0), h = rows.size(1);
  at::Tensor v = rows.to(at::kFloat);
  if (m.kind == Kind::kHiF8Cast) return {encode_hifloat8(v), at::zeros({r}, v.options())};
  if (m.kind == Kind::kHiF8Tensor)
    return {encode_hifloat8((v * smooth).clamp(-kHiF8Max, kHiF8Max)), at::zeros({r}, v.options())};
  if (m.kind == Kind::kHiF8Token) {
    const at::Tensor s = v.abs().amax(-1, /*keepdim=*/true) / kHiF8Max;
    return {encode_hifloat8((v / at::where(s.eq(0), 1.f, s)).clamp(-kHiF8Max, kHiF8Max)), s.flatten()};
  }
  if (m.kind == Kind::kInt4) {
    if (smooth.defined()) v = v * smooth;
    const at::Tensor s = v.abs().amax(-1, /*keepdim=*/true) / 7.f;
    // Through int8, which wraps negative values into the byte's two's complement (a float cast to uint8 would not).
    const at::Tensor q =
        at::where(s.eq(0), 0.f, v / s).round().clamp(-8, 7).to(at::kChar).view(at::kByte).bitwise_and(0xF);
    const at::Tensor pairs = q.unflatten(-1, {h / 2, 2});
    return {pairs.select(-1, 0).bitwise_or(pairs.select(-1, 1).bitwise_left_shift(4)).contiguous(), s.flatten()};
  }
  if (m.kind == Kind::kMxfp4) {
    using Fn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, c10::string_view, int64_t, int64_t,
                                                  std::optional<int64_t>, double, double);
    static const auto mx = npu_op<Fn>("npu::npu_dynamic_mx_quant");
    auto [y, scale] = mx.call(rows, -1, "rint", 296, kMxBlock, 0, 0., 0.);
    return {y, scale};
  }
  const int64_t block = m.kind == Kind::kMxfp8RoundScale ? kMxBlock : kGroup, blocks = ceil_div(h, block);
  const at::Tensor padded = at::constant_pad_nd(v, {0, blocks * block - h}).view({r, blocks, block});
  // The reference takes the RoundScale amax of float16 rows from their bfloat16 truncation (the high 16 bits).
  at::Tensor magnitude = padded;
  if (m.kind == Kind::kMxfp8RoundScale && rows.scalar_type() == at::kHalf)
    magnitude = padded.contiguous().view(at::kInt).bitwise_and(static_cast<int32_t>(0xFFFF0000)).view(at::kFloat);
  magnitude = magnitude.abs().nan_to_num(INFINITY, INFINITY, INFINITY);
  at::Tensor amax = magnitude.amax(-1);
  if (m.clamp_amax) amax = amax.clamp_min(kAmaxFloor);
  const at::Tensor exponent = round_scale_exponent(amax, m.fp8_max);
  const at::Tensor zero = amax.eq(0), finite = amax.isfinite();
  if (m.kind == Kind::kMxfp8RoundScale) {
    // y = v * 2^-e (0 for an all-zero block, -inf times v for an infinite amax), cast to fp8 rounding to nearest even.
    const at::Tensor inverse = at::where(zero, 0.f, at::where(finite, at::exp2(-exponent.to(at::kFloat)), -INFINITY));
    const at::Tensor y = (padded * inverse.unsqueeze(-1)).view({r, blocks * block}).narrow(1, 0, h).to(m.fp8);
    at::Tensor scale = at::where(zero.logical_or(finite.logical_not()), 255, exponent + 127).to(at::kByte);
    if (blocks % 2) scale = at::constant_pad_nd(scale, {0, 1}, 255);
    return {y.contiguous(), scale.view(at::kFloat8_e8m0fnu)};
  }
  const at::Tensor scale = at::where(zero, 0.f, at::exp2(exponent.to(at::kFloat)));
  const at::Tensor divisor = at::where(zero, 1.f, scale).unsqueeze(-1);
  const at::Tensor y = (padded / divisor).clamp(-m.fp8_max, m.fp8_max).nan_to_num(0.f).view({r, blocks * block});
  return {y.narrow(1, 0, h).to(m.fp8).contiguous(), scale};
}

}  // namespace softnpu::fused::routing_quant
