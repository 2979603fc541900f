// npu_max(x, dim, keepdim=False) -> (values, indices) and npu_min, torch_npu's ArgMaxWithValue / ArgMinWithValue:
// torch.max / torch.min along one dimension, but with int32 indices (the NPU kernel's). (torch_npu for torch 2.13 has
// no names_dim overloads: torch dropped named tensors.) Backward: npu_max_backward / npu_min_backward(grad, dim,
// indices, sizes, keepdim), which scatter the gradient into zeros of the input's sizes at the indices. The kernels
// are ATen's max / min.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("npu_max_backward(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor");
  m.def("npu_min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("npu_min_backward(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor");
}

namespace softnpu::fused {

namespace {

using Result = std::tuple<at::Tensor, at::Tensor>;

template <bool kMax>
constexpr const char* op_name() {
  return kMax ? "npu_max" : "npu_min";
}

template <bool kMax>
Result reduce_meta(const at::Tensor& x, int64_t dim, bool keepdim) {
  TORCH_CHECK(x.dim() > 0, op_name<kMax>(), ": self must have at least one dimension");
  const int64_t d = at::maybe_wrap_dim(dim, x.dim());
  TORCH_CHECK(x.size(d) > 0, op_name<kMax>(), ": dimension ", dim, " of self is empty");
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  if (keepdim) {
    sizes[d] = 1;
  } else {
    sizes.erase(sizes.begin() + d);
  }
  return {at::empty(sizes, x.options()), at::empty(sizes, x.options().dtype(at::kInt))};
}

template <bool kMax>
Result reduce_cpu(const at::Tensor& x, int64_t dim, bool keepdim) {
  reduce_meta<kMax>(x, dim, keepdim);
  auto [values, indices] = kMax ? at::max(x, dim, keepdim) : at::min(x, dim, keepdim);
  return {values, indices.to(at::kInt)};
}

template <bool kMax>
at::Tensor backward_meta(const at::Tensor& grad, int64_t dim, const at::Tensor& indices, c10::SymIntArrayRef sizes,
                         bool keepdim) {
  TORCH_CHECK(grad.sizes() == indices.sizes(), op_name<kMax>(), "_backward: grad ", grad.sizes(),
              " and indices ", indices.sizes(), " must have one shape");
  return at::empty_symint(sizes, grad.options());
}

template <bool kMax>
at::Tensor backward_cpu(const at::Tensor& grad, int64_t dim, const at::Tensor& indices, c10::SymIntArrayRef sizes,
                        bool keepdim) {
  backward_meta<kMax>(grad, dim, indices, sizes, keepdim);
  at::Tensor dx = at::zeros_symint(sizes, grad.options());
  const int64_t d = at::maybe_wrap_dim(dim, dx.dim());
  const at::Tensor g = keepdim ? grad : grad.unsqueeze(d);
  const at::Tensor i = (keepdim ? indices : indices.unsqueeze(d)).to(at::kLong);
  return dx.scatter_(d, i, g);
}

using ReduceSig = Result(const at::Tensor&, int64_t, bool);
using BackwardSig = at::Tensor(const at::Tensor&, int64_t, const at::Tensor&, c10::SymIntArrayRef, bool);

template <bool kMax>
class ReduceFunction : public torch::autograd::Function<ReduceFunction<kMax>> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                int64_t dim, bool keepdim) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<ReduceSig>(kMax ? "npu::npu_max" : "npu::npu_min", "dim");
    auto [values, indices] = op.call(x, dim, keepdim);
    ctx->save_for_backward({indices});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["keepdim"] = keepdim;
    ctx->saved_data["sizes"] = x.sym_sizes().vec();
    ctx->mark_non_differentiable({indices});
    return {values, indices};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<BackwardSig>(kMax ? "npu::npu_max_backward" : "npu::npu_min_backward");
    const auto sizes = ctx->saved_data["sizes"].toSymIntVector();
    return {op.call(grads[0], ctx->saved_data["dim"].toInt(), ctx->get_saved_variables()[0], sizes,
                    ctx->saved_data["keepdim"].toBool()),
            at::Tensor(), at::Tensor()};
  }
};

template <bool kMax>
Result reduce_autograd(const at::Tensor& x, int64_t dim, bool keepdim) {
  auto out = ReduceFunction<kMax>::apply(x, dim, keepdim);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_max.dim", reduce_meta<true>);
  m.impl("npu_min.dim", reduce_meta<false>);
  m.impl("npu_max_backward", backward_meta<true>);
  m.impl("npu_min_backward", backward_meta<false>);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_max.dim", reduce_cpu<true>);
  m.impl("npu_min.dim", reduce_cpu<false>);
  m.impl("npu_max_backward", backward_cpu<true>);
  m.impl("npu_min_backward", backward_cpu<false>);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) {
  m.impl("npu_max.dim", reduce_autograd<true>);
  m.impl("npu_min.dim", reduce_autograd<false>);
}

}  // namespace softnpu::fused
