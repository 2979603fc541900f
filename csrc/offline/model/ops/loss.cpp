// Loss ONNX ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (which is NLL over a log-softmax), with
// per-class weights, ignore_index and the three reductions.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

struct LossAttrs {
  std::string reduction;
  bool has_ignore = false;
  int64_t ignore_index = 0;
};

LossAttrs loss_attrs(const OpContext& ctx) {
  LossAttrs a;
  a.reduction = ctx.attrs.s("reduction", "mean");
  if (a.reduction != "none" && a.reduction != "sum" && a.reduction != "mean")
    throw Unsupported("reduction " + a.reduction + " (none, sum or mean)");
  a.has_ignore = ctx.attrs.has("ignore_index");
  a.ignore_index = ctx.attrs.i("ignore_index", 0);
  return a;
}

// log_prob: (N, C, d1, ...); target: (N, d1, ...); weight: (C) or undefined. The mean divides by the summed weights
// of the targets that count (their number without weights), as ONNX's definition.
at::Tensor nll(const at::Tensor& log_prob, const at::Tensor& target, const at::Tensor& weight, const LossAttrs& a) {
  auto t = target.to(at::kLong);
  auto valid = a.has_ignore ? t.ne(a.ignore_index) : at::ones_like(t, t.options().dtype(at::kBool));
  // An ignored target may be any value, out of [0, C) too: gather class 0 there and weigh it 0.
  auto safe = t.mul(valid);
  auto picked = at::gather(log_prob, 1, safe.unsqueeze(1)).squeeze(1);
  auto w = valid.to(log_prob.scalar_type());
  if (weight.defined()) w = w * at::gather(weight.to(log_prob.scalar_type()), 0, safe.reshape({-1})).view(safe.sizes());
  auto loss = picked.neg() * w;
  if (a.reduction == "none") return loss;
  if (a.reduction == "sum") return loss.sum();
  return loss.sum() / w.sum();
}

Kernel nll_loss(const OpContext& ctx) {
  auto a = loss_attrs(ctx);
  return [a](const Tensors& in, Tensors& out) {
    out[0] = nll(in[0], in[1], in.size() > 2 ? in[2] : at::Tensor(), a);
  };
}

Kernel softmax_cross_entropy(const OpContext& ctx) {
  auto a = loss_attrs(ctx);
  return [a](const Tensors& in, Tensors& out) {
    auto log_prob = at::log_softmax(in[0], 1);
    out[0] = nll(log_prob, in[1], in.size() > 2 ? in[2] : at::Tensor(), a);
    if (out.size() > 1) out[1] = log_prob;
  };
}

const bool registered = register_ops({
    {"NegativeLogLikelihoodLoss", nll_loss},
    {"SoftmaxCrossEntropyLoss", softmax_cross_entropy},
});

}  // namespace

}  // namespace softnpu::offline
