// Image ONNX ops: Resize and Upsample (every mode as one separable interpolation), GridSample, AffineGrid, Col2Im,
// CenterCropPad, window pooling (AveragePool, LpPool), MaxUnpool, DeformConv, RoiAlign, MaxRoiPool.
#include <ATen/ATen.h>

#include <cmath>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

// ---- Resize: each resized axis is one gather of n neighbours per output position and a weighted sum, with the
// neighbours' indices and weights computed on the host from the shapes and the coordinate mode (as ONNX's reference).

enum class Interp { kNearest, kLinear, kCubic };

struct ResizeAttrs {
  Interp mode = Interp::kNearest;
  std::string coord = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  bool antialias = false;
  std::string aspect = "stretch";
  std::vector<int64_t> axes;
  bool legacy = false;  // Resize-10 and Upsample: asymmetric coordinates, nearest rounds down (up when downsampling)
};

Interp interp_mode(const std::string& m) {
  if (m == "nearest") return Interp::kNearest;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return Interp::kLinear;
  if (m == "cubic" || m == "bicubic") return Interp::kCubic;
  throw Unsupported("mode " + m + " (nearest, linear or cubic)");
}

std::vector<double> nearest_coeffs(double ratio, const std::string& mode) {
  if (ratio == 1.0) return {0, 1};
  if (mode == "round_prefer_floor") return {double(ratio <= 0.5), double(ratio > 0.5)};
  if (mode == "round_prefer_ceil") return {double(ratio < 0.5), double(ratio >= 0.5)};
  if (mode == "floor") return {1, 0};
  return {0, 1};  // ceil
}

double cubic_weight(double x, double a) {
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// The interpolation weights of the neighbours around a point `ratio` past its left neighbour; antialiasing widens the
// kernel by 1/scale when downsampling.
std::vector<double> interp_coeffs(const ResizeAttrs& a, double ratio, double scale, const std::string& nearest) {
  if (a.mode == Interp::kNearest) return nearest_coeffs(ratio, nearest);
  std::vector<double> c;
  if (!a.antialias) {
    if (a.mode == Interp::kLinear) return {1 - ratio, ratio};
    for (double x : {ratio + 1, ratio, 1 - ratio, 2 - ratio}) c.push_back(cubic_weight(x, a.cubic_a));
    return c;
  }
  double s = std::min(scale, 1.0);
  double support = a.mode == Interp::kLinear ? 1.0 : 2.0;
  int64_t start = static_cast<int64_t>(std::floor(-support / s)) + 1;
  int64_t n = 2 - 2 * start;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = (start + i - ratio) * s;
    double w = a.mode == Interp::kLinear ? std::clamp(1 - std::abs(x), 0.0, 1.0) : cubic_weight(x, a.cubic_a);
    c.push_back(w);
    sum += w;
  }
  for (auto& w : c) w /= sum;
  return c;
}

struct AxisTable {
  at::Tensor index;   // (out, n) int64, clamped into the input
  at::Tensor weight;  // (out, n) double
  at::Tensor outside; // (out) bool for tf_crop_and_resize's extrapolated positions, else undefined
};

AxisTable axis_table(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start, double roi_end) {
  std::string nearest = a.nearest;
  if (a.legacy) nearest = scale < 1 ? "ceil" : "floor";
  const std::string& coord = a.legacy ? std::string("asymmetric") : a.coord;
  double out_f = scale * in;
  std::vector<std::vector<double>> coeffs;
  std::vector<double> xs;
  std::vector<bool> outside(out, false);
  bool any_outside = false;
  for (int64_t y = 0; y < out; ++y) {
    double x;
    if (coord == "align_corners") x = out_f == 1 ? 0.0 : y * (in - 1) / (out_f - 1);
    else if (coord == "asymmetric") x = y / scale;
    else if (coord == "pytorch_half_pixel") x = out_f == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    else if (coord == "half_pixel") x = (y + 0.5) / scale - 0.5;
    else if (coord == "half_pixel_symmetric") x = in / 2.0 * (1 - out / out_f) + (y + 0.5) / scale - 0.5;
    else {  // tf_crop_and_resize
      x = out_f == 1 ? (roi_end - roi_start) * (in - 1) / 2 : y * (roi_end - roi_start) * (in - 1) / (out_f - 1);
      x += roi_start * (in - 1);
      outside[y] = x < 0 || x > in - 1;
      any_outside = any_outside || outside[y];
    }
    double fl = std::floor(x);
    coeffs.push_back(interp_coeffs(a, x == fl ? 1.0 : x - fl, scale, nearest));
    xs.push_back(x);
  }
  int64_t n = out ? static_cast<int64_t>(coeffs[0].size()) : 1;
  auto index = at::empty({out, n}, at::kLong);
  auto weight = at::empty({out, n}, at::kDouble);
  auto* ip = index.data_ptr<int64_t>();
  auto* wp = weight.data_ptr<double>();
  int64_t pad = (n + 1) / 2;
  for (int64_t y = 0; y < out; ++y) {
    // The n neighbours nearest to x, ties to the lower ones.
    double xp = xs[y] + pad;
    int64_t p = static_cast<int64_t>(std::floor(xp));
    double frac = xp - p;
    int64_t offset = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1) : (frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1);
    int64_t start = p + offset - pad;
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t idx = start + j;
      double w = coeffs[y][j];
      if (a.exclude_outside && (idx < 0 || idx >= in)) w = 0;
      ip[y * n + j] = std::clamp<int64_t>(idx, 0, in - 1);
      wp[y * n + j] = w;
      sum += w;
    }
    if (a.exclude_outside && sum != 0)
      for (int64_t j = 0; j < n; ++j) wp[y * n + j] /= sum;
  }
  AxisTable t{index, weight, {}};
  if (any_outside) {
    t.outside = at::empty({out}, at::kBool);
    for (int64_t y = 0; y < out; ++y) t.outside.data_ptr<bool>()[y] = outside[y];
  }
  return t;
}

