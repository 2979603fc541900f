// The stream-ordering facts the backend reports to c10's GPUTrace, which torch.npu._sanitizer listens to (as
// torch.cuda._sanitizer listens to CUDA's): event creation, record, wait and deletion, stream, event and device
// synchronization, and allocation. Until a sanitizer activates the trace (torch._C._activate_gpu_trace), each call is one
// predictable branch on a static flag.
//
// The allocator's other facts (a deallocation, record_stream, eraseStream: torch_npu's NPU trace reports them too) are
// queued instead (gpu_trace.cpp) and handed to Python by take_allocator_records: a block is often freed on a runtime
// compute thread (a launch record holds its tensors until its kernel ran), where calling into Python for the GIL could
// deadlock against a host thread that holds the GIL while it waits for that stream.
#pragma once

#include <c10/core/impl/GPUTrace.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/stream.h"

namespace softnpu::gpu_trace {

// A stream's identity for the sanitizer: its runtime handle, as torch_npu reports its aclrtStream (and CUDA its
// cudaStream_t); torch.npu.Stream.npu_stream gives the same value.
inline uintptr_t stream_key(const NPUStream& s) { return reinterpret_cast<uintptr_t>(s.handle()); }

inline uintptr_t event_key(const void* event) { return reinterpret_cast<uintptr_t>(event); }

// A new block of device memory: the sanitizer forgets what was done to the memory before (the allocator hands a block
// to a stream only once every stream that used it is done with it).
inline void memory_allocation(const void* ptr) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_memory_allocation(c10::kPrivateUse1, reinterpret_cast<uintptr_t>(ptr));
}

inline void event_creation(const void* event) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_event_creation(c10::kPrivateUse1, event_key(event));
}

inline void event_deletion(const void* event) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_event_deletion(c10::kPrivateUse1, event_key(event));
}

inline void event_record(const void* event, const NPUStream& s) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_event_record(c10::kPrivateUse1, event_key(event), stream_key(s));
}

inline void event_wait(const void* event, const NPUStream& s) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_event_wait(c10::kPrivateUse1, event_key(event), stream_key(s));
}

inline void stream_synchronization(const NPUStream& s) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_stream_synchronization(c10::kPrivateUse1, stream_key(s));
}

inline void event_synchronization(const void* event) {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_event_synchronization(c10::kPrivateUse1, event_key(event));
}

inline void device_synchronization() {
  if (const auto* interp = c10::impl::GPUTrace::get_trace(); C10_UNLIKELY(interp != nullptr))
    (*interp)->trace_gpu_device_synchronization(c10::kPrivateUse1);
}

// The queued allocator records, in the order they happened (a free is queued before its block can be handed out again,
// so a later allocation's report, which comes through GPUTrace, is delivered after it).
enum class AllocatorRecordKind : int { kDeallocation = 0, kRecordStream = 1, kEraseStream = 2 };

struct AllocatorRecord {
  AllocatorRecordKind kind;
  uintptr_t data_ptr;
  uintptr_t stream;  // stream_key of record_stream / eraseStream; 0 for a deallocation
};

// Set by the stream sanitizer while it listens (torch.npu._sanitizer); nothing is queued otherwise.
extern std::atomic<bool> g_allocator_records_enabled;

void queue_allocator_record(AllocatorRecord record);

// Takes every record queued so far.
std::vector<AllocatorRecord> take_allocator_records();

inline void memory_deallocation(const void* ptr) {
  if (C10_UNLIKELY(g_allocator_records_enabled.load(std::memory_order_relaxed)))
    queue_allocator_record({AllocatorRecordKind::kDeallocation, reinterpret_cast<uintptr_t>(ptr), 0});
}

inline void record_stream(const void* ptr, const NPUStream& s) {
  if (C10_UNLIKELY(g_allocator_records_enabled.load(std::memory_order_relaxed)))
    queue_allocator_record({AllocatorRecordKind::kRecordStream, reinterpret_cast<uintptr_t>(ptr), stream_key(s)});
}

inline void erase_stream(const void* ptr, const NPUStream& s) {
  if (C10_UNLIKELY(g_allocator_records_enabled.load(std::memory_order_relaxed)))
    queue_allocator_record({AllocatorRecordKind::kEraseStream, reinterpret_cast<uintptr_t>(ptr), stream_key(s)});
}

}  // namespace softnpu::gpu_trace
