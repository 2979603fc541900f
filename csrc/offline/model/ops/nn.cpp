// Neural-network ONNX ops: convolution, GEMM and MatMul (the cube ops, with the activation and bias the lowering fuses
// into them), max and global pooling (AveragePool is image.cpp's window pooling), normalization, softmax.
#include <ATen/ATen.h>

#include "model/ops/direct_conv.h"
#include "model/ops/layer_norm.h"
#include "model/ops/op.h"
#include "model/ops/pooling.h"
#include "model/ops/winograd.h"

namespace softnpu::offline {

namespace {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string auto_pad;
  bool ceil_mode = false;
};

Window window(const OpContext& ctx, size_t spatial_hint = 0) {
  Window w;
  w.kernel = ctx.attrs.ints("kernel_shape");
  w.strides = ctx.attrs.ints("strides");
  w.dilations = ctx.attrs.ints("dilations");
  w.pads = ctx.attrs.ints("pads");
  w.auto_pad = ctx.attrs.s("auto_pad", "NOTSET");
  w.ceil_mode = ctx.attrs.i("ceil_mode", 0);
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" && w.auto_pad != "VALID")
    throw Unsupported("auto_pad " + w.auto_pad);
  return w;
}

// ONNX's padding of each spatial dim at its beginning and end (auto_pad SAME decides them from the sizes).
void onnx_pads(const at::Tensor& x, const Window& w, const std::vector<int64_t>& kernel, std::vector<int64_t>* begin,
               std::vector<int64_t>* end) {
  size_t n = kernel.size();
  std::vector<int64_t> strides = w.strides.empty() ? std::vector<int64_t>(n, 1) : w.strides;
  std::vector<int64_t> dil = w.dilations.empty() ? std::vector<int64_t>(n, 1) : w.dilations;
  begin->assign(n, 0);
  end->assign(n, 0);
  if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      int64_t in = x.size(2 + i);
      int64_t out = (in + strides[i] - 1) / strides[i];
      int64_t total = std::max<int64_t>((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in, 0);
      (*begin)[i] = w.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      (*end)[i] = total - (*begin)[i];
    }
  } else if (w.auto_pad == "NOTSET" && !w.pads.empty()) {
    if (w.pads.size() != 2 * n) throw Unsupported("pads has " + std::to_string(w.pads.size()) + " values for " + std::to_string(n) + " spatial dims");
    for (size_t i = 0; i < n; ++i) (*begin)[i] = w.pads[i], (*end)[i] = w.pads[i + n];
  }
}

// The symmetric padding ATen takes, after padding the input itself where ONNX's begin and end pads differ (or
// auto_pad asks for SAME).
at::Tensor pad_input(const at::Tensor& x, const Window& w, const std::vector<int64_t>& kernel, double value,
                     std::vector<int64_t>* sym, bool pooling = false) {
  size_t n = kernel.size();
  std::vector<int64_t> dil = w.dilations.empty() ? std::vector<int64_t>(n, 1) : w.dilations;
  std::vector<int64_t> begin, end;
  onnx_pads(x, w, kernel, &begin, &end);
  sym->assign(n, 0);
  // ATen's pooling takes at most half the (dilated) kernel as padding.
  bool within = true;
  for (size_t i = 0; i < n && pooling; ++i) within &= begin[i] <= ((kernel[i] - 1) * dil[i] + 1) / 2;
  if (begin == end && within) {
    *sym = begin;
    return x;
  }
  std::vector<int64_t> p;
  for (size_t i = n; i-- > 0;) p.push_back(begin[i]), p.push_back(end[i]);
  return at::constant_pad_nd(x, p, value);
}

// An optional input: undefined when absent.
at::Tensor optional(const Tensors& in, size_t i) { return i < in.size() ? in[i] : at::Tensor(); }

using direct::Activation;

// The activation the lowering fused into the node (passes.cpp).
Activation activation(const OpContext& ctx) {
  auto a = ctx.attrs.s("softnpu_activation", "");
  return a == "Relu" ? Activation::kRelu : a == "Gelu" ? Activation::kGelu : a == "GeluTanh" ? Activation::kGeluTanh
       : a == "Tanh" ? Activation::kTanh : Activation::kNone;
}

