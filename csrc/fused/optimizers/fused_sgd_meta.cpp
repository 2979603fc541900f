// Meta kernel of ATen's fused SGD step, which ATen lacks (the fused Adam and AdamW steps have theirs). Without one the
// op path cannot infer the step's (empty) outputs and waits for the device at every NpuFusedSGD / SGD(fused=True)
// step; with it the step launches on the stream like any op. The step writes its arguments in place, so the Meta
// kernel only checks what the CPU kernel would.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace softnpu::fused {

namespace {

void check_lists(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers) {
  TORCH_CHECK(params.size() == grads.size(), "_fused_sgd_: expected as many grads as params, got ", grads.size(),
              " and ", params.size());
  TORCH_CHECK(momentum_buffers.empty() || momentum_buffers.size() == params.size(),
              "_fused_sgd_: expected no momentum buffers or one per param, got ", momentum_buffers.size(), " for ",
              params.size(), " params");
  for (size_t i = 0; i < params.size(); ++i)
    TORCH_CHECK(params[i].sizes() == grads[i].sizes(), "_fused_sgd_: param ", i, " has shape ", params[i].sizes(),
                " but its grad has ", grads[i].sizes());
}

void fused_sgd_meta(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double, double,
                    double, double, bool, bool, bool, const std::optional<at::Tensor>&,
                    const std::optional<at::Tensor>&) {
  check_lists(params, grads, momentum_buffers);
}

void fused_sgd_tensor_lr_meta(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double,
                              double, const at::Tensor&, double, bool, bool, bool, const std::optional<at::Tensor>&,
                              const std::optional<at::Tensor>&) {
  check_lists(params, grads, momentum_buffers);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_fused_sgd_", fused_sgd_meta);
  m.impl("_fused_sgd_.tensor_lr", fused_sgd_tensor_lr_meta);
}

}  // namespace softnpu::fused
