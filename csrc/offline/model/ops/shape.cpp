// ONNX ops that move data without arithmetic: shapes, views, concatenation, slicing, gathering, constants.
#include <ATen/ATen.h>

#include <cstring>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

Kernel reshape(const OpContext& ctx) {
  bool allowzero = ctx.attrs.i("allowzero", 0);
  auto attr_shape = ctx.attrs.ints("shape");
  bool legacy = ctx.opset < 5;
  return [=](const Tensors& in, Tensors& out) {
    auto shape = legacy ? attr_shape : values_i64(in[1]);
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] == 0 && !allowzero) shape[i] = in[0].size(static_cast<int64_t>(i));
    out[0] = in[0].reshape(shape);
  };
}

Kernel flatten(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 1);
  return [axis](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t a = axis < 0 ? axis + x.dim() : axis;
    if (a < 0 || a > x.dim()) throw Unsupported("axis out of range");
    int64_t outer = c10::multiply_integers(x.sizes().begin(), x.sizes().begin() + a);
    int64_t inner = c10::multiply_integers(x.sizes().begin() + a, x.sizes().end());
    out[0] = x.reshape({outer, inner});
  };
}

// A permutation that keeps the last axis in place moves whole rows of it: one memcpy per row, where ATen's strided
// copy goes element by element (9 us for the tiny BERT's 64 x 128 head split at batch 1 on an AMD EPYC core, 1-2 us
// by rows). Rows shorter than this are left to ATen: a call per row would cost more.
constexpr int64_t kMinRowBytes = 64;

at::Tensor permute_rows(const at::Tensor& x, const std::vector<int64_t>& p) {
  auto src = x.contiguous();
  auto view = src.permute(p);
  auto y = at::empty(view.sizes(), src.options());
  const int64_t rank = view.dim(), esize = src.element_size(), row = view.size(rank - 1) * esize;
  const int64_t rows = y.numel() / view.size(rank - 1);
  const char* from = static_cast<const char*>(src.const_data_ptr());
  char* to = static_cast<char*>(y.data_ptr());
  std::vector<int64_t> index(rank - 1, 0);
  int64_t offset = 0;  // in elements of src: the current row's start
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(to + r * row, from + offset * esize, row);
    for (int64_t k = rank - 2; k >= 0; --k) {
      offset += view.stride(k);
      if (++index[k] < view.size(k)) break;
      offset -= view.stride(k) * view.size(k);
      index[k] = 0;
    }
  }
  return y;
}

Kernel transpose(const OpContext& ctx) {
  auto perm = ctx.attrs.ints("perm");
  return [perm](const Tensors& in, Tensors& out) {
    std::vector<int64_t> p = perm;
    const auto& x = in[0];
    if (p.empty())
      for (int64_t i = x.dim() - 1; i >= 0; --i) p.push_back(i);
    if (x.dim() >= 2 && p.back() == x.dim() - 1 && !x.is_meta() && x.numel() > 0 &&
        x.size(-1) * x.element_size() >= kMinRowBytes) {
      out[0] = permute_rows(x, p);
      return;
    }
    out[0] = x.permute(p).contiguous();
  };
}

Kernel concat(const OpContext& ctx) {
  int64_t axis = ctx.attrs.required_i("axis");
  return [axis](const Tensors& in, Tensors& out) {
    std::vector<at::Tensor> parts;
    for (const auto& t : in)
      if (t.defined()) parts.push_back(t);
    out[0] = at::cat(parts, normalize_axis(axis, parts[0].dim()));
  };
}

Kernel split(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 0);
  auto attr_split = ctx.attrs.ints("split");
  int64_t num_outputs = ctx.attrs.i("num_outputs", 0);
  bool from_input = ctx.opset >= 13;
  int n = ctx.num_outputs;
  return [=](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(axis, in[0].dim());
    int64_t len = in[0].size(a);
    std::vector<int64_t> sizes = from_input ? (in.size() > 1 && in[1].defined() ? values_i64(in[1]) : std::vector<int64_t>{})
                                            : attr_split;
    if (sizes.empty()) {
      int64_t parts = num_outputs ? num_outputs : n;
      int64_t chunk = (len + parts - 1) / parts;  // the last part takes the remainder (opset 18)
      for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, len - i * chunk)));
    }
    auto pieces = at::split_with_sizes(in[0], sizes, a);
    for (size_t i = 0; i < out.size() && i < pieces.size(); ++i) out[i] = pieces[i].contiguous();
  };
}