// The fused activation on ATen's output, in place.
void activate_(at::Tensor& y, Activation act) {
  if (act == Activation::kRelu) y.relu_();
  if (act == Activation::kGelu) at::gelu_(y, "none");
  if (act == Activation::kGeluTanh) at::gelu_(y, "tanh");
  if (act == Activation::kTanh) y.tanh_();
}

Kernel conv(const OpContext& ctx) {
  auto w = window(ctx);
  int64_t group = ctx.attrs.i("group", 1);
  auto act = activation(ctx);
  bool relu = act == Activation::kRelu;  // the lowering fuses no other activation into a convolution
  // The executor's layout pass gave the node a transformed filter: Winograd's (m) or the direct kernel's. Their
  // kernels store an fp16 node's output as float16 values themselves (the executor does not round it again).
  int m = static_cast<int>(ctx.attrs.i("softnpu_winograd", 0));
  bool half = ctx.attrs.s("softnpu_precision", "") == "fp16";
  if (m)
    return [w, m, relu, half](const Tensors& in, Tensors& out) {
      const auto& x = in[0];
      std::vector<int64_t> begin, end;
      onnx_pads(x, w, {3, 3}, &begin, &end);
      out[0] = winograd::conv(x, in[1], m, optional(in, 2), optional(in, 3), begin[0], begin[1],
                              x.size(2) + begin[0] + end[0] - 2, x.size(3) + begin[1] + end[1] - 2, relu, half);
    };
  if (ctx.attrs.i("softnpu_direct", 0))
    return [w, act, half](const Tensors& in, Tensors& out) {
      const auto& x = in[0];
      const auto& filter = in[1];  // [OC, KH, KW, C] in size
      std::vector<int64_t> kernel{filter.size(1), filter.size(2)}, begin, end;
      auto strides = w.strides.empty() ? std::vector<int64_t>{1, 1} : w.strides;
      auto dil = w.dilations.empty() ? std::vector<int64_t>{1, 1} : w.dilations;
      onnx_pads(x, w, kernel, &begin, &end);
      int64_t oh = (x.size(2) + begin[0] + end[0] - dil[0] * (kernel[0] - 1) - 1) / strides[0] + 1;
      int64_t ow = (x.size(3) + begin[1] + end[1] - dil[1] * (kernel[1] - 1) - 1) / strides[1] + 1;
      out[0] = direct::conv(x, filter, optional(in, 2), optional(in, 3), strides, dil, begin[0], begin[1], oh, ow, act,
                            half);
    };
  return [w, group, act](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    const auto& weight = in[1];
    std::vector<int64_t> kernel(weight.sizes().begin() + 2, weight.sizes().end());
    size_t n = kernel.size();
    std::vector<int64_t> sym;
    auto xp = pad_input(x, w, kernel, 0.0, &sym);
    // Channels-last weights (the executor's layout) take channels-last activations.
    if (xp.dim() == 4 && weight.is_contiguous(at::MemoryFormat::ChannelsLast) && !weight.is_contiguous() && !xp.is_meta())
      xp = xp.contiguous(at::MemoryFormat::ChannelsLast);
    auto y = at::convolution(xp, weight, optional(in, 2), w.strides.empty() ? std::vector<int64_t>(n, 1) : w.strides,
                             sym, w.dilations.empty() ? std::vector<int64_t>(n, 1) : w.dilations, false,
                             std::vector<int64_t>(n, 0), group);
    if (in.size() > 3 && in[3].defined()) y.add_(in[3]);  // the residual the lowering fused (passes.cpp)
    activate_(y, act);
    out[0] = y;
  };
}

