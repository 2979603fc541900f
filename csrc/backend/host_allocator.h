// The pinned host memory allocator: PyTorch's generic caching host allocator (ATen/core/CachingHostAllocator.h) over
// the runtime's pinned memory. A block used by an asynchronous copy is not reused before the copy completes: the
// copy path records an event for it on the copy's stream (record_pinned_use).
#pragma once

#include <c10/core/Allocator.h>

#include "backend/stream.h"

namespace softnpu {

c10::Allocator* pinned_allocator();

// Keeps the pinned block behind `data` (a DataPtr of pinned_allocator) from reuse until the stream's queued work
// completes. Returns false if the pointer is not from the pinned allocator.
bool record_pinned_use(const c10::DataPtr& data, const NPUStream& stream);

}  // namespace softnpu
