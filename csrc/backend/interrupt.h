// Host waits that Ctrl-C can interrupt. Every wait for the device a user can start (synchronize, stream and event
// synchronize, .item(), .cpu(), an op launch blocked on a full queue) waits in slices of the runtime's timed waits
// and polls between them; the Python extension installs the poll, which turns a pending SIGINT into
// KeyboardInterrupt. An interrupted wait leaves its work queued: the next synchronize completes it.
#pragma once

#include <cstdint>

#include "backend/npu_error.h"
#include "softnpu/runtime.h"

namespace softnpu {

// Called between slices of a wait; throws to interrupt it (the Python extension's raises the pending Python error).
// Must be callable from any thread, with or without the GIL.
using InterruptPoll = void (*)();
void set_interrupt_poll(InterruptPoll poll);

// How long a wait sleeps between polls: a signal is noticed within this (plus the GIL's hand-over).
constexpr uint64_t kInterruptPollMicros = 20'000;

void poll_interrupt();

// Calls try_wait(timeout_us) until it returns something other than snpuErrorNotReady, polling in between; a runtime
// error is thrown as a PyTorch error naming `what`.
template <typename TryWait>
void wait_interruptibly(const char* what, TryWait&& try_wait) {
  for (;;) {
    const snpuError_t err = try_wait(kInterruptPollMicros);
    if (err != snpuErrorNotReady) {
      if (err != snpuSuccess) throw_npu_error(err, what);
      return;
    }
    poll_interrupt();
  }
}

}  // namespace softnpu
