// npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad, max_grad_norm, amsgrad,
// maximize, *, out=(var, m, v)): one AdamW step of one tensor, in place, as torch_npu's ApplyAdamW documents it
// (DeepSpeed's FusedAdam on npu calls it for each flattened parameter group):
//   g = -grad if maximize; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
//   v = max(max_grad_norm, v) if amsgrad; var = var - lr * (m / (1 - beta1_power)) / (sqrt(v / (1 - beta2_power)) +
//   epsilon) - lr * weight_decay * var,
// beta1_power and beta2_power being beta1^t and beta2^t for step t. The functional form (no out) raises, as on
// torch_npu. The kernel is one pass over the four tensors in float32: ATen's fused AdamW kernel (vectorized) when the
// powers are those of a step count, else a loop of its own; the composite (lerp, mul, addcmul, sqrt, div, add,
// addcdiv, mul) makes eight and allocates temporaries.
// The .out overload has the schema torch_npu registers for ops with several outputs (its torchnpugen turns them into
// one `Tensor[] out` returning plain tensors), so out=(var, m, v) binds in eager calls, torch.jit.trace and
// torch.jit.script. It is a composite over _npu_apply_adam_w_, which returns nothing: a custom op returning its
// mutated arguments cannot be functionalized by torch.compile, one that only mutates them can.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, returns); the kernel op holds the in-place step.
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_apply_adam_w(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar weight_decay, Scalar beta1, "
        "Scalar beta2, Scalar epsilon, Tensor grad, Tensor? max_grad_norm, bool? amsgrad, bool? maximize) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("npu_apply_adam_w.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar weight_decay, Scalar beta1, "
        "Scalar beta2, Scalar epsilon, Tensor grad, Tensor? max_grad_norm, bool? amsgrad, bool? maximize, *, "
        "Tensor[] out) -> (Tensor, Tensor, Tensor)");
  m.def("_npu_apply_adam_w_(Tensor(a!) var, Tensor(b!) m, Tensor(c!) v, Scalar beta1_power, Scalar beta2_power, "
        "Scalar lr, Scalar weight_decay, Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, "
        "Tensor? max_grad_norm, bool? amsgrad, bool? maximize) -> ()");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_apply_adam_w";

void check(const at::Tensor& var, const at::Tensor& m, const at::Tensor& v, const at::Tensor& grad,
           const std::optional<at::Tensor>& max_grad_norm, bool amsgrad) {
  for (const auto* t : {&var, &m, &v, &grad}) {
    TORCH_CHECK(t->sizes() == var.sizes(), OP, ": var, m, v and grad must have one shape, got ", var.sizes(),
                " and ", t->sizes());
    TORCH_CHECK(t->scalar_type() == at::kFloat || t->scalar_type() == at::kHalf || t->scalar_type() == at::kBFloat16,
                OP, ": var, m, v and grad must be float32, float16 or bfloat16, got ", t->scalar_type());
  }
  TORCH_CHECK(m.scalar_type() == var.scalar_type() && v.scalar_type() == var.scalar_type(), OP,
              ": m and v must have var's dtype ", var.scalar_type(), ", got ", m.scalar_type(), " and ",
              v.scalar_type());
  TORCH_CHECK(!amsgrad || given(max_grad_norm), OP, ": amsgrad=True needs max_grad_norm");
  if (given(max_grad_norm))
    TORCH_CHECK(max_grad_norm->sizes() == var.sizes(), OP, ": max_grad_norm ", max_grad_norm->sizes(),
                " must have var's shape ", var.sizes());
}

at::Tensor contiguous_or_copy(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

void step_meta(at::Tensor& var, at::Tensor& m, at::Tensor& v, const at::Scalar&, const at::Scalar&, const at::Scalar&,
               const at::Scalar&, const at::Scalar&, const at::Scalar&, const at::Scalar&, const at::Tensor& grad,
               const std::optional<at::Tensor>& max_grad_norm, std::optional<bool> amsgrad, std::optional<bool>) {
  check(var, m, v, grad, max_grad_norm, amsgrad.value_or(false));
}

// The step t with beta1^t == beta1_power and beta2^t == beta2_power (the powers of one step count, as DeepSpeed and
// torch_npu's own optimizers pass them), if there is one.
std::optional<double> step_of(double beta1_power, double beta2_power, double beta1, double beta2) {
  if (!(beta1 > 0 && beta1 < 1 && beta1_power > 0 && beta1_power < 1)) return std::nullopt;
  const double t = std::round(std::log(beta1_power) / std::log(beta1));
  const auto close = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::abs(b); };
  if (t < 1 || !close(std::pow(beta1, t), beta1_power) || !close(std::pow(beta2, t), beta2_power)) return std::nullopt;
  return t;
}

