// npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6) -> (y, rstd, x): the residual add fused with RMSNorm, as torch_npu
// documents it: x = x1 + x2, rstd = 1 / sqrt(mean(x^2) + epsilon) over the trailing dims gamma covers (float32, those
// dims kept as 1), y = x * rstd * gamma; y and x in x1's dtype.
//
// The kernel is one pass over memory per row (rms_norm_kernel.cc): the sum, its square sum and the scaled output, in
// float32 vectors, in parallel over rows, written into the outputs through the .out overload, where the composite
// (add, cast, square, mean, rsqrt, two products, cast) makes eight passes and as many temporaries.
// torch_npu has no backward for it; here it is differentiable through npu_rms_norm_backward (the gradient of y), plus
// the gradient of x, both reaching x1 and x2.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/cpu_kernels.h"

// torch_npu's schema (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)");
  // The out= form lets the op path write the results straight into the device outputs (no copy).
  m.def("npu_add_rms_norm.out(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06, *, Tensor(a!) out0, "
        "Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_add_rms_norm";

void check(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& gamma) {
  TORCH_CHECK(x1.sizes() == x2.sizes(), OP, ": x1 ", x1.sizes(), " and x2 ", x2.sizes(), " must have one shape");
  TORCH_CHECK(x1.scalar_type() == x2.scalar_type(), OP, ": x1 and x2 must have one dtype, got ", x1.scalar_type(),
              " and ", x2.scalar_type());
  TORCH_CHECK(x1.scalar_type() == at::kFloat || x1.scalar_type() == at::kHalf || x1.scalar_type() == at::kBFloat16,
              OP, ": x1 must be float32, float16 or bfloat16, got ", x1.scalar_type());
  TORCH_CHECK(x1.dim() >= 1 && x1.dim() <= 8, OP, ": x1 must have 1 to 8 dims, got ", x1.dim());
  TORCH_CHECK(x1.numel() > 0, OP, ": empty tensors are not supported");
  TORCH_CHECK(gamma.dim() >= 1 && gamma.dim() <= x1.dim() && x1.sizes().slice(x1.dim() - gamma.dim()) == gamma.sizes(),
              OP, ": gamma's shape ", gamma.sizes(), " must equal the trailing dims of x1 ", x1.sizes());
  TORCH_CHECK(at::isFloatingType(gamma.scalar_type()), OP, ": gamma must be floating point, got ",
              gamma.scalar_type());
}

std::vector<int64_t> rstd_shape(const at::Tensor& x, const at::Tensor& gamma) {
  auto shape = x.sizes().vec();
  for (int64_t d = x.dim() - gamma.dim(); d < x.dim(); ++d) shape[d] = 1;
  return shape;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_meta(const at::Tensor& x1, const at::Tensor& x2,
                                                                 const at::Tensor& gamma, double epsilon) {
  check(x1, x2, gamma);
  return {at::empty(x1.sizes(), x1.options()), at::empty(rstd_shape(x1, gamma), x1.options().dtype(at::kFloat)),
          at::empty(x1.sizes(), x1.options())};
}

// Writes y, rstd and x (contiguous, of the Meta kernel's shapes and dtypes) in one pass over x1 and x2
// (normalization/rms_norm_kernel.cc).
void add_rms_norm_into(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& gamma, double epsilon,
                       at::Tensor& y, at::Tensor& rstd, at::Tensor& x) {
  const at::Tensor a = x1.contiguous(), b = x2.contiguous();
  const at::Tensor g = gamma.to(compute_type(x1.scalar_type())).contiguous();
  const int64_t n = gamma.numel(), rows = x1.numel() / n;
  SOFTNPU_CPU_KERNEL(rms_norm, x1.scalar_type(), a.const_data_ptr(), b.const_data_ptr(), g.const_data_ptr(), epsilon,
                     rows, n, y.data_ptr(), rstd.data_ptr(), x.data_ptr());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_cpu(const at::Tensor& x1, const at::Tensor& x2,
                                                                const at::Tensor& gamma, double epsilon) {
  check(x1, x2, gamma);
  at::Tensor y = at::empty(x1.sizes(), x1.options()), x = at::empty(x1.sizes(), x1.options());
  at::Tensor rstd = at::empty(rstd_shape(x1, gamma), x1.options().dtype(at::kFloat));
  add_rms_norm_into(x1, x2, gamma, epsilon, y, rstd, x);
  return {y, rstd, x};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> add_rms_norm_out(const at::Tensor& x1, const at::Tensor& x2,
                                                                   const at::Tensor& gamma, double epsilon,
                                                                   at::Tensor& out0, at::Tensor& out1,
                                                                   at::Tensor& out2) {
  check(x1, x2, gamma);
  TORCH_CHECK(out0.sizes() == x1.sizes() && out2.sizes() == x1.sizes() &&
                  out1.sizes() == c10::IntArrayRef(rstd_shape(x1, gamma)) && out0.scalar_type() == x1.scalar_type() &&
                  out2.scalar_type() == x1.scalar_type() && out1.scalar_type() == at::kFloat &&
                  out0.is_contiguous() && out1.is_contiguous() && out2.is_contiguous(),
              OP, ".out: out0, out1, out2 must be contiguous tensors of y's, rstd's and x's shapes and dtypes");
  add_rms_norm_into(x1, x2, gamma, epsilon, out0, out1, out2);
  return {out0, out1, out2};
}

using AddRmsNormSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                     const at::Tensor&, double);
using RmsNormBackwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                              const at::Tensor&, const at::Tensor&);

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x1,
                                                const at::Tensor& x2, const at::Tensor& gamma, double epsilon) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<AddRmsNormSig>("npu::npu_add_rms_norm");
    auto [y, rstd, x] = op.call(x1, x2, gamma, epsilon);
    ctx->save_for_backward({x, gamma, rstd});
    ctx->mark_non_differentiable({rstd});
    // An unused output's gradient stays undefined rather than a tensor of zeros added to dx (a pass over x).
    ctx->set_materialize_grads(false);
    return {y, rstd, x};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<RmsNormBackwardSig>("npu::npu_rms_norm_backward");
    const auto s = ctx->get_saved_variables();
    at::Tensor d, dgamma;
    if (grads[0].defined()) std::tie(d, dgamma) = op.call(grads[0], s[0], s[1], s[2]);
    if (grads[2].defined()) d = d.defined() ? d + grads[2] : grads[2];
    return {d, d, dgamma, at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_autograd(const at::Tensor& x1, const at::Tensor& x2,
                                                                     const at::Tensor& gamma, double epsilon) {
  auto out = AddRmsNormFunction::apply(x1, x2, gamma, epsilon);
  return {out[0], out[1], out[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_add_rms_norm", add_rms_norm_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_add_rms_norm", add_rms_norm_cpu);
  m.impl("npu_add_rms_norm.out", add_rms_norm_out);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_add_rms_norm", add_rms_norm_autograd); }

}  // namespace softnpu::fused
