// torch_npu's device functions (c10_npu::device_count, current_device, SetDevice): softnpu's devices.
#pragma once

#include <c10/core/Device.h>

#include "third_party/acl/inc/acl/acl_base.h"

namespace c10_npu {

c10::DeviceIndex device_count() noexcept;
c10::DeviceIndex current_device();
aclError SetDevice(c10::DeviceIndex device);
aclError GetDevice(int32_t* device);
void set_device(c10::DeviceIndex device);
// Waits for every stream of the current device.
void device_synchronize();

}  // namespace c10_npu