// The full transposed convolution (no padding), then cropped by each side's padding: ONNX's pads may differ at the
// two ends, and output_shape / SAME decide them from the sizes.
Kernel conv_transpose(const OpContext& ctx) {
  auto w = window(ctx);
  int64_t group = ctx.attrs.i("group", 1);
  auto output_padding = ctx.attrs.ints("output_padding");
  auto output_shape = ctx.attrs.ints("output_shape");
  auto act = activation(ctx);
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    const auto& weight = in[1];
    size_t n = weight.dim() - 2;
    auto strides = w.strides.empty() ? std::vector<int64_t>(n, 1) : w.strides;
    auto dil = w.dilations.empty() ? std::vector<int64_t>(n, 1) : w.dilations;
    auto opad = output_padding.empty() ? std::vector<int64_t>(n, 0) : output_padding;
    std::vector<int64_t> begin(n, 0), end(n, 0), full(n);
    for (size_t i = 0; i < n; ++i) full[i] = strides[i] * (x.size(2 + i) - 1) + opad[i] + (weight.size(2 + i) - 1) * dil[i] + 1;
    bool same = w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER";
    if (!output_shape.empty() || same) {
      for (size_t i = 0; i < n; ++i) {
        int64_t target = !output_shape.empty() ? output_shape[output_shape.size() - n + i] : x.size(2 + i) * strides[i];
        int64_t total = full[i] - target;
        // ONNX: SAME_UPPER puts the odd unit of padding at the end, anything else at the beginning. A target past
        // the full result grows it at the end, where no input reaches (the bias only).
        begin[i] = total < 0 ? 0 : w.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        end[i] = total - begin[i];
      }
    } else if (!w.pads.empty() && w.auto_pad == "NOTSET") {
      for (size_t i = 0; i < n; ++i) begin[i] = w.pads[i], end[i] = w.pads[i + n];
    }
    at::Tensor bias = in.size() > 2 ? in[2] : at::Tensor();
    // output_padding in ATen must stay below the stride; it only adds rows at the end, which cropping handles too.
    std::vector<int64_t> aten_opad(n, 0);
    for (size_t i = 0; i < n; ++i) aten_opad[i] = opad[i] < strides[i] || opad[i] < dil[i] ? opad[i] : 0;
    auto y = at::convolution(x, weight, {}, strides, std::vector<int64_t>(n, 0), dil, true, aten_opad, group);
    for (size_t i = 0; i < n; ++i) {
      if (end[i] < 0) {
        std::vector<int64_t> grow(2 * (y.dim() - 2 - i), 0);
        grow[grow.size() - 1] = -end[i];
        y = at::constant_pad_nd(y, grow, 0);
        end[i] = 0;
      }
      int64_t len = y.size(2 + i) - begin[i] - end[i];
      if (len < 0) throw Unsupported("padding larger than the output");
      y = y.narrow(2 + i, begin[i], len);
    }
    std::vector<int64_t> bshape(y.dim(), 1);
    bshape[1] = -1;
    y = bias.defined() ? y + bias.reshape(bshape) : y.contiguous();
    activate_(y, act);
    out[0] = y;
  };
}

// The outputs of a product the lowering merged from products of the same rows (softnpu_split, passes.cpp): blocks of
// its columns, views of the one result.
void split_columns(const at::Tensor& y, const std::vector<int64_t>& widths, Tensors& out) {
  if (widths.empty()) {
    out[0] = y;
    return;
  }
  int64_t begin = 0;
  for (size_t k = 0; k < widths.size(); ++k) {
    out[k] = y.narrow(-1, begin, widths[k]);
    begin += widths[k];
  }
}

// A Gemm or MatMul whose matrix the executor's layout pass packed (softnpu_packed): softnpu's kernel, with the bias,
// the residual (the fourth input) and the activation in its epilogue, and the fp16 node's rounding of its output.
Kernel packed_matmul(const OpContext& ctx) {
  auto act = activation(ctx);
  bool half = ctx.attrs.s("softnpu_precision", "") == "fp16";
  auto split = ctx.attrs.ints("softnpu_split");
  return [act, half, split](const Tensors& in, Tensors& out) {
    split_columns(direct::matmul(in[0], in[1], optional(in, 2), optional(in, 3), act, half), split, out);
  };
}

