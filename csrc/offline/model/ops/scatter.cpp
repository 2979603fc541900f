// Indexing ONNX ops: scatters and gathers by index tensors, selections whose output size depends on the data
// (Compress, NonZero, Unique), sequence reversal, cumulative products, determinants and per-element selections.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

// Negative indices count from the end of the indexed dim (ONNX), ATen's index ops take them non-negative.
at::Tensor wrap_indices(const at::Tensor& idx, int64_t size) {
  auto i = idx.to(at::kLong);
  return at::where(i < 0, i + size, i);
}

std::string reduction(const OpContext& ctx) {
  auto r = ctx.attrs.s("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min") throw Unsupported("reduction " + r);
  return r;
}

// ATen's names of ONNX's reductions, for scatter_reduce and index_reduce.
const char* aten_reduce(const std::string& r) {
  return r == "add" ? "sum" : r == "mul" ? "prod" : r == "max" ? "amax" : "amin";
}

Kernel scatter_elements(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 0);
  auto r = reduction(ctx);
  return [axis, r](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(axis, in[0].dim());
    auto idx = wrap_indices(in[1], in[0].size(a));
    auto y = in[0].clone();
    if (r == "none")
      y.scatter_(a, idx, in[2]);
    else
      y.scatter_reduce_(a, idx, in[2], aten_reduce(r), true);
    out[0] = y;
  };
}

// ScatterND: each row of the last index dim addresses a slice of data's leading dims. The rows become offsets into
// data viewed as (slices, slice elements), so one index_copy/index_add/index_reduce does every reduction.
Kernel scatter_nd(const OpContext& ctx) {
  auto r = reduction(ctx);
  return [r](const Tensors& in, Tensors& out) {
    const auto& data = in[0];
    int64_t k = in[1].size(-1);
    if (k > data.dim()) throw Unsupported("indices address more dims than data has");
    auto lead = data.sizes().slice(0, k);
    auto rows = in[1].reshape({-1, k}).to(at::kLong);
    auto offset = at::zeros({rows.size(0)}, rows.options());
    for (int64_t j = 0; j < k; ++j) offset = offset * lead[j] + wrap_indices(rows.select(1, j), lead[j]);
    std::vector<int64_t> flat{c10::multiply_integers(lead)};
    flat.insert(flat.end(), data.sizes().begin() + k, data.sizes().end());
    auto y = data.clone();
    auto view = y.view(flat);
    std::vector<int64_t> upd_shape{rows.size(0)};
    upd_shape.insert(upd_shape.end(), data.sizes().begin() + k, data.sizes().end());
    auto upd = in[2].reshape(upd_shape);
    if (r == "none") view.index_copy_(0, offset, upd);
    else if (r == "add") view.index_add_(0, offset, upd);
    else view.index_reduce_(0, offset, upd, aten_reduce(r), true);
    out[0] = y;
  };
}

// GatherND: each row of the last index dim addresses a slice of data's dims after the leading batch_dims, per batch.
Kernel gather_nd(const OpContext& ctx) {
  int64_t batch_dims = ctx.attrs.i("batch_dims", 0);
  return [batch_dims](const Tensors& in, Tensors& out) {
    const auto& data = in[0];
    const auto& indices = in[1];
    int64_t b = batch_dims, k = indices.size(-1);
    if (b + k > data.dim()) throw Unsupported("indices address more dims than data has");
    std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end() - 1);
    shape.insert(shape.end(), data.sizes().begin() + b + k, data.sizes().end());
    if (data.is_meta() || indices.is_meta()) {
      out[0] = at::empty(shape, data.options().device(at::kMeta));
      return;
    }
    auto lead = data.sizes().slice(b, k);
    auto idx = values_i64(indices);
    std::vector<int64_t> rows(k ? idx.size() / k : 0);
    for (size_t r = 0; r < rows.size(); ++r) {
      int64_t offset = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t i = idx[r * k + j];
        if (i < -lead[j] || i >= lead[j])
          throw std::out_of_range("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(lead[j]));
        offset = offset * lead[j] + (i < 0 ? i + lead[j] : i);
      }
      rows[r] = offset;
    }
    out[0] = gather_rows(data, c10::multiply_integers(data.sizes().slice(0, b)), c10::multiply_integers(lead), rows,
                         true, shape);
  };
}

Kernel compress(const OpContext& ctx) {
  bool has_axis = ctx.attrs.has("axis");
  int64_t axis = ctx.attrs.i("axis", 0);
  return [has_axis, axis](const Tensors& in, Tensors& out) {
    if (in[1].is_meta()) throw DataDependent("the condition's values decide the output's size");
    auto x = has_axis ? in[0] : in[0].reshape({-1});
    int64_t a = has_axis ? normalize_axis(axis, x.dim()) : 0;
    auto cond = in[1].reshape({-1}).to(at::kBool);
    if (cond.numel() > x.size(a)) cond = cond.narrow(0, 0, x.size(a));
    out[0] = at::index_select(x, a, at::nonzero(cond).reshape({-1}));
  };
}

