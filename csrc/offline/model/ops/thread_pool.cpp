// The pool (thread_pool.h): one job at a time; helpers spin, then sleep, between jobs.
#include "model/ops/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace softnpu::offline {

namespace {

// How long a helper spins after a job before it sleeps: longer than the gap between two matrix products of a model
// run (the small ops between them), short enough that a CPU-bound ATen op after the model's last product gets the
// core back soon.
constexpr auto kSpin = std::chrono::microseconds(200);

// Parts per thread: a part claimed late by a slow helper does not leave the caller waiting long.
constexpr int64_t kPartsPerThread = 4;

// A job's parts are claimed through its own counter, so a helper still holding the previous job claims nothing of it.
struct Job {
  int64_t n, parts;
  const std::function<void(int64_t, int64_t)>* fn;
  std::atomic<int64_t> next{0}, done{0};

  // Claims and runs parts until none is left.
  void work() {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= parts) return;
      (*fn)(n * i / parts, n * (i + 1) / parts);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    static std::once_flag fork_handler;
    std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, [] { current() = nullptr; }); });
    Pool*& pool = current();
    if (!pool) pool = new Pool();  // never destroyed: helpers may spin while the process exits
    return *pool;
  }

  void run(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mutex_, std::try_to_lock);
    if (!busy.owns_lock() || threads < 2 || n < 2) {
      fn(0, n);
      return;
    }
    start_helpers(threads - 1);
    auto job = std::make_shared<Job>();
    job->n = n;
    job->parts = std::min<int64_t>(n, static_cast<int64_t>(threads) * kPartsPerThread);
    job->fn = &fn;
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      job_ = job;
    }
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(job_mutex_);
      wake_.notify_all();
    }
    job->work();
    while (job->done.load(std::memory_order_acquire) < job->parts) _mm_pause();
  }

 private:
  // The process's pool. A forked child has none of its parent's helpers, and its mutexes may be held by a thread
  // that does not exist there: the child starts a pool of its own (the parent's is left, unused).
  static Pool*& current() {
    static Pool* pool = nullptr;
    return pool;
  }

  void start_helpers(int wanted) {
    wanted = std::min<int>(wanted, static_cast<int>(std::thread::hardware_concurrency()) - 1);
    while (helpers_ < wanted) {
      std::thread([this] { helper(); }).detach();
      ++helpers_;
    }
  }

  void helper() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      int polls = 0;
      while (generation_.load(std::memory_order_acquire) == seen) {
        _mm_pause();
        if (++polls % 64 == 0 && std::chrono::steady_clock::now() > until) {
          std::unique_lock<std::mutex> lock(job_mutex_);
          sleeping_.fetch_add(1, std::memory_order_seq_cst);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
          sleeping_.fetch_sub(1, std::memory_order_seq_cst);
        }
      }
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> lock(job_mutex_);
        job = job_;
        seen = generation_.load(std::memory_order_acquire);
      }
      job->work();
    }
  }

  std::mutex run_mutex_;  // one job at a time; another caller meanwhile runs its work itself
  int helpers_ = 0;
  std::mutex job_mutex_;  // job_, and the helpers' sleep
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};  // moves on with each job
  std::condition_variable wake_;
  std::atomic<int> sleeping_{0};
};

}  // namespace

void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Pool::get().run(n, threads, fn);
}

}  // namespace softnpu::offline
