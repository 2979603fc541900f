// torch_npu's include/ops.h: op-plugin's C++ operator functions (op_plugin::npu_*). Those softnpu has are here, each
// the dispatcher call NPUNativeFunctions makes (npu tensors: the op path, current stream).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "torch_npu/csrc/aten/NPUNativeFunctions.h"

namespace op_plugin {

inline std::tuple<at::Tensor, at::Tensor> npu_rms_norm(const at::Tensor& self, const at::Tensor& gamma,
                                                       double epsilon = 1e-6) {
  return at_npu::native::NPUNativeFunctions::npu_rms_norm(self, gamma, epsilon);
}
inline at::Tensor npu_swiglu(const at::Tensor& self, int64_t dim = -1) {
  return at_npu::native::NPUNativeFunctions::npu_swiglu(self, dim);
}
inline at::Tensor npu_rotary_mul(const at::Tensor& self, const at::Tensor& r1, const at::Tensor& r2) {
  return at_npu::native::NPUNativeFunctions::npu_rotary_mul(self, r1, r2);
}
inline at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format) {
  return at_npu::native::NPUNativeFunctions::npu_format_cast(self, acl_format);
}

}  // namespace op_plugin