Kernel slice(const OpContext& ctx) {
  bool legacy = ctx.opset < 10;
  auto a_starts = ctx.attrs.ints("starts"), a_ends = ctx.attrs.ints("ends"), a_axes = ctx.attrs.ints("axes");
  return [=](const Tensors& in, Tensors& out) {
    std::vector<int64_t> starts = legacy ? a_starts : values_i64(in[1]);
    std::vector<int64_t> ends = legacy ? a_ends : values_i64(in[2]);
    std::vector<int64_t> axes = legacy ? a_axes : (in.size() > 3 && in[3].defined() ? values_i64(in[3]) : std::vector<int64_t>{});
    std::vector<int64_t> steps = !legacy && in.size() > 4 && in[4].defined() ? values_i64(in[4]) : std::vector<int64_t>{};
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    at::Tensor x = in[0];
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t ax = normalize_axis(axes[i], x.dim());
      int64_t dim = x.size(ax);
      int64_t step = steps.empty() ? 1 : steps[i];
      if (step == 0) throw Unsupported("a step of 0");
      int64_t s = starts[i], e = ends[i];
      if (s < 0) s += dim;
      if (e < 0) e += dim;
      if (step > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        x = x.slice(ax, s, std::max(s, e), step);
      } else {
        s = std::clamp<int64_t>(s, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        // A negative step walks from s down to e (exclusive): flip, then slice forward.
        int64_t count = s > e ? (s - e - step - 1) / (-step) : 0;
        auto flipped = x.flip({ax});
        int64_t fs = dim - 1 - s;
        x = count ? flipped.slice(ax, fs, fs + (count - 1) * (-step) + 1, -step) : flipped.slice(ax, 0, 0);
      }
    }
    out[0] = x.contiguous();
  };
}

Kernel gather(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 0);
  return [axis](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t a = normalize_axis(axis, x.dim());
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + a);
    for (auto d : in[1].sizes()) shape.push_back(d);
    shape.insert(shape.end(), x.sizes().begin() + a + 1, x.sizes().end());
    if (x.is_meta() || in[1].is_meta()) {
      out[0] = at::empty(shape, x.options().device(at::kMeta));
      return;
    }
    out[0] = gather_rows(x, c10::multiply_integers(x.sizes().slice(0, a)), x.size(a), values_i64(in[1]), false, shape);
  };
}

Kernel gather_elements(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 0);
  return [axis](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(axis, in[0].dim());
    auto idx = in[1].to(at::kLong);
    idx = at::where(idx < 0, idx + in[0].size(a), idx);
    out[0] = at::gather(in[0], a, idx);
  };
}

Kernel squeeze(const OpContext& ctx) {
  bool from_input = ctx.opset >= 13;
  auto attr_axes = ctx.attrs.ints("axes");
  return [=](const Tensors& in, Tensors& out) {
    auto axes = from_input ? (in.size() > 1 && in[1].defined() ? values_i64(in[1]) : std::vector<int64_t>{}) : attr_axes;
    if (axes.empty()) {
      out[0] = in[0].squeeze();
      return;
    }
    std::vector<int64_t> shape;
    std::vector<bool> drop(in[0].dim(), false);
    for (auto a : axes) drop[normalize_axis(a, in[0].dim())] = true;
    for (int64_t d = 0; d < in[0].dim(); ++d)
      if (!drop[d]) shape.push_back(in[0].size(d));
    out[0] = in[0].reshape(shape);
  };
}

Kernel unsqueeze(const OpContext& ctx) {
  bool from_input = ctx.opset >= 13;
  auto attr_axes = ctx.attrs.ints("axes");
  return [=](const Tensors& in, Tensors& out) {
    auto axes = from_input ? values_i64(in[1]) : attr_axes;
    int64_t rank = in[0].dim() + static_cast<int64_t>(axes.size());
    std::vector<bool> added(rank, false);
    for (auto a : axes) added[normalize_axis(a, rank)] = true;
    std::vector<int64_t> shape;
    int64_t k = 0;
    for (int64_t d = 0; d < rank; ++d) shape.push_back(added[d] ? 1 : in[0].size(k++));
    out[0] = in[0].reshape(shape);
  };
}

Kernel shape(const OpContext& ctx) {
  int64_t start = ctx.attrs.i("start", 0), end = ctx.attrs.i("end", INT64_MAX);
  return [start, end](const Tensors& in, Tensors& out) {
    int64_t r = in[0].dim();
    int64_t s = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    int64_t e = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    auto sizes = in[0].sizes().vec();
    // Shapes are known whenever the input's shape is: a real tensor even for a meta input.
    out[0] = at::tensor(std::vector<int64_t>(sizes.begin() + s, sizes.begin() + std::max(s, e)), at::kLong);
  };
}

