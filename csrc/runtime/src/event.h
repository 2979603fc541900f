// Events: markers in a stream's queue. Recording enqueues a marker task and remembers (stream, seq); the event is
// complete once that stream has reached seq, and the marker takes the timestamp when it runs, after everything
// queued before it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "softnpu/runtime.h"

namespace softnpu::rt {

class Stream;

class Event {
 public:
  explicit Event(bool timing) : timing(timing) {}
  ~Event();  // releases the recorded stream
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  const bool timing;
  void* handle = nullptr;  // set once, before the event is used

  // Reference counted: the handle and every marker not yet run hold one, so destroying a recorded event is safe.
  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // What a wait or synchronize covers: the last record's stream (a reference the caller releases) and seq.
  // stream is null if the event was never recorded.
  struct Capture {
    Stream* stream = nullptr;
    uint64_t seq = 0;
  };

  // Enqueues the marker on s, replacing the previous capture. Returns the marker's seq.
  uint64_t record(Stream* s);
  // A record on a stream that captures (graph.h): no marker, the event names the capture; a stream that waits on it
  // joins that capture (fork/join across streams, as CUDA's). Replaces the previous capture.
  void record_in_capture(uint64_t capture_id);
  // The capture of the last record if it was made while capturing, else 0.
  uint64_t capture_id();
  Capture capture();
  bool complete();

  // Compute side: the marker of the given record runs. A marker of a superseded record takes no timestamp.
  void on_marker(uint64_t generation);

  enum class TimeState { kValid, kNotRecorded, kNotReady };
  // The timestamp (steady clock, ns) of the current record.
  TimeState timestamp(int64_t* ns);

 private:
  std::atomic<int> refs_{1};
  std::mutex mutex_;
  Stream* stream_ = nullptr;  // guarded by mutex_; holds a reference
  uint64_t seq_ = 0;
  uint64_t generation_ = 0;
  uint64_t capture_id_ = 0;  // guarded by mutex_
  int64_t time_ns_ = 0;
};

}  // namespace softnpu::rt
