#include "staging.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace softnpu::rt {

namespace {

// Buffers come in power-of-two size classes from 64 KiB, each preceded by a header naming its class, and are kept
// for reuse up to kMaxCachedBytes (new buffers cost page faults on first touch).
constexpr size_t kMinClassBytes = size_t(1) << 16;
constexpr int kClasses = 48;
constexpr size_t kMaxCachedBytes = size_t(256) << 20;
constexpr size_t kHeaderBytes = 64;  // keeps the payload cache-line aligned

struct Pool {
  std::mutex mutex;
  std::vector<void*> free[kClasses];  // headers of cached buffers
  size_t cached_bytes = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // leaked: copies may still release buffers while the process exits
  return *p;
}

int class_of(size_t size) {
  int c = 0;
  while ((kMinClassBytes << c) < size) ++c;
  return c;
}

}  // namespace

void* staging_acquire(size_t size) {
  const int c = class_of(size);
  const size_t bytes = kMinClassBytes << c;
  void* header = nullptr;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    if (!p.free[c].empty()) {
      header = p.free[c].back();
      p.free[c].pop_back();
      p.cached_bytes -= bytes;
    }
  }
  if (!header) {
    header = std::aligned_alloc(kHeaderBytes, kHeaderBytes + bytes);
    if (!header) throw std::bad_alloc();
    *static_cast<int*>(header) = c;
  }
  return static_cast<char*>(header) + kHeaderBytes;
}

void staging_release(void* buffer) {
  void* header = static_cast<char*>(buffer) - kHeaderBytes;
  const int c = *static_cast<int*>(header);
  const size_t bytes = kMinClassBytes << c;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    if (p.cached_bytes + bytes <= kMaxCachedBytes) {
      p.free[c].push_back(header);
      p.cached_bytes += bytes;
      return;
    }
  }
  std::free(header);
}

}  // namespace softnpu::rt
