// Devices as PyTorch sees them: counting, the current device (per host thread, as in CUDA), and index checks with
// CUDA's kind of error.
#pragma once

#include <c10/core/Device.h>

namespace softnpu {

// Number of visible NPUs, without starting the runtime; a configuration error raises (naming the variable).
c10::DeviceIndex device_count();
// Same, but never raises: 0 when the configuration is malformed (for contracts that must not throw).
c10::DeviceIndex device_count_noexcept() noexcept;
// Starts the runtime (idempotent): a malformed SOFTNPU_*/ASCEND_* variable raises here, named.
void init_runtime();

c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex device);
// Sets the device and returns the previous one.
c10::DeviceIndex exchange_device(c10::DeviceIndex device);

// Raises unless 0 <= device < device_count().
void check_device_index(c10::DeviceIndex device);

// Whether this process is a child forked after the runtime was initialized (torch.cuda's "bad fork"): the runtime
// refuses every call there, and backend state inherited from the parent (allocator pools, cached streams) must not
// be used or freed. Cheap and never raises.
bool in_bad_fork() noexcept;
// Raises CUDA's error for a forked child ("Cannot re-initialize NPU in forked subprocess...") in a bad fork.
void check_not_in_bad_fork();

}  // namespace softnpu
