// Elementwise ONNX ops: unary math, activations, binary arithmetic with numpy broadcasting, comparisons, logic.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

bool is_wide_unsigned(at::ScalarType t) { return t == at::kUInt16 || t == at::kUInt32 || t == at::kUInt64; }

// ATen has almost no kernels for uint16/32/64: those run in int64 and are cast back (exact within int64's range; a
// comparison's bool result stays bool).
template <typename F>
at::Tensor widened(const Tensors& in, F f) {
  auto type = in[0].scalar_type();
  if (!is_wide_unsigned(type)) return f(in);
  Tensors wide;
  for (const auto& t : in) wide.push_back(t.defined() && is_wide_unsigned(t.scalar_type()) ? t.to(at::kLong) : t);
  auto r = f(wide);
  return r.scalar_type() == at::kBool ? r : r.to(type);
}

using UnaryFn = at::Tensor (*)(const at::Tensor&);

template <UnaryFn F>
Kernel unary(const OpContext&) {
  return [](const Tensors& in, Tensors& out) { out[0] = widened(in, [](const Tensors& x) { return F(x[0]); }); };
}

at::Tensor neg(const at::Tensor& x) { return at::neg(x); }
at::Tensor abs(const at::Tensor& x) { return at::abs(x); }
at::Tensor exp(const at::Tensor& x) { return at::exp(x); }
at::Tensor log(const at::Tensor& x) { return at::log(x); }
at::Tensor sqrt(const at::Tensor& x) { return at::sqrt(x); }
at::Tensor reciprocal(const at::Tensor& x) { return at::reciprocal(x); }
at::Tensor floor(const at::Tensor& x) { return at::floor(x); }
at::Tensor ceil(const at::Tensor& x) { return at::ceil(x); }
at::Tensor round(const at::Tensor& x) { return at::round(x); }  // half to even, as ONNX
at::Tensor sign(const at::Tensor& x) { return at::sign(x); }
at::Tensor relu(const at::Tensor& x) { return at::relu(x); }
at::Tensor sigmoid(const at::Tensor& x) { return at::sigmoid(x); }
at::Tensor tanh(const at::Tensor& x) { return at::tanh(x); }
at::Tensor erf(const at::Tensor& x) { return at::erf(x); }
at::Tensor sin(const at::Tensor& x) { return at::sin(x); }
at::Tensor cos(const at::Tensor& x) { return at::cos(x); }
at::Tensor tan(const at::Tensor& x) { return at::tan(x); }
at::Tensor asin(const at::Tensor& x) { return at::asin(x); }
at::Tensor acos(const at::Tensor& x) { return at::acos(x); }
at::Tensor atan(const at::Tensor& x) { return at::atan(x); }
at::Tensor sinh(const at::Tensor& x) { return at::sinh(x); }
at::Tensor cosh(const at::Tensor& x) { return at::cosh(x); }
at::Tensor asinh(const at::Tensor& x) { return at::asinh(x); }
at::Tensor acosh(const at::Tensor& x) { return at::acosh(x); }
at::Tensor atanh(const at::Tensor& x) { return at::atanh(x); }
at::Tensor softsign(const at::Tensor& x) { return x / (1 + at::abs(x)); }
at::Tensor softplus(const at::Tensor& x) { return at::log1p(at::exp(x)); }
at::Tensor logical_not(const at::Tensor& x) { return at::logical_not(x); }
at::Tensor bitwise_not(const at::Tensor& x) { return at::bitwise_not(x); }
at::Tensor isnan(const at::Tensor& x) { return at::isnan(x); }
at::Tensor identity(const at::Tensor& x) { return x; }
at::Tensor mish(const at::Tensor& x) { return x * at::tanh(at::log1p(at::exp(x))); }

using BinaryFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&);


template <BinaryFn F>
Kernel binary(const OpContext& ctx) {
  if (ctx.opset < 7 && ctx.attrs.i("broadcast", 0) && ctx.attrs.has("axis"))
    throw Unsupported("legacy broadcast with an axis (opset < 7)");
  return [](const Tensors& in, Tensors& out) {
    out[0] = widened(in, [](const Tensors& x) { return F(x[0], x[1]); });
  };
}