at::Tensor resize_axis(const at::Tensor& x, int64_t axis, const AxisTable& t, const ResizeAttrs& a) {
  int64_t out = t.index.size(0), n = t.index.size(1);
  std::vector<int64_t> bshape(x.dim() + 1, 1);
  at::Tensor y;
  if (a.mode == Interp::kNearest) {
    // One neighbour carries the weight: a gather, in the input's type.
    auto pick = t.index.gather(1, t.weight.argmax(1, true)).reshape({-1});
    y = x.index_select(axis, pick.to(x.device()));
  } else {
    auto type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    auto xf = x.to(type);
    auto g = xf.index_select(axis, t.index.reshape({-1}).to(x.device()));
    auto shape = g.sizes().vec();
    shape[axis] = out;
    shape.insert(shape.begin() + axis + 1, n);
    bshape[axis] = out;
    bshape[axis + 1] = n;
    y = (g.view(shape) * t.weight.to(type).view(bshape).to(x.device())).sum(axis + 1);
    if (!at::isFloatingType(x.scalar_type())) y = y.round();
    y = y.to(x.scalar_type());
  }
  if (t.outside.defined()) {
    std::vector<int64_t> mshape(x.dim(), 1);
    mshape[axis] = out;
    y = y.masked_fill(t.outside.view(mshape).to(x.device()), a.extrapolation);
  }
  return y;
}

at::Tensor resize(const at::Tensor& x, const ResizeAttrs& a, std::vector<double> roi, std::vector<double> scales,
                  std::vector<int64_t> sizes) {
  int64_t r = x.dim();
  std::vector<int64_t> axes;
  for (auto ax : a.axes) axes.push_back(normalize_axis(ax, r));
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  size_t k = axes.size();
  if (!sizes.empty() && sizes.size() != k) throw Unsupported("sizes has " + std::to_string(sizes.size()) + " values for " + std::to_string(k) + " axes");
  if (sizes.empty() && scales.size() != k) throw Unsupported("scales has " + std::to_string(scales.size()) + " values for " + std::to_string(k) + " axes");
  std::vector<double> scale(r, 1.0), rs(r, 0.0), re(r, 1.0);
  std::vector<int64_t> out = x.sizes().vec();
  if (roi.size() == 2 * k)
    for (size_t i = 0; i < k; ++i) rs[axes[i]] = roi[i], re[axes[i]] = roi[k + i];
  if (!sizes.empty()) {
    for (size_t i = 0; i < k; ++i) scale[axes[i]] = double(sizes[i]) / x.size(axes[i]), out[axes[i]] = sizes[i];
    if (a.aspect != "stretch") {
      double s = scale[axes[0]];
      for (auto ax : axes) s = a.aspect == "not_larger" ? std::min(s, scale[ax]) : std::max(s, scale[ax]);
      for (auto ax : axes) scale[ax] = s, out[ax] = static_cast<int64_t>(s * x.size(ax) + 0.5);
    }
  } else {
    for (size_t i = 0; i < k; ++i) {
      if (scales[i] <= 0) throw Unsupported("a scale of " + std::to_string(scales[i]));
      scale[axes[i]] = scales[i];
      out[axes[i]] = static_cast<int64_t>(scales[i] * x.size(axes[i]));
    }
  }
  at::Tensor y = x;
  for (auto ax : axes) {
    if (x.size(ax) == 0 && out[ax] > 0) throw Unsupported("resizing an empty dimension to " + std::to_string(out[ax]));
    bool identity = std::abs(scale[ax] - 1.0) < 1e-9 && out[ax] == x.size(ax) && rs[ax] == 0.0 && re[ax] == 1.0;
    if (identity) continue;
    y = resize_axis(y, ax, axis_table(a, x.size(ax), out[ax], scale[ax], rs[ax], re[ax]), a);
  }
  return y.is_same(x) ? x.clone() : y;
}

