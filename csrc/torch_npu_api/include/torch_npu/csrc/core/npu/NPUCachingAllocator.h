// torch_npu's c10_npu::NPUCachingAllocator: softnpu's caching device allocator (the one tensors, torch.npu.memory_*
// and npu-smi see). Raw allocations are blocks of the cache, reused in the order of the stream they are made for.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <functional>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace c10_npu::NPUCachingAllocator {

using c10::CachingDeviceAllocator::DeviceStats;
// An event of the allocator (c10's, which torch_npu's mirrors: action_, device_, addr_, size_, stream_, mempool_).
using c10::CachingDeviceAllocator::TraceEntry;
using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;

// The allocator itself (c10::Allocator: allocate() serves the current device's current stream).
c10::DeviceAllocator* get();
// A block for the current stream of the current device, or for a given stream (one of torch.npu's streams).
void* raw_alloc(size_t nbytes);
void* raw_alloc_with_stream(size_t nbytes, aclrtStream stream);
void raw_delete(void* ptr);
// Releases the cached free blocks to the device.
void emptyCache(bool check_error = true);
// Marks a block as used on another stream: it is reused only after the work queued there so far.
void recordStream(const c10::DataPtr& ptr, NPUStream stream);
DeviceStats getDeviceStats(c10::DeviceIndex device);
void resetAccumulatedStats(c10::DeviceIndex device);
void resetPeakStats(c10::DeviceIndex device);
// The tracker is called with every event of every device as it happens (segment allocations and frees, block
// allocations and frees, ...), whether or not torch.npu.memory._record_memory_history records them. It runs with the
// allocator locked: it must not allocate on npu nor call into torch.
void attachAllocatorTraceTracker(AllocatorTraceTracker tracker);

}  // namespace c10_npu::NPUCachingAllocator
