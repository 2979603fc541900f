// c10_npu's device functions over softnpu's devices (backend/device.h).
#include "torch_npu/csrc/core/npu/NPUFunctions.h"

#include "backend/device.h"
#include "backend/guard.h"

namespace c10_npu {

c10::DeviceIndex device_count() noexcept { return softnpu::device_count_noexcept(); }
c10::DeviceIndex current_device() { return softnpu::current_device(); }
void set_device(c10::DeviceIndex device) { softnpu::set_device(device); }

aclError SetDevice(c10::DeviceIndex device) {
  try {
    softnpu::set_device(device);
  } catch (const c10::Error&) {
    return ACL_ERROR_INVALID_PARAM;
  }
  return ACL_ERROR_NONE;
}

aclError GetDevice(int32_t* device) {
  if (!device) return ACL_ERROR_INVALID_PARAM;
  *device = softnpu::current_device();
  return ACL_ERROR_NONE;
}

void device_synchronize() { softnpu::NPUGuardImpl().synchronizeDevice(softnpu::current_device()); }

}  // namespace c10_npu