std::vector<double> optional_f64(const Tensors& in, size_t i) {
  return i < in.size() && in[i].defined() && in[i].numel() ? values_f64(in[i]) : std::vector<double>{};
}

Kernel resize_op(const OpContext& ctx) {
  ResizeAttrs a;
  a.mode = interp_mode(ctx.attrs.s("mode", "nearest"));
  a.legacy = ctx.opset < 11;
  a.coord = ctx.attrs.s("coordinate_transformation_mode", "half_pixel");
  if (a.coord == "tf_half_pixel_for_nn") throw Unsupported("coordinate_transformation_mode tf_half_pixel_for_nn");
  if (a.coord != "half_pixel" && a.coord != "half_pixel_symmetric" && a.coord != "pytorch_half_pixel" &&
      a.coord != "align_corners" && a.coord != "asymmetric" && a.coord != "tf_crop_and_resize")
    throw Unsupported("coordinate_transformation_mode " + a.coord);
  a.nearest = ctx.attrs.s("nearest_mode", "round_prefer_floor");
  if (a.nearest != "round_prefer_floor" && a.nearest != "round_prefer_ceil" && a.nearest != "floor" && a.nearest != "ceil")
    throw Unsupported("nearest_mode " + a.nearest);
  a.cubic_a = ctx.attrs.f("cubic_coeff_a", -0.75f);
  a.exclude_outside = ctx.attrs.i("exclude_outside", 0);
  a.extrapolation = ctx.attrs.f("extrapolation_value", 0.0f);
  a.antialias = ctx.attrs.i("antialias", 0);
  if (a.antialias && a.mode == Interp::kNearest) throw Unsupported("antialias with mode nearest");
  a.aspect = ctx.attrs.s("keep_aspect_ratio_policy", "stretch");
  if (a.aspect != "stretch" && a.aspect != "not_larger" && a.aspect != "not_smaller")
    throw Unsupported("keep_aspect_ratio_policy " + a.aspect);
  a.axes = ctx.attrs.ints("axes");
  return [a](const Tensors& in, Tensors& out) {
    if (a.legacy) {
      out[0] = resize(in[0], a, {}, values_f64(in[1]), {});
      return;
    }
    auto sizes_f = optional_f64(in, 3);
    std::vector<int64_t> sizes(sizes_f.begin(), sizes_f.end());
    auto roi = a.coord == "tf_crop_and_resize" ? optional_f64(in, 1) : std::vector<double>{};
    out[0] = resize(in[0], a, roi, sizes.empty() ? optional_f64(in, 2) : std::vector<double>{}, sizes);
  };
}

Kernel upsample(const OpContext& ctx) {
  ResizeAttrs a;
  a.mode = interp_mode(ctx.attrs.s("mode", "nearest"));
  if (a.mode == Interp::kCubic) throw Unsupported("mode cubic (nearest or linear)");
  a.legacy = true;
  auto attr_scales = ctx.attrs.floats("scales");
  bool from_attr = ctx.opset < 9;
  return [a, attr_scales, from_attr](const Tensors& in, Tensors& out) {
    std::vector<double> scales = from_attr ? std::vector<double>(attr_scales.begin(), attr_scales.end()) : values_f64(in[1]);
    out[0] = resize(in[0], a, {}, scales, {});
  };
}

// ---- GridSample and AffineGrid: ATen's grid sampler and grid generator, whose conventions are ONNX's.

Kernel grid_sample(const OpContext& ctx) {
  auto mode = ctx.attrs.s("mode", ctx.opset < 20 ? "bilinear" : "linear");
  auto padding = ctx.attrs.s("padding_mode", "zeros");
  bool align = ctx.attrs.i("align_corners", 0);
  int64_t m = mode == "linear" || mode == "bilinear" ? 0 : mode == "nearest" ? 1 : mode == "cubic" || mode == "bicubic" ? 2 : -1;
  if (m < 0) throw Unsupported("mode " + mode);
  int64_t p = padding == "zeros" ? 0 : padding == "border" ? 1 : padding == "reflection" ? 2 : -1;
  if (p < 0) throw Unsupported("padding_mode " + padding);
  return [m, p, align](const Tensors& in, Tensors& out) {
    if (in[0].dim() != 4 && in[0].dim() != 5) throw Unsupported("input of rank " + std::to_string(in[0].dim()) + " (4 or 5)");
    if (m == 2 && in[0].dim() != 4) throw Unsupported("cubic sampling of a volume");
    out[0] = at::grid_sampler(in[0], in[1].to(in[0].scalar_type()), m, p, align);
  };
}

