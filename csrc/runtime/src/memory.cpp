#include "memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>

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

// A memfd named after serial, of bytes, so snpuIpcOpenMemHandle in another process maps the same pages; -1 where the
// host has none (or the process is out of descriptors).
int shared_memory_file(uint64_t serial, size_t bytes) {
  const std::string name = "softnpu-" + std::to_string(serial);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
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
    if (a.device && !a.imported) {
      a.device->memory_used.fetch_sub(a.mapped, std::memory_order_relaxed);
      if (stats::DeviceCounters* c = a.device->counters_if_used())
        stats::add_memory(c, -static_cast<int64_t>(a.mapped));
    }
    if (!a.registered) unmap(a);
    delete a.pages;
  }
  allocations_.clear();
}

void Memory::account(Device* device, int64_t bytes) {
  if (bytes < 0) device->memory_used.fetch_sub(static_cast<uint64_t>(-bytes), std::memory_order_relaxed);
  stats::add_memory(device->counters(), bytes);
}

snpuError_t Memory::reserve(Device* device, size_t size, void** out) {
  if (size == 0 || size % kMapGranularity != 0)
    return fail(snpuErrorInvalidValue, "snpuMemAddressReserve: size " + std::to_string(size) +
                                           " is not a positive multiple of the granularity (" +
                                           mib(kMapGranularity) + ")");
  // PROT_NONE and MAP_NORESERVE: addresses only, no memory and no swap reservation behind them.
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return fail(snpuErrorMemoryAllocation, "snpuMemAddressReserve: the host has no free address range of " +
                                               mib(size) + " (" + std::strerror(errno) + ")");
  // Its pages are private until it is first exported (share): then they, and those mapped later, come from a memfd as
  // large as the reservation (sparse: only mapped granules hold memory).
  std::unique_lock lock(mutex_);
  allocations_[static_cast<char*>(p)] = Allocation{static_cast<char*>(p), size, 0, snpuMemoryTypeDevice, device,
                                                   new std::vector<bool>(size / kMapGranularity, false)};
  *out = p;
  return snpuSuccess;
}

snpuError_t Memory::reservation_range(void* ptr, size_t size, bool mapped, const char* call, Allocation** out,
                                      size_t* first) {
  const char* p = static_cast<const char*>(ptr);
  auto it = allocations_.upper_bound(p);
  if (it == allocations_.begin() || !(--it)->second.pages || p >= it->second.base + it->second.size) {
    char text[160];
    std::snprintf(text, sizeof(text), "%s: %p is not in a reservation of snpuMemAddressReserve", call, ptr);
    return fail(snpuErrorInvalidValue, text);
  }
  Allocation& a = it->second;
  const size_t offset = static_cast<size_t>(p - a.base);
  if (size == 0 || offset % kMapGranularity || size % kMapGranularity || size > a.size - offset)
    return fail(snpuErrorInvalidValue, std::string(call) + ": the range of " + std::to_string(size) + " bytes at offset " +
                                           std::to_string(offset) + " is not aligned to the granularity (" +
                                           mib(kMapGranularity) + ") or leaves the reservation of " + mib(a.size));
  *first = offset / kMapGranularity;
  for (size_t i = *first; i < *first + size / kMapGranularity; ++i) {
    if ((*a.pages)[i] != mapped)
      return fail(snpuErrorInvalidValue, std::string(call) + ": the page at offset " +
                                             std::to_string(i * kMapGranularity) + " is " +
                                             (mapped ? "not mapped" : "already mapped"));
  }
  *out = &a;
  return snpuSuccess;
}

