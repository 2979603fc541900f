// npu_rms_norm(x, gamma, epsilon) -> (y, rstd): y = x * rstd * gamma over the trailing dims gamma covers, rstd =
// 1 / sqrt(mean(x^2) + epsilon) in float32 (float64 for float64 x) with those dims kept as 1, as torch_npu returns it.
// The backward is torch_npu's npu_rms_norm_backward(dy, x, gamma, rstd) -> (dx, dgamma). Both are one pass over
// memory per row (rms_norm_kernel.cc) writing into the outputs through their .out overloads, where the composites
// make six (forward) and eleven (backward) passes, each with its temporary.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <limits>

#include "fused/common.h"
#include "fused/cpu_kernels.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)");
  m.def("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> (Tensor, Tensor)");
  // The out= forms let the op path write the results straight into the device outputs (no copy).
  m.def("npu_rms_norm.out(Tensor self, Tensor gamma, float epsilon=1e-06, *, Tensor(a!) out0, Tensor(b!) out1) "
        "-> (Tensor(a!), Tensor(b!))");
  m.def("npu_rms_norm_backward.out(Tensor dy, Tensor self, Tensor gamma, Tensor rstd, *, Tensor(a!) out0, "
        "Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))");
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

// Writes y and rstd (of the Meta kernel's shapes and dtypes, contiguous).
void rms_norm_into(const at::Tensor& x, const at::Tensor& gamma, double epsilon, at::Tensor& y, at::Tensor& rstd) {
  const at::Tensor xc = x.contiguous();
  const at::Tensor g = gamma.to(compute_type(x.scalar_type())).contiguous();
  const int64_t n = gamma.numel();
  if (n == 0) {
    rstd.fill_(std::numeric_limits<double>::quiet_NaN());  // the mean of no elements, as ATen's
    return;
  }
  SOFTNPU_CPU_KERNEL(rms_norm, x.scalar_type(), xc.const_data_ptr(), nullptr, g.const_data_ptr(), epsilon,
                     x.numel() / n, n, y.data_ptr(), rstd.data_ptr(), nullptr);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_cpu(const at::Tensor& x, const at::Tensor& gamma, double epsilon) {
  auto [y, rstd] = rms_norm_meta(x, gamma, epsilon);
  rms_norm_into(x, gamma, epsilon, y, rstd);
  return {std::move(y), std::move(rstd)};
}

// out0 and out1 must be contiguous with y's and rstd's shapes and dtypes (the op path allocates them so).
std::tuple<at::Tensor&, at::Tensor&> rms_norm_out(const at::Tensor& x, const at::Tensor& gamma, double epsilon,
                                                  at::Tensor& out0, at::Tensor& out1) {
  norm_dims(x, gamma, "npu_rms_norm");
  TORCH_CHECK(out0.sizes() == x.sizes() && out0.scalar_type() == x.scalar_type() && out0.is_contiguous() &&
                  out1.sizes() == c10::IntArrayRef(rstd_shape(x, gamma)) &&
                  out1.scalar_type() == compute_type(x.scalar_type()) && out1.is_contiguous(),
              "npu_rms_norm.out: out0 and out1 must be contiguous tensors of y's and rstd's shapes and dtypes");
  rms_norm_into(x, gamma, epsilon, out0, out1);
  return {out0, out1};
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

// dx and dgamma (rms_norm_kernel.cc) into dx (x's shape and dtype) and dgamma (gamma's), contiguous.
void rms_norm_backward_into(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& gamma,
                            const at::Tensor& rstd, at::Tensor& dx, at::Tensor& dgamma) {
  const auto acc = compute_type(x.scalar_type());
  const at::Tensor d = dy.to(x.scalar_type()).contiguous(), xc = x.contiguous();
  const at::Tensor g = gamma.to(acc).contiguous(), r = rstd.to(acc).contiguous();
  const int64_t n = gamma.numel();
  if (n == 0) return;
  const at::Tensor sums = at::empty({n}, x.options().dtype(acc));
  SOFTNPU_CPU_KERNEL(rms_norm_backward, x.scalar_type(), d.const_data_ptr(), xc.const_data_ptr(), g.const_data_ptr(),
                     r.const_data_ptr(), x.numel() / n, n, dx.data_ptr(), sums.data_ptr());
  dgamma.view(-1).copy_(sums);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                         const at::Tensor& gamma, const at::Tensor& rstd) {
  auto [dx, dgamma] = rms_norm_backward_meta(dy, x, gamma, rstd);
  rms_norm_backward_into(dy, x, gamma, rstd, dx, dgamma);
  return {std::move(dx), std::move(dgamma)};
}

std::tuple<at::Tensor&, at::Tensor&> rms_norm_backward_out(const at::Tensor& dy, const at::Tensor& x,
                                                           const at::Tensor& gamma, const at::Tensor& rstd,
                                                           at::Tensor& out0, at::Tensor& out1) {
  check_backward(dy, x, gamma, rstd);
  TORCH_CHECK(out0.sizes() == x.sizes() && out0.scalar_type() == x.scalar_type() && out0.is_contiguous() &&
                  out1.sizes() == gamma.sizes() && out1.scalar_type() == gamma.scalar_type() && out1.is_contiguous(),
              "npu_rms_norm_backward.out: out0 and out1 must be contiguous tensors of dx's and dgamma's shapes and "
              "dtypes");
  rms_norm_backward_into(dy, x, gamma, rstd, out0, out1);
  return {out0, out1};
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
  m.impl("npu_rms_norm.out", rms_norm_out);
  m.impl("npu_rms_norm_backward.out", rms_norm_backward_out);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_rms_norm", rms_norm_autograd); }

}  // namespace softnpu::fused
