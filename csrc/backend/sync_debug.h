// torch.npu.set_sync_debug_mode: what to do when an op makes the host wait for the device without being asked to
// (Tensor.item(), a host fallback, a blocking or pageable copy), as CUDA's c10::cuda::warning_state(). Explicit
// synchronizations (torch.npu.synchronize, Stream/Event.synchronize) are what the program asked for: never reported.
#pragma once

namespace softnpu {

enum class SyncDebugMode { kDisabled = 0, kWarn = 1, kError = 2 };

void set_sync_debug_mode(SyncDebugMode mode);
SyncDebugMode sync_debug_mode();

// Called by every path that synchronizes on the host's behalf: warns (UserWarning) or raises (RuntimeError) naming
// `what` (the op) when the mode says so; during an NPU graph capture of the current stream, raises and invalidates
// the capture (graph.h).
void check_sync_debug(const char* what);

}  // namespace softnpu
