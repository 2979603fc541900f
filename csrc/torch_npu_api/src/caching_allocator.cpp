// c10_npu::NPUCachingAllocator: the calls of softnpu's caching allocator (backend/allocator.h).
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"

#include "backend/allocator.h"
#include "backend/device.h"
#include "stream_of_handle.h"

namespace c10_npu::NPUCachingAllocator {

c10::DeviceAllocator* get() { return softnpu::NPUCachingAllocator::get(); }

void* raw_alloc(size_t nbytes) {
  return softnpu::NPUCachingAllocator::get()->raw_alloc(nbytes, softnpu::getCurrentNPUStream());
}

void* raw_alloc_with_stream(size_t nbytes, aclrtStream stream) {
  const auto s = torch_npu_api::stream_of_handle(stream);
  TORCH_CHECK(s.has_value(), "raw_alloc_with_stream: the stream is not a current or default stream of an npu device; "
              "allocate for c10_npu::getCurrentNPUStream() instead");
  softnpu::NPUStream backend_stream = *s;
  TORCH_CHECK(backend_stream.device_index() == softnpu::current_device(),
              "raw_alloc_with_stream: the stream belongs to npu:", backend_stream.device_index(),
              ", not to the current device npu:", softnpu::current_device());
  return softnpu::NPUCachingAllocator::get()->raw_alloc(nbytes, backend_stream);
}

void raw_delete(void* ptr) { softnpu::NPUCachingAllocator::get()->raw_delete(ptr); }

void emptyCache(bool check_error) {
  try {
    softnpu::NPUCachingAllocator::get()->emptyCache();
  } catch (const c10::Error&) {
    if (check_error) throw;
  }
}

void recordStream(const c10::DataPtr& ptr, NPUStream stream) {
  softnpu::NPUCachingAllocator::get()->recordStream(ptr, stream.unwrap());
}

DeviceStats getDeviceStats(c10::DeviceIndex device) {
  return softnpu::NPUCachingAllocator::get()->getDeviceStats(device);
}
void resetAccumulatedStats(c10::DeviceIndex device) {
  softnpu::NPUCachingAllocator::get()->resetAccumulatedStats(device);
}
void resetPeakStats(c10::DeviceIndex device) { softnpu::NPUCachingAllocator::get()->resetPeakStats(device); }

void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
  softnpu::NPUCachingAllocator::get()->attach_trace_tracker(std::move(tracker));
}

}  // namespace c10_npu::NPUCachingAllocator
