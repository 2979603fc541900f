// npu_rms_norm(x, gamma, epsilon) -> (y, rstd): y = x * rstd * gamma over the trailing dims gamma covers, rstd =
// 1 / sqrt(mean(x^2) + epsilon) in float32 (float64 for float64 x) with those dims kept as 1, as torch_npu returns it.
// The backward is torch_npu's npu_rms_norm_backward(dy, x, gamma, rstd) -> (dx, dgamma).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)");
  m.def("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> (Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

// The dims gamma covers (the last gamma.dim() of x), checked.
std::vector<int64_t> norm_dims(const at::Tensor& x, const at::Tensor& gamma, const char* op) {
  TORCH_CHECK(gamma.dim() >= 1 && gamma.dim() <= x.dim(), op, ": gamma must have between 1 and ", x.dim(),
              " dims (those of the trailing dims of x), got ", gamma.dim());
  TORCH_CHECK(x.sizes().slice(x.dim() - gamma.dim()) == gamma.sizes(), op, ": gamma's shape ", gamma.sizes(),
              " must equal the trailing dims of x ", x.sizes());
  TORCH_CHECK(at::isFloatingType(x.scalar_type()) && at::isFloatingType(gamma.scalar_type()), op,
              ": x and gamma must be floating point, got ", x.scalar_type(), " and ", gamma.scalar_type());
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - gamma.dim(); d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

std::vector<int64_t> rstd_shape(const at::Tensor& x, const at::Tensor& gamma) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (int64_t d = x.dim() - gamma.dim(); d < x.dim(); ++d) shape[d] = 1;
  return shape;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_meta(const at::Tensor& x, const at::Tensor& gamma, double epsilon) {
  norm_dims(x, gamma, "npu_rms_norm");
  return {at::empty(x.sizes(), x.options()),
          at::empty(rstd_shape(x, gamma), x.options().dtype(compute_type(x.scalar_type())))};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_cpu(const at::Tensor& x, const at::Tensor& gamma, double epsilon) {
  const auto dims = norm_dims(x, gamma, "npu_rms_norm");
  const auto acc = compute_type(x.scalar_type());
  const at::Tensor xf = x.to(acc);
  at::Tensor rstd = (xf.square().mean(dims, /*keepdim=*/true) + epsilon).rsqrt_();
  at::Tensor y = (xf * rstd * gamma.to(acc)).to(x.scalar_type());
  return {std::move(y), std::move(rstd)};
}

std::vector<int64_t> check_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& gamma,
                                    const at::Tensor& rstd) {
  auto dims = norm_dims(x, gamma, "npu_rms_norm_backward");
  TORCH_CHECK(dy.sizes() == x.sizes(), "npu_rms_norm_backward: dy's shape ", dy.sizes(), " must equal x's ",
              x.sizes());
  TORCH_CHECK(rstd.sizes() == c10::IntArrayRef(rstd_shape(x, gamma)), "npu_rms_norm_backward: rstd's shape ",
              rstd.sizes(), " must be ", c10::IntArrayRef(rstd_shape(x, gamma)));
  return dims;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_meta(const at::Tensor& dy, const at::Tensor& x,
                                                          const at::Tensor& gamma, const at::Tensor& rstd) {
  check_backward(dy, x, gamma, rstd);
  return {at::empty(x.sizes(), x.options()), at::empty(gamma.sizes(), gamma.options())};
}

// With xh = x * rstd: dx = rstd * (dy * gamma - xh * mean(dy * gamma * xh)), dgamma = sum(dy * xh) over the
// leading dims.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                         const at::Tensor& gamma, const at::Tensor& rstd) {
  const auto dims = check_backward(dy, x, gamma, rstd);
  const auto acc = compute_type(x.scalar_type());
  const at::Tensor r = rstd.to(acc);
  const at::Tensor xh = x.to(acc) * r;
  const at::Tensor dyg = dy.to(acc) * gamma.to(acc);
  at::Tensor dx = (r * (dyg - xh * (dyg * xh).mean(dims, /*keepdim=*/true))).to(x.scalar_type());
  std::vector<int64_t> lead;
  for (int64_t d = 0; d < x.dim() - gamma.dim(); ++d) lead.push_back(d);
  at::Tensor prod = dy.to(acc) * xh;
  at::Tensor dgamma = (lead.empty() ? prod : prod.sum(lead)).to(gamma.scalar_type());
  return {std::move(dx), std::move(dgamma)};
}

using RmsNormSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double);
using RmsNormBackwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                              const at::Tensor&, const at::Tensor&);

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& gamma, double epsilon) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<RmsNormSig>("npu::npu_rms_norm");
    auto [y, rstd] = op.call(x, gamma, epsilon);
    ctx->save_for_backward({x, gamma, rstd});
    ctx->mark_non_differentiable({rstd});
    return {y, rstd};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<RmsNormBackwardSig>("npu::npu_rms_norm_backward");
    const auto saved = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto [dx, dgamma] = op.call(grads[0], saved[0], saved[1], saved[2]);
    return {dx, dgamma, at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> rms_norm_autograd(const at::Tensor& x, const at::Tensor& gamma, double epsilon) {
  auto out = RmsNormFunction::apply(x, gamma, epsilon);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_rms_norm", rms_norm_meta);
  m.impl("npu_rms_norm_backward", rms_norm_backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_rms_norm", rms_norm_cpu);
  m.impl("npu_rms_norm_backward", rms_norm_backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_rms_norm", rms_norm_autograd); }

}  // namespace softnpu::fused
