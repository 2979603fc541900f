// Host-side launch events while a profiler session records: each kernel the op path launches becomes a
// "snpuLaunchKernel" event on the launching thread, inside its op, as cudaLaunchKernel is for a CUDA kernel; the
// trace draws a flow arrow from it to the kernel on its stream. The launch gets an id of its own (kLaunchIdBit set,
// never a host op's id) as its runtime correlation id, so the kernel's record names its launch, which names the op.
//
// Each launch also carries the cost model's estimate of its kernel on the SoC (backend/cost), worked out only while
// a session records; the trace puts it beside the kernel's measured duration.
//
// Off, a launch pays one relaxed load and a branch (LaunchScope's constructor).
#pragma once

#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "backend/cost/cost_model.h"

namespace softnpu::profiler {

constexpr uint64_t kLaunchIdBit = uint64_t{1} << 63;

struct LaunchEvent {
  const char* kernel;   // the kernel's name (owned by the op registry, which outlives the trace)
  uint64_t sequence;    // 1, 2, ...: the launch id without kLaunchIdBit, and the flow id in the trace
  uint64_t op;          // correlation id of the host op that launched it (0: none)
  int32_t thread;       // system thread id, as Kineto names the host op's thread
  int64_t start_ns;     // CLOCK_REALTIME, the clock of the runtime's records and of the profiler
  int64_t end_ns;
  std::optional<cost::Estimate> estimate;  // the kernel on the SoC; none where the launcher gives none
};

extern std::atomic<bool> g_recording_launches;

void set_recording_launches(bool on);
// A fresh id from the launches' sequence (without kLaunchIdBit): also what a copy of the trace is known by, so its
// estimate is found like a kernel's.
uint64_t next_launch_sequence();
// Moves out the events recorded so far.
std::vector<LaunchEvent> take_launch_events();

// The estimates of the kernels in the last processed trace, by launch id (the kernel's correlation id in the trace),
// for softnpu.cost's profiler helpers: set by the session, read from Python.
void keep_trace_estimates(std::vector<std::pair<uint64_t, cost::Estimate>> estimates);
std::vector<std::pair<uint64_t, cost::Estimate>> last_trace_estimates();

// Around one launch call.
class LaunchScope {
 public:
  explicit LaunchScope(const char* kernel) {
    if (C10_UNLIKELY(g_recording_launches.load(std::memory_order_relaxed))) begin(kernel);
  }
  // estimate() -> std::optional<cost::Estimate>, called only while recording, before the launch's time starts.
  template <typename Estimator>
  LaunchScope(const char* kernel, Estimator&& estimate) {
    if (C10_UNLIKELY(g_recording_launches.load(std::memory_order_relaxed))) {
      // Profiling never fails a launch: a kernel the model cannot describe goes without an estimate.
      try {
        event_.estimate = estimate();
      } catch (const std::exception&) {
        event_.estimate.reset();
      }
      begin(kernel);
    }
  }
  ~LaunchScope() {
    if (C10_UNLIKELY(active_)) end();
  }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  void begin(const char* kernel);
  void end();

  bool active_ = false;
  LaunchEvent event_;
};

}  // namespace softnpu::profiler