Kernel affine_grid(const OpContext& ctx) {
  bool align = ctx.attrs.i("align_corners", 0);
  return [align](const Tensors& in, Tensors& out) {
    out[0] = at::affine_grid_generator(in[0], values_i64(in[1]), align);
  };
}

// ---- Col2Im: every block column added at its place in the padded image (one index_add), then the pads cut off.

Kernel col2im(const OpContext& ctx) {
  auto dil_a = ctx.attrs.ints("dilations"), pads_a = ctx.attrs.ints("pads"), strides_a = ctx.attrs.ints("strides");
  return [=](const Tensors& in, Tensors& out) {
    auto image = values_i64(in[1]), block = values_i64(in[2]);
    size_t d = image.size();
    auto dil = dil_a.empty() ? std::vector<int64_t>(d, 1) : dil_a;
    auto strides = strides_a.empty() ? std::vector<int64_t>(d, 1) : strides_a;
    auto pads = pads_a.empty() ? std::vector<int64_t>(2 * d, 0) : pads_a;
    std::vector<int64_t> padded(d), blocks(d);
    int64_t kernel = 1, locations = 1, padded_total = 1;
    for (size_t i = 0; i < d; ++i) {
      padded[i] = image[i] + pads[i] + pads[d + i];
      blocks[i] = (padded[i] - dil[i] * (block[i] - 1) - 1) / strides[i] + 1;
      kernel *= block[i];
      locations *= blocks[i];
      padded_total *= padded[i];
    }
    const auto& x = in[0];
    int64_t n = x.size(0), c = x.size(1) / kernel;
    if (x.size(2) != locations) throw Unsupported("the input's last dim is not the number of blocks");
    // Flat position in the padded image of (kernel offset, block location), both row-major.
    auto index = at::empty({kernel * locations}, at::kLong);
    auto* ip = index.data_ptr<int64_t>();
    std::vector<int64_t> ko(d), lo(d);
    for (int64_t k = 0; k < kernel; ++k) {
      for (int64_t i = d, r = k; i-- > 0;) ko[i] = r % block[i], r /= block[i];
      for (int64_t l = 0; l < locations; ++l) {
        for (int64_t i = d, r = l; i-- > 0;) lo[i] = r % blocks[i], r /= blocks[i];
        int64_t flat = 0;
        for (size_t i = 0; i < d; ++i) flat = flat * padded[i] + lo[i] * strides[i] + ko[i] * dil[i];
        ip[k * locations + l] = flat;
      }
    }
    auto y = at::zeros({n, c, padded_total}, x.options());
    y.index_add_(2, index.to(x.device()), x.reshape({n, c, kernel * locations}));
    std::vector<int64_t> shape{n, c};
    shape.insert(shape.end(), padded.begin(), padded.end());
    auto img = y.view(shape);
    for (size_t i = 0; i < d; ++i) img = img.narrow(2 + i, pads[i], image[i]);
    out[0] = img.contiguous();
  };
}

// ---- CenterCropPad: per axis, crop the centre or pad both sides (the extra element at the end).

Kernel center_crop_pad(const OpContext& ctx) {
  auto axes_a = ctx.attrs.ints("axes");
  return [axes_a](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    auto shape = values_i64(in[1]);
    std::vector<int64_t> axes;
    for (auto a : axes_a) axes.push_back(normalize_axis(a, x.dim()));
    if (axes.empty())
      for (int64_t i = 0; i < x.dim(); ++i) axes.push_back(i);
    if (shape.size() != axes.size()) throw Unsupported("shape does not match the axes");
    at::Tensor y = x;
    std::vector<int64_t> pad(2 * x.dim(), 0);
    bool padding = false;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t ax = axes[i], have = x.size(ax), want = shape[i];
      if (want < have) {
        y = y.narrow(ax, (have - want) / 2, want);
      } else if (want > have) {
        // constant_pad_nd lists the last dim first.
        int64_t slot = 2 * (x.dim() - 1 - ax);
        pad[slot] = (want - have) / 2;
        pad[slot + 1] = want - have - pad[slot];
        padding = true;
      }
    }
    out[0] = padding ? at::constant_pad_nd(y, pad, 0) : y.contiguous();
  };
}

// ---- Window pooling: the sum over each window is a convolution with a kernel of ones (any dilation, any pads, ceil
// mode), so AveragePool and LpPool are one mechanism; the count of each window is the same convolution of a mask.

