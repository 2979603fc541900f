// Optional values holding tensors: an empty optional is an undefined tensor (sequences have no representation here).
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

Kernel optional(const OpContext& ctx) {
  const auto* type = ctx.attrs.find("type");
  if (type && type->has_tp() && !type->tp().has_tensor_type()) throw Unsupported("optionals of sequences");
  return [](const Tensors& in, Tensors& out) { out[0] = in.empty() ? at::Tensor() : in[0]; };
}

Kernel has_element(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    out[0] = at::scalar_tensor(!in.empty() && in[0].defined(), at::kBool);
  };
}

Kernel get_element(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    if (in.empty() || !in[0].defined()) throw Unsupported("OptionalGetElement of an empty optional");
    out[0] = in[0];
  };
}

const bool registered = register_ops({
    {"Optional", optional},
    {"OptionalHasElement", has_element},
    {"OptionalGetElement", get_element},
});

}  // namespace

}  // namespace softnpu::offline
