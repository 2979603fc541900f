// Streams: in-order queues of fixed-size tasks. The host enqueues (snpuLaunchKernel, copies, event records and
// waits); one compute thread at a time drains a stream (device.cpp schedules them). Sequence numbers order
// everything: the n-th task enqueued has seq n, and the stream has reached n once it completed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "errors.h"
#include "softnpu/runtime.h"

namespace softnpu::rt {

class Device;
class Event;
class Stream;
class StreamCapture;

// Host waits may give up at a deadline (the timed synchronizing calls, a launch waiting for room).
using Deadline = std::chrono::steady_clock::time_point;
constexpr Deadline kNoDeadline = Deadline::max();
// now + timeout_us, or kNoDeadline for UINT64_MAX.
Deadline deadline_after(uint64_t timeout_us);

// Priorities as CUDA numbers them: lower is more urgent.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -3;
constexpr int kPriorityLevels = kLeastPriority - kGreatestPriority + 1;

// Guards a stream's queue. Its critical sections are a few dozen instructions, and a launch must make no system
// call even when a compute thread is taking a task from the same stream at that moment.
class SpinLock {
 public:
  void lock() {
    int spins = 0;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 256) {
          relax();
        } else {
          std::this_thread::yield();  // the holder was preempted
        }
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

 private:
  std::atomic<bool> flag_{false};
};

// Spins until done() or the time is up, yielding the core between rounds: when threads outnumber cores, the thread
// that would make done() true may be waiting for this very core.
template <class Done>
bool spin_until(Done done, std::chrono::microseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      SpinLock::relax();
    }
    if (std::chrono::steady_clock::now() >= end) return done();
    std::this_thread::yield();
  }
}

enum class TaskKind : uint8_t { kKernel, kCopy, kMemset, kRecord, kWait };

// One unit of stream work. Fixed-size and trivially copyable, so the queue never allocates per launch.
struct Task {
  TaskKind kind;
  bool traced;              // launched while activity records were on: only such tasks leave one (as CUPTI's)
  const char* name;         // the kernel's name, or "Memcpy HtoD" and the like
  uint64_t correlation_id;  // the launching thread's, for the profiler
  union {
    struct {
      snpuKernelFn fn;
      void* arg;
      snpuKernelCleanupFn cleanup;
    } kernel;
    struct {
      void* dst;
      const void* src;
      size_t size;
      void* staging;  // owned staging buffer holding the source (pageable host to device), or null; released
                      // with the task's other references, once it ran or was dropped
      snpuMemcpyKind kind;  // resolved (never snpuMemcpyDefault), for the activity record
      bool pageable;        // the caller's host side is not pinned, for the activity record
    } copy;
    struct {
      void* dst;
      int value;
      size_t size;
    } memset;
    struct {
      Event* event;  // holds a reference
      uint64_t generation;
    } record;
    struct {
      Stream* stream;  // holds a reference
      uint64_t seq;
    } wait;
  };
};

// A ring buffer that grows by doubling: amortized, launching allocates nothing.
class TaskQueue {
 public:
  TaskQueue() : tasks_(new Task[kInitialCapacity]), capacity_(kInitialCapacity) {}
  bool empty() const { return size_ == 0; }
  const Task& front() const { return tasks_[head_]; }
  void pop() {
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }
  void push(const Task& task) {
    if (size_ == capacity_) grow();
    tasks_[(head_ + size_) & (capacity_ - 1)] = task;
    ++size_;
  }

 private:
  static constexpr size_t kInitialCapacity = 64;
  void grow();

  std::unique_ptr<Task[]> tasks_;
  size_t capacity_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// Streams with work queued, on all devices: how many kernels may soon run at once (kernel thread budget).
int active_stream_count();

class Stream {
 public:
  Stream(Device* device, int priority, uint64_t id);
  // Drops tasks that never ran (only left when work was abandoned): cleanups run, references are released.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device* const device;
  const int priority;
  const int level;  // index of the priority among the device's ready lists, 0 the most urgent
  const uint64_t id;
  void* handle = nullptr;  // what callers hold; set once, before the stream is used

