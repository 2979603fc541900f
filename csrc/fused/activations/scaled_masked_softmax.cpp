// npu_scaled_masked_softmax(x, mask, scale=1, fixed_triu_mask=False) -> softmax over the last dim of x * scale with
// the positions where mask is True set to -10000 (Megatron's ScaledMaskedSoftmax, which torch_npu's fuses: a fully
// masked row is uniform, not NaN), in float32, y in x's dtype. mask is bool and broadcasts to x; fixed_triu_mask=True
// masks the upper triangle (j > i) itself. Forward and backward run in scaled_masked_softmax_kernel.cc.
// Backward: npu_scaled_masked_softmax_backward(y_grad, y, mask, scale,
// fixed_triu_mask) = scale * y * (y_grad - sum(y_grad * y)), zero at the masked positions.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <vector>

#include "fused/common.h"
#include "fused/cpu_kernels.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_scaled_masked_softmax(Tensor x, Tensor mask, Scalar scale=1, bool fixed_triu_mask=False) -> Tensor");
  m.def("npu_scaled_masked_softmax_backward(Tensor y_grad, Tensor y, Tensor mask, Scalar scale, "
        "bool fixed_triu_mask) -> Tensor");
}

namespace softnpu::fused {

namespace {

void check(const at::Tensor& x, const at::Tensor& mask, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op,
              ": x must be float16, float32 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 2, op, ": x must have at least 2 dims, got ", x.sizes());
  TORCH_CHECK(mask.scalar_type() == at::kBool, op, ": mask must be bool, got ", mask.scalar_type());
  TORCH_CHECK(broadcasts_to(mask.sizes(), x.sizes()), op, ": mask ", mask.sizes(), " must broadcast to x ",
              x.sizes());
}

// The positions to fill: mask, or with fixed_triu_mask the upper triangle of the last two dims.
at::Tensor fill_mask(const at::Tensor& x, const at::Tensor& mask, bool fixed_triu_mask) {
  if (!fixed_triu_mask) return mask;
  return at::ones({x.size(-2), x.size(-1)}, mask.options()).triu_(1);
}

// The mask as a view of x's shape (stride 0 where it broadcasts, its last dim contiguous), and for each row of x the
// element offset of its mask row.
struct MaskRows {
  MaskRows(const at::Tensor& x, const at::Tensor& fill) : mask(fill.expand(x.sizes())), n(x.size(-1)) {
    if (mask.stride(-1) != 1) mask = mask.contiguous();
    rows = x.numel() / n;
    offsets.resize(static_cast<size_t>(rows));
    const int64_t lead = x.dim() - 1;
    std::vector<int64_t> idx(static_cast<size_t>(lead), 0);
    int64_t off = 0;
    for (int64_t r = 0; r < rows; ++r) {
      offsets[r] = off;
      for (int64_t d = lead - 1; d >= 0; --d) {
        off += mask.stride(d);
        if (++idx[d] < x.size(d)) break;
        off -= mask.stride(d) * x.size(d);
        idx[d] = 0;
      }
    }
  }

  at::Tensor mask;
  int64_t n, rows = 0;
  std::vector<int64_t> offsets;
};

at::Tensor softmax_meta(const at::Tensor& x, const at::Tensor& mask, const at::Scalar& scale, bool fixed_triu_mask) {
  check(x, mask, "npu_scaled_masked_softmax");
  return at::empty(x.sizes(), x.options());
}

at::Tensor softmax_cpu(const at::Tensor& x, const at::Tensor& mask, const at::Scalar& scale, bool fixed_triu_mask) {
  check(x, mask, "npu_scaled_masked_softmax");
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return y;
  const MaskRows m(x, fill_mask(x, mask, fixed_triu_mask));
  SOFTNPU_CPU_KERNEL(scaled_masked_softmax, x.scalar_type(), xc.const_data_ptr(), m.mask.const_data_ptr<bool>(),
                     m.offsets.data(), scale.toDouble(), m.rows, m.n, y.mutable_data_ptr());
  return y;
}

at::Tensor backward_meta(const at::Tensor& y_grad, const at::Tensor& y, const at::Tensor& mask,
                         const at::Scalar& scale, bool fixed_triu_mask) {
  check(y, mask, "npu_scaled_masked_softmax_backward");
  TORCH_CHECK(y_grad.sizes() == y.sizes(), "npu_scaled_masked_softmax_backward: y_grad ", y_grad.sizes(),
              " must have y's shape ", y.sizes());
  return at::empty(y_grad.sizes(), y_grad.options());
}

at::Tensor backward_cpu(const at::Tensor& y_grad, const at::Tensor& y, const at::Tensor& mask, const at::Scalar& scale,
                        bool fixed_triu_mask) {
  backward_meta(y_grad, y, mask, scale, fixed_triu_mask);
  const at::Tensor gc = y_grad.contiguous(), yc = y.to(y_grad.scalar_type()).contiguous();
  at::Tensor dx = at::empty(y_grad.sizes(), y_grad.options());
  if (dx.numel() == 0) return dx;
  // Masked positions were replaced by a constant: no gradient reaches them (a fully masked row's included).
  const MaskRows m(y, fill_mask(y, mask, fixed_triu_mask));
  SOFTNPU_CPU_KERNEL(scaled_masked_softmax_backward, dx.scalar_type(), gc.const_data_ptr(), yc.const_data_ptr(),
                     m.mask.const_data_ptr<bool>(), m.offsets.data(), scale.toDouble(), m.rows, m.n,
                     dx.mutable_data_ptr());
  return dx;
}

using SoftmaxSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Scalar&, bool);
using BackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Scalar&, bool);

class SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& mask, const at::Scalar& scale,
                                                bool fixed_triu_mask) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<SoftmaxSig>("npu::npu_scaled_masked_softmax");
    at::Tensor y = op.call(x, mask, scale, fixed_triu_mask);
    ctx->save_for_backward({y, mask});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["fixed_triu_mask"] = fixed_triu_mask;
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<BackwardSig>("npu::npu_scaled_masked_softmax_backward");
    const auto s = ctx->get_saved_variables();
    return {op.call(grads[0], s[0], s[1], ctx->saved_data["scale"].toScalar(),
                    ctx->saved_data["fixed_triu_mask"].toBool()),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor softmax_autograd(const at::Tensor& x, const at::Tensor& mask, const at::Scalar& scale,
                            bool fixed_triu_mask) {
  return SoftmaxFunction::apply(x, mask, scale, fixed_triu_mask)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_scaled_masked_softmax", softmax_meta);
  m.impl("npu_scaled_masked_softmax_backward", backward_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_scaled_masked_softmax", softmax_cpu);
  m.impl("npu_scaled_masked_softmax_backward", backward_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_scaled_masked_softmax", softmax_autograd); }

}  // namespace softnpu::fused
