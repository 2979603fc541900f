#include "backend/sync_debug.h"

#include <c10/util/Exception.h>

#include <atomic>

#include "backend/graph.h"

namespace softnpu {

namespace {
std::atomic<int> g_mode{static_cast<int>(SyncDebugMode::kDisabled)};
}  // namespace

void set_sync_debug_mode(SyncDebugMode mode) { g_mode.store(static_cast<int>(mode), std::memory_order_relaxed); }

SyncDebugMode sync_debug_mode() { return static_cast<SyncDebugMode>(g_mode.load(std::memory_order_relaxed)); }

void check_sync_debug(const char* what) {
  check_not_capturing(what);
  const auto mode = sync_debug_mode();
  if (C10_LIKELY(mode == SyncDebugMode::kDisabled)) return;
  TORCH_CHECK(mode != SyncDebugMode::kError, what,
              ": called a synchronizing NPU operation (the host waits for the device), and "
              "torch.npu.set_sync_debug_mode(\"error\") forbids it");
  TORCH_WARN(what, ": called a synchronizing NPU operation (the host waits for the device)");
}

}  // namespace softnpu
