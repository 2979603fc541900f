#include "device.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "activity.h"
#include "event.h"
#include "fault.h"
#include "interrupt.h"
#include "kernel.h"
#include "parallel_copy.h"
#include "log.h"
#include "memory.h"
#include "runtime_state.h"

namespace softnpu::rt {

namespace {

using Clock = std::chrono::steady_clock;

// An idle compute thread spins this long before sleeping, so back-to-back launches do not pay a wake-up each.
constexpr auto kIdleSpin = std::chrono::microseconds(30);
// A stream yields its compute thread to a waiting stream of the same priority after running this long.
constexpr auto kTimeSlice = std::chrono::milliseconds(2);

}  // namespace

Device::Device(Runtime* runtime, int index, int physical, int cores, uint64_t capacity)
    : runtime(runtime),
      index(index),
      physical(physical),
      cores(cores),
      capacity(capacity),
      default_stream_(new Stream(this, kLeastPriority, 0)) {
  streams_.push_back(default_stream_);
}

Device::~Device() {
  // Joins compute threads started after Runtime's stop(): work enqueued during the process's exit (a tensor freed by
  // another thread, e.g. autograd's device thread) on a device that had never run anything starts them late, and a
  // joinable std::thread destroyed here would abort the process ("terminate called without an active exception").
  stop();
  default_stream_->release();
}

stats::DeviceCounters* Device::first_use() {
  stats::DeviceCounters* c = stats::counters(physical);
  counters_.store(c, std::memory_order_release);
  return c;
}

Stream* Device::create_stream(int priority, uint64_t id) {
  Stream* s = new Stream(this, priority, id);
  std::lock_guard lock(streams_mutex_);
  streams_.push_back(s);
  return s;
}

void Device::forget_stream(Stream* s) {
  std::lock_guard lock(streams_mutex_);
  std::erase(streams_, s);
}

snpuError_t Device::synchronize(bool report, Deadline deadline) {
  std::vector<std::pair<Stream*, uint64_t>> targets;
  {
    std::lock_guard lock(streams_mutex_);
    targets.reserve(streams_.size());
    for (Stream* s : streams_) {
      s->retain();
      targets.emplace_back(s, s->enqueued());
    }
  }
  bool waited = false;
  bool reached = true;
  for (auto& [s, seq] : targets) {
    if (!reached) break;
    bool w = false;
    // A caller's synchronize (report) may be interrupted; the waits of frees and shutdown may not.
    if (!report) {
      reached = s->wait_until(seq, deadline, true, &w);
    } else {
      const WaitResult r = wait_interruptibly(s, seq, deadline, true, &w);
      if (r == WaitResult::kInterrupted) {
        for (auto& target : targets) target.first->release();
        return interrupted("snpuDeviceSynchronize", "the work stays queued");
      }
      reached = r == WaitResult::kReached;
    }
    waited |= w;
  }
  if (waited) counters()->sync_waits.fetch_add(1, std::memory_order_relaxed);
  if (!reached) {
    for (auto& [s, seq] : targets) s->release();
    return snpuErrorNotReady;
  }

  Stream* culprit = nullptr;
  uint64_t culprit_seq = 0;
  uint64_t culprit_order = 0;
  if (report) {
    for (auto& [s, seq] : targets) {
      uint64_t order;
      if (s->peek_error(seq, &order) && (!culprit || order < culprit_order)) {
        culprit = s;
        culprit_seq = seq;
        culprit_order = order;
      }
    }
  }
  KernelError error;
  bool failed = culprit && culprit->take_error(culprit_seq, &error);
  for (auto& [s, seq] : targets) s->release();
  return failed ? report_kernel_error(std::move(error), runtime->config.launch_blocking) : snpuSuccess;
}

void Device::drop_errors() {
  std::lock_guard lock(streams_mutex_);
  KernelError dropped;
  for (Stream* s : streams_) s->take_error(UINT64_MAX, &dropped);
}

bool Device::idle() {
  std::lock_guard lock(streams_mutex_);
  return std::all_of(streams_.begin(), streams_.end(), [](Stream* s) { return s->reached(s->enqueued()); });
}

void Device::make_ready(Stream* s) {
  if (!threads_started_.load(std::memory_order_acquire)) start_threads();
  std::lock_guard lock(mutex_);
  int level = s->level;
  if (ready_tail_[level]) {
    ready_tail_[level]->next_ready = s;
  } else {
    ready_head_[level] = s;
  }
  ready_tail_[level] = s;
  ready_mask_.fetch_or(1u << level, std::memory_order_relaxed);
  wake_one();
}

// Called with mutex_ held. A spinning thread finds the work itself (it rechecks under mutex_ before sleeping), so
// the futex wake is spent only when every idle thread sleeps.
void Device::wake_one() {
  if (sleepers_ > 0 && !spinning_.load(std::memory_order_relaxed)) cv_.notify_one();
}

void Device::start_threads() {
  std::lock_guard lock(threads_mutex_);
  if (threads_started_.load(std::memory_order_relaxed)) return;
  for (int i = 0; i < cores; ++i) threads_.emplace_back(&Device::compute_loop, this, i);
  threads_started_.store(true, std::memory_order_release);
}

void Device::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true, std::memory_order_relaxed);
    cv_.notify_all();
  }
  std::lock_guard lock(threads_mutex_);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void Device::compute_loop(int thread_index) {
  std::string name = "npu" + std::to_string(index) + "-core" + std::to_string(thread_index);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  set_current_device(*runtime, index);  // a kernel launching on the NULL stream means its own device
  std::vector<Stream*> woken;
  woken.reserve(16);
  while (Stream* s = take_ready()) run(s, &woken);
}

