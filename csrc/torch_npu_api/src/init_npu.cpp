// torch_npu's init_npu / finalize_npu / synchronize / current_device (libs/init_npu.h) over softnpu's devices, and ACL
// set up for extensions the way torch_npu's process has it.
#include "torch_npu/csrc/libs/init_npu.h"

#include <c10/util/Exception.h>

#include <atomic>

#include "backend/allocator.h"
#include "backend/device.h"
#include "backend/guard.h"

// Defined by softnpu's libascendcl.so (csrc/offline/acl/init.cpp): ACL initializes at its first call and a thread
// without an ACL context works on torch.npu's current device, as in torch_npu's process, where torch_npu has called
// aclInit and aclrtSetDevice. Not CANN's API, so not in ACL's headers.
extern "C" void softnpu_acl_init_for_framework(void);

namespace {

// Loading libtorch_npu.so is importing torch_npu (or linking a C++ program to it).
const bool acl_set_up = [] {
  softnpu_acl_init_for_framework();
  return true;
}();

std::atomic<bool> g_initialized{false};

bool is_npu(const at::Device& device) { return device.type() == c10::DeviceType::PrivateUse1; }

}  // namespace

namespace torch_npu {

void init_npu(const c10::DeviceIndex device_index) {
  softnpu::init_runtime();
  softnpu::check_device_index(device_index);
  softnpu::set_device(device_index);
  g_initialized.store(true);
}

void init_npu(const std::string& device_str) {
  const at::Device device(device_str);
  TORCH_CHECK(is_npu(device), "NPU device init fail, except got NPU device, but got ", device_str);
  init_npu(device.has_index() ? device.index() : softnpu::current_device());
}

void init_npu(const at::Device& device) {
  TORCH_CHECK(is_npu(device), "NPU device init fail, except got NPU device, but got ", device.str());
  init_npu(device.has_index() ? device.index() : softnpu::current_device());
}

void finalize_npu() {
  if (!g_initialized.exchange(false)) {
    TORCH_WARN("Please init npu device first!");
    return;
  }
  softnpu::NPUGuardImpl().synchronizeDevice(softnpu::current_device());
  softnpu::NPUCachingAllocator::get()->emptyCache();
}

}  // namespace torch_npu

namespace torch::npu {

void synchronize(int64_t device_index) {
  const c10::DeviceIndex device = device_index < 0 ? softnpu::current_device()
                                                   : static_cast<c10::DeviceIndex>(device_index);
  softnpu::check_device_index(device);
  softnpu::NPUGuardImpl().synchronizeDevice(device);
}

}  // namespace torch::npu

namespace c10::npu {

DeviceIndex current_device() { return softnpu::current_device(); }

}  // namespace c10::npu
