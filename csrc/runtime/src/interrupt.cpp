#include "interrupt.h"

#include <algorithm>
#include <atomic>
#include <string>

namespace softnpu::rt {

namespace {
std::atomic<snpuInterruptCheckFn> g_check{nullptr};
}  // namespace

void set_interrupt_check(snpuInterruptCheckFn check) { g_check.store(check, std::memory_order_release); }

WaitResult wait_interruptibly(Stream* s, uint64_t seq, Deadline deadline, bool spin, bool* waited) {
  snpuInterruptCheckFn check = g_check.load(std::memory_order_acquire);
  if (!check) return s->wait_until(seq, deadline, spin, waited) ? WaitResult::kReached : WaitResult::kDeadline;
  if (waited) *waited = false;
  for (bool first = true;; first = false) {
    const Deadline slice = std::min(deadline, std::chrono::steady_clock::now() + kInterruptCheckInterval);
    bool w = false;
    if (s->wait_until(seq, slice, spin && first, &w)) {
      if (waited) *waited = *waited || w;
      return WaitResult::kReached;
    }
    if (waited) *waited = true;
    if (slice == deadline) return WaitResult::kDeadline;
    if (check() != 0) return WaitResult::kInterrupted;
  }
}

snpuError_t interrupted(const char* call, const char* consequence) {
  return fail(snpuErrorInterrupted, std::string(call) + ": the wait was interrupted (the interrupt check asked to "
                                                        "stop waiting); " + consequence);
}

}  // namespace softnpu::rt
