// npu_bert_apply_adam(lr, beta1, beta2, epsilon, grad, max_grad_norm, global_grad_norm, weight_decay, step_size=None,
// adam_mode=0, *, out=(var, m, v)): one step of BERT's Adam of one tensor, in place (torch_npu's ApplyAdamV2):
//   g = grad * max_grad_norm / global_grad_norm if 0 < max_grad_norm < global_grad_norm (clipping by the global
//   norm), else grad; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2; r = m / (sqrt(v) + epsilon);
//   adam_mode 0 ("adam", BERT's AdamWeightDecay): var -= step * (r + weight_decay * var);
//   adam_mode 1 ("mbart_adam", fairseq's Adam that mBART trains with): var -= lr * weight_decay * var + step * r;
// step being step_size when given (the caller's bias-corrected rate), else lr. No bias correction otherwise, as
// BERT's. The functional form (no out) raises, as on torch_npu. One pass over the four tensors in float32.
// The .out overload has the schema torch_npu registers for ops with several outputs (its torchnpugen turns them into
// one `Tensor[] out` returning plain tensors), so out=(var, m, v) binds in eager calls and under torch.jit.script. It is
// a composite over _npu_bert_apply_adam_, which returns nothing, so torch.compile can functionalize it.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns); the kernel op holds the in-place step.
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_bert_apply_adam(Scalar lr, Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, "
        "Scalar max_grad_norm, Scalar global_grad_norm, Scalar weight_decay, Scalar? step_size=None, "
        "int adam_mode=0) -> (Tensor var, Tensor m, Tensor v)");
  m.def("npu_bert_apply_adam.out(Scalar lr, Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, "
        "Scalar max_grad_norm, Scalar global_grad_norm, Scalar weight_decay, Scalar? step_size=None, "
        "int adam_mode=0, *, Tensor[] out) -> (Tensor, Tensor, Tensor)");
  m.def("_npu_bert_apply_adam_(Tensor(a!) var, Tensor(b!) m, Tensor(c!) v, Scalar lr, Scalar beta1, Scalar beta2, "
        "Scalar epsilon, Tensor grad, Scalar max_grad_norm, Scalar global_grad_norm, Scalar weight_decay, "
        "Scalar? step_size, int adam_mode) -> ()");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_bert_apply_adam";

void check(const at::Tensor& var, const at::Tensor& m, const at::Tensor& v, const at::Tensor& grad,
           int64_t adam_mode) {
  TORCH_CHECK(var.scalar_type() == at::kFloat || var.scalar_type() == at::kHalf, OP,
              ": var must be float16 or float32, got ", var.scalar_type());
  for (const auto* t : {&m, &v, &grad})
    TORCH_CHECK(t->sizes() == var.sizes() && t->scalar_type() == var.scalar_type(), OP,
                ": m, v and grad must have var's shape ", var.sizes(), " and dtype ", var.scalar_type(), ", got ",
                t->sizes(), " ", t->scalar_type());
  TORCH_CHECK(adam_mode == 0 || adam_mode == 1, OP, ": adam_mode must be 0 (adam) or 1 (mbart_adam), got ",
              adam_mode);
}

void step_meta(at::Tensor& var, at::Tensor& m, at::Tensor& v, const at::Scalar&, const at::Scalar&,
               const at::Scalar&, const at::Scalar&, const at::Tensor& grad, const at::Scalar&, const at::Scalar&,
               const at::Scalar&, const std::optional<at::Scalar>&, int64_t adam_mode) {
  check(var, m, v, grad, adam_mode);
}

at::Tensor contiguous_or_copy(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

void step_cpu(at::Tensor& var, at::Tensor& m, at::Tensor& v, const at::Scalar& lr, const at::Scalar& beta1,
              const at::Scalar& beta2, const at::Scalar& epsilon, const at::Tensor& grad,
              const at::Scalar& max_grad_norm, const at::Scalar& global_grad_norm, const at::Scalar& weight_decay,
              const std::optional<at::Scalar>& step_size, int64_t adam_mode) {
  check(var, m, v, grad, adam_mode);
  at::Tensor pv = contiguous_or_copy(var), pm = contiguous_or_copy(m), pvv = contiguous_or_copy(v);
  const at::Tensor g = grad.contiguous();
  const float max_norm = max_grad_norm.toFloat(), global_norm = global_grad_norm.toFloat();
  const float clip = max_norm > 0.f && global_norm > max_norm ? max_norm / global_norm : 1.f;
  const float b1 = beta1.toFloat(), b2 = beta2.toFloat(), eps = epsilon.toFloat(), eta = lr.toFloat();
  const float wd = weight_decay.toFloat();
  const float step = step_size.has_value() ? step_size->toFloat() : eta;
  // var' = decay * var - step * r: mode 0 decays by the step, mode 1 by lr (decoupled).
  const float decay = 1.f - (adam_mode == 0 ? step : eta) * wd;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, var.scalar_type(), OP, [&] {
    scalar_t* p = pv.data_ptr<scalar_t>();
    scalar_t* mp = pm.data_ptr<scalar_t>();
    scalar_t* vp = pvv.data_ptr<scalar_t>();
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    at::parallel_for(0, var.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float gi = static_cast<float>(gp[i]) * clip;
        const float mi = b1 * static_cast<float>(mp[i]) + (1.f - b1) * gi;
        const float vi = b2 * static_cast<float>(vp[i]) + (1.f - b2) * gi * gi;
        p[i] = static_cast<scalar_t>(decay * static_cast<float>(p[i]) - step * mi / (std::sqrt(vi) + eps));
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
                     const at::Scalar&, const at::Tensor&, const at::Scalar&, const at::Scalar&, const at::Scalar&,
                     const std::optional<at::Scalar>&, int64_t);

std::tuple<at::Tensor, at::Tensor, at::Tensor> bert_apply_adam_out(
    const at::Scalar& lr, const at::Scalar& beta1, const at::Scalar& beta2, const at::Scalar& epsilon,
    const at::Tensor& grad, const at::Scalar& max_grad_norm, const at::Scalar& global_grad_norm,
    const at::Scalar& weight_decay, const std::optional<at::Scalar>& step_size, int64_t adam_mode,
    at::TensorList out) {
  TORCH_CHECK(out.size() == 3, OP, ": out must be (var, m, v), got ", out.size(), " tensors");
  at::Tensor var = out[0], m = out[1], v = out[2];
  static const auto op = npu_op<StepSig>("npu::_npu_bert_apply_adam_");
  op.call(var, m, v, lr, beta1, beta2, epsilon, grad, max_grad_norm, global_grad_norm, weight_decay, step_size,
          adam_mode);
  return {var, m, v};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bert_apply_adam(const at::Scalar&, const at::Scalar&,
                                                               const at::Scalar&, const at::Scalar&,
                                                               const at::Tensor&, const at::Scalar&,
                                                               const at::Scalar&, const at::Scalar&,
                                                               const std::optional<at::Scalar>&, int64_t) {
  TORCH_CHECK(false, "npu_bert_apply_adam is not implemented for Tensor: pass out=(var, m, v)");
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("_npu_bert_apply_adam_", step_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("_npu_bert_apply_adam_", step_cpu); }

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) {
  m.impl("npu_bert_apply_adam", bert_apply_adam);
  m.impl("npu_bert_apply_adam.out", bert_apply_adam_out);
}

}  // namespace softnpu::fused
