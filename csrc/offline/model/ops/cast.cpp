// Type conversions: Cast and CastLike (with ONNX's float8 saturation, float8e8m0 rounding modes and the sub-byte
// integers) and BitCast.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

struct CastMode {
  bool saturate = true;
  std::string round_mode = "up";  // float8e8m0 only
};

CastMode cast_mode(const OpContext& ctx) {
  CastMode m{ctx.attrs.i("saturate", 1) != 0, ctx.attrs.s("round_mode", "up")};
  if (m.round_mode != "up" && m.round_mode != "down" && m.round_mode != "nearest")
    throw Unsupported("round_mode " + m.round_mode);
  return m;
}

// float8e8m0 holds a biased exponent only: the float32 exponent field, rounded by the mantissa as round_mode says.
at::Tensor to_e8m0(const at::Tensor& x, const CastMode& m) {
  auto bits = x.to(at::kFloat).view(at::kInt) & 0x7fffffff;
  auto exponent = at::bitwise_right_shift(bits, 23), mantissa = bits & 0x7fffff;
  auto nan = bits > 0x7f800000, inf = bits == 0x7f800000;
  at::Tensor up;
  if (m.round_mode == "up") up = mantissa > 0;
  else if (m.round_mode == "nearest") up = mantissa >= 0x400000;
  else up = at::zeros_like(mantissa, at::kBool);
  // A float32 subnormal is below 2^-126: it rounds between byte 0 (2^-127) and byte 1.
  up = at::where(exponent == 0, m.round_mode == "down" ? at::zeros_like(up) : mantissa > 0x400000, up);
  auto e = exponent + up.to(at::kInt);
  e = at::where(e > 254, at::full_like(e, m.saturate ? 254 : 255), e);
  e = at::where(inf, at::full_like(e, m.saturate ? 254 : 255), e);
  e = at::where(nan, at::full_like(e, 255), e);
  return e.to(at::kByte).view(at::kFloat8_e8m0fnu);
}

// ATen's float8 conversions round to nearest even but treat overflow per type (some saturate, some give NaN or
// infinity); ONNX decides it by `saturate`: the largest finite value, or NaN (infinity for float8e5m2).
at::Tensor to_float8(const at::Tensor& x, at::ScalarType to, const CastMode& m) {
  double max = to == at::kFloat8_e4m3fn ? 448.0 : to == at::kFloat8_e4m3fnuz ? 240.0 : 57344.0;
  auto xf = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
  at::Tensor y;
  if (m.saturate) {
    y = at::clamp(xf, -max, max);
  } else {
    double overflow = to == at::kFloat8_e5m2 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    auto big = at::abs(xf) > max;
    y = at::where(big & (xf > 0), overflow, at::where(big, -overflow, xf));
  }
  return y.to(to);
}

at::Tensor convert(const at::Tensor& x, at::ScalarType to, const CastMode& m) {
  if (x.scalar_type() == to) return storage_bytes(x).clone().view(to);
  if (sub_byte_bits(x.scalar_type())) return convert(sub_byte_values(x), to, m);
  // Integers wrap to the sub-byte type's bits, as a narrowing integer cast does; floats truncate first.
  if (sub_byte_bits(to)) return to_sub_byte(x.to(at::kLong), to);
  if (to == at::kFloat8_e8m0fnu) return to_e8m0(x, m);
  if (c10::isFloat8Type(to) && (x.is_floating_point() || x.is_complex())) return to_float8(x, to, m);
  return x.to(to);
}

Kernel cast(const OpContext& ctx) {
  auto to = scalar_type(static_cast<int32_t>(ctx.attrs.required_i("to")));
  auto m = cast_mode(ctx);
  return [to, m](const Tensors& in, Tensors& out) { out[0] = convert(in[0], to, m); };
}

Kernel cast_like(const OpContext& ctx) {
  auto m = cast_mode(ctx);
  return [m](const Tensors& in, Tensors& out) { out[0] = convert(in[0], in[1].scalar_type(), m); };
}

Kernel bit_cast(const OpContext& ctx) {
  auto to = scalar_type(static_cast<int32_t>(ctx.attrs.required_i("to")));
  return [to](const Tensors& in, Tensors& out) {
    if (c10::elementSize(in[0].scalar_type()) != c10::elementSize(to))
      throw Unsupported(std::string("BitCast between types of different sizes (") + c10::toString(in[0].scalar_type()) +
                        " to " + c10::toString(to) + ")");
    out[0] = in[0].contiguous().view(to).clone();
  };
}

const bool registered = register_ops({
    {"Cast", cast},
    {"CastLike", cast_like},
    {"BitCast", bit_cast},
});

}  // namespace

at::Tensor onnx_cast(const at::Tensor& x, at::ScalarType to, bool saturate, const std::string& round_mode) {
  return convert(x, to, CastMode{saturate, round_mode});
}

}  // namespace softnpu::offline