Kernel gemm(const OpContext& ctx) {
  if (ctx.attrs.i("softnpu_packed", 0)) return packed_matmul(ctx);
  double alpha = ctx.attrs.f("alpha", 1.0f), beta = ctx.attrs.f("beta", 1.0f);
  bool ta = ctx.attrs.i("transA", 0), tb = ctx.attrs.i("transB", 0);
  auto act = activation(ctx);
  return [=](const Tensors& in, Tensors& out) {
    auto a = ta ? in[0].t() : in[0];
    auto b = tb ? in[1].t() : in[1];
    at::Tensor y;
    if (in.size() > 2 && in[2].defined())
      y = at::addmm(in[2], a, b, beta, alpha);
    else
      y = alpha == 1.0 ? at::mm(a, b) : at::mm(a, b) * alpha;
    if (in.size() > 3 && in[3].defined()) y.add_(in[3]);  // the residual the lowering fused (passes.cpp)
    activate_(y, act);
    out[0] = y;
  };
}

Kernel matmul(const OpContext& ctx) {
  if (ctx.attrs.i("softnpu_packed", 0)) return packed_matmul(ctx);
  auto act = activation(ctx);
  auto split = ctx.attrs.ints("softnpu_split");
  return [act, split](const Tensors& in, Tensors& out) {
    at::Tensor y;
    if (in.size() > 2 && in[2].defined() && in[0].dim() >= 2 && in[1].dim() == 2) {
      // The lowering's matmul+bias: one GEMM over the flattened rows.
      auto sizes = in[0].sizes().vec();
      auto rows = in[0].reshape({-1, sizes.back()});
      sizes.back() = in[1].size(1);
      y = at::addmm(in[2], rows, in[1]).view(sizes);
    } else {
      y = at::matmul(in[0], in[1]);
      if (in.size() > 2 && in[2].defined()) y = y + in[2];
    }
    if (in.size() > 3 && in[3].defined()) y.add_(in[3]);  // the residual the lowering fused (passes.cpp)
    activate_(y, act);
    split_columns(y, split, out);
  };
}

Kernel batch_norm(const OpContext& ctx) {
  double eps = ctx.attrs.f("epsilon", 1e-5f);
  double momentum = ctx.attrs.f("momentum", 0.9f);
  bool training = ctx.attrs.i("training_mode", 0);
  if (ctx.opset < 14 && ctx.num_outputs > 1) throw Unsupported("the training outputs of BatchNormalization before opset 14");
  if (ctx.opset < 7 && ctx.attrs.i("spatial", 1) == 0) throw Unsupported("spatial=0");
  return [=](const Tensors& in, Tensors& out) {
    if (!training) {
      out[0] = at::batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.0, eps, false);
      return;
    }
    // Training mode: the batch's statistics (population variance), and the running ones updated with momentum.
    const auto& x = in[0];
    std::vector<int64_t> dims{0}, shape(x.dim(), 1);
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    shape[1] = -1;
    auto mean = x.mean(dims);
    auto var = x.var(dims, /*unbiased=*/false);
    out[0] = (x - mean.reshape(shape)) / at::sqrt(var.reshape(shape) + eps) * in[1].reshape(shape) + in[2].reshape(shape);
    if (out.size() > 1) out[1] = in[3] * momentum + mean * (1 - momentum);
    if (out.size() > 2) out[2] = in[4] * momentum + var * (1 - momentum);
  };
}

// Opset 18 takes one scale and bias per group, opset 21 one per channel.
Kernel group_norm(const OpContext& ctx) {
  double eps = ctx.attrs.f("epsilon", 1e-5f);
  int64_t groups = ctx.attrs.required_i("num_groups");
  bool per_group = ctx.opset < 21;
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t c = x.size(1);
    auto scale = per_group ? in[1].repeat_interleave(c / groups) : in[1];
    auto bias = per_group ? in[2].repeat_interleave(c / groups) : in[2];
    auto xf = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
    out[0] = at::group_norm(xf, groups, scale.to(xf.scalar_type()), bias.to(xf.scalar_type()), eps).to(x.scalar_type());
  };
}

Kernel instance_norm(const OpContext& ctx) {
  double eps = ctx.attrs.f("epsilon", 1e-5f);
  return [eps](const Tensors& in, Tensors& out) {
    out[0] = at::instance_norm(in[0], in[1], in[2], {}, {}, true, 0.0, eps, false);
  };
}