Stream* Device::take_ready() {
  // One idle thread per device spins; more would only take cores from the host thread and the running kernels.
  bool spinning = !spinning_.exchange(true, std::memory_order_relaxed);
  if (spinning) {
    spin_until(
        [this] {
          return ready_mask_.load(std::memory_order_relaxed) != 0 || stopping_.load(std::memory_order_relaxed);
        },
        kIdleSpin);
  }
  std::unique_lock lock(mutex_);
  if (spinning) spinning_.store(false, std::memory_order_relaxed);
  for (;;) {
    uint32_t mask = ready_mask_.load(std::memory_order_relaxed);
    if (mask != 0) {
      int level = __builtin_ctz(mask);
      Stream* s = ready_head_[level];
      ready_head_[level] = s->next_ready;
      s->next_ready = nullptr;
      if (!ready_head_[level]) {
        ready_tail_[level] = nullptr;
        ready_mask_.fetch_and(~(1u << level), std::memory_order_relaxed);
      }
      if (ready_mask_.load(std::memory_order_relaxed) != 0) wake_one();  // more work than this thread takes
      return s;
    }
    if (stopping_.load(std::memory_order_relaxed)) return nullptr;
    ++sleepers_;
    cv_.wait(lock);
    --sleepers_;
  }
}

void Device::run(Stream* s, std::vector<Stream*>* woken) {
  Clock::time_point slice_end = Clock::now() + kTimeSlice;
  bool finished = false;
  Task task{};
  for (;;) {
    Task done = task;
    Stream::Step step = s->advance(finished, &task, woken);
    if (finished) release_task_references(done);
    for (Stream* w : *woken) w->device->make_ready(w);
    woken->clear();
    if (step == Stream::Step::kIdle) {
      s->release();
      return;
    }
    if (finished) {
      // Yield to a more urgent stream at once, and to an equally urgent one at the end of the time slice.
      uint32_t mask = ready_mask_.load(std::memory_order_relaxed);
      uint32_t level_bit = 1u << s->level;
      if ((mask & (level_bit - 1)) != 0 || ((mask & level_bit) != 0 && Clock::now() >= slice_end)) {
        make_ready(s);
        return;
      }
    }
    if (task.kind == TaskKind::kWait && !task.wait.stream->reached(task.wait.seq) &&
        task.wait.stream->park(s, task.wait.seq)) {
      return;  // parked: the waited stream readies it again, so the thread is free for other streams
    }
    if (task.kind != TaskKind::kWait) execute(s, task);
    finished = true;
  }
}

void Device::execute(Stream* s, const Task& task) {
  if (task.kind == TaskKind::kRecord) {
    task.record.event->on_marker(task.record.generation);
    return;
  }
  Memory& memory = runtime->memory;
  // Work queued before a profiler started belongs to no trace, even if it runs while one records.
  const bool timed = task.traced;
  int64_t wall_start = timed ? activity::now_ns() : 0;
  Clock::time_point start = Clock::now();
  KernelError error;
  bool failed = intercept(this, s, task, &error);
  // After intercept: a task an injected hang holds is not device code, which snpuIpcGetMemHandle would wait for.
  memory.enter_device_code();
  if (!failed) {
    switch (task.kind) {
      case TaskKind::kKernel:
        failed = run_kernel(this, s, task, &error);
        break;
      case TaskKind::kCopy:
        parallel_memcpy(task.copy.dst, task.copy.src, task.copy.size, thread_budget(this, task.copy.size));
        break;
      case TaskKind::kMemset:
        std::memset(task.memset.dst, task.memset.value, task.memset.size);
        break;
      default:
        break;
    }
  }
  Clock::time_point end = Clock::now();
  int64_t wall_end = timed ? activity::now_ns() : 0;
  memory.leave_device_code();
  if (task.kind == TaskKind::kKernel) run_cleanup(task);

  stats::DeviceCounters* c = counters();
  c->kernels_completed.fetch_add(1, std::memory_order_relaxed);
  c->busy_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count(),
                       std::memory_order_relaxed);
  if (timed) {
    snpuActivityRecord r{task.name, index, s->id, task.correlation_id, wall_start, wall_end, failed ? 1 : 0, 0, -1, 0};
    if (task.kind == TaskKind::kCopy) {
      r.bytes = task.copy.size;
      r.copy_kind = task.copy.kind;
      r.pageable = task.copy.pageable ? 1 : 0;
    } else if (task.kind == TaskKind::kMemset) {
      r.bytes = task.memset.size;
    }
    activity::add(r);
  }
  if (failed) s->record_error(std::move(error), s->head_seq());
}

}  // namespace softnpu::rt
