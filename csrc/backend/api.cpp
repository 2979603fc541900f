// The public C++ API (include/softnpu/softnpu.h). device_count() is defined in device.cpp.
#include "softnpu/softnpu.h"

#include <c10/util/Exception.h>

#include <limits>

#include "backend/device.h"
#include "backend/guard.h"

namespace softnpu {

void init() {
  // Raises, naming the variable, when the runtime's configuration is malformed.
  const auto n = device_count();
  TORCH_CHECK(n > 0, "softnpu: no npu device is visible (see ASCEND_RT_VISIBLE_DEVICES and SOFTNPU_DEVICE_COUNT)");
}

void synchronize(int64_t device_index) {
  TORCH_CHECK(device_index >= -1 && device_index <= std::numeric_limits<c10::DeviceIndex>::max(),
              "softnpu::synchronize: invalid device index ", device_index);
  NPUGuardImpl().synchronizeDevice(static_cast<c10::DeviceIndex>(device_index));
}

}  // namespace softnpu
