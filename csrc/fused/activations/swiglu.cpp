// npu_swiglu(x, dim=-1): x's halves (a, b) along dim give silu(a) * b, as torch_npu's. The backward is
// npu_swiglu_backward(grad, x, dim) -> dx: da = grad * b * s * (1 + a * (1 - s)) with s = sigmoid(a),
// db = grad * silu(a).
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_swiglu(Tensor self, int dim=-1) -> Tensor");
  m.def("npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor");
}

namespace softnpu::fused {

namespace {

int64_t check(const at::Tensor& x, int64_t dim, const char* op) {
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dim");
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());
  TORCH_CHECK(x.size(d) % 2 == 0, op, ": x's size along dim ", dim, " must be even, got shape ", x.sizes());
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), op, ": x must be floating point, got ", x.scalar_type());
  return d;
}

at::Tensor swiglu_meta(const at::Tensor& x, int64_t dim) {
  const int64_t d = check(x, dim, "npu_swiglu");
  auto shape = x.sizes().vec();
  shape[d] /= 2;
  return at::empty(shape, x.options());
}

at::Tensor swiglu_cpu(const at::Tensor& x, int64_t dim) {
  const int64_t d = check(x, dim, "npu_swiglu");
  const auto halves = x.to(compute_type(x.scalar_type())).chunk(2, d);
  return (at::silu(halves[0]) * halves[1]).to(x.scalar_type());
}

int64_t check_backward(const at::Tensor& grad, const at::Tensor& x, int64_t dim) {
  const int64_t d = check(x, dim, "npu_swiglu_backward");
  auto shape = x.sizes().vec();
  shape[d] /= 2;
  TORCH_CHECK(grad.sizes() == c10::IntArrayRef(shape), "npu_swiglu_backward: grad_output's shape ", grad.sizes(),
              " must be ", c10::IntArrayRef(shape));
  return d;
}

at::Tensor swiglu_backward_meta(const at::Tensor& grad, const at::Tensor& x, int64_t dim) {
  check_backward(grad, x, dim);
  return at::empty(x.sizes(), x.options());
}

at::Tensor swiglu_backward_cpu(const at::Tensor& grad, const at::Tensor& x, int64_t dim) {
  const int64_t d = check_backward(grad, x, dim);
  const auto acc = compute_type(x.scalar_type());
  const auto halves = x.to(acc).chunk(2, d);
  const at::Tensor &a = halves[0], &b = halves[1];
  const at::Tensor g = grad.to(acc);
  const at::Tensor s = at::sigmoid(a);
  at::Tensor da = g * b * s * (1 + a * (1 - s));
  at::Tensor db = g * a * s;
  return at::cat({da, db}, d).to(x.scalar_type());
}

using SwigluSig = at::Tensor(const at::Tensor&, int64_t);
using SwigluBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t dim) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<SwigluSig>("npu::npu_swiglu");
    ctx->save_for_backward({x});
    ctx->saved_data["dim"] = dim;
    return op.call(x, dim);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<SwigluBackwardSig>("npu::npu_swiglu_backward");
    const auto saved = ctx->get_saved_variables();
    return {op.call(grads[0], saved[0], ctx->saved_data["dim"].toInt()), at::Tensor()};
  }
};

at::Tensor swiglu_autograd(const at::Tensor& x, int64_t dim) { return SwigluFunction::apply(x, dim); }

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_swiglu", swiglu_meta);
  m.impl("npu_swiglu_backward", swiglu_backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_swiglu", swiglu_cpu);
  m.impl("npu_swiglu_backward", swiglu_backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_swiglu", swiglu_autograd); }

}  // namespace softnpu::fused