Kernel size(const OpContext&) {
  return [](const Tensors& in, Tensors& out) { out[0] = at::scalar_tensor(in[0].numel(), at::kLong); };
}

Kernel expand(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    auto shape = values_i64(in[1]);
    // ONNX broadcasts both ways: a 1 in the shape keeps the input's dim.
    auto x = in[0];
    int64_t rank = std::max<int64_t>(x.dim(), shape.size());
    std::vector<int64_t> target(rank);
    for (int64_t i = 0; i < rank; ++i) {
      int64_t xs = i - (rank - x.dim()) >= 0 ? x.size(i - (rank - x.dim())) : 1;
      int64_t ss = i - (rank - static_cast<int64_t>(shape.size())) >= 0 ? shape[i - (rank - shape.size())] : 1;
      target[i] = ss == 1 ? xs : ss;
    }
    out[0] = x.expand(target).contiguous();
  };
}

Kernel tile(const OpContext&) {
  return [](const Tensors& in, Tensors& out) { out[0] = in[0].repeat(values_i64(in[1])); };
}

Kernel constant(const OpContext& ctx) {
  at::Tensor value;
  const auto& a = ctx.attrs;
  if (a.has("value")) value = a.t("value");
  else if (a.has("value_float")) value = at::scalar_tensor(a.f("value_float", 0), at::kFloat);
  else if (a.has("value_int")) value = at::scalar_tensor(a.i("value_int", 0), at::kLong);
  else if (a.has("value_floats")) { auto v = a.floats("value_floats"); value = at::tensor(v, at::kFloat); }
  else if (a.has("value_ints")) { auto v = a.ints("value_ints"); value = at::tensor(v, at::kLong); }
  else throw Unsupported("a Constant without a numeric value (sparse or string)");
  return [value](const Tensors&, Tensors& out) { out[0] = value; };
}

Kernel constant_of_shape(const OpContext& ctx) {
  auto value = ctx.attrs.t("value");
  if (!value.defined()) value = at::zeros({1}, at::kFloat);
  return [value](const Tensors& in, Tensors& out) {
    out[0] = at::full(values_i64(in[0]), value.reshape({}).item(), at::TensorOptions().dtype(value.scalar_type()));
  };
}

Kernel range(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    auto type = in[0].scalar_type();
    if (at::isFloatingType(type)) {
      double s = value_f64(in[0]), l = value_f64(in[1]), d = value_f64(in[2]);
      int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((l - s) / d)), 0);
      out[0] = (at::arange(n, at::kDouble) * d + s).to(type);
    } else {
      int64_t s = value_i64(in[0]), l = value_i64(in[1]), d = value_i64(in[2]);
      if (d == 0) throw Unsupported("a delta of 0");
      int64_t n = std::max<int64_t>((l - s + d + (d > 0 ? -1 : 1)) / d, 0);
      out[0] = (at::arange(n, at::kLong) * d + s).to(type);
    }
  };
}

Kernel pad(const OpContext& ctx) {
  auto mode = ctx.attrs.s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") throw Unsupported("mode " + mode);
  bool legacy = ctx.opset < 11;
  auto attr_pads = ctx.attrs.ints(legacy && ctx.opset < 2 ? "paddings" : "pads");
  float attr_value = ctx.attrs.f("value", 0.0f);
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t r = x.dim();
    auto pads = legacy ? attr_pads : values_i64(in[1]);
    std::vector<int64_t> axes;
    if (!legacy && in.size() > 3 && in[3].defined()) {
      for (auto a : values_i64(in[3])) axes.push_back(normalize_axis(a, r));
    } else {
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    }
    std::vector<int64_t> begin(r, 0), end(r, 0);
    int64_t n = static_cast<int64_t>(axes.size());
    if (static_cast<int64_t>(pads.size()) != 2 * n) throw Unsupported("pads does not match the axes");
    for (int64_t i = 0; i < n; ++i) begin[axes[i]] = pads[i], end[axes[i]] = pads[i + n];
    // A value known only at run time does not change the shape: inference pads with 0.
    bool has_value = !legacy && in.size() > 2 && in[2].defined() && in[2].numel() && !in[2].is_meta();
    at::Scalar value = legacy ? at::Scalar(attr_value) : (has_value ? in[2].reshape({}).item() : at::Scalar(0));
    at::Tensor y = x;
    if (mode == "constant") {
      std::vector<int64_t> p;
      for (int64_t d = r; d-- > 0;) p.push_back(begin[d]), p.push_back(end[d]);
      out[0] = at::constant_pad_nd(x, p, value);
      return;
    }
    // reflect / edge / wrap: one dim at a time, with index gathering (valid for any rank).
    for (int64_t d = 0; d < r; ++d) {
      if (!begin[d] && !end[d]) continue;
      int64_t len = y.size(d);
      auto idx = at::arange(-begin[d], len + end[d], at::kLong);
      if (mode == "edge") idx = idx.clamp(0, len - 1);
      else if (mode == "wrap") idx = at::remainder(idx, len);
      else {
        auto period = 2 * (len - 1);
        idx = at::remainder(idx, std::max<int64_t>(period, 1));
        idx = at::where(idx >= len, period - idx, idx);
      }
      y = at::index_select(y, d, idx);
    }
    out[0] = y;
  };
}

