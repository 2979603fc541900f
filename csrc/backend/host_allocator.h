// The pinned host memory allocator: PyTorch's generic caching host allocator (ATen/core/CachingHostAllocator.h) over
// the runtime's pinned memory. A block used by an asynchronous copy is not reused before the copy completes: the
// copy path records an event for it on the copy's stream (record_pinned_use).
// Under PYTORCH_NPU_ALLOC_CONF's pin_memory_expandable_segments:True, the allocations, their uses, statistics and
// empty_cache go to torch_npu's expandable allocator instead (expandable_host_allocator.h).
#pragma once

#include <c10/core/Allocator.h>

#include <utility>

#include "backend/npu_error.h"
#include "backend/stream.h"

namespace softnpu {

// A use of a pinned block by a stream's queued work: an owned runtime event recorded on the stream, as the
// allocators keep them in containers.
class PinnedUseEvent {
 public:
  explicit PinnedUseEvent(const NPUStream& stream) {
    NPU_CHECK(snpuEventCreate(&event_, snpuEventDisableTiming));
    // A free (a deleter: it must not throw) during a capture an earlier call invalidated: that capture's work will
    // never run, so the block waits for nothing.
    const snpuError_t err = snpuEventRecord(event_, stream.handle());
    if (err != snpuErrorStreamCaptureInvalidated) NPU_CHECK(err);
  }
  PinnedUseEvent(PinnedUseEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  PinnedUseEvent& operator=(PinnedUseEvent&& o) noexcept {
    std::swap(event_, o.event_);
    return *this;
  }
  PinnedUseEvent(const PinnedUseEvent&) = delete;
  PinnedUseEvent& operator=(const PinnedUseEvent&) = delete;
  ~PinnedUseEvent() {
    if (event_) snpuEventDestroy(event_);
  }
  bool query() const {
    const snpuError_t err = snpuEventQuery(event_);
    if (err == snpuErrorNotReady) return false;
    NPU_CHECK(err);
    return true;
  }

 private:
  snpuEvent_t event_ = nullptr;
};

c10::Allocator* pinned_allocator();

// Keeps the pinned block behind `data` (a DataPtr of pinned_allocator) from reuse until the stream's queued work
// completes. Returns false if the pointer is not from the pinned allocator.
bool record_pinned_use(const c10::DataPtr& data, const NPUStream& stream);

}  // namespace softnpu
