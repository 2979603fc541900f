// c10_npu's device functions over softnpu's devices (backend/device.h).
#include "torch_npu/csrc/core/npu/NPUFunctions.h"

#include "backend/device.h"
#include "backend/guard.h"
#include "backend/npu_error.h"
#include "backend/sync_debug.h"

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

void WarningState::set_sync_debug_mode(SyncDebugMode level) {
  softnpu::set_sync_debug_mode(static_cast<softnpu::SyncDebugMode>(level));
}

SyncDebugMode WarningState::get_sync_debug_mode() { return static_cast<SyncDebugMode>(softnpu::sync_debug_mode()); }

WarningState& warning_state() {
  static WarningState state;  // stateless: the mode is softnpu's
  return state;
}

void warn_or_error_on_sync() { softnpu::check_sync_debug("c10_npu::warn_or_error_on_sync"); }

void stream_synchronize(aclrtStream stream) {
  softnpu::check_sync_debug("c10_npu::stream_synchronize");
  NPU_CHECK(snpuStreamSynchronize(static_cast<snpuStream_t>(stream)));
}

}  // namespace c10_npu
