// ONNX tensors to ATen and back (the op table's helpers are declared in ops/op.h).
#pragma once

#include "model/ops/op.h"

namespace softnpu::offline {

at::Tensor from_proto(const onnx::TensorProto& proto);  // a CPU tensor; throws Unsupported
void to_proto(const at::Tensor& t, const std::string& name, onnx::TensorProto* proto);

}  // namespace softnpu::offline
