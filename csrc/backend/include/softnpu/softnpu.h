// softnpu's C++ API for libtorch programs (find_package(softnpu); target_link_libraries(app softnpu::softnpu)).
//
// Everything else is libtorch's own API: once libsoftnpu_backend.so is loaded, the PrivateUse1 backend is named
// "npu" and its kernels, allocator and guard are registered, so torch::Device("npu:0"), tensor.to(device) and
// module->to(device) work as for any device.
//
// Call softnpu::init() before using the device. The backend registers itself when it loads, which a program does
// only if it references one of its symbols: a linker that drops unreferenced shared libraries (--as-needed, the
// default on several distributions) would otherwise leave it out, and "npu" would be an unknown device type.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace softnpu {

// Starts the npu devices (the runtime reads SOFTNPU_* and ASCEND_RT_VISIBLE_DEVICES). Throws c10::Error if the
// configuration is invalid or no device is visible. Calling it again does nothing.
void init();

// Number of visible npu devices.
c10::DeviceIndex device_count();

// Waits for all work queued on every stream of npu:device_index (-1: the current npu device), and throws the first
// kernel error it has not reported yet. As torch::cuda::synchronize.
void synchronize(int64_t device_index = -1);

}  // namespace softnpu
