// torch_npu's device functions (c10_npu::device_count, current_device, SetDevice, ...): softnpu's devices; the
// synchronization debug mode is torch.npu.set_sync_debug_mode's.
#pragma once

#include <c10/core/Device.h>

#include "third_party/acl/inc/acl/acl_base.h"
#include "third_party/acl/inc/acl/acl_rt.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace c10_npu {

C10_NPU_API c10::DeviceIndex device_count() noexcept;
// The calling thread's current device.
C10_NPU_API c10::DeviceIndex current_device();
// ACL_ERROR_INVALID_PARAM for a device that does not exist.
C10_NPU_API aclError SetDevice(c10::DeviceIndex device);
C10_NPU_API aclError GetDevice(int32_t* device);
// c10::Error for a device that does not exist.
C10_NPU_API void set_device(c10::DeviceIndex device);
// Waits for every stream of the current device.
C10_NPU_API void device_synchronize();

enum class SyncDebugMode { L_DISABLED = 0, L_WARN, L_ERROR };

// The synchronization debug mode: torch.npu.set_sync_debug_mode's, read and set from C++.
class WarningState {
 public:
  void set_sync_debug_mode(SyncDebugMode level);
  SyncDebugMode get_sync_debug_mode();
};

C10_NPU_API WarningState& warning_state();

// For code that makes the host wait for the device: warns or raises as the debug mode says.
C10_NPU_API void warn_or_error_on_sync();

// Waits for a runtime stream's work (a torch.npu stream's handle or aclrtCreateStream's); reported to the
// synchronization debug mode first, as torch_npu's. c10::Error with the runtime's message if its work failed.
C10_NPU_API void stream_synchronize(aclrtStream stream);

}  // namespace c10_npu
