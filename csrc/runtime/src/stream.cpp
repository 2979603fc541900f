#include "stream.h"

#include "staging.h"

#include <algorithm>
#include <chrono>

#include "device.h"
#include "event.h"
#include "interrupt.h"
#include "log.h"
#include "runtime_state.h"

namespace softnpu::rt {

namespace {

// Host waits spin this long before sleeping: a short kernel usually finishes within it, and waking a sleeper costs
// more than that.
constexpr auto kHostSpin = std::chrono::microseconds(30);

std::atomic<uint64_t> g_error_order{0};

}  // namespace

void TaskQueue::grow() {
  std::unique_ptr<Task[]> bigger(new Task[capacity_ * 2]);
  for (size_t i = 0; i < size_; ++i) bigger[i] = tasks_[(head_ + i) & (capacity_ - 1)];
  tasks_ = std::move(bigger);
  capacity_ *= 2;
  head_ = 0;
}

Stream::Stream(Device* device, int priority, uint64_t id)
    : device(device), priority(priority), level(priority - kGreatestPriority), id(id) {}

Stream::~Stream() {
  while (!queue_.empty()) {
    const Task& t = queue_.front();
    if (t.kind == TaskKind::kKernel && t.kernel.cleanup) t.kernel.cleanup(t.kernel.arg);
    release_task_references(t);
    queue_.pop();
  }
}

std::atomic<int>& active_streams() {
  static std::atomic<int> count{0};
  return count;
}

int active_stream_count() { return active_streams().load(std::memory_order_relaxed); }

uint64_t Stream::enqueue(const Task& task) {
  bool was_idle;
  uint64_t seq;
  {
    std::lock_guard lock(mutex_);
    queue_.push(task);
    seq = enqueued_.load(std::memory_order_relaxed) + 1;
    enqueued_.store(seq, std::memory_order_release);
    was_idle = !active_;
    active_ = true;
  }
  if (was_idle) {
    active_streams().fetch_add(1, std::memory_order_relaxed);
    retain();  // the scheduler's reference, given back by advance's kIdle
    device->make_ready(this);
  }
  return seq;
}

Deadline deadline_after(uint64_t timeout_us) {
  // Beyond a year is no deadline (and the sum cannot overflow).
  if (timeout_us > uint64_t(365) * 24 * 3600 * 1'000'000) return kNoDeadline;
  return std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
}

bool Stream::wait_until(uint64_t seq, Deadline deadline, bool spin, bool* waited) {
  if (waited) *waited = false;
  if (reached(seq)) return true;
  if (waited) *waited = true;
  if (spin && spin_until([&] { return reached(seq); }, kHostSpin)) return true;
  bool done = true;
  host_waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(wait_mutex_);
    // Dekker with the completing thread (all sequentially consistent): either it sees wake_seq_ at or below what it
    // completed and notifies, or we see its completion. Woken for a lower seq than ours, we publish ours again.
    while (completed_.load(std::memory_order_seq_cst) < seq) {
      wake_seq_.store(std::min(wake_seq_.load(std::memory_order_relaxed), seq), std::memory_order_seq_cst);
      if (completed_.load(std::memory_order_seq_cst) >= seq) break;
      if (deadline == kNoDeadline) {
        wait_cv_.wait(lock);
      } else if (wait_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        done = completed_.load(std::memory_order_seq_cst) >= seq;
        break;
      }
    }
  }
  host_waiters_.fetch_sub(1, std::memory_order_relaxed);
  return done;
}

void Stream::notify_host_waiters(uint64_t done) {
  // Only the completion a waiter waits for wakes it: a host waiting for room in a full queue, or for the last of many
  // small kernels, would otherwise wake for every kernel that finishes.
  if (host_waiters_.load(std::memory_order_seq_cst) == 0 || done < wake_seq_.load(std::memory_order_seq_cst)) return;
  {
    std::lock_guard lock(wait_mutex_);
    wake_seq_.store(UINT64_MAX, std::memory_order_relaxed);
  }
  wait_cv_.notify_all();
}

bool Stream::take_error(uint64_t seq, KernelError* out) {
  if (!has_error_.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(mutex_);
  if (!has_error_.load(std::memory_order_relaxed) || error_seq_ > seq) return false;
  *out = std::move(error_);
  has_error_.store(false, std::memory_order_relaxed);
  return true;
}

bool Stream::peek_error(uint64_t seq, uint64_t* order) {
  if (!has_error_.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(mutex_);
  if (!has_error_.load(std::memory_order_relaxed) || error_seq_ > seq) return false;
  *order = error_order_;
  return true;
}

void Stream::record_error(KernelError error, uint64_t seq) {
  bool kept = false;
  {
    std::lock_guard lock(mutex_);
    if (!has_error_.load(std::memory_order_relaxed)) {
      error_ = error;
      error_seq_ = seq;
      error_order_ = g_error_order.fetch_add(1, std::memory_order_relaxed);
      has_error_.store(true, std::memory_order_release);
      kept = true;
    }
  }
  SNPU_LOG(log::kError, "kernel '%s' failed on device %d stream %llu (code %d): %s%s", error.kernel_name.c_str(),
           error.device, static_cast<unsigned long long>(error.stream_id), error.code, error.message.c_str(),
           kept ? "" : " (not reported: an earlier failure on the stream is still unreported)");
}

Stream::Step Stream::advance(bool finished, Task* next, std::vector<Stream*>* woken) {
  Step step = Step::kRun;
  uint64_t done = 0;
  {
    std::lock_guard lock(mutex_);
    if (finished) {
      queue_.pop();
      done = completed_.load(std::memory_order_relaxed) + 1;
      completed_.store(done, std::memory_order_seq_cst);
      if (!parked_.empty()) {
        size_t kept = 0;
        for (auto& [waiter, seq] : parked_) {
          if (seq <= done) {
            woken->push_back(waiter);
          } else {
            parked_[kept++] = {waiter, seq};
          }
        }
        parked_.resize(kept);
      }
    }
    if (queue_.empty()) {
      active_ = false;
      active_streams().fetch_sub(1, std::memory_order_relaxed);
      step = Step::kIdle;
    } else {
      *next = queue_.front();
    }
  }
  if (finished) notify_host_waiters(done);
  return step;
}

bool Stream::park(Stream* waiter, uint64_t seq) {
  std::lock_guard lock(mutex_);
  if (completed_.load(std::memory_order_relaxed) >= seq) return false;
  parked_.emplace_back(waiter, seq);
  return true;
}

snpuError_t synchronize(Stream* s, uint64_t seq, Deadline deadline, bool interruptible) {
  bool waited = false;
  const WaitResult result = interruptible ? wait_interruptibly(s, seq, deadline, true, &waited)
                                          : (s->wait_until(seq, deadline, true, &waited) ? WaitResult::kReached
                                                                                         : WaitResult::kDeadline);
  if (waited) s->device->counters()->sync_waits.fetch_add(1, std::memory_order_relaxed);
  if (result == WaitResult::kInterrupted) return interrupted("synchronizing with the stream", "the work stays queued");
  if (result == WaitResult::kDeadline) return snpuErrorNotReady;
  KernelError error;
  if (s->take_error(seq, &error))
    return report_kernel_error(std::move(error), s->device->runtime->config.launch_blocking);
  return snpuSuccess;
}

void release_task_references(const Task& task) {
  if (task.kind == TaskKind::kRecord) task.record.event->release();
  if (task.kind == TaskKind::kWait) task.wait.stream->release();
  if (task.kind == TaskKind::kCopy && task.copy.staging) staging_release(task.copy.staging);
}

}  // namespace softnpu::rt