struct PoolWindow {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string auto_pad;
  bool ceil_mode = false;
  bool count_include_pad = false;
};

PoolWindow pool_window(const OpContext& ctx) {
  PoolWindow w;
  w.kernel = ctx.attrs.ints("kernel_shape");
  if (w.kernel.empty()) throw Unsupported("no kernel_shape");
  size_t n = w.kernel.size();
  w.strides = ctx.attrs.ints("strides", std::vector<int64_t>(n, 1));
  w.dilations = ctx.attrs.ints("dilations", std::vector<int64_t>(n, 1));
  w.pads = ctx.attrs.ints("pads", std::vector<int64_t>(2 * n, 0));
  w.auto_pad = ctx.attrs.s("auto_pad", "NOTSET");
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" && w.auto_pad != "VALID")
    throw Unsupported("auto_pad " + w.auto_pad);
  w.ceil_mode = ctx.attrs.i("ceil_mode", 0);
  w.count_include_pad = ctx.attrs.i("count_include_pad", 0);
  if (w.strides.size() != n || w.dilations.size() != n || w.pads.size() != 2 * n)
    throw Unsupported("strides, dilations or pads do not match kernel_shape");
  return w;
}

// Sums of `x` (float) over the windows, and how many elements of each window count.
std::pair<at::Tensor, at::Tensor> window_sums(const at::Tensor& x, const PoolWindow& w) {
  size_t n = w.kernel.size();
  if (x.dim() != static_cast<int64_t>(n) + 2) throw Unsupported("kernel_shape does not match the input's rank");
  if (n < 1 || n > 3) throw Unsupported("pooling over " + std::to_string(n) + " dims");
  std::vector<int64_t> begin(n), end(n), extra(n), out(n), spatial(x.sizes().begin() + 2, x.sizes().end());
  for (size_t i = 0; i < n; ++i) {
    int64_t in = spatial[i], s = w.strides[i], eff = w.dilations[i] * (w.kernel[i] - 1) + 1;
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out[i] = (in + s - 1) / s;
      int64_t total = std::max<int64_t>((out[i] - 1) * s + eff - in, 0);
      begin[i] = w.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end[i] = total - begin[i];
    } else {
      begin[i] = w.auto_pad == "VALID" ? 0 : w.pads[i];
      end[i] = w.auto_pad == "VALID" ? 0 : w.pads[n + i];
      int64_t span = in + begin[i] + end[i] - eff;
      out[i] = (w.ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // The last window starts inside the input or its begin padding.
      if (w.ceil_mode && (out[i] - 1) * s >= in + begin[i]) --out[i];
    }
    extra[i] = std::max<int64_t>((out[i] - 1) * s + eff - (in + begin[i] + end[i]), 0);
  }
  std::vector<int64_t> pad_x, pad_mask_in, pad_mask_out;
  for (size_t i = n; i-- > 0;) {
    pad_x.push_back(begin[i]), pad_x.push_back(end[i] + extra[i]);
    pad_mask_out.push_back(0), pad_mask_out.push_back(extra[i]);
  }
  std::vector<int64_t> flat{-1, 1};
  flat.insert(flat.end(), spatial.begin(), spatial.end());
  auto xp = at::constant_pad_nd(x.reshape(flat), pad_x, 0);
  std::vector<int64_t> kshape{1, 1};
  kshape.insert(kshape.end(), w.kernel.begin(), w.kernel.end());
  auto ones = at::ones(kshape, xp.options());
  std::vector<int64_t> zero(n, 0);
  auto window = [&](const at::Tensor& t) {
    return at::convolution(t, ones, {}, w.strides, zero, w.dilations, false, zero, 1);
  };
  auto sums = window(xp);
  // Elements that count: the input, and with count_include_pad its declared pads, never the ceil-mode overhang.
  std::vector<int64_t> mshape{1, 1};
  mshape.insert(mshape.end(), spatial.begin(), spatial.end());
  auto mask = at::ones(mshape, xp.options());
  if (w.count_include_pad) {
    std::vector<int64_t> p;
    for (size_t i = n; i-- > 0;) p.push_back(begin[i]), p.push_back(end[i]);
    mask = at::constant_pad_nd(at::constant_pad_nd(mask, p, 1), pad_mask_out, 0);
  } else {
    mask = at::constant_pad_nd(mask, pad_x, 0);
  }
  auto counts = window(mask);
  std::vector<int64_t> shape{x.size(0), x.size(1)};
  for (size_t i = 0; i < n; ++i) shape.push_back(sums.size(2 + i));
  return {sums.view(shape), counts};
}

at::ScalarType compute_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

Kernel average_pool(const OpContext& ctx) {
  auto w = pool_window(ctx);
  return [w](const Tensors& in, Tensors& out) {
    auto [sums, counts] = window_sums(in[0].to(compute_type(in[0])), w);
    out[0] = (sums / counts).to(in[0].scalar_type());
  };
}

