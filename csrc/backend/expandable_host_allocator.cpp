#include "backend/expandable_host_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "backend/device.h"
#include "backend/env.h"
#include "backend/host_allocator.h"
#include "backend/npu_error.h"

namespace softnpu::expandable_host {

namespace {

// torch_npu's granule of host memory (the device allocator's large segment, kLargeBuffer).
constexpr size_t kGranule = size_t{20} << 20;
constexpr size_t kMinBlockSize = 512;

size_t round_size(size_t size) { return (size + 32 + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize; }

struct Block {
  size_t size = 0;
  bool in_use = false;  // handed out, or freed while uses are queued
  bool freed = false;   // the owner dropped it: it returns to the pool once its uses complete
  std::vector<PinnedUseEvent> uses;
};

void free_expandable(void* ptr);

class Allocator {
 public:
  at::DataPtr allocate(size_t requested) {
    if (requested == 0) return {nullptr, nullptr, &free_expandable, at::DeviceType::CPU};
    const size_t size = round_size(requested);
    std::lock_guard<std::mutex> g(mutex_);
    reserve();
    process_uses();
    auto it = first_fit(size);
    TORCH_CHECK_WITH(OutOfMemoryError, it != blocks_.end(), "NPU out of memory. Tried to allocate ", requested,
                     " bytes of pinned host memory: the expandable host range (", reserved_, " bytes) has no free ",
                     "block that large");
    if (it->second.size > size) blocks_[it->first + size].size = it->second.size - size;
    it->second.size = size;
    it->second.in_use = true;
    map_granules(it->first, size);
    stats_.active_bytes.increase(size);
    stats_.active_requests.increase(1);
    return {it->first, it->first, &free_expandable, at::DeviceType::CPU};
  }

  void free(void* ptr) {
    std::lock_guard<std::mutex> g(mutex_);
    auto it = blocks_.find(static_cast<char*>(ptr));
    if (it == blocks_.end()) return;
    it->second.freed = true;
    if (it->second.uses.empty()) release(it);
  }

  bool owns(const void* ptr) const {  // under mutex_
    const char* p = static_cast<const char*>(ptr);
    return base_ && p >= base_ && p < base_ + reserved_;
  }

  bool record_use(const void* ptr, const NPUStream& stream) {
    std::lock_guard<std::mutex> g(mutex_);
    if (!owns(ptr)) return false;
    auto it = blocks_.upper_bound(const_cast<char*>(static_cast<const char*>(ptr)));
    --it;
    if (!it->second.in_use || it->second.freed) return false;
    it->second.uses.emplace_back(stream);
    return true;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> g(mutex_);
    process_uses();
    for (const auto& [ptr, b] : blocks_) {
      if (b.in_use) continue;
      // The granules wholly inside the free block.
      const size_t first = (static_cast<size_t>(ptr - base_) + kGranule - 1) / kGranule;
      const size_t end = (static_cast<size_t>(ptr - base_) + b.size) / kGranule;
      for (size_t i = first; i < end; ++i)
        if (mapped_[i]) unmap_granule(i);
    }
  }

  at::HostStats stats() {
    std::lock_guard<std::mutex> g(mutex_);
    return stats_;
  }

  void reset_accumulated_stats() {
    std::lock_guard<std::mutex> g(mutex_);
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
    stats_.host_alloc_time.reset_accumulated();
    stats_.host_free_time.reset_accumulated();
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }

  void reset_peak_stats() {
    std::lock_guard<std::mutex> g(mutex_);
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
  }

 private:
  using BlockIt = std::map<char*, Block>::iterator;

  // Address space for 9/8 of the host's memory (torch_npu reserves 9/8 of the device's), no pages yet.
  void reserve() {
    if (base_) return;
    const size_t host = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t size = (host + host / 8 + kGranule - 1) / kGranule * kGranule;
    void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(p != MAP_FAILED, "pin_memory_expandable_segments: reserving ", size,
                " bytes of address space for pinned host memory failed");
    NPU_CHECK(snpuHostRegister(p, size, snpuHostRegisterDefault));
    base_ = static_cast<char*>(p);
    reserved_ = size;
    mapped_.assign(size / kGranule, false);
    blocks_[base_].size = size;
  }

  // Lowest address first, so freed memory low in the range (already mapped) is reused before new granules are.
  BlockIt first_fit(size_t size) {
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (!it->second.in_use && it->second.size >= size) return it;
    return blocks_.end();
  }

  void map_granules(char* ptr, size_t size) {
    const size_t first = static_cast<size_t>(ptr - base_) / kGranule;
    const size_t last = (static_cast<size_t>(ptr - base_) + size - 1) / kGranule;
    for (size_t i = first; i <= last; ++i) {
      if (mapped_[i]) continue;
      const auto start = std::chrono::steady_clock::now();
      TORCH_CHECK_WITH(OutOfMemoryError, mprotect(base_ + i * kGranule, kGranule, PROT_READ | PROT_WRITE) == 0,
                       "NPU out of memory: mapping ", kGranule, " bytes of pinned host memory failed");
      record_duration(stats_.host_alloc_time, start);
      mapped_[i] = true;
      ++stats_.num_host_alloc;
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(kGranule);
    }
  }

  // Gives the pages back to the system; the address space stays reserved.
  void unmap_granule(size_t i) {
    const auto start = std::chrono::steady_clock::now();
    char* p = base_ + i * kGranule;
    madvise(p, kGranule, MADV_DONTNEED);
    mprotect(p, kGranule, PROT_NONE);
    record_duration(stats_.host_free_time, start);
    mapped_[i] = false;
    ++stats_.num_host_free;
    stats_.allocations.decrease(1);
    stats_.allocated_bytes.decrease(kGranule);
  }

  static void record_duration(c10::CachingAllocator::DurationStat& stat, std::chrono::steady_clock::time_point start) {
    stat.increase(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
  }

  // Freed blocks whose queued uses have all completed return to the pool.
  void process_uses() {
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      Block& b = it->second;
      if (!b.freed) {
        ++it;
        continue;
      }
      while (!b.uses.empty() && b.uses.back().query()) b.uses.pop_back();
      if (!b.uses.empty()) {
        ++it;
        continue;
      }
      it = release(it);
    }
  }

  // Returns the block to the pool, merged with its free neighbours; the iterator after the merged block.
  BlockIt release(BlockIt it) {
    stats_.active_bytes.decrease(it->second.size);
    stats_.active_requests.decrease(1);
    it->second = Block{it->second.size};
    auto next = std::next(it);
    if (next != blocks_.end() && !next->second.in_use) {
      it->second.size += next->second.size;
      next = blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (!prev->second.in_use) {
        prev->second.size += it->second.size;
        blocks_.erase(it);
      }
    }
    return next;
  }

  std::mutex mutex_;
  char* base_ = nullptr;
  size_t reserved_ = 0;
  std::vector<bool> mapped_;  // per granule
  std::map<char*, Block> blocks_;  // the whole range, in address order
  at::HostStats stats_;
};

Allocator& allocator() {
  static Allocator* const a = new Allocator();  // never destroyed: blocks may be freed during interpreter exit
  return *a;
}

void free_expandable(void* ptr) {
  if (ptr && !in_bad_fork()) allocator().free(ptr);
}

}  // namespace

bool enabled() { return allocator_config().pin_memory_expandable_segments; }

at::DataPtr allocate(size_t size) {
  check_not_in_bad_fork();
  return allocator().allocate(size);
}

bool record_use(const void* ptr, const NPUStream& stream) { return allocator().record_use(ptr, stream); }

void empty_cache() { allocator().empty_cache(); }

at::HostStats stats() { return allocator().stats(); }

void reset_accumulated_stats() { allocator().reset_accumulated_stats(); }

void reset_peak_stats() { allocator().reset_peak_stats(); }

}  // namespace softnpu::expandable_host
