// Linear quantization: QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked), DynamicQuantizeLinear,
// and the integer and quantized matmul and convolution (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv).
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

// A scale or zero point broadcast against x: a scalar (per tensor), a 1-D tensor along `axis` (per axis), or x's
// rank with `axis` divided into blocks of block_size (blocked).
at::Tensor broadcast_param(const at::Tensor& p, const at::Tensor& x, int64_t axis, int64_t block_size) {
  if (p.numel() == 1 && p.dim() <= 1) return p.reshape({});
  int64_t a = normalize_axis(axis, x.dim());
  if (block_size > 0) {
    if (p.dim() != x.dim()) throw Unsupported("a blocked scale needs the input's rank");
    return p.repeat_interleave(block_size, a).narrow(a, 0, x.size(a));
  }
  if (p.dim() != 1) throw Unsupported("a per-axis scale must be 1-D");
  std::vector<int64_t> shape(x.dim(), 1);
  shape[a] = p.size(0);
  return p.reshape(shape);
}

// The values of a quantized tensor or zero point (sub-byte integers have no kernels of their own).
at::Tensor numeric(const at::Tensor& t) { return sub_byte_bits(t.scalar_type()) ? sub_byte_values(t) : t; }

// Integer quantization: rint, then the zero point, then the type's range (ONNX's order).
at::Tensor saturate_round(const at::Tensor& v, const at::Tensor& zero_point, at::ScalarType type) {
  auto q = at::round(v.to(at::kDouble));
  if (zero_point.defined()) q = q + numeric(zero_point).to(at::kDouble);
  double lo, hi;
  switch (type) {
    case at::kInt4: lo = -8, hi = 7; break;
    case at::kUInt4: lo = 0, hi = 15; break;
    case at::kInt2: lo = -2, hi = 1; break;
    case at::kUInt2: lo = 0, hi = 3; break;
    case at::kByte: lo = 0, hi = 255; break;
    case at::kChar: lo = -128, hi = 127; break;
    case at::kUInt16: lo = 0, hi = 65535; break;
    case at::kShort: lo = -32768, hi = 32767; break;
    case at::kInt: lo = -2147483648.0, hi = 2147483647.0; break;
    default: throw Unsupported(std::string("quantization to ") + c10::toString(type));
  }
  auto clamped = at::clamp(q, lo, hi);
  return sub_byte_bits(type) ? to_sub_byte(clamped, type) : clamped.to(type);
}

Kernel quantize_linear(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 1), block_size = ctx.attrs.i("block_size", 0);
  int64_t output_dtype = ctx.attrs.i("output_dtype", 0), precision = ctx.attrs.i("precision", 0);
  bool saturate = ctx.attrs.i("saturate", 1);
  at::ScalarType attr_type = output_dtype ? scalar_type(static_cast<int32_t>(output_dtype)) : at::kByte;
  at::ScalarType precision_type = precision ? scalar_type(static_cast<int32_t>(precision)) : at::kFloat;
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    bool has_zp = in.size() > 2 && in[2].defined();
    auto type = has_zp ? in[2].scalar_type() : attr_type;
    auto scale = broadcast_param(in[1], x, axis, block_size);
    // The division in the inputs' own precision (a half input over a half scale rounds to half), unless `precision`.
    auto v = precision ? at::div(x.to(precision_type), scale.to(precision_type)) : at::div(x, scale);
    if (c10::isFloat8Type(type)) {
      out[0] = onnx_cast(v, type, saturate);
      return;
    }
    out[0] = saturate_round(v, has_zp ? broadcast_param(numeric(in[2]), x, axis, block_size) : at::Tensor(), type);
  };
}

Kernel dequantize_linear(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 1), block_size = ctx.attrs.i("block_size", 0);
  int64_t output_dtype = ctx.attrs.i("output_dtype", 0);
  bool has_output_dtype = output_dtype != 0;
  at::ScalarType attr_type = has_output_dtype ? scalar_type(static_cast<int32_t>(output_dtype)) : at::kFloat;
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    auto dx = numeric(x).to(at::kFloat);
    if (in.size() > 2 && in[2].defined()) dx = dx - broadcast_param(numeric(in[2]), x, axis, block_size).to(at::kFloat);
    auto y = dx * broadcast_param(in[1], x, axis, block_size);
    out[0] = y.to(has_output_dtype ? attr_type : in[1].scalar_type());
  };
}

