// torch_npu's swapped memory (torch_npu.empty_with_swapped_memory, its NPUSwappedMemoryAllocator): host memory the
// device addresses directly, so a tensor larger than the device's memory can live on the host and still be an npu
// tensor every op reads and writes. On Ascend it is pinned host memory registered as mapped (aclrtHostRegister); here
// the runtime's mapped host memory (snpuHostAllocMapped). Not cached and not accounted as device memory: each
// allocation is its own, freed with its tensor after the device's queued work.
#pragma once

#include <c10/core/Allocator.h>

namespace softnpu {

// Allocates on the current device.
c10::Allocator* swapped_memory_allocator();

}  // namespace softnpu