Kernel layer_norm(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", -1);
  double eps = ctx.attrs.f("epsilon", 1e-5f);
  return [axis, eps](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t a = normalize_axis(axis, x.dim());
    at::Tensor bias = in.size() > 2 && in[2].defined() ? in[2] : at::Tensor();
    if (out.size() == 1 && layer_norm::applies(x, a, in[1], bias)) {
      out[0] = layer_norm::normalize(x, in[1], bias, eps);
      return;
    }
    std::vector<int64_t> shape(x.sizes().begin() + a, x.sizes().end());
    auto scale = in[1].expand(shape).contiguous();
    if (bias.defined()) bias = bias.expand(shape).contiguous();
    auto xf = x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
    auto [y, mean, rstd] = at::native_layer_norm(xf, shape, scale.to(xf.scalar_type()),
                                                 bias.defined() ? bias.to(xf.scalar_type()) : bias, eps);
    out[0] = y.to(x.scalar_type());
    if (out.size() > 1) out[1] = mean;
    if (out.size() > 2) out[2] = rstd;
  };
}

template <bool Log>
Kernel softmax(const OpContext& ctx) {
  bool legacy = ctx.opset < 13;
  int64_t axis = ctx.attrs.i("axis", legacy ? 1 : -1);
  return [legacy, axis](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t a = normalize_axis(axis, x.dim());
    if (!legacy) {
      out[0] = Log ? at::log_softmax(x, a) : at::softmax(x, a);
      return;
    }
    // Before opset 13 the input is coerced to 2-D at the axis.
    auto flat = x.reshape({c10::multiply_integers(x.sizes().begin(), x.sizes().begin() + a), -1});
    out[0] = (Log ? at::log_softmax(flat, 1) : at::softmax(flat, 1)).reshape(x.sizes());
  };
}

Kernel hardmax(const OpContext& ctx) {
  bool legacy = ctx.opset < 13;
  int64_t axis = ctx.attrs.i("axis", legacy ? 1 : -1);
  return [legacy, axis](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t a = normalize_axis(axis, x.dim());
    auto v = legacy ? x.reshape({c10::multiply_integers(x.sizes().begin(), x.sizes().begin() + a), -1}) : x;
    int64_t d = legacy ? 1 : a;
    auto idx = at::argmax(v, d, true);
    out[0] = at::zeros_like(v).scatter_(d, idx, 1).reshape(x.sizes());
  };
}

Kernel max_pool(const OpContext& ctx) {
  auto w = window(ctx);
  bool indices = ctx.has_output(1);
  bool column_major = ctx.attrs.i("storage_order", 0);
  if (indices && w.kernel.size() != 2) throw Unsupported("the Indices output of a pooling that is not 2-D");
  return [w, indices, column_major](const Tensors& in, Tensors& out) {
    size_t n = w.kernel.size();
    std::vector<int64_t> sym;
    bool integral = !in[0].is_floating_point();
    double low = integral ? static_cast<double>(std::numeric_limits<int64_t>::min()) : -std::numeric_limits<double>::infinity();
    auto x = pad_input(in[0], w, w.kernel, low, &sym, true);
    auto strides = w.strides.empty() ? std::vector<int64_t>(n, 1) : w.strides;
    auto dil = w.dilations.empty() ? std::vector<int64_t>(n, 1) : w.dilations;
    auto xf = integral ? x.to(at::kFloat) : x;
    at::Tensor y;
    if (indices) {
      if (!x.is_same(in[0])) throw Unsupported("the Indices output with padding beyond half the kernel");
      auto [values, plane] = at::max_pool2d_with_indices(xf, w.kernel, strides, sym, dil, w.ceil_mode);
      // ATen's index is within each (n, c) plane, row-major; ONNX's counts over the whole tensor, in storage_order.
      int64_t h = in[0].size(2), wd = in[0].size(3);
      auto idx = column_major ? (plane % wd) * h + at::div(plane, wd, "floor") : plane;
      auto base = at::arange(in[0].size(0) * in[0].size(1), at::TensorOptions().dtype(at::kLong).device(plane.device()))
                      .reshape({in[0].size(0), in[0].size(1), 1, 1}) * (h * wd);
      out[1] = idx + base;
      out[0] = integral ? values.to(in[0].scalar_type()) : values;
      return;
    }
    if (n == 1) y = at::max_pool1d(xf, w.kernel, strides, sym, dil, w.ceil_mode);
    else if (n == 2 && pooling::supported(xf) && dil == std::vector<int64_t>{1, 1})
      y = pooling::max_pool2d(xf, w.kernel, strides, sym, w.ceil_mode);
    else if (n == 2) y = at::max_pool2d(xf, w.kernel, strides, sym, dil, w.ceil_mode);
    else if (n == 3) y = at::max_pool3d(xf, w.kernel, strides, sym, dil, w.ceil_mode);
    else throw Unsupported("pooling over " + std::to_string(n) + " dims");
    out[0] = integral ? y.to(in[0].scalar_type()) : y;
  };
}