at::Tensor add(const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }
at::Tensor sub(const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); }
at::Tensor mul(const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); }
// ONNX integer division truncates toward zero (C semantics); float division is true division.
at::Tensor div(const at::Tensor& a, const at::Tensor& b) {
  return a.is_floating_point() || b.is_floating_point() ? at::div(a, b) : at::div(a, b, "trunc");
}
at::Tensor pow(const at::Tensor& a, const at::Tensor& b) {
  // The result takes the base's type (ONNX), while ATen would promote.
  return at::pow(a, b.is_floating_point() && !a.is_floating_point() ? b : b.to(a.scalar_type()))
      .to(a.scalar_type());
}
at::Tensor equal(const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }
at::Tensor less(const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }
at::Tensor less_equal(const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); }
at::Tensor greater(const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }
at::Tensor greater_equal(const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); }
at::Tensor logical_and(const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); }
at::Tensor logical_or(const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); }
at::Tensor logical_xor(const at::Tensor& a, const at::Tensor& b) { return at::logical_xor(a, b); }
at::Tensor bitwise_and(const at::Tensor& a, const at::Tensor& b) { return at::bitwise_and(a, b); }
at::Tensor bitwise_or(const at::Tensor& a, const at::Tensor& b) { return at::bitwise_or(a, b); }
at::Tensor bitwise_xor(const at::Tensor& a, const at::Tensor& b) { return at::bitwise_xor(a, b); }
at::Tensor prelu(const at::Tensor& x, const at::Tensor& slope) { return at::where(x < 0, x * slope, x); }

Kernel mod(const OpContext& ctx) {
  bool fmod = ctx.attrs.i("fmod", 0);
  return [fmod](const Tensors& in, Tensors& out) {
    out[0] = widened(in, [fmod](const Tensors& x) {
      return fmod || x[0].is_floating_point() ? at::fmod(x[0], x[1]) : at::remainder(x[0], x[1]);
    });
  };
}

Kernel bit_shift(const OpContext& ctx) {
  auto dir = ctx.attrs.s("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") throw Unsupported("direction must be LEFT or RIGHT");
  bool left = dir == "LEFT";
  return [left](const Tensors& in, Tensors& out) {
    out[0] = widened(in, [left](const Tensors& x) {
      return left ? at::bitwise_left_shift(x[0], x[1]) : at::bitwise_right_shift(x[0], x[1]);
    });
  };
}

// Max, Min, Sum, Mean: variadic with broadcasting.
template <int Which>
Kernel variadic(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    out[0] = widened(in, [](const Tensors& x) {
      at::Tensor r = x[0];
      for (size_t i = 1; i < x.size(); ++i) {
        if (Which == 0) r = at::maximum(r, x[i]);
        if (Which == 1) r = at::minimum(r, x[i]);
        if (Which == 2 || Which == 3) r = at::add(r, x[i]);
      }
      if (Which == 3) r = r / static_cast<double>(x.size());
      return x.size() == 1 ? r.clone() : r;
    });
  };
}

Kernel leaky_relu(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 0.01f);
  return [a](const Tensors& in, Tensors& out) { out[0] = at::leaky_relu(in[0], a); };
}

Kernel elu(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 1.0f);
  return [a](const Tensors& in, Tensors& out) { out[0] = at::elu(in[0], a); };
}

Kernel selu(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 1.67326319217681884765625f), g = ctx.attrs.f("gamma", 1.05070102214813232421875f);
  return [a, g](const Tensors& in, Tensors& out) {
    out[0] = at::where(in[0] > 0, in[0] * g, (at::exp(in[0]) - 1) * (a * g));
  };
}

Kernel celu(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 1.0f);
  return [a](const Tensors& in, Tensors& out) { out[0] = at::celu(in[0], a); };
}

Kernel hard_sigmoid(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 0.2f), b = ctx.attrs.f("beta", 0.5f);
  return [a, b](const Tensors& in, Tensors& out) { out[0] = at::clamp(in[0] * a + b, 0, 1); };
}

Kernel hard_swish(const OpContext&) {
  return [](const Tensors& in, Tensors& out) { out[0] = in[0] * at::clamp(in[0] / 6 + 0.5, 0, 1); };
}

Kernel thresholded_relu(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 1.0f);
  return [a](const Tensors& in, Tensors& out) { out[0] = at::where(in[0] > a, in[0], at::zeros_like(in[0])); };
}

Kernel swish(const OpContext& ctx) {
  double a = ctx.attrs.f("alpha", 1.0f);
  return [a](const Tensors& in, Tensors& out) { out[0] = in[0] * at::sigmoid(in[0] * a); };
}