Kernel dynamic_quantize_linear(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    auto x = in[0].to(at::kFloat);
    auto zero = at::zeros({}, x.options());
    auto rmin = at::minimum(x.numel() ? at::amin(x) : zero, zero), rmax = at::maximum(x.numel() ? at::amax(x) : zero, zero);
    auto scale = (rmax - rmin) / 255.0f;
    auto zp = at::clamp(at::round(-rmin / scale), 0, 255);
    out[0] = at::clamp(at::round(x / scale) + zp, 0, 255).to(at::kByte);
    out[1] = scale;
    out[2] = zp.to(at::kByte);
  };
}

// A zero point of an integer matmul operand: per tensor, per row of a (a column vector), or per column of b.
at::Tensor shifted(const at::Tensor& x, const Tensors& in, int zp_index, bool rows) {
  auto v = x.to(at::kInt);
  if (static_cast<int>(in.size()) <= zp_index || !in[zp_index].defined()) return v;
  auto zp = in[zp_index].to(at::kInt);
  if (zp.numel() > 1 && rows) zp = zp.reshape({-1, 1});
  return v - zp;
}

Kernel matmul_integer(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    // int64 products cannot overflow where ONNX's int32 accumulation is defined.
    auto a = shifted(in[0], in, 2, true).to(at::kLong), b = shifted(in[1], in, 3, false).to(at::kLong);
    out[0] = at::matmul(a, b).to(at::kInt);
  };
}

// A per-output-channel parameter of a convolution weight of `rank` dims (one value per tensor stays a scalar).
at::Tensor per_channel(const at::Tensor& p, int64_t rank) {
  if (p.numel() == 1) return p.reshape({});
  std::vector<int64_t> shape(rank, 1);
  shape[0] = p.numel();
  return p.reshape(shape);
}

// The Conv kernel of the same attributes on double values: exact for int8 operands, whose sums stay below 2^53.
Kernel conv_integer(const OpContext& ctx) {
  auto conv = find_op("Conv")->build(ctx);
  return [conv](const Tensors& in, Tensors& out) {
    auto x = in[0].to(at::kDouble), w = in[1].to(at::kDouble);
    if (in.size() > 2 && in[2].defined()) x = x - in[2].to(at::kDouble);
    if (in.size() > 3 && in[3].defined()) w = w - per_channel(in[3].to(at::kDouble), w.dim());
    Tensors r(1);
    conv({x, w}, r);
    out[0] = r[0].to(at::kInt);
  };
}

Kernel qlinear_matmul(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    auto a = shifted(in[0], {in[0], in[1], in[2]}, 2, true).to(at::kLong);
    auto b = shifted(in[3], {in[3], in[4], in[5]}, 2, false).to(at::kLong);
    auto c = at::matmul(a, b).to(at::kDouble);
    // The combined scale in the scales' own type, as the reference computes it: a's per row (a column of M), b's
    // per column (a row of N), so a per-row and a per-column scale make the [M, N] table of their products.
    auto a_scale = in[1].numel() > 1 ? in[1].reshape({-1, 1}) : in[1];
    auto s = a_scale * in[4] / in[6];
    out[0] = saturate_round(c * s.to(at::kDouble), in[7], in[7].scalar_type());
  };
}

Kernel qlinear_conv(const OpContext& ctx) {
  auto conv = find_op("Conv")->build(ctx);
  return [conv](const Tensors& in, Tensors& out) {
    auto x = in[0].to(at::kDouble) - in[2].to(at::kDouble);
    auto w = in[3].to(at::kDouble);
    auto w_zp = in[5].to(at::kDouble), w_scale = in[4].to(at::kDouble);
    w = w - per_channel(w_zp, w.dim());
    Tensors r(1);
    Tensors args{x, w};
    if (in.size() > 8 && in[8].defined()) args.push_back(in[8].to(at::kDouble));
    conv(args, r);
    // Per output channel: the integer accumulation times x_scale * w_scale, requantized by y_scale.
    auto scale = in[1].to(at::kDouble) * w_scale;
    if (scale.numel() > 1) {
      std::vector<int64_t> shape(r[0].dim(), 1);
      shape[1] = scale.numel();
      scale = scale.reshape(shape);
    }
    out[0] = saturate_round(r[0] * scale / in[6].to(at::kDouble), in[7], in[7].scalar_type());
  };
}

const bool registered = register_ops({
    {"QuantizeLinear", quantize_linear},
    {"DequantizeLinear", dequantize_linear},
    {"DynamicQuantizeLinear", dynamic_quantize_linear},
    {"MatMulInteger", matmul_integer},
    {"ConvInteger", conv_integer},
    {"QLinearMatMul", qlinear_matmul},
    {"QLinearConv", qlinear_conv},
});

}  // namespace

}  // namespace softnpu::offline
