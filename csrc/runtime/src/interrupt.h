// Host waits the process may interrupt (snpuSetInterruptCheck): a thread blocked in the runtime — a launch waiting for
// room in a full queue, a synchronizing call — sleeps in slices and asks the check between them, so a Ctrl-C is seen
// within a slice whatever the length of the kernels it waits for. Waits whose end the caller must see (a copy into
// pageable host memory, frees, shutdown) use Stream::wait_until directly and are never interrupted.
#pragma once

#include <chrono>
#include <cstdint>

#include "softnpu/runtime.h"
#include "stream.h"

namespace softnpu::rt {

// How long an interruptible wait sleeps between checks.
constexpr auto kInterruptCheckInterval = std::chrono::milliseconds(20);

void set_interrupt_check(snpuInterruptCheckFn check);

enum class WaitResult { kReached, kDeadline, kInterrupted };

// As s->wait_until(seq, deadline, spin, waited), asking the interrupt check every kInterruptCheckInterval.
WaitResult wait_interruptibly(Stream* s, uint64_t seq, Deadline deadline, bool spin = true, bool* waited = nullptr);

// The error an interrupted wait returns, naming the call and what became of its work.
snpuError_t interrupted(const char* call, const char* consequence);

}  // namespace softnpu::rt