Kernel trilu(const OpContext& ctx) {
  bool upper = ctx.attrs.i("upper", 1);
  return [upper](const Tensors& in, Tensors& out) {
    int64_t k = in.size() > 1 && in[1].defined() ? value_i64(in[1]) : 0;
    out[0] = upper ? at::triu(in[0], k) : at::tril(in[0], k);
  };
}

Kernel depth_to_space(const OpContext& ctx) {
  int64_t b = ctx.attrs.required_i("blocksize");
  bool crd = ctx.attrs.s("mode", "DCR") == "CRD";
  return [b, crd](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    at::Tensor y = crd ? x.reshape({n, c / (b * b), b, b, h, w}).permute({0, 1, 4, 2, 5, 3})
                       : x.reshape({n, b, b, c / (b * b), h, w}).permute({0, 3, 4, 1, 5, 2});
    out[0] = y.reshape({n, c / (b * b), h * b, w * b});
  };
}

Kernel space_to_depth(const OpContext& ctx) {
  int64_t b = ctx.attrs.required_i("blocksize");
  return [b](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    out[0] = x.reshape({n, c, h / b, b, w / b, b}).permute({0, 3, 5, 1, 2, 4}).reshape({n, c * b * b, h / b, w / b});
  };
}

Kernel eye_like(const OpContext& ctx) {
  int64_t k = ctx.attrs.i("k", 0);
  int64_t dtype = ctx.attrs.i("dtype", -1);
  return [k, dtype](const Tensors& in, Tensors& out) {
    auto type = dtype >= 0 ? scalar_type(static_cast<int32_t>(dtype)) : in[0].scalar_type();
    auto ones = at::ones({in[0].size(0), in[0].size(1)}, at::kFloat);
    out[0] = at::triu(at::tril(ones, k), k).to(type);
  };
}

Kernel one_hot(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", -1);
  return [axis](const Tensors& in, Tensors& out) {
    int64_t depth = static_cast<int64_t>(value_f64(in[1]));
    auto idx = in[0].to(at::kLong);
    idx = at::where(idx < 0, idx + depth, idx);
    auto valid = (idx >= 0) & (idx < depth);
    auto oh = at::one_hot(at::where(valid, idx, at::zeros_like(idx)), depth) * valid.unsqueeze(-1);
    int64_t r = idx.dim() + 1;
    int64_t a = normalize_axis(axis, r);
    oh = oh.movedim(-1, a);
    auto values = in[2];
    auto off = values.select(0, 0), on = values.select(0, 1);
    out[0] = at::where(oh.to(at::kBool), on, off).to(values.scalar_type());
  };
}

const bool registered = register_ops({
    {"Reshape", reshape, {1}},
    {"Flatten", flatten},
    {"Transpose", transpose},
    {"Concat", concat},
    {"Split", split, {1}},
    {"Slice", slice, {1, 2, 3, 4}},
    {"Gather", gather},
    {"GatherElements", gather_elements},
    {"Squeeze", squeeze, {1}},
    {"Unsqueeze", unsqueeze, {1}},
    {"Shape", shape},
    {"Size", size},
    {"Expand", expand, {1}},
    {"Tile", tile, {1}},
    {"Constant", constant},
    {"ConstantOfShape", constant_of_shape, {0}},
    {"Range", range, {0, 1, 2}},
    {"Pad", pad, {1, 2, 3}},
    {"Trilu", trilu, {1}},
    {"DepthToSpace", depth_to_space},
    {"SpaceToDepth", space_to_depth},
    {"EyeLike", eye_like},
    {"OneHot", one_hot, {1}},
});

}  // namespace

}  // namespace softnpu::offline
