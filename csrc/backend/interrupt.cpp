#include "backend/interrupt.h"

#include <atomic>

namespace softnpu {

namespace {
std::atomic<InterruptPoll> g_poll{nullptr};
}  // namespace

void set_interrupt_poll(InterruptPoll poll) { g_poll.store(poll, std::memory_order_release); }

void poll_interrupt() {
  if (InterruptPoll poll = g_poll.load(std::memory_order_acquire)) poll();
}

}  // namespace softnpu
