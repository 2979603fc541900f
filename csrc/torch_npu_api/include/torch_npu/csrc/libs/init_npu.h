// torch_npu's entry points for C++ programs without Python (libtorch + -ltorch_npu): start and end the npu devices,
// synchronize one, ask the current one. softnpu's runtime also starts by itself at the first npu call, so init_npu
// is where a program chooses its device and learns of a configuration error early.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace torch_npu {

// Starts the runtime and makes the device current on this thread; c10::Error for a device that does not exist.
TORCH_NPU_API void init_npu(const c10::DeviceIndex device_index = 0);
// "npu" or "npu:N"; c10::Error for another device type.
TORCH_NPU_API void init_npu(const std::string& device_str);
TORCH_NPU_API void init_npu(const at::Device& device);

// Waits for the current device's work and returns the caching allocator's free blocks to the device (warns if
// init_npu was not called). Tensors still alive keep their memory.
TORCH_NPU_API void finalize_npu();

}  // namespace torch_npu

namespace torch::npu {

// Waits for the device's streams; -1 is the current device.
TORCH_NPU_API void synchronize(int64_t device_index = -1);

}  // namespace torch::npu

namespace c10::npu {

// The calling thread's current npu device.
C10_NPU_API DeviceIndex current_device();

}  // namespace c10::npu