Kernel lp_pool(const OpContext& ctx) {
  auto w = pool_window(ctx);
  w.count_include_pad = true;
  double p = ctx.attrs.i("p", 2);
  return [w, p](const Tensors& in, Tensors& out) {
    auto x = in[0].to(compute_type(in[0]));
    auto sums = window_sums(x.abs().pow(p), w).first;
    out[0] = sums.pow(1.0 / p).to(in[0].scalar_type());
  };
}

// ---- MaxUnpool: each value scattered to the flat index MaxPool recorded for it.

Kernel max_unpool(const OpContext& ctx) {
  auto kernel = ctx.attrs.ints("kernel_shape");
  size_t n = kernel.size();
  auto strides = ctx.attrs.ints("strides", std::vector<int64_t>(n, 1));
  auto pads = ctx.attrs.ints("pads", std::vector<int64_t>(2 * n, 0));
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    std::vector<int64_t> shape{x.size(0), x.size(1)};
    for (size_t i = 0; i < n; ++i) shape.push_back((x.size(2 + i) - 1) * strides[i] + kernel[i] - pads[i] - pads[n + i]);
    auto y = at::zeros({c10::multiply_integers(shape)}, x.options());
    y.scatter_(0, in[1].reshape({-1}).to(at::kLong), x.reshape({-1}));
    auto unpooled = y.view(shape);
    if (in.size() < 3 || !in[2].defined()) {
      out[0] = unpooled;
      return;
    }
    // The indices address the unpooled shape; a larger output_shape pads its end.
    auto want = values_i64(in[2]);
    if (want.size() != shape.size()) throw Unsupported("output_shape of the wrong rank");
    std::vector<int64_t> pad;
    for (size_t i = shape.size(); i-- > 0;) {
      if (want[i] < shape[i]) throw Unsupported("output_shape smaller than the unpooled shape");
      pad.push_back(0), pad.push_back(want[i] - shape[i]);
    }
    out[0] = at::constant_pad_nd(unpooled, pad, 0);
  };
}

// ---- DeformConv: each kernel tap samples the input bilinearly at its offset position (zero outside), scaled by
// the mask; the taps then contract with the weights as a convolution's im2col would.

// x: (N, C, H, W); py, px: (N, G, K, Ho, Wo) sampling positions per offset group. Returns (N, C, K, Ho, Wo).
at::Tensor bilinear_taps(const at::Tensor& x, const at::Tensor& py, const at::Tensor& px, int64_t groups) {
  int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  int64_t k = py.size(2), ho = py.size(3), wo = py.size(4);
  auto y0 = py.floor(), x0 = px.floor();
  auto flat = x.reshape({n, groups, c / groups, h * w});
  at::Tensor acc;
  for (int dy = 0; dy < 2; ++dy) {
    for (int dx = 0; dx < 2; ++dx) {
      auto yi = y0 + dy, xi = x0 + dx;
      auto wgt = (1 - (py - yi).abs()) * (1 - (px - xi).abs());
      auto valid = (yi >= 0) & (yi <= h - 1) & (xi >= 0) & (xi <= w - 1);
      auto idx = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).to(at::kLong);  // (N, G, K, Ho, Wo)
      auto gathered = flat.gather(3, idx.reshape({n, groups, 1, k * ho * wo}).expand({n, groups, c / groups, k * ho * wo}));
      auto term = gathered * (wgt * valid).reshape({n, groups, 1, k * ho * wo});
      acc = acc.defined() ? acc + term : term;
    }
  }
  return acc.reshape({n, c, k, ho, wo});
}

