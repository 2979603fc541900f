#include "activity.h"

#include <time.h>

#include <algorithm>
#include <deque>
#include <mutex>

namespace softnpu::rt::activity {

std::atomic<bool> g_enabled{false};

namespace {

thread_local uint64_t t_correlation_id = 0;

// Never destroyed: compute threads may still add records while the process exits.
struct Buffer {
  std::mutex mutex;
  std::deque<snpuActivityRecord> records;
};

Buffer& buffer() {
  static Buffer* const b = new Buffer;
  return *b;
}

}  // namespace

void set_enabled(bool enable) { g_enabled.store(enable, std::memory_order_relaxed); }

void add(const snpuActivityRecord& record) {
  Buffer& b = buffer();
  std::lock_guard lock(b.mutex);
  b.records.push_back(record);
}

size_t drain(snpuActivityRecord* out, size_t capacity) {
  Buffer& b = buffer();
  std::lock_guard lock(b.mutex);
  size_t n = std::min(capacity, b.records.size());
  std::copy_n(b.records.begin(), n, out);
  b.records.erase(b.records.begin(), b.records.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

uint64_t correlation_id() { return t_correlation_id; }

void set_correlation_id(uint64_t id) { t_correlation_id = id; }

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace softnpu::rt::activity
