// Convolution. ATen's convolution picks a kernel for CPU and CUDA; every other device gets
// convolution_overrideable and convolution_backward_overrideable. On npu these are what they stand for,
// aten::convolution and aten::convolution_backward, run through the generic path, so the CPU kernel underneath picks
// its best algorithm (oneDNN, ...).
#include <torch/library.h>

#include "backend/ops/executor.h"

namespace softnpu {

namespace {

void convolution(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  execute_op(op, stack);
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
// output_padding, groups, output_mask) -> convolution_backward, which also takes the bias sizes after weight.
void convolution_backward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  const size_t base = stack->size() - 10;
  const at::Tensor& weight = (*stack)[base + 2].toTensor();
  const bool transposed = (*stack)[base + 6].toBool();
  const int64_t groups = (*stack)[base + 8].toInt();
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(base + 3), c10::IValue(std::vector<int64_t>{out_channels}));
  execute_op(op, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution>());
  m.impl("convolution_backward_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_backward>());
}

}  // namespace softnpu