Kernel deform_conv(const OpContext& ctx) {
  auto strides_a = ctx.attrs.ints("strides"), dil_a = ctx.attrs.ints("dilations"), pads_a = ctx.attrs.ints("pads");
  int64_t group = ctx.attrs.i("group", 1), offset_group = ctx.attrs.i("offset_group", 1);
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    const auto& weight = in[1];
    const auto& offset = in[2];
    if (x.dim() != 4) throw Unsupported("input of rank " + std::to_string(x.dim()) + " (only 2-D images)");
    auto type = compute_type(x);
    int64_t n = x.size(0), oc = weight.size(0), kh = weight.size(2), kw = weight.size(3), k = kh * kw;
    auto strides = strides_a.empty() ? std::vector<int64_t>{1, 1} : strides_a;
    auto dil = dil_a.empty() ? std::vector<int64_t>{1, 1} : dil_a;
    auto pads = pads_a.empty() ? std::vector<int64_t>{0, 0, 0, 0} : pads_a;
    int64_t ho = offset.size(2), wo = offset.size(3);
    // Base positions of each tap: output position * stride - pad + tap * dilation.
    auto oy = at::arange(ho, x.options().dtype(type)) * strides[0] - pads[0];
    auto ox = at::arange(wo, x.options().dtype(type)) * strides[1] - pads[1];
    auto ty = at::arange(kh, x.options().dtype(type)).repeat_interleave(kw) * dil[0];
    auto tx = at::arange(kw, x.options().dtype(type)).repeat({kh}) * dil[1];
    auto base_y = ty.view({k, 1, 1}) + oy.view({1, ho, 1});
    auto base_x = tx.view({k, 1, 1}) + ox.view({1, 1, wo});
    // offset: (N, G*K*2, Ho, Wo), (dy, dx) pairs per tap.
    auto off = offset.to(type).view({n, offset_group, k, 2, ho, wo});
    auto py = off.select(3, 0) + base_y;
    auto px = off.select(3, 1) + base_x;
    auto taps = bilinear_taps(x.to(type), py, px, offset_group);  // (N, C, K, Ho, Wo)
    if (in.size() > 4 && in[4].defined()) {
      auto mask = in[4].to(type).view({n, offset_group, 1, k, ho, wo});
      int64_t c = x.size(1);
      taps = (taps.view({n, offset_group, c / offset_group, k, ho, wo}) * mask).view({n, c, k, ho, wo});
    }
    int64_t c = x.size(1);
    auto cols = taps.view({n, group, (c / group) * k, ho * wo});
    auto wmat = weight.to(type).view({group, oc / group, (c / group) * k});
    auto y = at::matmul(wmat.unsqueeze(0), cols).view({n, oc, ho, wo});
    if (in.size() > 3 && in[3].defined()) y = y + in[3].to(type).view({1, oc, 1, 1});
    out[0] = y.to(x.scalar_type());
  };
}

// ---- RoiAlign and MaxRoiPool: a host loop over the regions (their bins depend on the region's values), each
// region's samples gathered at once.

struct Samples {
  at::Tensor low, high;          // (S) int64 neighbours
  at::Tensor w_low, w_high;      // (S) weights, 0 for a sample outside the map
};

// Sample coordinates start + bin * (p + (i + 0.5) / grid) for p < pooled, i < grid, bilinear neighbours in [0, size).
Samples roi_samples(double start, double bin, int64_t pooled, int64_t grid, int64_t size) {
  int64_t s = pooled * grid;
  auto low = at::empty({s}, at::kLong), high = at::empty({s}, at::kLong);
  auto wl = at::empty({s}, at::kDouble), wh = at::empty({s}, at::kDouble);
  for (int64_t p = 0; p < pooled; ++p) {
    for (int64_t i = 0; i < grid; ++i) {
      int64_t j = p * grid + i;
      double v = start + p * bin + (i + 0.5) * bin / grid;
      if (v < -1.0 || v > size) {
        low.data_ptr<int64_t>()[j] = high.data_ptr<int64_t>()[j] = 0;
        wl.data_ptr<double>()[j] = wh.data_ptr<double>()[j] = 0;
        continue;
      }
      v = std::max(v, 0.0);
      int64_t lo = static_cast<int64_t>(v), hi = lo + 1;
      if (lo >= size - 1) hi = lo = size - 1, v = static_cast<double>(lo);
      low.data_ptr<int64_t>()[j] = lo;
      high.data_ptr<int64_t>()[j] = hi;
      wl.data_ptr<double>()[j] = 1 - (v - lo);
      wh.data_ptr<double>()[j] = v - lo;
    }
  }
  return {low, high, wl, wh};
}

