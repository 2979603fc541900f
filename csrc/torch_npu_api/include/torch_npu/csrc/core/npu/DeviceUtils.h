// torch_npu's device predicates: npu is PyTorch's PrivateUse1 device type.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>

namespace torch_npu::utils {

inline constexpr c10::DeviceType get_npu_device_type() { return c10::DeviceType::PrivateUse1; }
inline bool is_npu(const c10::Device& device) { return device.type() == c10::DeviceType::PrivateUse1; }
inline bool is_npu(const at::Tensor& tensor) { return tensor.defined() && is_npu(tensor.device()); }
inline bool is_npu(const c10::TensorOptions& options) { return is_npu(options.device()); }

inline void torch_check_npu(const at::Tensor& tensor) {
  TORCH_CHECK(is_npu(tensor), "Expected NPU tensor, please check whether the input tensor device is correct.");
}
inline void torch_check_npu(const c10::TensorOptions& options) {
  TORCH_CHECK(is_npu(options), "Expected NPU tensor, please check whether the input tensor device is correct.");
}
inline void torch_check_npu(const c10::Device& device) {
  TORCH_CHECK(is_npu(device), "Expected NPU tensor, please check whether the input tensor device is correct.");
}

}  // namespace torch_npu::utils
