// Ops whose Meta kernel shapes an output otherwise than ATen's CPU and CUDA kernels do: the generic path (which
// allocates what the Meta kernel infers; the CPU kernel fills it in place), then the output re-described as CPU and
// CUDA give it. Metadata only: the data is already where the CPU kernel put it.
#include <torch/library.h>

#include "backend/ops/executor.h"

namespace softnpu {

namespace {

// The decomposition serving as Meta kernel gives the loss of a single sample (input of at most one dimension) shape
// (1,) under reduction="none"; CPU and CUDA give a 0-dim loss for it under every reduction.
void multilabel_margin_loss_forward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const int64_t input_dim = (*stack)[stack->size() - 3].toTensor().dim();
  execute_op(op, stack);
  if (input_dim > 1) return;
  c10::IValue& loss = (*stack)[stack->size() - 2];
  loss = loss.toTensor().view(c10::IntArrayRef{});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("multilabel_margin_loss_forward",
         torch::CppFunction::makeFromBoxedFunction<&multilabel_margin_loss_forward>());
}

}  // namespace softnpu