Kernel non_zero(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    if (in[0].is_meta()) throw DataDependent("the input's values decide the output's size");
    // A scalar counts as a 1-D tensor of one element, whose output has one row (numpy).
    auto x = in[0].dim() == 0 ? in[0].reshape({1}) : in[0];
    out[0] = at::nonzero(x).t().contiguous();
  };
}

// Unique: ATen sorts; ONNX's sorted=0 orders by first occurrence, which the first index of each value gives.
Kernel unique(const OpContext& ctx) {
  bool has_axis = ctx.attrs.has("axis");
  int64_t axis = ctx.attrs.i("axis", 0);
  bool sorted = ctx.attrs.i("sorted", 1);
  return [=](const Tensors& in, Tensors& out) {
    if (in[0].is_meta()) throw DataDependent("the input's values decide the output's size");
    auto x = has_axis ? in[0] : in[0].reshape({-1});
    int64_t a = has_axis ? normalize_axis(axis, x.dim()) : 0;
    auto [values, inverse, counts] = at::unique_dim(x, a, true, true, true);
    int64_t n = values.size(a);
    auto positions = at::arange(x.size(a), at::kLong);
    auto first = at::full({n}, x.size(a), at::kLong).scatter_reduce_(0, inverse, positions, "amin", true);
    if (!sorted) {
      auto order = at::argsort(first);
      auto rank = at::empty_like(order).scatter_(0, order, at::arange(n, at::kLong));
      values = at::index_select(values, a, order);
      first = first.index_select(0, order);
      counts = counts.index_select(0, order);
      inverse = rank.index_select(0, inverse);
    }
    out[0] = values;
    if (out.size() > 1) out[1] = first;
    if (out.size() > 2) out[2] = inverse;
    if (out.size() > 3) out[3] = counts;
  };
}

// ReverseSequence: along the time axis, batch b's first sequence_lens[b] steps reversed, the rest kept; one gather.
Kernel reverse_sequence(const OpContext& ctx) {
  int64_t time_axis = ctx.attrs.i("time_axis", 0), batch_axis = ctx.attrs.i("batch_axis", 1);
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t t = normalize_axis(time_axis, x.dim()), b = normalize_axis(batch_axis, x.dim());
    std::vector<int64_t> tshape(x.dim(), 1), bshape(x.dim(), 1);
    tshape[t] = x.size(t);
    bshape[b] = x.size(b);
    auto steps = at::arange(x.size(t), x.options().dtype(at::kLong)).view(tshape);
    auto lens = in[1].to(at::kLong).view(bshape);
    auto idx = at::where(steps < lens, lens - 1 - steps, steps).expand(x.sizes()).contiguous();
    out[0] = at::gather(x, t, idx);
  };
}

Kernel cumprod(const OpContext& ctx) {
  bool exclusive = ctx.attrs.i("exclusive", 0), reverse = ctx.attrs.i("reverse", 0);
  return [=](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(value_i64(in[1]), in[0].dim());
    auto x = reverse ? in[0].flip({a}) : in[0];
    if (exclusive && x.size(a) > 0) {
      // Shifted by one with a leading 1: a division would lose the zeros.
      auto one = at::ones_like(x.narrow(a, 0, 1));
      x = at::cat({one, x.narrow(a, 0, x.size(a) - 1)}, a);
    }
    auto y = at::cumprod(x, a, x.scalar_type());
    out[0] = reverse ? y.flip({a}) : y;
  };
}

Kernel det(const OpContext&) {
  return [](const Tensors& in, Tensors& out) { out[0] = at::linalg_det(in[0]); };
}

Kernel shrink(const OpContext& ctx) {
  double lambd = ctx.attrs.f("lambd", 0.5f), bias = ctx.attrs.f("bias", 0.0f);
  return [lambd, bias](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    auto y = at::where(x < -lambd, x + bias, at::where(x > lambd, x - bias, at::zeros_like(x)));
    out[0] = y.to(x.scalar_type());
  };
}

Kernel mean_variance_normalization(const OpContext& ctx) {
  auto axes = ctx.attrs.ints("axes", {0, 2, 3});
  return [axes](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    std::vector<int64_t> dims;
    for (auto a : axes) dims.push_back(normalize_axis(a, x.dim()));
    auto centered = x - at::mean(x, dims, true);
    // ONNX's function body adds 1e-9 to the variance before the square root.
    out[0] = centered / at::sqrt(at::mean(centered * centered, dims, true) + 1e-9);
  };
}

const bool registered = register_ops({
    {"ScatterElements", scatter_elements},
    {"Scatter", scatter_elements},
    {"ScatterND", scatter_nd},
    {"GatherND", gather_nd},
    {"Compress", compress, {1}},
    {"NonZero", non_zero, {0}},
    {"Unique", unique, {0}},
    {"ReverseSequence", reverse_sequence},
    {"CumProd", cumprod, {1}},
    {"Det", det},
    {"Shrink", shrink},
    {"MeanVarianceNormalization", mean_variance_normalization},
});

}  // namespace

}  // namespace softnpu::offline