Kernel roi_align(const OpContext& ctx) {
  bool half_pixel = ctx.opset >= 16 && ctx.attrs.s("coordinate_transformation_mode", "half_pixel") == "half_pixel";
  auto mode = ctx.attrs.s("mode", "avg");
  if (mode != "avg" && mode != "max") throw Unsupported("mode " + mode + " (avg or max)");
  bool max = mode == "max";
  int64_t oh = ctx.attrs.i("output_height", 1), ow = ctx.attrs.i("output_width", 1);
  int64_t ratio = ctx.attrs.i("sampling_ratio", 0);
  double scale = ctx.attrs.f("spatial_scale", 1.0f);
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t r = in[1].size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    // The shape is known from the shapes; the regions' values only at run time.
    if (in[1].is_meta() || in[2].is_meta()) {
      out[0] = at::empty({r, c, oh, ow}, x.options());
      return;
    }
    auto rois = values_f64(in[1]);
    auto batch = values_i64(in[2]);
    auto type = compute_type(x);
    auto xf = x.to(type);
    double offset = half_pixel ? 0.5 : 0.0;
    std::vector<at::Tensor> results;
    for (int64_t i = 0; i < r; ++i) {
      double x0 = rois[4 * i] * scale - offset, y0 = rois[4 * i + 1] * scale - offset;
      double rw = rois[4 * i + 2] * scale - offset - x0, rh = rois[4 * i + 3] * scale - offset - y0;
      if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
      int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / oh));
      int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / ow));
      auto sy = roi_samples(y0, rh / oh, oh, gh, h), sx = roi_samples(x0, rw / ow, ow, gw, w);
      auto img = xf.select(0, batch[i]);
      auto term = [&](const at::Tensor& yi, const at::Tensor& wy, const at::Tensor& xi, const at::Tensor& wx) {
        auto v = img.index_select(1, yi.to(x.device())).index_select(2, xi.to(x.device()));
        return v * at::outer(wy, wx).to(type).to(x.device());
      };
      auto t1 = term(sy.low, sy.w_low, sx.low, sx.w_low), t2 = term(sy.low, sy.w_low, sx.high, sx.w_high);
      auto t3 = term(sy.high, sy.w_high, sx.low, sx.w_low), t4 = term(sy.high, sy.w_high, sx.high, sx.w_high);
      at::Tensor pooled;
      if (max) {
        pooled = at::maximum(at::maximum(t1, t2), at::maximum(t3, t4)).view({c, oh, gh, ow, gw}).amax({2, 4});
      } else {
        pooled = (t1 + t2 + t3 + t4).view({c, oh, gh, ow, gw}).sum({2, 4}) / static_cast<double>(std::max<int64_t>(gh * gw, 1));
      }
      results.push_back(pooled);
    }
    out[0] = (r ? at::stack(results) : at::empty({0, c, oh, ow}, xf.options())).to(x.scalar_type());
  };
}

Kernel max_roi_pool(const OpContext& ctx) {
  auto pooled_shape = ctx.attrs.ints("pooled_shape");
  if (pooled_shape.size() != 2) throw Unsupported("pooled_shape must have 2 values");
  double scale = ctx.attrs.f("spatial_scale", 1.0f);
  int64_t ph_n = pooled_shape[0], pw_n = pooled_shape[1];
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t r = in[1].size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    if (in[1].is_meta()) {
      out[0] = at::empty({r, c, ph_n, pw_n}, x.options());
      return;
    }
    auto rois = values_f64(in[1]);
    auto y = at::zeros({r, c, ph_n, pw_n}, x.options());
    for (int64_t i = 0; i < r; ++i) {
      // Region corners rounded to the map's pixels; each bin is at least one pixel wide.
      const double* roi = &rois[5 * i];
      int64_t b = static_cast<int64_t>(roi[0]);
      int64_t x0 = std::llround(roi[1] * scale), y0 = std::llround(roi[2] * scale);
      int64_t x1 = std::llround(roi[3] * scale), y1 = std::llround(roi[4] * scale);
      double bh = static_cast<double>(std::max<int64_t>(y1 - y0 + 1, 1)) / ph_n;
      double bw = static_cast<double>(std::max<int64_t>(x1 - x0 + 1, 1)) / pw_n;
      for (int64_t ph = 0; ph < ph_n; ++ph) {
        int64_t hs = std::clamp<int64_t>(static_cast<int64_t>(std::floor(ph * bh)) + y0, 0, h);
        int64_t he = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((ph + 1) * bh)) + y0, 0, h);
        for (int64_t pw = 0; pw < pw_n; ++pw) {
          int64_t ws = std::clamp<int64_t>(static_cast<int64_t>(std::floor(pw * bw)) + x0, 0, w);
          int64_t we = std::clamp<int64_t>(static_cast<int64_t>(std::ceil((pw + 1) * bw)) + x0, 0, w);
          if (he <= hs || we <= ws) continue;  // an empty bin stays 0
          y.select(0, i).select(1, ph).select(1, pw).copy_(x[b].slice(1, hs, he).slice(2, ws, we).amax({1, 2}));
        }
      }
    }
    out[0] = y;
  };
}

const bool registered = register_ops({
    {"Resize", resize_op, {1, 2, 3}},
    {"Upsample", upsample, {1}},
    {"GridSample", grid_sample},
    {"AffineGrid", affine_grid, {1}},
    {"Col2Im", col2im, {1, 2}},
    {"CenterCropPad", center_crop_pad, {1}},
    {"AveragePool", average_pool},
    {"LpPool", lp_pool},
    {"MaxUnpool", max_unpool, {2}},
    {"DeformConv", deform_conv},
    {"RoiAlign", roi_align},
    {"MaxRoiPool", max_roi_pool},
});

}  // namespace

}  // namespace softnpu::offline
