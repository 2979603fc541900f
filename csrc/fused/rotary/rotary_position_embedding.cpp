// npu_rotary_position_embedding(x, cos, sin, mode=0) -> y = x * cos + rotate(x) * sin, torch_npu's (and MindSpeed's)
// single-input RoPE: mode 0 rotate_half (GPT-NeoX), 1 rotate_interleaved (GPT-J pairs), 2 quarter (rotate_half within
// each half of the last dim). cos and sin broadcast to x (11SD, B1SD, BNSD, 1S1D, ...). One pass over x
// (rope_kernel.h), where the composite makes five (chunk/cat, two products, the sum). Backward:
// npu_rotary_position_embedding_backward(grad, cos, sin, x, mode) -> (dx, dcos, dsin), dx = grad * cos +
// rotate^T(grad * sin), dcos and dsin reduced to cos's and sin's shapes, one pass over grad (and x). Both have .out
// overloads, through which the op path has them write into the device outputs.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/rotary/rope_kernel.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_rotary_position_embedding(Tensor self, Tensor cos, Tensor sin, int mode=0) -> Tensor");
  // The out= form lets the op path write the result straight into the device output (no copy).
  m.def("npu_rotary_position_embedding.out(Tensor self, Tensor cos, Tensor sin, int mode=0, *, Tensor(a!) out) "
        "-> Tensor(a!)");
  m.def("npu_rotary_position_embedding_backward(Tensor grad, Tensor cos, Tensor sin, Tensor? self=None, int mode=0) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("npu_rotary_position_embedding_backward.out(Tensor grad, Tensor cos, Tensor sin, Tensor? self=None, "
        "int mode=0, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
}

namespace softnpu::fused {

namespace {

int64_t block_of(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t mode, const char* op) {
  TORCH_CHECK(mode >= 0 && mode <= 2, op, ": mode must be 0 (half), 1 (interleave) or 2 (quarter), got ", mode);
  TORCH_CHECK(x.dim() == 4, op, ": x must be 4-D (BNSD, BSND or SBND), got shape ", x.sizes());
  for (const auto* t : {&x, &cos, &sin})
    TORCH_CHECK(t->scalar_type() == at::kFloat || t->scalar_type() == at::kHalf || t->scalar_type() == at::kBFloat16,
                op, ": x, cos and sin must be float16, bfloat16 or float32, got ", t->scalar_type());
  TORCH_CHECK(cos.sizes() == sin.sizes(), op, ": cos ", cos.sizes(), " and sin ", sin.sizes(), " must have one shape");
  TORCH_CHECK(cos.dim() == 4 && broadcasts_to(cos.sizes(), x.sizes()), op, ": cos and sin ", cos.sizes(),
              " must be 4-D and broadcast to x ", x.sizes());
  const int64_t D = x.size(-1), parts = mode == 2 ? 4 : 2;
  TORCH_CHECK(D % parts == 0, op, ": x's last dim ", D, " must be a multiple of ", parts, " for mode ", mode);
  return mode == 1 ? 2 : mode == 2 ? D / 2 : D;
}

at::Tensor rope_meta(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t mode) {
  block_of(x, cos, sin, mode, "npu_rotary_position_embedding");
  return at::empty(x.sizes(), x.options());
}

at::Tensor rope_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t mode) {
  const int64_t block = block_of(x, cos, sin, mode, "npu_rotary_position_embedding");
  at::Tensor y = at::empty(x.sizes(), x.options());
  rope_forward(x, cos, sin, block, y);
  return y;
}

at::Tensor& rope_out(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t mode, at::Tensor& out) {
  const int64_t block = block_of(x, cos, sin, mode, "npu_rotary_position_embedding");
  TORCH_CHECK(out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type(),
              "npu_rotary_position_embedding.out: out must have x's shape and dtype");
  rope_forward(x, cos, sin, block, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_meta(const at::Tensor& grad, const at::Tensor& cos,
                                                             const at::Tensor& sin, const std::optional<at::Tensor>& x,
                                                             int64_t mode) {
  block_of(grad, cos, sin, mode, "npu_rotary_position_embedding_backward");
  const bool with_x = given(x);
  return {at::empty(grad.sizes(), grad.options()), at::empty(with_x ? cos.sizes() : c10::IntArrayRef{0}, cos.options()),
          at::empty(with_x ? sin.sizes() : c10::IntArrayRef{0}, sin.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad, const at::Tensor& cos,
                                                            const at::Tensor& sin, const std::optional<at::Tensor>& x,
                                                            int64_t mode) {
  auto [dx, dcos, dsin] = backward_meta(grad, cos, sin, x, mode);
  rope_backward(grad, cos, sin, x, block_of(grad, cos, sin, mode, "npu_rotary_position_embedding_backward"), dx, dcos,
                dsin);
  return {std::move(dx), std::move(dcos), std::move(dsin)};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> backward_out(const at::Tensor& grad, const at::Tensor& cos,
                                                               const at::Tensor& sin,
                                                               const std::optional<at::Tensor>& x, int64_t mode,
                                                               at::Tensor& out0, at::Tensor& out1, at::Tensor& out2) {
  const int64_t block = block_of(grad, cos, sin, mode, "npu_rotary_position_embedding_backward");
  const std::vector<int64_t> table = given(x) ? cos.sizes().vec() : std::vector<int64_t>{0};
  TORCH_CHECK(out0.sizes() == grad.sizes() && out0.scalar_type() == grad.scalar_type() &&
                  out1.sizes() == c10::IntArrayRef(table) && out1.scalar_type() == cos.scalar_type() &&
                  out2.sizes() == c10::IntArrayRef(table) &&
                  out2.scalar_type() == sin.scalar_type(),
              "npu_rotary_position_embedding_backward.out: out0, out1 and out2 must have the shapes and dtypes of dx, "
              "dcos and dsin");
  rope_backward(grad, cos, sin, x, block, out0, out1, out2);
  return {out0, out1, out2};
}

using RopeSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t);
using RopeBackwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                       const at::Tensor&,
                                                                       const std::optional<at::Tensor>&, int64_t);

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& cos, const at::Tensor& sin, int64_t mode) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<RopeSig>("npu::npu_rotary_position_embedding");
    const bool table_grad = cos.requires_grad() || sin.requires_grad();
    // x is kept only when cos or sin need a gradient (torch_npu's backward takes it as optional for that).
    ctx->save_for_backward({cos, sin, table_grad ? x : at::Tensor()});
    ctx->saved_data["mode"] = mode;
    return {op.call(x, cos, sin, mode)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<RopeBackwardSig>("npu::npu_rotary_position_embedding_backward");
    const auto s = ctx->get_saved_variables();
    std::optional<at::Tensor> x;
    if (s[2].defined()) x = s[2];
    auto [dx, dcos, dsin] = op.call(grads[0], s[0], s[1], x, ctx->saved_data["mode"].toInt());
    return {dx, x ? dcos : at::Tensor(), x ? dsin : at::Tensor(), at::Tensor()};
  }
};

at::Tensor rope_autograd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t mode) {
  return RopeFunction::apply(x, cos, sin, mode)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_rotary_position_embedding", rope_meta);
  m.impl("npu_rotary_position_embedding_backward", backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_rotary_position_embedding", rope_cpu);
  m.impl("npu_rotary_position_embedding.out", rope_out);
  m.impl("npu_rotary_position_embedding_backward", backward_cpu);
  m.impl("npu_rotary_position_embedding_backward.out", backward_out);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_rotary_position_embedding", rope_autograd); }

}  // namespace softnpu::fused
