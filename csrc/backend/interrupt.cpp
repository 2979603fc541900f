#include "backend/interrupt.h"

#include <atomic>
#include <exception>
#include <utility>

#include <c10/util/Exception.h>

#include "softnpu/runtime.h"

namespace softnpu {

namespace {

std::atomic<InterruptPoll> g_poll{nullptr};
thread_local int t_uninterruptible = 0;
thread_local std::exception_ptr t_interrupt;

// The runtime's interrupt check (runtime.h), on the waiting thread: the poll's exception is kept for NPU_CHECK.
int runtime_interrupt_check() {
  if (t_uninterruptible > 0) return 0;
  try {
    poll_interrupt();
    return 0;
  } catch (...) {
    t_interrupt = std::current_exception();
    return 1;
  }
}

}  // namespace

void set_interrupt_poll(InterruptPoll poll) {
  g_poll.store(poll, std::memory_order_release);
  snpuSetInterruptCheck(poll ? &runtime_interrupt_check : nullptr);
}

void poll_interrupt() {
  if (InterruptPoll poll = g_poll.load(std::memory_order_acquire)) poll();
}

void rethrow_interrupt(const char* what) {
  if (t_interrupt) std::rethrow_exception(std::exchange(t_interrupt, nullptr));
  TORCH_CHECK(false, "NPU error: ", what, " was interrupted: ", snpuGetLastErrorMessage());
}

UninterruptibleScope::UninterruptibleScope() { ++t_uninterruptible; }
UninterruptibleScope::~UninterruptibleScope() { --t_uninterruptible; }

}  // namespace softnpu
