// npu_geglu(x, dim=-1, approximate=1, activate_left=False) -> (y, gelu): x's halves along dim, one activated with gelu
// (approximate 0: erf, 1: tanh), the other multiplied by it: y = gelu(a) * b, with a the right half unless
// activate_left (diffusers' GEGLU: hidden, gate = x.chunk(2, -1); hidden * gelu(gate)). gelu is the activated half's
// gelu, which the backward takes: npu_geglu_grad(grad, x, gelu, dim, approximate, activate_left) -> dx, with
// da = gelu'(a) * b * grad and db = gelu * grad.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_geglu(Tensor self, int dim=-1, int approximate=1, bool activate_left=False) -> (Tensor, Tensor)");
  m.def("npu_geglu_grad(Tensor grad_output, Tensor self, Tensor gelu, int dim=-1, int approximate=1, "
        "bool activate_left=False) -> Tensor");
}

namespace softnpu::fused {

namespace {

int64_t check(const at::Tensor& x, int64_t dim, int64_t approximate, const char* op) {
  TORCH_CHECK(x.dim() >= 1, op, ": self must have at least one dim");
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());
  TORCH_CHECK(x.size(d) % 2 == 0, op, ": self's size along dim ", dim, " must be even, got shape ", x.sizes());
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), op, ": self must be floating point, got ", x.scalar_type());
  TORCH_CHECK(approximate == 0 || approximate == 1, op, ": approximate must be 0 (none) or 1 (tanh), got ",
              approximate);
  return d;
}

std::vector<int64_t> half_shape(const at::Tensor& x, int64_t d) {
  auto shape = x.sizes().vec();
  shape[d] /= 2;
  return shape;
}

const char* gelu_mode(int64_t approximate) { return approximate == 1 ? "tanh" : "none"; }

// (activated half, other half) of x in the compute dtype.
std::pair<at::Tensor, at::Tensor> halves(const at::Tensor& x, int64_t d, bool activate_left) {
  const auto parts = x.to(compute_type(x.scalar_type())).chunk(2, d);
  return activate_left ? std::make_pair(parts[0], parts[1]) : std::make_pair(parts[1], parts[0]);
}

std::tuple<at::Tensor, at::Tensor> geglu_meta(const at::Tensor& x, int64_t dim, int64_t approximate,
                                              bool activate_left) {
  const auto shape = half_shape(x, check(x, dim, approximate, "npu_geglu"));
  return {at::empty(shape, x.options()), at::empty(shape, x.options())};
}

std::tuple<at::Tensor, at::Tensor> geglu_cpu(const at::Tensor& x, int64_t dim, int64_t approximate,
                                             bool activate_left) {
  const int64_t d = check(x, dim, approximate, "npu_geglu");
  const auto [a, b] = halves(x, d, activate_left);
  const at::Tensor gelu = at::gelu(a, gelu_mode(approximate));
  return {(gelu * b).to(x.scalar_type()), gelu.to(x.scalar_type())};
}

int64_t check_grad(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& gelu, int64_t dim,
                   int64_t approximate) {
  const int64_t d = check(x, dim, approximate, "npu_geglu_grad");
  const auto shape = half_shape(x, d);
  TORCH_CHECK(grad.sizes() == c10::IntArrayRef(shape) && gelu.sizes() == c10::IntArrayRef(shape), "npu_geglu_grad: grad_output ", grad.sizes(),
              " and gelu ", gelu.sizes(), " must have the shape of half of self, ", c10::IntArrayRef(shape));
  return d;
}

at::Tensor geglu_grad_meta(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& gelu, int64_t dim,
                           int64_t approximate, bool activate_left) {
  check_grad(grad, x, gelu, dim, approximate);
  return at::empty(x.sizes(), x.options());
}

at::Tensor geglu_grad_cpu(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& gelu, int64_t dim,
                          int64_t approximate, bool activate_left) {
  const int64_t d = check_grad(grad, x, gelu, dim, approximate);
  const auto [a, b] = halves(x, d, activate_left);
  const auto acc = compute_type(x.scalar_type());
  const at::Tensor g = grad.to(acc);
  const at::Tensor da = at::gelu_backward(g * b, a, gelu_mode(approximate));
  const at::Tensor db = g * gelu.to(acc);
  return (activate_left ? at::cat({da, db}, d) : at::cat({db, da}, d)).to(x.scalar_type());
}

using GegluSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, int64_t, bool);
using GegluGradSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t, bool);

class GegluFunction : public torch::autograd::Function<GegluFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                int64_t dim, int64_t approximate, bool activate_left) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<GegluSig>("npu::npu_geglu");
    auto [y, gelu] = op.call(x, dim, approximate, activate_left);
    ctx->save_for_backward({x, gelu});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["approximate"] = approximate;
    ctx->saved_data["activate_left"] = activate_left;
    ctx->mark_non_differentiable({gelu});
    return {y, gelu};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<GegluGradSig>("npu::npu_geglu_grad");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor dx = op.call(grads[0], saved[0], saved[1], ctx->saved_data["dim"].toInt(),
                                  ctx->saved_data["approximate"].toInt(), ctx->saved_data["activate_left"].toBool());
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> geglu_autograd(const at::Tensor& x, int64_t dim, int64_t approximate,
                                                  bool activate_left) {
  const auto out = GegluFunction::apply(x, dim, approximate, activate_left);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_geglu", geglu_meta);
  m.impl("npu_geglu_grad", geglu_grad_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_geglu", geglu_cpu);
  m.impl("npu_geglu_grad", geglu_grad_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_geglu", geglu_autograd); }

}  // namespace softnpu::fused