snpuError_t Memory::map(void* ptr, size_t size) {
  // Not while share() moves the reservation into its memfd: the pages mapped come from where it is at the end.
  std::lock_guard share_lock(share_mutex_);
  // The protection is decided and applied under protect_mutex_, so protect_all never misses these pages.
  std::unique_lock<std::mutex> protect_lock;
  int prot = PROT_READ | PROT_WRITE;
  if (protect_) {
    protect_lock = std::unique_lock(protect_mutex_);
    if (device_code_running_ == 0) prot = PROT_NONE;
  }
  Device* device;
  size_t first;
  int fd;
  {
    std::unique_lock lock(mutex_);
    Allocation* a;
    if (snpuError_t e = reservation_range(ptr, size, false, "snpuMemMap", &a, &first)) return e;
    device = a->device;
    fd = a->fd;
    uint64_t used = device->memory_used.load(std::memory_order_relaxed);
    do {
      if (used + size > device->capacity) return out_of_memory(device, size, used);
    } while (!device->memory_used.compare_exchange_weak(used, used + size, std::memory_order_relaxed));
    // Marked before the mapping exists, so a concurrent map of the same pages fails; undone below on failure.
    for (size_t i = first; i < first + size / kMapGranularity; ++i) (*a->pages)[i] = true;
    a->mapped += size;
  }
  // MAP_FIXED replaces the reservation's PROT_NONE pages by committed ones (MAP_POPULATE: real at return), the
  // memfd's at the same offset.
  const int flags = fd >= 0 ? MAP_SHARED | MAP_FIXED | MAP_POPULATE : MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_POPULATE;
  if (mmap(ptr, size, prot, flags, fd, fd >= 0 ? static_cast<off_t>(first * kMapGranularity) : 0) == MAP_FAILED) {
    const int err = errno;
    std::unique_lock lock(mutex_);
    Allocation& a = allocations_.at(static_cast<const char*>(ptr) -
                                    first * kMapGranularity);
    for (size_t i = first; i < first + size / kMapGranularity; ++i) (*a.pages)[i] = false;
    a.mapped -= size;
    device->memory_used.fetch_sub(size, std::memory_order_relaxed);
    return fail(snpuErrorMemoryAllocation, "out of memory on device " + std::to_string(device->index) +
                                               ": the host could not provide " + mib(size) + " (" +
                                               std::strerror(err) + ")");
  }
  stats::add_memory(device->counters(), static_cast<int64_t>(size));
  return snpuSuccess;
}

snpuError_t Memory::unmap_range(void* ptr, size_t size) {
  std::unique_lock<std::mutex> protect_lock;
  if (protect_) protect_lock = std::unique_lock(protect_mutex_);
  std::unique_lock lock(mutex_);
  Allocation* a;
  size_t first;
  if (snpuError_t e = reservation_range(ptr, size, true, "snpuMemUnmap", &a, &first)) return e;
  // A fresh PROT_NONE mapping over the range gives its memory back to the host; the addresses stay reserved. The
  // memfd's pages go too (a hole punched; a process that imported the reservation sees them go as well).
  if (mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    return fail(snpuErrorInternal, std::string("snpuMemUnmap: mmap failed: ") + std::strerror(errno));
  if (a->fd >= 0 && fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              static_cast<off_t>(first * kMapGranularity), static_cast<off_t>(size)) != 0)
    SNPU_LOG(log::kError, "snpuMemUnmap: releasing the pages at %p failed: %s", ptr, std::strerror(errno));
  for (size_t i = first; i < first + size / kMapGranularity; ++i) (*a->pages)[i] = false;
  a->mapped -= size;
  account(a->device, -static_cast<int64_t>(size));
  return snpuSuccess;
}

