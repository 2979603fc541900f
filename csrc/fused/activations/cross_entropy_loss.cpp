// npu_cross_entropy_loss(input, target, weight=None, reduction='mean', ignore_index=-100, label_smoothing=0.0,
// lse_square_scale_for_zloss=0.0, return_zloss=False) -> (loss, log_prob, zloss, lse_for_zloss): log_softmax and
// nll_loss fused as torch_npu documents them (verl's npu path calls it): log_prob = input - lse per row, loss =
// torch's cross_entropy (class weights, ignore_index, label smoothing), [N] for 'none' and [1] otherwise, in input's
// dtype. The z-loss is not supported by torch_npu yet (lse_square_scale_for_zloss must be 0): zloss is zeros of loss's
// shape and lse_for_zloss the rows' log-sum-exp. Backward: npu_cross_entropy_loss_backward(grad_loss, log_prob,
// target, weight, grad_zloss, lse_for_zloss, reduction, ignore_index, label_smoothing, lse_square_scale_for_zloss),
// from log_prob alone: with g = dloss/dlog_prob, dinput = g - softmax * sum(g).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_cross_entropy_loss(Tensor input, Tensor target, Tensor? weight=None, str reduction='mean', "
        "int ignore_index=-100, float label_smoothing=0.0, float lse_square_scale_for_zloss=0.0, "
        "bool return_zloss=False) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("npu_cross_entropy_loss_backward(Tensor grad_loss, Tensor log_prob, Tensor target, Tensor? weight=None, "
        "Tensor? grad_zloss=None, Tensor? lse_for_zloss=None, str reduction='mean', int ignore_index=-100, "
        "float label_smoothing=0.0, float lse_square_scale_for_zloss=0.0) -> Tensor");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_cross_entropy_loss";

int64_t reduction_of(c10::string_view r) {
  TORCH_CHECK(r == "mean" || r == "sum" || r == "none", OP, ": reduction must be mean, sum or none, got ", r);
  return r == "none" ? at::Reduction::None : r == "sum" ? at::Reduction::Sum : at::Reduction::Mean;
}

