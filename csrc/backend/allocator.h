// The caching device allocator, in the manner of CUDA's (c10/cuda/CUDACachingAllocator) and torch_npu's:
//
//  - Requests are rounded (512 bytes, or PYTORCH_NPU_ALLOC_CONF roundup_power2_divisions) and served from two pools:
//    small (<= 1 MiB, carved from 2 MiB segments) and large (carved from 20 MiB segments, or an exact segment
//    rounded to 2 MiB above 10 MiB). Blocks are split on allocation and merged with free neighbours on free.
//  - Free lists are per stream. A block freed by the host goes back to its stream's free list at once: work queued
//    later on that stream runs after the work that used the block, so reuse is safe without waiting. If the block was
//    used on other streams (record_stream), it returns only after events recorded on those streams complete.
//  - Segments come from the runtime (snpuMalloc). When the device is exhausted, cached segments are released and the
//    allocation retried; if it still fails, torch.OutOfMemoryError is raised with CUDA's kind of message.
//  - Statistics are c10's DeviceStats, so torch.npu.memory_stats() reads like torch.cuda.memory_stats().
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include "backend/stream.h"

namespace softnpu {

class NPUCachingAllocator final : public c10::DeviceAllocator {
 public:
  static NPUCachingAllocator* get();

  // c10::Allocator: allocates on the current device, for its current stream.
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // Synchronous device-to-device copy (used by storage copies outside the op path).
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator.
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Allocates for a given stream of the current device (the op path passes the stream it launches on).
  c10::DataPtr allocate_on(size_t nbytes, const NPUStream& stream);

  // Segments and blocks, for torch.npu.memory_snapshot().
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> snapshot();

 private:
  NPUCachingAllocator() = default;
};

}  // namespace softnpu