  // Reference counted: the handle (or the device, for a default stream), the scheduler while the stream has work,
  // events recorded on it and waits of other streams hold references.
  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // ---- host side

  // Appends a task and returns its seq. A stream that was idle is handed to its device's scheduler.
  uint64_t enqueue(const Task& task);

  uint64_t enqueued() const { return enqueued_.load(std::memory_order_acquire); }
  bool reached(uint64_t seq) const { return completed_.load(std::memory_order_acquire) >= seq; }

  // Blocks until the stream has reached seq or the deadline passed (kNoDeadline: none): spins briefly (unless !spin),
  // then sleeps. Returns whether it reached seq; *waited says whether it had to wait.
  bool wait_until(uint64_t seq, Deadline deadline, bool spin = true, bool* waited = nullptr);
  // Without a deadline. Returns whether it had to wait.
  bool wait_for(uint64_t seq, bool spin = true) {
    bool waited = false;
    wait_until(seq, kNoDeadline, spin, &waited);
    return waited;
  }

  // Moves out the unreported kernel error if it came from a task at or before seq.
  bool take_error(uint64_t seq, KernelError* out);
  // The global order of the unreported error at or before seq, to report the earliest of several streams.
  bool peek_error(uint64_t seq, uint64_t* order);

  // ---- compute side: called by the compute thread that owns the stream (took it from the ready list)

  enum class Step { kRun, kIdle };
  // If finished, the head task has run: pops it, marks it complete, collects the streams parked on it into woken
  // and wakes host waiters. Then copies the next head task into *next (it stays queued until it finishes) and
  // returns kRun, or returns kIdle: the stream has no work and the caller no longer owns it (nor its reference).
  Step advance(bool finished, Task* next, std::vector<Stream*>* woken);

  // Seq of the head task (the one running).
  uint64_t head_seq() const { return completed_.load(std::memory_order_relaxed) + 1; }

  // Parks waiter (whose head task waits for this stream to reach seq) unless the stream already reached it.
  // A parked waiter holds no compute thread; it is returned through advance's woken list once seq completes.
  bool park(Stream* waiter, uint64_t seq);

  // Keeps the first failure until it is reported; later failures meanwhile are only logged.
  void record_error(KernelError error, uint64_t seq);

  // Ready-list link, guarded by the device's scheduler mutex.
  Stream* next_ready = nullptr;

  // The capture recording this stream's launches (graph.h), or null: the one check the launch path makes.
  std::atomic<StreamCapture*> capture{nullptr};

 private:
  void notify_host_waiters(uint64_t done);

  std::atomic<int> refs_{1};

  SpinLock mutex_;
  TaskQueue queue_;                                      // guarded by mutex_
  bool active_ = false;                                  // scheduled: ready, running or parked; guarded by mutex_
  std::vector<std::pair<Stream*, uint64_t>> parked_;     // guarded by mutex_
  std::atomic<uint64_t> enqueued_{0};                    // written under mutex_
  std::atomic<uint64_t> completed_{0};                   // written under mutex_

  // Host waiters sleep here; a completion notifies only when someone waits for it (seq >= wake_seq_, the lowest seq
  // awaited, reset by each notification).
  std::atomic<int> host_waiters_{0};
  std::atomic<uint64_t> wake_seq_{UINT64_MAX};
  std::mutex wait_mutex_;
  std::condition_variable wait_cv_;

  std::atomic<bool> has_error_{false};
  KernelError error_;       // guarded by mutex_
  uint64_t error_seq_ = 0;  // guarded by mutex_
  uint64_t error_order_ = 0;
};

// The host side of every synchronizing call: waits until s reaches seq (counted in the device's sync_waits), then
// reports s's unreported kernel error if it came at or before seq. snpuErrorNotReady if the deadline passed first;
// snpuErrorInterrupted if interruptible and the interrupt check stopped the wait (interrupt.h).
snpuError_t synchronize(Stream* s, uint64_t seq, Deadline deadline = kNoDeadline, bool interruptible = true);

// Releases the references an event record or a wait holds, once the task has run or was dropped.
void release_task_references(const Task& task);

}  // namespace softnpu::rt
