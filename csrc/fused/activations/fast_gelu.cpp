// npu_fast_gelu(x) -> x * sigmoid(1.702 x), torch_npu's FastGelu (which writes it x / (1 + exp(-1.702 |x|)) *
// exp(0.851 (x - |x|)) so that no exponential overflows). Backward: npu_fast_gelu_backward(grad, x). Both are one
// vectorized pass over memory in the compute type (activations/fast_gelu_kernel.cc), where the composite makes three.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/cpu_kernels.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_fast_gelu(Tensor self) -> Tensor");
  // The out= form lets the op path write the result straight into the device output (no copy).
  m.def("npu_fast_gelu.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("npu_fast_gelu_backward(Tensor grad, Tensor self) -> Tensor");
  // torch_npu's older name (torch_npu.fast_gelu): the op torch_npu.jit's fusion pass writes into TorchScript graphs.
  m.def("fast_gelu(Tensor self) -> Tensor");
}

namespace softnpu::fused {

namespace {

void check(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op,
              ": self must be float32, float16 or bfloat16, got ", x.scalar_type());
}

at::Tensor fast_gelu_meta(const at::Tensor& x) {
  check(x, "npu_fast_gelu");
  return at::empty(x.sizes(), x.options());
}

at::Tensor& fast_gelu_out(const at::Tensor& x, at::Tensor& y) {
  check(x, "npu_fast_gelu");
  TORCH_CHECK(y.sizes() == x.sizes() && y.scalar_type() == x.scalar_type(),
              "npu_fast_gelu.out: out must have self's shape and dtype");
  const at::Tensor xc = x.contiguous();
  // The kernel writes contiguous elements: a strided out gets them through a copy.
  at::Tensor dst = y.is_contiguous() ? y : at::empty(x.sizes(), x.options());
  SOFTNPU_CPU_KERNEL(fast_gelu, x.scalar_type(), xc.const_data_ptr(), xc.numel(), dst.mutable_data_ptr());
  if (!dst.is_same(y)) y.copy_(dst);
  return y;
}

at::Tensor fast_gelu_cpu(const at::Tensor& x) {
  at::Tensor y = at::empty(x.sizes(), x.options());
  fast_gelu_out(x, y);
  return y;
}

at::Tensor fast_gelu_backward_meta(const at::Tensor& grad, const at::Tensor& x) {
  check(x, "npu_fast_gelu_backward");
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.scalar_type() == x.scalar_type(),
              "npu_fast_gelu_backward: grad ", grad.sizes(), " ", grad.scalar_type(), " must match self ", x.sizes(),
              " ", x.scalar_type());
  return at::empty(x.sizes(), x.options());
}

at::Tensor fast_gelu_backward_cpu(const at::Tensor& grad, const at::Tensor& x) {
  at::Tensor dx = fast_gelu_backward_meta(grad, x);
  const at::Tensor gc = grad.contiguous(), xc = x.contiguous();
  SOFTNPU_CPU_KERNEL(fast_gelu_backward, x.scalar_type(), gc.const_data_ptr(), xc.const_data_ptr(), xc.numel(),
                     dx.mutable_data_ptr());
  return dx;
}

using FastGeluSig = at::Tensor(const at::Tensor&);
using FastGeluBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&);

class FastGeluFunction : public torch::autograd::Function<FastGeluFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<FastGeluSig>("npu::npu_fast_gelu");
    ctx->save_for_backward({x});
    return {op.call(x)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<FastGeluBackwardSig>("npu::npu_fast_gelu_backward");
    return {op.call(grads[0], ctx->get_saved_variables()[0])};
  }
};

at::Tensor fast_gelu_autograd(const at::Tensor& x) { return FastGeluFunction::apply(x)[0]; }

at::Tensor fast_gelu_alias(const at::Tensor& x) {
  static const auto op = npu_op<FastGeluSig>("npu::npu_fast_gelu");
  return op.call(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_fast_gelu", fast_gelu_meta);
  m.impl("npu_fast_gelu_backward", fast_gelu_backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_fast_gelu", fast_gelu_cpu);
  m.impl("npu_fast_gelu.out", fast_gelu_out);
  m.impl("npu_fast_gelu_backward", fast_gelu_backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_fast_gelu", fast_gelu_autograd); }

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) { m.impl("fast_gelu", fast_gelu_alias); }

}  // namespace softnpu::fused
