// If, Loop and Scan: their subgraphs (model/subgraph.h) run inside the node's kernel, on tensors.
#include <ATen/ATen.h>

#include <memory>

#include "model/ops/op.h"
#include "model/subgraph.h"

namespace softnpu::offline {

namespace {

// The enclosing graph's values the subgraphs read: the node's inputs after its own, named by softnpu_captures.
struct Captures {
  std::vector<std::string> names;
  size_t first = 0;  // index of the first captured input

  Captures(const OpContext& ctx) {
    const auto* a = ctx.attrs.find(kCapturesAttribute);
    if (a) names.assign(a->strings().begin(), a->strings().end());
    first = ctx.num_inputs - names.size();
  }
  std::map<std::string, at::Tensor> bind(const Tensors& in) const {
    std::map<std::string, at::Tensor> m;
    for (size_t i = 0; i < names.size(); ++i) m[names[i]] = in[first + i];
    return m;
  }
};

std::shared_ptr<Subgraph> subgraph(const OpContext& ctx, const std::string& name) {
  const auto* a = ctx.attrs.find(name);
  if (!a || !a->has_g()) throw Unsupported("attribute '" + name + "' (a graph) is required");
  return std::make_shared<Subgraph>(a->g(), ctx.opset);
}

Kernel if_op(const OpContext& ctx) {
  auto then_branch = subgraph(ctx, "then_branch"), else_branch = subgraph(ctx, "else_branch");
  Captures captures(ctx);
  return [=](const Tensors& in, Tensors& out) {
    const auto& branch = value_i64(in[0]) != 0 ? then_branch : else_branch;
    auto r = branch->run({}, captures.bind(in));
    for (size_t i = 0; i < out.size() && i < r.size(); ++i) out[i] = r[i];
  };
}

// Stacks the per-iteration values of a scan output along a new axis (an empty run gives a 0-length tensor).
at::Tensor stack(const std::vector<at::Tensor>& parts, int64_t axis) {
  if (parts.empty()) return at::empty({0}, at::kFloat);
  return at::stack(parts, normalize_axis(axis, parts[0].dim() + 1));
}

Kernel loop(const OpContext& ctx) {
  auto body = subgraph(ctx, "body");
  Captures captures(ctx);
  size_t carried = captures.first - 2;
  return [=](const Tensors& in, Tensors& out) {
    auto outer = captures.bind(in);
    bool has_max = in[0].defined(), has_cond = in.size() > 1 && in[1].defined();
    int64_t max = has_max ? value_i64(in[0]) : 0;
    bool cond = has_cond ? value_i64(in[1]) != 0 : true;
    Tensors state(in.begin() + 2, in.begin() + 2 + carried);
    std::vector<std::vector<at::Tensor>> scans;
    for (int64_t i = 0; (!has_max || i < max) && cond; ++i) {
      Tensors args{at::scalar_tensor(i, at::kLong), at::scalar_tensor(cond, at::kBool)};
      args.insert(args.end(), state.begin(), state.end());
      auto r = body->run(args, outer);
      if (r.size() < 1 + carried) throw Unsupported("Loop body returns fewer values than the loop carries");
      cond = value_i64(r[0]) != 0;
      for (size_t k = 0; k < carried; ++k) state[k] = r[1 + k];
      scans.resize(r.size() - 1 - carried);
      for (size_t k = 0; k < scans.size(); ++k) scans[k].push_back(r[1 + carried + k]);
      if (!has_max && !has_cond) throw Unsupported("a Loop without a trip count or a condition never ends");
    }
    for (size_t k = 0; k < carried && k < out.size(); ++k) out[k] = state[k];
    for (size_t k = carried; k < out.size(); ++k)
      out[k] = k - carried < scans.size() ? stack(scans[k - carried], 0) : at::empty({0}, at::kFloat);
  };
}

Kernel scan(const OpContext& ctx) {
  if (ctx.opset < 9) throw Unsupported("Scan before opset 9 (sequence_lens)");
  auto body = subgraph(ctx, "body");
  Captures captures(ctx);
  int64_t m = ctx.attrs.required_i("num_scan_inputs");
  int64_t n = static_cast<int64_t>(captures.first) - m;
  auto in_axes = ctx.attrs.ints("scan_input_axes", std::vector<int64_t>(m, 0));
  auto in_dirs = ctx.attrs.ints("scan_input_directions", std::vector<int64_t>(m, 0));
  int64_t k = static_cast<int64_t>(body->num_outputs()) - n;
  auto out_axes = ctx.attrs.ints("scan_output_axes", std::vector<int64_t>(k, 0));
  auto out_dirs = ctx.attrs.ints("scan_output_directions", std::vector<int64_t>(k, 0));
  return [=](const Tensors& in, Tensors& out) {
    auto outer = captures.bind(in);
    Tensors state(in.begin(), in.begin() + n);
    std::vector<at::Tensor> xs;
    std::vector<int64_t> axes;
    for (int64_t j = 0; j < m; ++j) {
      xs.push_back(in[n + j]);
      axes.push_back(normalize_axis(in_axes[j], in[n + j].dim()));
    }
    int64_t len = m ? xs[0].size(axes[0]) : 0;
    std::vector<std::vector<at::Tensor>> ys(k);
    for (int64_t t = 0; t < len; ++t) {
      Tensors args = state;
      for (int64_t j = 0; j < m; ++j) args.push_back(xs[j].select(axes[j], in_dirs[j] ? len - 1 - t : t));
      auto r = body->run(args, outer);
      for (int64_t s = 0; s < n; ++s) state[s] = r[s];
      for (int64_t s = 0; s < k; ++s) ys[s].push_back(r[n + s]);
    }
    for (int64_t s = 0; s < n && s < static_cast<int64_t>(out.size()); ++s) out[s] = state[s];
    for (int64_t s = 0; s < k && n + s < static_cast<int64_t>(out.size()); ++s) {
      auto parts = ys[s];
      if (out_dirs[s]) std::reverse(parts.begin(), parts.end());
      out[n + s] = stack(parts, out_axes[s]);
    }
  };
}

const bool registered = register_ops({
    {"If", if_op, {0}},
    {"Loop", loop, {0, 1}},
    {"Scan", scan},
});

}  // namespace

}  // namespace softnpu::offline
