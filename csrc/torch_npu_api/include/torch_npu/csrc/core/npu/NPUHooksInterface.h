// torch_npu's c10_npu::NPUHooksInterface: the PrivateUse1 hooks ATen asks outside the op path. softnpu's hooks
// (csrc/backend/hooks.cpp, registered when the library loads) implement this interface, so get_npu_hooks() is them.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>

#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace c10_npu {

struct TORCH_NPU_API NPUHooksInterface : public at::PrivateUse1HooksInterface {
  ~NPUHooksInterface() override = default;
  // The device's default generator: at_npu::detail::getDefaultNPUGenerator's.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override = 0;
  at::Device getDeviceFromPtr(void* data) const override = 0;
  void init() const override = 0;
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const override = 0;
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override = 0;
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override = 0;
  bool isAvailable() const override = 0;
  bool isPinnedPtr(const void* data) const override = 0;
  c10::Allocator* getPinnedMemoryAllocator() const override = 0;
};

// The registered hooks (softnpu's, an NPUHooksInterface).
TORCH_NPU_API at::PrivateUse1HooksInterface* get_npu_hooks();

}  // namespace c10_npu
