#include "memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "device.h"
#include "errors.h"
#include "log.h"

namespace softnpu::rt {

namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// MAP_POPULATE: the memory is real when the call returns, as device memory is.
void* map_pages(size_t bytes, int prot) {
  void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

snpuError_t out_of_memory(const Device* device, size_t size, uint64_t used) {
  return fail(snpuErrorMemoryAllocation, "out of memory on device " + std::to_string(device->index) +
                                             ": tried to allocate " + mib(size) + "; capacity " +
                                             mib(device->capacity) + ", in use " + mib(used));
}

}  // namespace

void Memory::release_all() {
  std::unique_lock lock(mutex_);
  for (auto& [base, a] : allocations_) {
    if (a.device) {
      a.device->memory_used.fetch_sub(a.mapped, std::memory_order_relaxed);
      if (stats::DeviceCounters* c = a.device->counters_if_used())
        stats::add_memory(c, -static_cast<int64_t>(a.mapped));
    }
    unmap(a);
  }
  allocations_.clear();
}

snpuError_t Memory::allocate_device(Device* device, size_t size, void** out) {
  if (size == 0) {
    *out = nullptr;
    return snpuSuccess;
  }
  size_t page = page_size();
  if (size > device->capacity) return out_of_memory(device, size, device->memory_used.load());
  size_t mapped = (size + page - 1) / page * page;
  uint64_t used = device->memory_used.load(std::memory_order_relaxed);
  do {
    if (used + mapped > device->capacity) return out_of_memory(device, size, used);
  } while (!device->memory_used.compare_exchange_weak(used, used + mapped, std::memory_order_relaxed));

  std::unique_lock<std::mutex> protect_lock;
  int prot = PROT_READ | PROT_WRITE;
  if (protect_) {
    protect_lock = std::unique_lock(protect_mutex_);
    if (device_code_running_ == 0) prot = PROT_NONE;
  }
  void* p = map_pages(mapped, prot);
  if (!p) {
    int err = errno;
    device->memory_used.fetch_sub(mapped, std::memory_order_relaxed);
    return fail(snpuErrorMemoryAllocation, "out of memory on device " + std::to_string(device->index) +
                                               ": the host could not provide " + mib(size) + " (" +
                                               std::strerror(err) + ")");
  }
  {
    std::unique_lock lock(mutex_);
    allocations_[static_cast<char*>(p)] =
        Allocation{static_cast<char*>(p), size, mapped, snpuMemoryTypeDevice, device};
  }
  stats::add_memory(device->counters(), static_cast<int64_t>(mapped));
  *out = p;
  return snpuSuccess;
}

snpuError_t Memory::allocate_host(size_t size, void** out) {
  if (size == 0) {
    *out = nullptr;
    return snpuSuccess;
  }
  size_t page = page_size();
  if (size > SIZE_MAX - page)
    return fail(snpuErrorMemoryAllocation, "cannot allocate " + mib(size) + " of pinned host memory");
  size_t mapped = (size + page - 1) / page * page;
  void* p = map_pages(mapped, PROT_READ | PROT_WRITE);
  if (!p) {
    return fail(snpuErrorMemoryAllocation,
                "cannot allocate " + mib(size) + " of pinned host memory: " + std::strerror(errno));
  }
  std::unique_lock lock(mutex_);
  allocations_[static_cast<char*>(p)] = Allocation{static_cast<char*>(p), size, mapped, snpuMemoryTypeHost, nullptr};
  *out = p;
  return snpuSuccess;
}

snpuError_t Memory::free(void* ptr, snpuMemoryType type) {
  Allocation a;
  {
    std::unique_lock lock(mutex_);
    auto it = allocations_.find(static_cast<const char*>(ptr));
    if (it == allocations_.end() || it->second.type != type) {
      lock.unlock();
      char text[160];
      Allocation containing;
      bool inside = find(ptr, &containing);
      const char* what = type == snpuMemoryTypeDevice ? "device" : "pinned host";
      if (inside && containing.type == type) {
        std::snprintf(text, sizeof(text), "%p is inside the %s allocation at %p, not its start", ptr, what,
                      static_cast<void*>(containing.base));
      } else if (inside) {
        std::snprintf(text, sizeof(text), "%p is %s memory, not %s memory", ptr,
                      containing.type == snpuMemoryTypeDevice ? "device" : "pinned host", what);
      } else {
        std::snprintf(text, sizeof(text), "%p is not %s memory allocated by the runtime (or was freed already)", ptr,
                      what);
      }
      return fail(snpuErrorInvalidPointer, text);
    }
    a = it->second;
    allocations_.erase(it);
  }
  if (a.device) {
    a.device->memory_used.fetch_sub(a.mapped, std::memory_order_relaxed);
    stats::add_memory(a.device->counters(), -static_cast<int64_t>(a.mapped));
  }
  unmap(a);
  return snpuSuccess;
}

bool Memory::find(const void* ptr, Allocation* out) const {
  const char* p = static_cast<const char*>(ptr);
  std::shared_lock lock(mutex_);
  auto it = allocations_.upper_bound(p);
  if (it == allocations_.begin()) return false;
  --it;
  const Allocation& a = it->second;
  if (p >= a.base + a.size) return false;
  *out = a;
  return true;
}

void Memory::set_device_code_running(int delta) {
  std::lock_guard lock(protect_mutex_);
  int before = device_code_running_;
  device_code_running_ += delta;
  if (before == 0 && device_code_running_ > 0) protect_all(PROT_READ | PROT_WRITE);
  if (before > 0 && device_code_running_ == 0) protect_all(PROT_NONE);
}

void Memory::protect_all(int prot) {
  std::shared_lock lock(mutex_);
  for (auto& [base, a] : allocations_) {
    if (a.type == snpuMemoryTypeDevice && mprotect(a.base, a.mapped, prot) != 0)
      SNPU_LOG(log::kError, "mprotect of device memory at %p failed: %s", static_cast<void*>(a.base),
               std::strerror(errno));
  }
}

void Memory::unmap(const Allocation& a) {
  if (munmap(a.base, a.mapped) != 0)
    SNPU_LOG(log::kError, "munmap of %p failed: %s", static_cast<void*>(a.base), std::strerror(errno));
}

}  // namespace softnpu::rt
