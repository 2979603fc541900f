// ai.onnx.preview.training's optimizers: one update step of Adagrad, Momentum or Adam over n tensors at once.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

// Inputs R (learning rate), T (update count), then groups of n tensors each (X..., G..., and the optimizer's state).
int64_t tensors_per_group(const Tensors& in, int groups) {
  int64_t n = (static_cast<int64_t>(in.size()) - 2) / groups;
  if (n <= 0 || 2 + n * groups != static_cast<int64_t>(in.size()))
    throw Unsupported("expected R, T and " + std::to_string(groups) + " groups of tensors");
  return n;
}

Kernel adagrad(const OpContext& ctx) {
  double decay = ctx.attrs.f("decay_factor", 0.0f), eps = ctx.attrs.f("epsilon", 0.0f),
         norm = ctx.attrs.f("norm_coefficient", 0.0f);
  return [=](const Tensors& in, Tensors& out) {
    int64_t n = tensors_per_group(in, 3);
    double r = value_f64(in[0]) / (1 + value_f64(in[1]) * decay);
    for (int64_t i = 0; i < n; ++i) {
      const auto &x = in[2 + i], &g = in[2 + n + i], &h = in[2 + 2 * n + i];
      auto gr = x * norm + g;
      auto h_new = h + gr * gr;
      out[i] = x - r * gr / (at::sqrt(h_new) + eps);
      out[n + i] = h_new;
    }
  };
}

Kernel momentum(const OpContext& ctx) {
  double alpha = ctx.attrs.f("alpha", 0.0f), beta = ctx.attrs.f("beta", 0.0f), norm = ctx.attrs.f("norm_coefficient", 0.0f);
  auto mode = ctx.attrs.s("mode", "standard");
  if (mode != "standard" && mode != "nesterov") throw Unsupported("mode " + mode);
  bool nesterov = mode == "nesterov";
  return [=](const Tensors& in, Tensors& out) {
    int64_t n = tensors_per_group(in, 3);
    double r = value_f64(in[0]);
    double b = value_i64(in[1]) > 0 ? beta : 1.0;
    for (int64_t i = 0; i < n; ++i) {
      const auto &x = in[2 + i], &g = in[2 + n + i], &v = in[2 + 2 * n + i];
      auto gr = x * norm + g;
      auto v_new = v * alpha + gr * b;
      out[i] = nesterov ? x - r * (gr + v_new * alpha) : x - r * v_new;
      out[n + i] = v_new;
    }
  };
}

Kernel adam(const OpContext& ctx) {
  double alpha = ctx.attrs.f("alpha", 0.9f), beta = ctx.attrs.f("beta", 0.999f), eps = ctx.attrs.f("epsilon", 1e-6f),
         norm = ctx.attrs.f("norm_coefficient", 0.0f), post = ctx.attrs.f("norm_coefficient_post", 0.0f);
  return [=](const Tensors& in, Tensors& out) {
    int64_t n = tensors_per_group(in, 4);
    double r = value_f64(in[0]);
    double t = static_cast<double>(value_i64(in[1]));
    double r_adj = t > 0 ? r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : r;
    for (int64_t i = 0; i < n; ++i) {
      const auto &x = in[2 + i], &g = in[2 + n + i], &v = in[2 + 2 * n + i], &h = in[2 + 3 * n + i];
      auto gr = x * norm + g;
      auto v_new = v * alpha + gr * (1 - alpha);
      auto h_new = h * beta + gr * gr * (1 - beta);
      out[i] = (x - r_adj * (v_new / (at::sqrt(h_new) + eps))) * (1 - post);
      out[n + i] = v_new;
      out[2 * n + i] = h_new;
    }
  };
}

const bool registered = register_ops({
    {"ai.onnx.preview.training:Adagrad", adagrad, {0, 1}},
    {"ai.onnx.preview.training:Momentum", momentum, {0, 1}},
    {"ai.onnx.preview.training:Adam", adam, {0, 1}},
});

}  // namespace

}  // namespace softnpu::offline
