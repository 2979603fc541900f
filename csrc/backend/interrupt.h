// Host waits that Ctrl-C can interrupt. The runtime asks an interrupt check between 20 ms slices of every wait a
// caller starts (snpuSetInterruptCheck: synchronize, stream and event synchronize, .item(), .cpu(), any launch —
// kernel, copy, memset, event — blocked on a full queue); installing the poll installs that check. The Python
// extension's poll turns a pending SIGINT into KeyboardInterrupt: the check keeps the exception on the waiting thread,
// the runtime call returns snpuErrorInterrupted, and NPU_CHECK rethrows it there. An interrupted wait leaves its work
// queued (an interrupted launch queued nothing): the next synchronize completes it.
#pragma once

#include <cstdint>

#include "backend/npu_error.h"

namespace softnpu {

// Called between slices of a wait; throws to interrupt it (the Python extension's raises the pending Python error).
// Must be callable from any thread, with or without the GIL.
using InterruptPoll = void (*)();
void set_interrupt_poll(InterruptPoll poll);

// How long a wait of the backend's own (a collective's) sleeps between polls: a signal is noticed within this (plus
// the GIL's hand-over). The runtime's waits use the same interval.
constexpr uint64_t kInterruptPollMicros = 20'000;

// Throws what the poll throws if an interrupt is pending.
void poll_interrupt();

// Rethrows the exception the runtime's interrupt check caught on this thread (a call returned snpuErrorInterrupted).
[[noreturn]] void rethrow_interrupt(const char* what);

// While one lives on a thread, its runtime waits are not interrupted: waits whose end the host must see (a copy into
// pinned host memory it is about to read).
class UninterruptibleScope {
 public:
  UninterruptibleScope();
  ~UninterruptibleScope();
  UninterruptibleScope(const UninterruptibleScope&) = delete;
  UninterruptibleScope& operator=(const UninterruptibleScope&) = delete;
};

}  // namespace softnpu