snpuError_t Memory::release(void* ptr) {
  Allocation a;
  {
    std::unique_lock lock(mutex_);
    auto it = allocations_.find(static_cast<const char*>(ptr));
    if (it == allocations_.end() || !it->second.pages) {
      char text[160];
      std::snprintf(text, sizeof(text), "snpuMemAddressFree: %p is not the start of a reservation", ptr);
      return fail(snpuErrorInvalidValue, text);
    }
    a = it->second;
    allocations_.erase(it);
  }
  account(a.device, -static_cast<int64_t>(a.mapped));
  unmap(a);
  delete a.pages;
  return snpuSuccess;
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
  void* p = map_pages(mapped, prot);  // private until exported (share)
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

snpuError_t Memory::allocate_host(size_t size, void** out, Device* mapped_for) {
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
  Allocation a{static_cast<char*>(p), size, mapped, snpuMemoryTypeHost, nullptr};
  a.mapped_for = mapped_for;
  allocations_[a.base] = a;
  *out = p;
  return snpuSuccess;
}

snpuError_t Memory::register_host(void* ptr, size_t size, Device* mapped_for) {
  const char* begin = static_cast<const char*>(ptr);
  std::unique_lock lock(mutex_);
  // Any allocation or registration overlapping [begin, begin + size): the last one starting before its end.
  auto it = allocations_.lower_bound(begin + size);
  if (it != allocations_.begin()) {
    const Allocation& before = std::prev(it)->second;
    if (before.base + before.size > begin) {
      char text[200];
      std::snprintf(text, sizeof(text), "snpuHostRegister: [%p, +%zu) overlaps %s at %p (%zu bytes)", ptr, size,
                    before.registered ? "a registered range"
                    : before.type == snpuMemoryTypeDevice ? "device memory" : "pinned host memory",
                    static_cast<void*>(before.base), before.size);
      return fail(snpuErrorInvalidValue, text);
    }
  }
  Allocation a{static_cast<char*>(ptr), size, size, snpuMemoryTypeHost, nullptr};
  a.mapped_for = mapped_for;
  a.registered = true;
  allocations_[a.base] = a;
  return snpuSuccess;
}

snpuError_t Memory::unregister_host(void* ptr) {
  std::unique_lock lock(mutex_);
  auto it = allocations_.find(static_cast<const char*>(ptr));
  if (it == allocations_.end() || !it->second.registered) {
    char text[160];
    std::snprintf(text, sizeof(text), "snpuHostUnregister: %p is not the start of a range snpuHostRegister registered",
                  ptr);
    return fail(snpuErrorInvalidValue, text);
  }
  allocations_.erase(it);
  return snpuSuccess;
}

snpuError_t Memory::free(void* ptr, snpuMemoryType type) {
  Allocation a;
  {
    std::unique_lock lock(mutex_);
    auto it = allocations_.find(static_cast<const char*>(ptr));
    if (it != allocations_.end() && it->second.pages) {
      char text[160];
      std::snprintf(text, sizeof(text), "%p is a reservation of snpuMemAddressReserve: release it with "
                    "snpuMemAddressFree", ptr);
      return fail(snpuErrorInvalidPointer, text);
    }
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
    if (it->second.imported) {
      char text[160];
      std::snprintf(text, sizeof(text), "%p was opened by snpuIpcOpenMemHandle: unmap it with snpuIpcCloseMemHandle",
                    ptr);
      return fail(snpuErrorInvalidPointer, text);
    }
    if (it->second.registered) {
      char text[160];
      std::snprintf(text, sizeof(text), "%p is the program's memory registered by snpuHostRegister: unregister it "
                    "with snpuHostUnregister", ptr);
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

snpuError_t Memory::share(const void* ptr, Allocation* out) {
  auto done = [](const Allocation& a) { return a.fd >= 0 || a.type != snpuMemoryTypeDevice || a.imported; };
  if (find(ptr, out) && done(*out)) return snpuSuccess;
  std::lock_guard share_lock(share_mutex_);
  if (!find(ptr, out))
    return fail(snpuErrorInvalidPointer, "snpuIpcGetMemHandle: the pointer is not device memory of snpuMalloc");
  if (done(*out)) return snpuSuccess;  // shared meanwhile
  // A reservation's memfd is as large as it (sparse: its mapped granules move in), an allocation's as its pages.
  const size_t file_size = out->pages ? out->size : out->mapped;
  const uint64_t serial = next_serial_.fetch_add(1, std::memory_order_relaxed);
  const int fd = shared_memory_file(serial, file_size);
  if (fd < 0)
    return fail(snpuErrorNotPermitted, std::string("snpuIpcGetMemHandle: the host gives no shared memory file "
                                                   "(memfd_create: ") + std::strerror(errno) + ")");
  // No device code runs from here until the memfd's pages replace the private ones at the same addresses: a kernel
  // writing the memory meanwhile would write pages being replaced.
  struct Hold {
    Memory* m;
    explicit Hold(Memory* memory) : m(memory) {
      m->held_.store(true, std::memory_order_seq_cst);
      while (m->device_code_.load(std::memory_order_seq_cst) != 0)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    ~Hold() {
      {
        std::lock_guard lock(m->held_mutex_);
        m->held_.store(false, std::memory_order_seq_cst);
      }
      m->held_cv_.notify_all();
    }
  } hold(this);
  std::unique_lock<std::mutex> protect_lock;
  if (protect_) protect_lock = std::unique_lock(protect_mutex_);
  std::unique_lock lock(mutex_);
  auto it = allocations_.find(out->base);
  if (it == allocations_.end()) {  // freed by another thread meanwhile
    close(fd);
    return fail(snpuErrorInvalidPointer, "snpuIpcGetMemHandle: the allocation was freed while it was exported");
  }
  Allocation& a = it->second;
  // The runs of memory to move: an allocation whole, a reservation's runs of mapped granules.
  std::vector<std::pair<size_t, size_t>> runs;  // offset, bytes
  if (!a.pages) {
    runs.emplace_back(0, a.mapped);
  } else {
    const std::vector<bool>& pages = *a.pages;
    for (size_t i = 0; i < pages.size();) {
      size_t j = i;
      while (j < pages.size() && pages[j]) ++j;
      if (j > i) runs.emplace_back(i * kMapGranularity, (j - i) * kMapGranularity);
      i = j + 1;
    }
  }
  for (const auto& [offset, bytes] : runs) {
    char* at = a.base + offset;
    void* copy = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
    bool moved = copy != MAP_FAILED;
    if (moved) {
      if (protect_) mprotect(at, bytes, PROT_READ);  // no device code runs: it is PROT_NONE
      std::memcpy(copy, at, bytes);
      // mremap puts the memfd's mapping over the private one in one step; on failure the private one stays.
      moved = mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at) != MAP_FAILED;
      if (!moved) munmap(copy, bytes);
      if (protect_) mprotect(at, bytes, PROT_NONE);
    }
    if (!moved) {
      // Runs moved before stay in the memfd, which is closed: the memory stays shared but unexportable (never here
      // but where the host is out of memory).
      const int err = errno;
      close(fd);
      return fail(snpuErrorMemoryAllocation, "snpuIpcGetMemHandle: the host could not move " + mib(bytes) +
                                                 " into shared memory (" + std::strerror(err) + ")");
    }
  }
  a.fd = fd;
  a.serial = serial;
  *out = a;
  return snpuSuccess;
}

void Memory::wait_while_held() {
  // Steps out of device code (so share() can go on), waits for the hold to end, and enters again.
  do {
    device_code_.fetch_sub(1, std::memory_order_seq_cst);
    {
      std::unique_lock lock(held_mutex_);
      held_cv_.wait(lock, [this] { return !held_.load(std::memory_order_seq_cst); });
    }
    device_code_.fetch_add(1, std::memory_order_seq_cst);
  } while (held_.load(std::memory_order_seq_cst));
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
  auto protect = [prot](char* p, size_t bytes) {
    if (mprotect(p, bytes, prot) != 0)
      SNPU_LOG(log::kError, "mprotect of device memory at %p failed: %s", static_cast<void*>(p), std::strerror(errno));
  };
  for (auto& [base, a] : allocations_) {
    if (a.type != snpuMemoryTypeDevice) continue;
    if (!a.pages) {
      protect(a.base, a.mapped);
      continue;
    }
    // A reservation: only its mapped runs (making unmapped pages accessible would commit them on first touch).
    const std::vector<bool>& pages = *a.pages;
    for (size_t i = 0; i < pages.size();) {
      if (!pages[i]) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < pages.size() && pages[j]) ++j;
      protect(a.base + i * kMapGranularity, (j - i) * kMapGranularity);
      i = j;
    }
  }
}

void Memory::unmap(const Allocation& a) {
  if (munmap(a.base, a.pages ? a.size : a.mapped) != 0)
    SNPU_LOG(log::kError, "munmap of %p failed: %s", static_cast<void*>(a.base), std::strerror(errno));
  if (a.fd >= 0) close(a.fd);
}

snpuError_t Memory::map_imported(Device* device, int fd, size_t size, void** out) {
  std::unique_lock<std::mutex> protect_lock;
  int prot = PROT_READ | PROT_WRITE;
  if (protect_) {
    protect_lock = std::unique_lock(protect_mutex_);
    if (device_code_running_ == 0) prot = PROT_NONE;
  }
  void* p = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return fail(snpuErrorMemoryAllocation, "snpuIpcOpenMemHandle: cannot map " + mib(size) + " (" +
                                               std::strerror(errno) + ")");
  std::unique_lock lock(mutex_);
  Allocation a{static_cast<char*>(p), size, size, snpuMemoryTypeDevice, device};
  a.imported = true;
  allocations_[a.base] = a;
  *out = p;
  return snpuSuccess;
}

snpuError_t Memory::unmap_imported(void* ptr) {
  Allocation a;
  {
    std::unique_lock lock(mutex_);
    auto it = allocations_.find(static_cast<const char*>(ptr));
    if (it == allocations_.end() || !it->second.imported) {
      char text[160];
      std::snprintf(text, sizeof(text), "snpuIpcCloseMemHandle: %p is not memory opened by snpuIpcOpenMemHandle",
                    ptr);
      return fail(snpuErrorInvalidPointer, text);
    }
    a = it->second;
    allocations_.erase(it);
  }
  unmap(a);
  return snpuSuccess;
}

}  // namespace softnpu::rt
