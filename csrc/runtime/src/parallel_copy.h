// Large copies spread over several threads, as ATen's CPU copy_ spreads them: one thread cannot draw the memory's
// bandwidth. The compute thread running the copy task takes a share itself; helper threads (started on first use,
// one fewer than the threads allowed) take the rest.
#pragma once

#include <cstddef>

namespace softnpu::rt {

// Copies size bytes with up to `threads` threads. Small copies, and copies while another one holds the helpers,
// run on the calling thread alone.
void parallel_memcpy(void* dst, const void* src, size_t size, int threads);

}  // namespace softnpu::rt