void step_cpu(at::Tensor& var, at::Tensor& m, at::Tensor& v, const at::Scalar& beta1_power,
              const at::Scalar& beta2_power, const at::Scalar& lr, const at::Scalar& weight_decay,
              const at::Scalar& beta1, const at::Scalar& beta2, const at::Scalar& epsilon, const at::Tensor& grad,
              const std::optional<at::Tensor>& max_grad_norm, std::optional<bool> amsgrad_opt,
              std::optional<bool> maximize_opt) {
  const bool amsgrad = amsgrad_opt.value_or(false), maximize = maximize_opt.value_or(false);
  check(var, m, v, grad, max_grad_norm, amsgrad);
  // When the powers are those of a step count (DeepSpeed's call), ATen's fused AdamW kernel computes the same step
  // (decoupled decay on the old var, then the bias-corrected update) in one vectorized pass.
  const auto t = step_of(beta1_power.toDouble(), beta2_power.toDouble(), beta1.toDouble(), beta2.toDouble());
  if (t && !amsgrad && grad.scalar_type() == var.scalar_type() && var.is_contiguous() && m.is_contiguous() &&
      v.is_contiguous()) {
    const at::Tensor steps = at::full({}, *t, at::TensorOptions().dtype(at::kFloat));
    at::_fused_adamw_({var}, {grad.contiguous()}, {m}, {v}, {}, {steps}, lr.toDouble(), beta1.toDouble(),
                      beta2.toDouble(), weight_decay.toDouble(), epsilon.toDouble(), false, maximize);
    return;
  }
  at::Tensor pv = contiguous_or_copy(var), pm = contiguous_or_copy(m), pvv = contiguous_or_copy(v);
  const at::Tensor g = grad.to(var.scalar_type()).contiguous();
  const at::Tensor mx = amsgrad ? max_grad_norm->to(at::kFloat).contiguous() : at::Tensor();
  const float b1 = beta1.toFloat(), b2 = beta2.toFloat(), eta = lr.toFloat(), wd = weight_decay.toFloat();
  const float eps = epsilon.toFloat();
  const float c1 = 1.f / (1.f - beta1_power.toFloat()), c2 = 1.f / (1.f - beta2_power.toFloat());
  const float decay = 1.f - eta * wd;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, var.scalar_type(), OP, [&] {
    scalar_t* p = pv.data_ptr<scalar_t>();
    scalar_t* mp = pm.data_ptr<scalar_t>();
    scalar_t* vp = pvv.data_ptr<scalar_t>();
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    const float* mxp = amsgrad ? mx.const_data_ptr<float>() : nullptr;
    at::parallel_for(0, var.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float gi = maximize ? -static_cast<float>(gp[i]) : static_cast<float>(gp[i]);
        const float mi = b1 * static_cast<float>(mp[i]) + (1.f - b1) * gi;
        float vi = b2 * static_cast<float>(vp[i]) + (1.f - b2) * gi * gi;
        if (mxp) vi = std::max(mxp[i], vi);
        const float denom = std::sqrt(vi * c2) + eps;
        p[i] = static_cast<scalar_t>(static_cast<float>(p[i]) * decay - eta * mi * c1 / denom);
        mp[i] = static_cast<scalar_t>(mi);
        vp[i] = static_cast<scalar_t>(vi);
      }
    });
  });
  if (!pv.is_same(var)) var.copy_(pv);
  if (!pm.is_same(m)) m.copy_(pm);
  if (!pvv.is_same(v)) v.copy_(pvv);
}

using StepSig = void(at::Tensor&, at::Tensor&, at::Tensor&, const at::Scalar&, const at::Scalar&, const at::Scalar&,
                     const at::Scalar&, const at::Scalar&, const at::Scalar&, const at::Scalar&, const at::Tensor&,
                     const std::optional<at::Tensor>&, std::optional<bool>, std::optional<bool>);

std::tuple<at::Tensor, at::Tensor, at::Tensor> adam_w_out(
    const at::Scalar& beta1_power, const at::Scalar& beta2_power, const at::Scalar& lr,
    const at::Scalar& weight_decay, const at::Scalar& beta1, const at::Scalar& beta2, const at::Scalar& epsilon,
    const at::Tensor& grad, const std::optional<at::Tensor>& max_grad_norm, std::optional<bool> amsgrad,
    std::optional<bool> maximize, at::TensorList out) {
  TORCH_CHECK(out.size() == 3, OP, ": out must be (var, m, v), got ", out.size(), " tensors");
  at::Tensor var = out[0], m = out[1], v = out[2];
  static const auto op = npu_op<StepSig>("npu::_npu_apply_adam_w_");
  op.call(var, m, v, beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad, max_grad_norm, amsgrad,
          maximize);
  return {var, m, v};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> adam_w(const at::Scalar&, const at::Scalar&, const at::Scalar&,
                                                      const at::Scalar&, const at::Scalar&, const at::Scalar&,
                                                      const at::Scalar&, const at::Tensor&,
                                                      const std::optional<at::Tensor>&, std::optional<bool>,
                                                      std::optional<bool>) {
  TORCH_CHECK(false, "npu_apply_adam_w is not implemented for Tensor: pass out=(var, m, v)");
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("_npu_apply_adam_w_", step_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("_npu_apply_adam_w_", step_cpu); }

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) {
  m.impl("npu_apply_adam_w", adam_w);
  m.impl("npu_apply_adam_w.out", adam_w_out);
}

}  // namespace softnpu::fused
