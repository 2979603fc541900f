#include "backend/profiler/launch_trace.h"

#include <ThreadUtil.h>
#include <time.h>

#include <mutex>
#include <utility>

#include "backend/profiler/correlation.h"
#include "softnpu/runtime.h"

namespace softnpu::profiler {

std::atomic<bool> g_recording_launches{false};

namespace {

std::atomic<uint64_t> g_launches{0};

struct Events {
  std::mutex mutex;
  std::vector<LaunchEvent> events;
};

Events& events() {
  static Events e;
  return e;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void set_recording_launches(bool on) { g_recording_launches.store(on, std::memory_order_relaxed); }

uint64_t next_launch_sequence() { return g_launches.fetch_add(1, std::memory_order_relaxed) + 1; }

std::vector<LaunchEvent> take_launch_events() {
  Events& e = events();
  std::lock_guard lock(e.mutex);
  return std::exchange(e.events, {});
}

namespace {

struct TraceEstimates {
  std::mutex mutex;
  std::vector<std::pair<uint64_t, cost::Estimate>> estimates;
};

TraceEstimates& trace_estimates() {
  static TraceEstimates t;
  return t;
}

}  // namespace

void keep_trace_estimates(std::vector<std::pair<uint64_t, cost::Estimate>> estimates) {
  TraceEstimates& t = trace_estimates();
  std::lock_guard lock(t.mutex);
  t.estimates = std::move(estimates);
}

std::vector<std::pair<uint64_t, cost::Estimate>> last_trace_estimates() {
  TraceEstimates& t = trace_estimates();
  std::lock_guard lock(t.mutex);
  return t.estimates;
}

void LaunchScope::begin(const char* kernel) {
  active_ = true;
  event_.kernel = kernel;
  event_.sequence = next_launch_sequence();
  event_.op = current_op();
  event_.thread = libkineto::systemThreadId();
  snpuActivitySetCorrelationId(kLaunchIdBit | event_.sequence);
  event_.start_ns = now_ns();
}

void LaunchScope::end() {
  event_.end_ns = now_ns();
  // Later launches of the op (copies, other kernels) carry the op's id again.
  snpuActivitySetCorrelationId(event_.op);
  Events& e = events();
  std::lock_guard lock(e.mutex);
  e.events.push_back(event_);
}

}  // namespace softnpu::profiler
