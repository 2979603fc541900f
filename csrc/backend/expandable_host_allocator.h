// torch_npu's expandable pinned host allocator (PYTORCH_NPU_ALLOC_CONF's pin_memory_expandable_segments:True): one
// reserved virtual range, pinned to the runtime as a whole, whose pages exist only in the 20 MiB granules a block
// covers (torch_npu maps physical pages there the same way). Blocks are cut from the range lowest address first and
// merged with free neighbours when freed; a freed block whose asynchronous uses are still queued stays active until
// they complete; empty_cache unmaps the granules no block uses. host_memory_stats(): allocated_bytes is the mapped
// memory, active_bytes the blocks handed out (request + 32, rounded to 512 bytes, as torch_npu's).
#pragma once

#include <ATen/core/CachingHostAllocator.h>

#include <cstddef>

#include "backend/stream.h"

namespace softnpu::expandable_host {

// The pinned allocator's mode: pin_memory_expandable_segments of the configuration in force.
bool enabled();

at::DataPtr allocate(size_t size);

// Keeps the block holding `ptr` from reuse until the stream's queued work completes; false if
// `ptr` is not in the reserved range or no live block holds it.
bool record_use(const void* ptr, const NPUStream& stream);

void empty_cache();
at::HostStats stats();
void reset_accumulated_stats();
void reset_peak_stats();

}  // namespace softnpu::expandable_host
