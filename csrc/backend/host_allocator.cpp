#include "backend/host_allocator.h"

#include <ATen/core/CachingHostAllocator.h>

#include <chrono>
#include <mutex>

#include "backend/device.h"
#include "backend/env.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace {

// An owned runtime event, as the generic allocator keeps them in containers.
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

struct PinnedAllocatorImpl final : public at::CachingHostAllocatorImpl<c10::Stream, PinnedUseEvent> {
  // In a bad fork, as the device allocator: the pools and their locks are the parent's.
  std::pair<void*, void*> allocate(size_t size) override {
    check_not_in_bad_fork();
    return CachingHostAllocatorImpl::allocate(size);
  }

  void free(void* ctx) override {
    if (!in_bad_fork()) CachingHostAllocatorImpl::free(ctx);
  }

 private:
  // The time spent in the runtime's host allocations and frees: host_memory_stats()' host_alloc_time and
  // host_free_time (microseconds), which ATen's generic allocator leaves to the backend, as CUDA's measures them.
  void allocate_host_memory(size_t size, void** ptr) override {
    const auto start = std::chrono::steady_clock::now();
    NPU_CHECK(snpuMallocHost(ptr, size));
    record_duration(stats_.host_alloc_time, start);
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    const auto start = std::chrono::steady_clock::now();
    NPU_CHECK(snpuFreeHost(block->ptr_));
    record_duration(stats_.host_free_time, start);
  }

  void record_duration(c10::CachingAllocator::DurationStat& stat, std::chrono::steady_clock::time_point start) {
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> g(stats_.timing_mutex_);
    stat.increase(us);
  }

  void record_stream(std::optional<std::vector<PinnedUseEvent>>& events, c10::Stream stream) override {
    events->emplace_back(NPUStream(stream));
  }

  bool query_event(PinnedUseEvent& event) override { return event.query(); }

  c10::Stream get_current_stream() const override { return getCurrentNPUStream(); }

  bool stream_is_capturing(c10::Stream stream) const override {
    snpuStreamCaptureStatus status;
    NPU_CHECK(snpuStreamIsCapturing(NPUStream(stream).handle(), &status));
    return status != snpuStreamCaptureStatusNone;
  }

  // PYTORCH_NPU_ALLOC_CONF's pinned_use_background_threads (c10 reads only its own variables).
  bool pinned_use_background_threads() override { return allocator_config().pinned_use_background_threads; }

  // pinned_max_round_threshold_mb / pinned_max_cached_size_mb (also set at run time by _set_allocator_settings).
  size_t pinned_max_round_threshold() const override { return allocator_config().pinned_max_round_threshold; }
  size_t pinned_max_cached_size() const override { return allocator_config().pinned_max_cached_size; }
};

DECLARE_HOST_ALLOCATOR(NPUPinnedAllocator, PinnedAllocatorImpl, free_pinned, g_pinned_allocator)

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned_allocator)

}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool record_pinned_use(const c10::DataPtr& data, const NPUStream& stream) {
  return g_pinned_allocator.record_event(data.get(), data.get_context(), stream.unwrap());
}

}  // namespace softnpu
