// Staging buffers for host-to-device copies from pageable memory. As CUDA does, such a copy returns once the source
// is copied into a runtime-owned buffer: the caller may reuse its memory at once, and the host does not wait for the
// work queued before the copy. The buffer goes back to the pool when the copy has run (or is dropped).
#pragma once

#include <cstddef>

namespace softnpu::rt {

void* staging_acquire(size_t size);
void staging_release(void* buffer);

}  // namespace softnpu::rt