void check(const at::Tensor& input, const at::Tensor& target, const std::optional<at::Tensor>& weight,
           c10::string_view reduction, double label_smoothing, double zloss_scale) {
  reduction_of(reduction);
  TORCH_CHECK(input.dim() == 2 && input.size(1) > 0, OP, ": input must be [N, C] with C > 0, got ", input.sizes());
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kHalf ||
                  input.scalar_type() == at::kBFloat16,
              OP, ": input must be float16, float32 or bfloat16, got ", input.scalar_type());
  TORCH_CHECK(target.dim() == 1 && target.size(0) == input.size(0) && target.scalar_type() == at::kLong, OP,
              ": target must be int64 [N] with N = ", input.size(0), ", got ", target.scalar_type(), " ",
              target.sizes());
  if (given(weight))
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == input.size(1) && weight->scalar_type() == at::kFloat, OP,
                ": weight must be float32 [C] with C = ", input.size(1), ", got ", weight->scalar_type(), " ",
                weight->sizes());
  TORCH_CHECK(label_smoothing >= 0 && label_smoothing < 1, OP, ": label_smoothing must be in [0, 1), got ",
              label_smoothing);
  TORCH_CHECK(zloss_scale == 0, OP, ": lse_square_scale_for_zloss is not supported yet (as on torch_npu), got ",
              zloss_scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> ce_meta(const at::Tensor& input, const at::Tensor& target,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   c10::string_view reduction, int64_t ignore_index,
                                                                   double label_smoothing, double zloss_scale,
                                                                   bool return_zloss) {
  check(input, target, weight, reduction, label_smoothing, zloss_scale);
  const int64_t n = reduction == "none" ? input.size(0) : 1;
  return {at::empty({n}, input.options()), at::empty(input.sizes(), input.options()),
          at::empty({n}, input.options()), at::empty({input.size(0)}, input.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> ce_cpu(const at::Tensor& input, const at::Tensor& target,
                                                                  const std::optional<at::Tensor>& weight,
                                                                  c10::string_view reduction, int64_t ignore_index,
                                                                  double label_smoothing, double zloss_scale,
                                                                  bool return_zloss) {
  check(input, target, weight, reduction, label_smoothing, zloss_scale);
  const at::Tensor x = input.to(at::kFloat);
  const at::Tensor lse = at::logsumexp(x, {1});
  const at::Tensor log_prob = x - lse.unsqueeze(1);
  const at::Tensor loss = at::cross_entropy_loss(log_prob, target, weight, reduction_of(reduction), ignore_index,
                                                 label_smoothing);
  const int64_t n = reduction == "none" ? input.size(0) : 1;
  return {loss.reshape({n}).to(input.scalar_type()), log_prob.to(input.scalar_type()),
          at::zeros({n}, input.options()), lse.to(input.scalar_type())};
}

at::Tensor ce_backward_meta(const at::Tensor& grad_loss, const at::Tensor& log_prob, const at::Tensor& target,
                            const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>&,
                            const std::optional<at::Tensor>&, c10::string_view reduction, int64_t,
                            double label_smoothing, double zloss_scale) {
  check(log_prob, target, weight, reduction, label_smoothing, zloss_scale);
  return at::empty(log_prob.sizes(), log_prob.options());
}

// dloss/dlog_prob of torch's cross_entropy on log-probabilities: -(1 - eps) w_y [c == y] - eps/C w_c per kept row,
// scaled by the reduction (mean: over the kept rows' sum of w_y); then through log_softmax.
at::Tensor ce_backward_cpu(const at::Tensor& grad_loss, const at::Tensor& log_prob, const at::Tensor& target,
                           const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& grad_zloss,
                           const std::optional<at::Tensor>& lse_for_zloss, c10::string_view reduction,
                           int64_t ignore_index, double label_smoothing, double zloss_scale) {
  check(log_prob, target, weight, reduction, label_smoothing, zloss_scale);
  const int64_t n = log_prob.size(0), c = log_prob.size(1);
  const at::Tensor lp = log_prob.to(at::kFloat);
  const at::Tensor w = given(weight) ? *weight : at::ones({c}, lp.options());
  const at::Tensor keep = target.ne(ignore_index);
  const at::Tensor safe_target = target.masked_fill(keep.logical_not(), 0);
  const at::Tensor w_y = w.index_select(0, safe_target) * keep;
  at::Tensor g = at::zeros({n, c}, lp.options());
  g.scatter_(1, safe_target.unsqueeze(1), (-(1 - label_smoothing) * w_y).unsqueeze(1));
  g.sub_((label_smoothing / static_cast<double>(c)) * w.unsqueeze(0) * keep.unsqueeze(1));
  at::Tensor scale = grad_loss.to(at::kFloat).reshape({-1});
  if (reduction == "mean") scale = scale / w_y.sum();
  g.mul_(reduction == "none" ? scale.unsqueeze(1) : scale.reshape({1, 1}));
  const at::Tensor dx = g - lp.exp() * g.sum(1, true);
  return dx.to(log_prob.scalar_type());
}

using CeSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                         const std::optional<at::Tensor>&,
                                                                         c10::string_view, int64_t, double, double,
                                                                         bool);
using CeBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                 const std::optional<at::Tensor>&, c10::string_view, int64_t, double, double);

class CeFunction : public torch::autograd::Function<CeFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                                                const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                                c10::string_view reduction, int64_t ignore_index,
                                                double label_smoothing, double zloss_scale, bool return_zloss) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<CeSig>("npu::npu_cross_entropy_loss");
    auto [loss, log_prob, zloss, lse] = op.call(input, target, weight, reduction, ignore_index, label_smoothing,
                                                zloss_scale, return_zloss);
    ctx->save_for_backward({log_prob, target, weight.value_or(at::Tensor())});
    ctx->saved_data["reduction"] = std::string(reduction);
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["label_smoothing"] = label_smoothing;
    ctx->saved_data["zloss_scale"] = zloss_scale;
    ctx->mark_non_differentiable({log_prob, zloss, lse});
    return {loss, log_prob, zloss, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<CeBackwardSig>("npu::npu_cross_entropy_loss_backward");
    const auto s = ctx->get_saved_variables();
    std::optional<at::Tensor> weight;
    if (s[2].defined()) weight = s[2];
    const std::string reduction = ctx->saved_data["reduction"].toStringRef();
    const at::Tensor dx = op.call(grads[0], s[0], s[1], weight, std::nullopt, std::nullopt, reduction,
                                  ctx->saved_data["ignore_index"].toInt(),
                                  ctx->saved_data["label_smoothing"].toDouble(),
                                  ctx->saved_data["zloss_scale"].toDouble());
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> ce_autograd(const at::Tensor& input,
                                                                       const at::Tensor& target,
                                                                       const std::optional<at::Tensor>& weight,
                                                                       c10::string_view reduction,
                                                                       int64_t ignore_index, double label_smoothing,
                                                                       double zloss_scale, bool return_zloss) {
  auto out = CeFunction::apply(input, target, weight, reduction, ignore_index, label_smoothing, zloss_scale,
                               return_zloss);
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_cross_entropy_loss", ce_meta);
  m.impl("npu_cross_entropy_loss_backward", ce_backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_cross_entropy_loss", ce_cpu);
  m.impl("npu_cross_entropy_loss_backward", ce_backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_cross_entropy_loss", ce_autograd); }

}  // namespace softnpu::fused
