#include "parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace softnpu::rt {

namespace {

constexpr size_t kMinBytesPerThread = size_t(1) << 20;  // below this, a helper costs more than it saves

class CopyHelpers {
 public:
  static CopyHelpers& instance() {
    static CopyHelpers* h = new CopyHelpers();  // leaked: helper threads live as long as the process
    return *h;
  }

  // False if another copy holds the helpers: the caller then copies alone.
  bool run(char* dst, const char* src, size_t size, int helpers) {
    std::unique_lock<std::mutex> busy(busy_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    start(helpers);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dst_ = dst;
      src_ = src;
      size_ = size;
      next_.store(0, std::memory_order_relaxed);
      // One contiguous share per thread (page aligned): large memcpy calls stream with non-temporal stores, which
      // small chunks would lose, and that halves what each thread moves.
      chunk_ = (size / (helpers + 1) + 4095) & ~size_t(4095);
      working_ = helpers;
      wanted_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return working_ == 0; });
    return true;
  }

 private:
  void start(int helpers) {
    while (static_cast<int>(threads_.size()) < helpers) {
      const int index = static_cast<int>(threads_.size());
      threads_.emplace_back([this, index] { loop(index); });
      threads_.back().detach();
    }
  }

  // Takes chunks until none is left.
  void work() {
    for (;;) {
      const size_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
      if (begin >= size_) return;
      std::memcpy(dst_ + begin, src_ + begin, std::min(chunk_, size_ - begin));
    }
  }

  void loop(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return generation_ != seen && index < wanted_; });
      seen = generation_;
      lock.unlock();
      work();
      lock.lock();
      if (--working_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex busy_mutex_;  // one parallel copy at a time
  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> threads_;
  uint64_t generation_ = 0;  // guarded by mutex_
  int wanted_ = 0;           // helpers taking part in the current copy; guarded by mutex_
  int working_ = 0;          // helpers not done with it yet; guarded by mutex_
  char* dst_ = nullptr;      // the current copy: written under mutex_ before helpers are woken
  const char* src_ = nullptr;
  size_t size_ = 0;
  size_t chunk_ = 0;
  std::atomic<size_t> next_{0};
};

}  // namespace

void parallel_memcpy(void* dst, const void* src, size_t size, int threads) {
  const int useful = static_cast<int>(std::min<size_t>(threads, size / kMinBytesPerThread));
  if (useful <= 1 || !CopyHelpers::instance().run(static_cast<char*>(dst), static_cast<const char*>(src), size,
                                                  useful - 1)) {
    std::memcpy(dst, src, size);
  }
}

}  // namespace softnpu::rt
