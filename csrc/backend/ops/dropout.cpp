// Dropout. native_dropout's CPU kernel draws from the global CPU generator, which it cannot be handed, so on npu it
// would ignore torch.npu.manual_seed. Here it is the CPU kernel's computation composed from npu ops, whose bernoulli_
// draws from the npu generator.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

namespace softnpu {

namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1. - p;
  // A probability of zero would divide by zero: everything is dropped.
  const double scale = keep == 0. ? 0. : 1. / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(keep);
  at::Tensor output = input.mul(mask).mul_(scale);
  return {output, mask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_dropout", native_dropout); }

}  // namespace softnpu
