// Activity records for the profiler: every kernel, copy and memset launched while enabled leaves a record with its
// stream, the launching thread's correlation id and CLOCK_REALTIME start and end. Process-wide, so records survive
// snpuShutdown until drained.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "softnpu/runtime.h"

namespace softnpu::rt::activity {

extern std::atomic<bool> g_enabled;

// One relaxed load: checked for every task that runs.
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_enabled(bool enable);
void add(const snpuActivityRecord& record);
size_t drain(snpuActivityRecord* out, size_t capacity);

// The correlation id launches of the calling thread carry (snpuActivitySetCorrelationId).
uint64_t correlation_id();
void set_correlation_id(uint64_t id);

// CLOCK_REALTIME in nanoseconds, the profiler's clock.
int64_t now_ns();

}  // namespace softnpu::rt::activity