template <bool Max>
Kernel global_pool(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    std::vector<int64_t> dims;
    for (int64_t d = 2; d < in[0].dim(); ++d) dims.push_back(d);
    out[0] = Max ? at::amax(in[0], dims, true) : at::mean(in[0], dims, true);
  };
}

Kernel lp_normalization(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", -1), p = ctx.attrs.i("p", 2);
  if (p != 1 && p != 2) throw Unsupported("p must be 1 or 2");
  return [axis, p](const Tensors& in, Tensors& out) {
    auto a = normalize_axis(axis, in[0].dim());
    auto norm = at::norm(in[0], p, {a}, true);
    out[0] = at::where(norm == 0, at::zeros_like(in[0]), in[0] / norm);  // a zero vector stays zero
  };
}

Kernel dropout(const OpContext& ctx) {
  return [](const Tensors& in, Tensors& out) {
    // Training mode drops values at random: only a ratio of 0 (keep everything) has a defined result.
    if (in.size() > 2 && in[2].defined() && value_i64(in[2]) != 0 &&
        !(in.size() > 1 && in[1].defined() && value_f64(in[1]) == 0.0))
      throw Unsupported("training_mode=true with a ratio above 0 (random)");
    out[0] = in[0];
    if (out.size() > 1) out[1] = at::ones(in[0].sizes(), in[0].options().dtype(at::kBool));
  };
}

Kernel lrn(const OpContext& ctx) {
  double alpha = ctx.attrs.f("alpha", 1e-4f), beta = ctx.attrs.f("beta", 0.75f), bias = ctx.attrs.f("bias", 1.0f);
  int64_t size = ctx.attrs.required_i("size");
  return [=](const Tensors& in, Tensors& out) {
    // ONNX sums over channels [c - floor((size-1)/2), c + ceil((size-1)/2)].
    auto sq = (in[0] * in[0]).unsqueeze(1);
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    std::vector<int64_t> pad(2 * (sq.dim() - 2), 0);
    pad[pad.size() - 2] = lo;
    pad[pad.size() - 1] = hi;
    auto padded = at::constant_pad_nd(sq, pad, 0);
    std::vector<int64_t> k(sq.dim() - 2, 1);
    k[0] = size;
    at::Tensor sum;
    if (k.size() == 3) sum = at::avg_pool3d(padded, k, 1, 0, false, true) * size;
    else if (k.size() == 2) sum = at::avg_pool2d(padded, k, 1, 0, false, true) * size;
    else throw Unsupported("LRN input rank");
    out[0] = in[0] / at::pow(sum.squeeze(1) * (alpha / size) + bias, beta);
  };
}

const bool registered = register_ops({
    {"Conv", conv},
    {"ConvTranspose", conv_transpose},
    {"Gemm", gemm},
    {"MatMul", matmul},
    {"BatchNormalization", batch_norm},
    {"InstanceNormalization", instance_norm},
    {"GroupNormalization", group_norm},
    {"LayerNormalization", layer_norm},
    {"Softmax", softmax<false>},
    {"LogSoftmax", softmax<true>},
    {"Hardmax", hardmax},
    {"MaxPool", max_pool},
    {"GlobalAveragePool", global_pool<false>},
    {"GlobalMaxPool", global_pool<true>},
    {"LpNormalization", lp_normalization},
    {"Dropout", dropout, {1, 2}},
    {"LRN", lrn},
});

}  // namespace

}  // namespace softnpu::offline
