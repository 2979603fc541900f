// Reductions, arg reductions, top-k, cumulative sums and einsum.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Opset where the op's axes moved from an attribute to an input: 13 for ReduceSum, 18 for the others.
template <Reduce R>
Kernel reduce(const OpContext& ctx) {
  int since = R == Reduce::kSum ? 13 : 18;
  bool from_input = ctx.opset >= since;
  auto attr_axes = ctx.attrs.ints("axes");
  bool keepdims = ctx.attrs.i("keepdims", 1);
  bool noop = ctx.attrs.i("noop_with_empty_axes", 0);
  return [=](const Tensors& in, Tensors& out) {
    auto x = in[0];
    auto axes = from_input ? (in.size() > 1 && in[1].defined() ? values_i64(in[1]) : std::vector<int64_t>{}) : attr_axes;
    if (axes.empty()) {
      if (noop) {
        out[0] = x;
        return;
      }
      for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
    }
    for (auto& a : axes) a = normalize_axis(a, x.dim());
    at::Tensor y;
    bool empty = x.numel() == 0;
    switch (R) {
      case Reduce::kSum: y = at::sum(x, axes, keepdims, x.scalar_type()); break;
      case Reduce::kMean: y = at::mean(x, axes, keepdims); break;
      case Reduce::kMax:
        y = empty ? at::full({}, -std::numeric_limits<double>::infinity(), x.options()) : at::amax(x, axes, keepdims);
        if (empty) {
          auto s = x.sizes().vec();
          for (auto a : axes) s[a] = 1;
          y = y.expand(s);
          if (!keepdims) for (auto it = axes.rbegin(); it != axes.rend(); ++it) y = y.squeeze(*it);
          y = y.contiguous();
        }
        break;
      case Reduce::kMin:
        y = empty ? at::full({}, std::numeric_limits<double>::infinity(), x.options()) : at::amin(x, axes, keepdims);
        if (empty) {
          auto s = x.sizes().vec();
          for (auto a : axes) s[a] = 1;
          y = y.expand(s);
          if (!keepdims) for (auto it = axes.rbegin(); it != axes.rend(); ++it) y = y.squeeze(*it);
          y = y.contiguous();
        }
        break;
      case Reduce::kProd: {
        y = x;
        std::vector<int64_t> sorted = axes;
        std::sort(sorted.rbegin(), sorted.rend());
        for (auto a : sorted) y = at::prod(y, a, true);
        if (!keepdims) for (auto a : sorted) y = y.squeeze(a);
        break;
      }
      case Reduce::kL1: y = at::sum(at::abs(x), axes, keepdims).to(x.scalar_type()); break;
      case Reduce::kL2: y = at::sqrt(at::sum(x * x, axes, keepdims)).to(x.scalar_type()); break;
      case Reduce::kLogSum: y = at::log(at::sum(x, axes, keepdims)); break;
      case Reduce::kLogSumExp: y = at::logsumexp(x, axes, keepdims); break;
      case Reduce::kSumSquare: y = at::sum(x * x, axes, keepdims, x.scalar_type()); break;
    }
    out[0] = y;
  };
}

template <bool Max>
Kernel arg_reduce(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", 0);
  bool keepdims = ctx.attrs.i("keepdims", 1);
  bool last = ctx.attrs.i("select_last_index", 0);
  return [=](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(axis, in[0].dim());
    if (!last) {
      out[0] = Max ? at::argmax(in[0], a, keepdims) : at::argmin(in[0], a, keepdims);
      return;
    }
    auto flipped = in[0].flip({a});
    auto idx = Max ? at::argmax(flipped, a, keepdims) : at::argmin(flipped, a, keepdims);
    out[0] = in[0].size(a) - 1 - idx;
  };
}

Kernel topk(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", -1);
  bool largest = ctx.attrs.i("largest", 1), sorted = ctx.attrs.i("sorted", 1);
  bool legacy = ctx.opset < 10;
  int64_t attr_k = ctx.attrs.i("k", 0);
  return [=](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(axis, in[0].dim());
    int64_t k = legacy ? attr_k : value_i64(in[1]);
    // Ties go to the lower index (ONNX); a stable sort gives that where topk does not promise it.
    auto [values, order] = at::sort(in[0], true, a, largest);
    out[0] = values.narrow(a, 0, k).contiguous();
    if (out.size() > 1) out[1] = order.narrow(a, 0, k).contiguous();
    (void)sorted;
  };
}

Kernel cumsum(const OpContext& ctx) {
  bool exclusive = ctx.attrs.i("exclusive", 0), reverse = ctx.attrs.i("reverse", 0);
  return [=](const Tensors& in, Tensors& out) {
    int64_t a = normalize_axis(value_i64(in[1]), in[0].dim());
    auto x = reverse ? in[0].flip({a}) : in[0];
    auto y = at::cumsum(x, a, x.scalar_type());
    if (exclusive) y = y - x;
    out[0] = reverse ? y.flip({a}) : y;
  };
}

Kernel einsum(const OpContext& ctx) {
  auto eq = ctx.attrs.s("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  return [eq](const Tensors& in, Tensors& out) { out[0] = at::einsum(eq, in); };
}

const bool registered = register_ops({
    {"ReduceSum", reduce<Reduce::kSum>, {1}},
    {"ReduceMean", reduce<Reduce::kMean>, {1}},
    {"ReduceMax", reduce<Reduce::kMax>, {1}},
    {"ReduceMin", reduce<Reduce::kMin>, {1}},
    {"ReduceProd", reduce<Reduce::kProd>, {1}},
    {"ReduceL1", reduce<Reduce::kL1>, {1}},
    {"ReduceL2", reduce<Reduce::kL2>, {1}},
    {"ReduceLogSum", reduce<Reduce::kLogSum>, {1}},
    {"ReduceLogSumExp", reduce<Reduce::kLogSumExp>, {1}},
    {"ReduceSumSquare", reduce<Reduce::kSumSquare>, {1}},
    {"ArgMax", arg_reduce<true>},
    {"ArgMin", arg_reduce<false>},
    {"TopK", topk, {1}},
    {"CumSum", cumsum, {1}},
    {"Einsum", einsum},
});

}  // namespace

}  // namespace softnpu::offline
