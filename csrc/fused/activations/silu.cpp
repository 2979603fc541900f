// npu_silu(x) -> x * sigmoid(x), npu_silu_(x) in place, npu_silu_backward(grad, x0, x1): torch_npu's Swish ops, which
// its derivatives give npu_silu's gradient with (x0 the input, x1 the result: dx = grad * (s + x1 (1 - s)),
// s = sigmoid(x0)). npu_silu_ has no gradient, as on torch_npu. The kernels are ATen's vectorized silu and its
// backward (which recomputes s from x0; x1 is what the NPU kernel reads instead). npu_silu_ is a composite over
// _npu_silu_, which returns nothing: a custom op returning its mutated argument cannot be functionalized by
// torch.compile, one that only mutates it can.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_silu(Tensor self) -> Tensor");
  m.def("npu_silu_(Tensor(a!) self) -> Tensor(a!)");
  m.def("_npu_silu_(Tensor(a!) self) -> ()");
  m.def("npu_silu_backward(Tensor grad_output, Tensor x0, Tensor x1) -> Tensor");
}

namespace softnpu::fused {

namespace {

void check(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op,
              ": self must be float32, float16 or bfloat16, got ", x.scalar_type());
}

at::Tensor silu_meta(const at::Tensor& x) {
  check(x, "npu_silu");
  return at::empty(x.sizes(), x.options());
}

void silu_inplace_meta(at::Tensor& x) { check(x, "npu_silu_"); }

at::Tensor silu_cpu(const at::Tensor& x) {
  check(x, "npu_silu");
  return at::silu(x);
}

void silu_inplace_cpu(at::Tensor& x) {
  check(x, "npu_silu_");
  at::silu_(x);
}

at::Tensor& silu_inplace(at::Tensor& x) {
  static const auto op = npu_op<void(at::Tensor&)>("npu::_npu_silu_");
  op.call(x);
  return x;
}

at::Tensor silu_backward_meta(const at::Tensor& grad, const at::Tensor& x0, const at::Tensor& x1) {
  check(x0, "npu_silu_backward");
  for (const auto* t : {&grad, &x1})
    TORCH_CHECK(t->sizes() == x0.sizes() && t->scalar_type() == x0.scalar_type(), "npu_silu_backward: grad_output ",
                "and x1 must have x0's shape ", x0.sizes(), " and dtype ", x0.scalar_type(), ", got ", t->sizes(),
                " ", t->scalar_type());
  return at::empty(x0.sizes(), x0.options());
}

at::Tensor silu_backward_cpu(const at::Tensor& grad, const at::Tensor& x0, const at::Tensor& x1) {
  silu_backward_meta(grad, x0, x1);
  return at::silu_backward(grad, x0);
}

using SiluSig = at::Tensor(const at::Tensor&);
using SiluBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&);

class SiluFunction : public torch::autograd::Function<SiluFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<SiluSig>("npu::npu_silu");
    at::Tensor y = op.call(x);
    ctx->save_for_backward({x, y});
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<SiluBackwardSig>("npu::npu_silu_backward");
    const auto saved = ctx->get_saved_variables();
    return {op.call(grads[0], saved[0], saved[1])};
  }
};

at::Tensor silu_autograd(const at::Tensor& x) { return SiluFunction::apply(x)[0]; }

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_silu", silu_meta);
  m.impl("_npu_silu_", silu_inplace_meta);
  m.impl("npu_silu_backward", silu_backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_silu", silu_cpu);
  m.impl("_npu_silu_", silu_inplace_cpu);
  m.impl("npu_silu_backward", silu_backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_silu", silu_autograd); }

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) { m.impl("npu_silu_", silu_inplace); }

}  // namespace softnpu::fused
