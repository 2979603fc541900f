// Copies and memsets: checked against what the runtime knows of each pointer, then run by compute threads as tasks
// named "Memcpy HtoD" and the like.
#pragma once

#include <cstddef>

#include "softnpu/runtime.h"

namespace softnpu::rt {

class Runtime;
class Stream;

// SYNC: on the default stream of the device that owns the device pointer.
snpuError_t copy_sync(Runtime& rt, void* dst, const void* src, size_t size, snpuMemcpyKind kind);
// ASYNC, except that a copy from or to pageable host memory completes before returning.
snpuError_t copy_async(Runtime& rt, void* dst, const void* src, size_t size, snpuMemcpyKind kind, Stream* s);
snpuError_t memset_async(Runtime& rt, void* dst, int value, size_t size, Stream* s);

}  // namespace softnpu::rt
