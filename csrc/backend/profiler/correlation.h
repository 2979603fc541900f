// Which host op the device work belongs to. While a profiler session runs, PyTorch hands Kineto the correlation id
// of every op it enters and leaves on a thread (pushCorrelationId / popCorrelationId), and Kineto forwards them to
// the session; the session keeps them here, a stack per thread, and sets the innermost one as the runtime's
// correlation id of the thread, which every kernel, copy and memset the thread launches then carries. So the launch
// path itself does nothing for correlation, and nothing at all when no session runs.
#pragma once

#include <cstdint>

namespace softnpu::profiler {

void push_op(uint64_t correlation_id);
void pop_op();

// The innermost op of this thread (0: none).
uint64_t current_op();

}  // namespace softnpu::profiler
