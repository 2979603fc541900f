// npu_rotary_mul(x, r1, r2, rotary_mode='half') = x * r1 + rotate(x) * r2, r1 and r2 (cos and sin) broadcast to x.
// rotate is torch_npu's: 'half' is rotate_half (the last dim's halves (a, b) become (-b, a), as in LLaMA),
// 'interleave' rotates each pair (x0, x1) to (-x1, x0). The backward is npu_rotary_mul_backward -> (dx, dr1, dr2),
// each gradient summed to its input's shape. Both are one pass over memory (rope_kernel.h) and have .out overloads,
// through which the op path has them write into the device outputs.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/rotary/rope_kernel.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor");
  m.def("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') "
        "-> (Tensor, Tensor, Tensor)");
  m.def("npu_rotary_mul.out(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', *, Tensor(a!) out) "
        "-> Tensor(a!)");
  m.def("npu_rotary_mul_backward.out(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', *, "
        "Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
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

// The kernels' block: the whole last dim for 'half', pairs for 'interleave'.
int64_t block_of(const at::Tensor& x, c10::string_view mode, const char* op) {
  return interleaved(mode, op) ? 2 : x.size(-1);
}

// r1 and r2 as the kernels take them: of one shape (their broadcast one when they differ).
std::pair<at::Tensor, at::Tensor> tables(const at::Tensor& r1, const at::Tensor& r2) {
  if (r1.sizes() == r2.sizes()) return {r1, r2};
  const auto shape = at::infer_size(r1.sizes(), r2.sizes());
  return {r1.expand(shape), r2.expand(shape)};
}

void forward_into(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode,
                  const at::Tensor& y) {
  const auto [c, s] = tables(r1, r2);
  rope_forward(x, c, s, block_of(x, mode, "npu_rotary_mul"), y);
}

// dx, and dr1 and dr2 summed to r1's and r2's shapes.
void backward_into(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2,
                   c10::string_view mode, const at::Tensor& dx, const at::Tensor& dr1, const at::Tensor& dr2) {
  const int64_t block = block_of(x, mode, "npu_rotary_mul_backward");
  const at::Tensor g = grad.to(x.scalar_type());
  if (r1.sizes() == r2.sizes()) {
    rope_backward(g, r1, r2, x, block, dx, dr1, dr2);
    return;
  }
  const auto [c, s] = tables(r1, r2);
  const at::Tensor dc = at::empty(c.sizes(), r1.options()), ds = at::empty(s.sizes(), r2.options());
  rope_backward(g, c, s, x, block, dx, dc, ds);
  dr1.copy_(dc.sum_to_size(r1.sizes()));
  dr2.copy_(ds.sum_to_size(r2.sizes()));
}

at::Tensor rotary_meta(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode) {
  check(x, r1, r2, mode, "npu_rotary_mul");
  return at::empty(x.sizes(), x.options());
}

at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode) {
  at::Tensor y = rotary_meta(x, r1, r2, mode);
  forward_into(x, r1, r2, mode, y);
  return y;
}

at::Tensor& rotary_out(const at::Tensor& x, const at::Tensor& r1, const at::Tensor& r2, c10::string_view mode,
                       at::Tensor& out) {
  check(x, r1, r2, mode, "npu_rotary_mul");
  TORCH_CHECK(out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type(),
              "npu_rotary_mul.out: out must have x's shape and dtype");
  forward_into(x, r1, r2, mode, out);
  return out;
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
  auto [dx, dr1, dr2] = rotary_backward_meta(grad, x, r1, r2, mode);
  backward_into(grad, x, r1, r2, mode, dx, dr1, dr2);
  return {std::move(dx), std::move(dr1), std::move(dr2)};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> rotary_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                                                      const at::Tensor& r1, const at::Tensor& r2,
                                                                      c10::string_view mode, at::Tensor& out0,
                                                                      at::Tensor& out1, at::Tensor& out2) {
  rotary_backward_meta(grad, x, r1, r2, mode);
  TORCH_CHECK(out0.sizes() == x.sizes() && out0.scalar_type() == x.scalar_type() && out1.sizes() == r1.sizes() &&
                  out1.scalar_type() == r1.scalar_type() && out2.sizes() == r2.sizes() &&
                  out2.scalar_type() == r2.scalar_type(),
              "npu_rotary_mul_backward.out: out0, out1 and out2 must have the shapes and dtypes of dx, dr1 and dr2");
  backward_into(grad, x, r1, r2, mode, out0, out1, out2);
  return {out0, out1, out2};
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
  m.impl("npu_rotary_mul.out", rotary_out);
  m.impl("npu_rotary_mul_backward.out", rotary_backward_out);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_rotary_mul", rotary_autograd); }

}  // namespace softnpu::fused
