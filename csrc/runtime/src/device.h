// A device: its streams, its memory accounting and its compute threads (the "AI cores"), which drain the streams
// that have work, the most urgent first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "published_stats.h"
#include "stream.h"

namespace softnpu::rt {

class Runtime;

class Device {
 public:
  Device(Runtime* runtime, int index, int physical, int cores, uint64_t capacity);
  // Stops (again: idempotent) and releases the default stream.
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  Runtime* const runtime;
  const int index;     // visible index
  const int physical;  // before ASCEND_RT_VISIBLE_DEVICES renumbering
  const int cores;
  const uint64_t capacity;

  std::atomic<uint64_t> memory_used{0};  // bytes of capacity held by allocations

  Stream* default_stream() const { return default_stream_; }

  // This process's published counters of the device. The first call marks the device as used (npu-smi lists it).
  stats::DeviceCounters* counters() {
    stats::DeviceCounters* c = counters_.load(std::memory_order_acquire);
    return c ? c : first_use();
  }
  // The counters if the device was used, else null; does not mark it.
  stats::DeviceCounters* counters_if_used() const { return counters_.load(std::memory_order_acquire); }

  // Streams created on the device (the default stream is always there).
  Stream* create_stream(int priority, uint64_t id);
  void forget_stream(Stream* s);

  // Waits for all work queued so far on every stream of the device. If report, returns the earliest unreported
  // kernel error among them (snpuErrorKernelFailed), leaving the others for later calls.
  // snpuErrorNotReady if the deadline passed first.
  snpuError_t synchronize(bool report, Deadline deadline = kNoDeadline);
  // Whether every stream of the device has completed all its work.
  bool idle();
  // Forgets the kernel errors its streams kept unreported (a restarted device, fault.h).
  void drop_errors();

  // ---- scheduler

  // Hands a stream with work (and the reference that comes with it) to the compute threads.
  void make_ready(Stream* s);
  // Joins the compute threads, after all work completed (snpuShutdown).
  void stop();

 private:
  stats::DeviceCounters* first_use();
  void start_threads();
  void compute_loop(int thread_index);
  Stream* take_ready();
  void wake_one();
  void run(Stream* s, std::vector<Stream*>* woken);
  void execute(Stream* s, const Task& task);

  Stream* default_stream_;
  std::atomic<stats::DeviceCounters*> counters_{nullptr};

  std::mutex streams_mutex_;
  std::vector<Stream*> streams_;  // every live stream of the device, the default one first

  // Ready lists: one FIFO per priority level, linked through Stream::next_ready, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable cv_;
  Stream* ready_head_[kPriorityLevels] = {};
  Stream* ready_tail_[kPriorityLevels] = {};
  std::atomic<uint32_t> ready_mask_{0};  // bit l set while level l's list is not empty: read without the lock
  int sleepers_ = 0;                     // compute threads sleeping on cv_; guarded by mutex_
  std::atomic<bool> spinning_{false};    // an idle compute thread is spinning: it needs no wake-up
  std::atomic<bool> stopping_{false};

  std::mutex threads_mutex_;
  std::atomic<bool> threads_started_{false};
  std::vector<std::thread> threads_;
};

}  // namespace softnpu::rt
