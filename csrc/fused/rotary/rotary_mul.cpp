// npu_rotary_mul(x, r1, r2, rotary_mode='half') = x * r1 + rotate(x) * r2, r1 and r2 (cos and sin) broadcast to x.
// rotate is torch_npu's: 'half' is rotate_half (the last dim's halves (a, b) become (-b, a), as in LLaMA),
// 'interleave' rotates each pair (x0, x1) to (-x1, x0). The backward is npu_rotary_mul_backward -> (dx, dr1, dr2),
// each gradient summed to its input's shape.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor");
  m.def("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') "
        "-> (Tensor, Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

bool interleaved(c10::string_view mode, const char* op) {
  TORCH_CHECK(mode == "half" || mode == "interleave", op, ": rotary_mode must be 'half' or 'interleave', got '",
              mode, "'");
  return mode == "interleave";
}

void check(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode,
                           const char* op) {
  interleaved(mode, op);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, op, ": the last dim of x must be even, got shape ", x.sizes());
  TORCH_CHECK(x.scalar_type() == r1.scalar_type() && x.scalar_type() == r2.scalar_type() &&
                  at::isFloatingType(x.scalar_type()),
              op, ": x, r1 and r2 must have one floating dtype, got ", x.scalar_type(), ", ", r1.scalar_type(), ", ",
              r2.scalar_type());
  TORCH_CHECK(broadcasts_to(r1.sizes(), x.sizes()) && broadcasts_to(r2.sizes(), x.sizes()), op, ": r1 ", r1.sizes(),
              " and r2 ", r2.sizes(),
              " must broadcast to x's shape ", x.sizes());
}

// rotate(x) and its transpose (the gradient through it).
at::Tensor rotate(const at::Tensor& x, bool interleave) {
  if (interleave) {
    const auto pairs = x.unflatten(-1, {-1, 2});
    return at::stack({-pairs.select(-1, 1), pairs.select(-1, 0)}, -1).flatten(-2);
  }
  const auto halves = x.chunk(2, -1);
  return at::cat({-halves[1], halves[0]}, -1);
}

at::Tensor rotate_transposed(const at::Tensor& g, bool interleave) {
  if (interleave) {
    const auto pairs = g.unflatten(-1, {-1, 2});
    return at::stack({pairs.select(-1, 1), -pairs.select(-1, 0)}, -1).flatten(-2);
  }
  const auto halves = g.chunk(2, -1);
  return at::cat({halves[1], -halves[0]}, -1);
}

at::Tensor rotary_meta(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode) {
  check(x, r1, r2, mode, "npu_rotary_mul");
  return at::empty(x.sizes(), x.options());
}

at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode) {
  check(x, r1, r2, mode, "npu_rotary_mul");
  const auto acc = compute_type(x.scalar_type());
  const at::Tensor xf = x.to(acc);
  return (xf * r1.to(acc) + rotate(xf, interleaved(mode, "npu_rotary_mul")) * r2.to(acc)).to(x.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_backward_meta(const at::Tensor& grad, const at::Tensor& x,
                                                                    const at::Tensor& r1, const at::Tensor& r2,
                                                                    c10::string_view mode) {
  check(x, r1, r2, mode, "npu_rotary_mul_backward");
  TORCH_CHECK(grad.sizes() == x.sizes(), "npu_rotary_mul_backward: grad's shape ", grad.sizes(), " must equal x's ",
              x.sizes());
  return {at::empty(x.sizes(), x.options()), at::empty(r1.sizes(), r1.options()),
          at::empty(r2.sizes(), r2.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                                   const at::Tensor& r1, const at::Tensor& r2,
                                                                   c10::string_view mode) {
  check(x, r1, r2, mode, "npu_rotary_mul_backward");
  TORCH_CHECK(grad.sizes() == x.sizes(), "npu_rotary_mul_backward: grad's shape ", grad.sizes(), " must equal x's ",
              x.sizes());
  const bool interleave = interleaved(mode, "npu_rotary_mul_backward");
  const auto acc = compute_type(x.scalar_type());
  const at::Tensor g = grad.to(acc), xf = x.to(acc);
  at::Tensor dx = g * r1.to(acc) + rotate_transposed(g * r2.to(acc), interleave);
  at::Tensor dr1 = at::sum_to(g * xf, r1.sizes());
  at::Tensor dr2 = at::sum_to(g * rotate(xf, interleave), r2.sizes());
  return {dx.to(x.scalar_type()), dr1.to(r1.scalar_type()), dr2.to(r2.scalar_type())};
}

using RotarySig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view);
using RotaryBackwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                         const at::Tensor&, const at::Tensor&,
                                                                         c10::string_view);

class RotaryMulFunction : public torch::autograd::Function<RotaryMulFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& r1,
                            const at::Tensor& r2, c10::string_view mode) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<RotarySig>("npu::npu_rotary_mul");
    ctx->save_for_backward({x, r1, r2});
    ctx->saved_data["mode"] = std::string(mode);
    return op.call(x, r1, r2, mode);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<RotaryBackwardSig>("npu::npu_rotary_mul_backward");
    const auto saved = ctx->get_saved_variables();
    const std::string mode = ctx->saved_data["mode"].toStringRef();
    auto [dx, dr1, dr2] = op.call(grads[0], saved[0], saved[1], saved[2], mode);
    return {dx, dr1, dr2, at::Tensor()};
  }
};

at::Tensor rotary_autograd(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode) {
  return RotaryMulFunction::apply(x, r1, r2, mode);
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_rotary_mul", rotary_meta);
  m.impl("npu_rotary_mul_backward", rotary_backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_rotary_mul", rotary_cpu);
  m.impl("npu_rotary_mul_backward", rotary_backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_rotary_mul", rotary_autograd); }

}  // namespace softnpu::fused
