#include "backend/host_allocator.h"

#include <ATen/core/CachingHostAllocator.h>

#include <chrono>
#include <mutex>

#include "backend/device.h"
#include "backend/env.h"
#include "backend/expandable_host_allocator.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace {

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

void free_pinned(void* ctx);

// The caching allocator, or the expandable one under pin_memory_expandable_segments (which the configuration in
// force fixes for the process: it is not a run-time key).
struct NPUPinnedAllocator final : public at::CachingHostAllocatorInterface<PinnedAllocatorImpl, free_pinned> {
  at::DataPtr allocate(size_t size) override {
    return expandable_host::enabled() ? expandable_host::allocate(size) : CachingHostAllocatorInterface::allocate(size);
  }
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    return (expandable_host::enabled() && expandable_host::record_use(ptr, NPUStream(stream))) ||
           CachingHostAllocatorInterface::record_event(ptr, ctx, stream);
  }
  void empty_cache() override {
    if (expandable_host::enabled()) expandable_host::empty_cache();
    CachingHostAllocatorInterface::empty_cache();
  }
  at::HostStats get_stats() override {
    return expandable_host::enabled() ? expandable_host::stats() : CachingHostAllocatorInterface::get_stats();
  }
  void reset_accumulated_stats() override {
    if (expandable_host::enabled()) expandable_host::reset_accumulated_stats();
    CachingHostAllocatorInterface::reset_accumulated_stats();
  }
  void reset_peak_stats() override {
    if (expandable_host::enabled()) expandable_host::reset_peak_stats();
    CachingHostAllocatorInterface::reset_peak_stats();
  }
};

NPUPinnedAllocator g_pinned_allocator;

void free_pinned(void* ctx) { g_pinned_allocator.free(ctx); }

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned_allocator)

}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool record_pinned_use(const c10::DataPtr& data, const NPUStream& stream) {
  return g_pinned_allocator.record_event(data.get(), data.get_context(), stream.unwrap());
}

}  // namespace softnpu