Kernel gelu(const OpContext& ctx) {
  auto approx = ctx.attrs.s("approximate", "none");
  if (approx != "none" && approx != "tanh") throw Unsupported("approximate must be none or tanh");
  return [approx](const Tensors& in, Tensors& out) { out[0] = at::gelu(in[0], approx); };
}

Kernel clip(const OpContext& ctx) {
  bool attrs = ctx.opset < 11;
  double lo = ctx.attrs.f("min", -std::numeric_limits<float>::max()), hi = ctx.attrs.f("max", std::numeric_limits<float>::max());
  return [attrs, lo, hi](const Tensors& in, Tensors& out) {
    if (attrs) {
      out[0] = at::clamp(in[0], lo, hi);
      return;
    }
    at::Tensor r = in[0];
    if (in.size() > 1 && in[1].defined()) r = at::maximum(r, in[1].to(r.scalar_type()));
    if (in.size() > 2 && in[2].defined()) r = at::minimum(r, in[2].to(r.scalar_type()));
    out[0] = r.is_same(in[0]) ? r.clone() : r;
  };
}

Kernel where(const OpContext&) {
  return [](const Tensors& in, Tensors& out) { out[0] = at::where(in[0], in[1], in[2]); };
}

Kernel isinf(const OpContext& ctx) {
  bool pos = ctx.attrs.i("detect_positive", 1), neg = ctx.attrs.i("detect_negative", 1);
  return [pos, neg](const Tensors& in, Tensors& out) {
    auto r = at::zeros(in[0].sizes(), in[0].options().dtype(at::kBool));
    if (pos) r = r | at::isposinf(in[0]);
    if (neg) r = r | at::isneginf(in[0]);
    out[0] = r;
  };
}

const bool registered = register_ops({
    {"Neg", unary<neg>},
    {"Abs", unary<abs>},
    {"Exp", unary<exp>},
    {"Log", unary<log>},
    {"Sqrt", unary<sqrt>},
    {"Reciprocal", unary<reciprocal>},
    {"Floor", unary<floor>},
    {"Ceil", unary<ceil>},
    {"Round", unary<round>},
    {"Sign", unary<sign>},
    {"Relu", unary<relu>},
    {"Sigmoid", unary<sigmoid>},
    {"Tanh", unary<tanh>},
    {"Erf", unary<erf>},
    {"Sin", unary<sin>},
    {"Cos", unary<cos>},
    {"Tan", unary<tan>},
    {"Asin", unary<asin>},
    {"Acos", unary<acos>},
    {"Atan", unary<atan>},
    {"Sinh", unary<sinh>},
    {"Cosh", unary<cosh>},
    {"Asinh", unary<asinh>},
    {"Acosh", unary<acosh>},
    {"Atanh", unary<atanh>},
    {"Softsign", unary<softsign>},
    {"Softplus", unary<softplus>},
    {"Not", unary<logical_not>},
    {"BitwiseNot", unary<bitwise_not>},
    {"IsNaN", unary<isnan>},
    {"Identity", unary<identity>},
    {"Mish", unary<mish>},
    {"Add", binary<add>},
    {"Sub", binary<sub>},
    {"Mul", binary<mul>},
    {"Div", binary<div>},
    {"Pow", binary<pow>},
    {"Equal", binary<equal>},
    {"Less", binary<less>},
    {"LessOrEqual", binary<less_equal>},
    {"Greater", binary<greater>},
    {"GreaterOrEqual", binary<greater_equal>},
    {"And", binary<logical_and>},
    {"Or", binary<logical_or>},
    {"Xor", binary<logical_xor>},
    {"BitwiseAnd", binary<bitwise_and>},
    {"BitwiseOr", binary<bitwise_or>},
    {"BitwiseXor", binary<bitwise_xor>},
    {"PRelu", binary<prelu>},
    {"Mod", mod},
    {"BitShift", bit_shift},
    {"Max", variadic<0>},
    {"Min", variadic<1>},
    {"Sum", variadic<2>},
    {"Mean", variadic<3>},
    {"LeakyRelu", leaky_relu},
    {"Elu", elu},
    {"Selu", selu},
    {"Celu", celu},
    {"HardSigmoid", hard_sigmoid},
    {"HardSwish", hard_swish},
    {"ThresholdedRelu", thresholded_relu},
    {"Gelu", gelu},
    {"Swish", swish},
    {"Clip", clip},
    {"Where", where},
    {"IsInf", isinf},
});

}  // namespace

}  // namespace softnpu::offline
