// PrivateUse1 hooks: what ATen asks of the npu backend outside the op path (availability, device count, generators,
// pinned memory, the device owning a pointer, storage resizing).
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <c10/util/Exception.h>

#include "backend/device.h"
#include "backend/generator.h"
#include "backend/host_allocator.h"
#include "backend/npu_error.h"
#include "backend/ops/storage.h"
#include "torch_npu/csrc/core/npu/NPUHooksInterface.h"

namespace softnpu {

namespace {

// torch_npu's c10_npu::NPUHooksInterface, as torch_npu's hooks are.
struct NPUHooks final : public c10_npu::NPUHooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device) const override { return device >= 0 && device < device_count(); }
  void init() const override { device_count(); }

  c10::DeviceIndex deviceCount() const override { return device_count_noexcept(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override { return exchange_device(device); }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override { return new_generator(device); }

  bool isPinnedPtr(const void* data) const override {
    snpuPointerAttributes attr{};
    return snpuPointerGetAttributes(&attr, data) == snpuSuccess && attr.type == snpuMemoryTypeHost;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }

  at::Device getDeviceFromPtr(void* data) const override {
    snpuPointerAttributes attr{};
    NPU_CHECK(snpuPointerGetAttributes(&attr, data));
    TORCH_CHECK(attr.type == snpuMemoryTypeDevice, "The pointer ", data, " is not npu device memory");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(attr.device));
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

// Registered at load time, before any op can ask for it.
const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NPUHooks());
  return true;
}();

}  // namespace

}  // namespace softnpu
