// Device and pinned host memory. Device memory is host memory mapped per allocation and accounted against the
// device's capacity, or a reservation (an address range mapped PROT_NONE without memory) into which pages of
// kMapGranularity are committed and decommitted; a registry ordered by address answers which allocation or
// reservation any pointer (interior ones included) belongs to. With SOFTNPU_PROTECT_MEMORY=1 device memory is
// inaccessible (PROT_NONE) except while device code runs.
//
// An allocation or a reservation is private anonymous memory until it is first exported (snpuIpcGetMemHandle,
// ipc.cpp): shared memory (a memfd) costs twice as much to create and fault in (a 20 MiB segment 13.6 ms instead of
// 7.9, its free 4.7 ms instead of 2.2), for every segment, where few are ever shared. share() then moves it into a
// memfd in place (a reservation's memfd as large as it, sparse; granules mapped later come from it), with device code
// held back so that no kernel writes it meanwhile.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "softnpu/runtime.h"

namespace softnpu::rt {

class Device;

// snpuMemMap's granularity, CUDA's usual one.
constexpr size_t kMapGranularity = 2 << 20;

struct Allocation {
  char* base = nullptr;
  size_t size = 0;     // as requested (a reservation's whole range)
  size_t mapped = 0;   // whole pages, what the capacity accounts
  snpuMemoryType type = snpuMemoryTypeUnregistered;
  Device* device = nullptr;  // owner of device memory
  std::vector<bool>* pages = nullptr;  // a reservation's mapped granules (owned by Memory); null for allocations
  int fd = -1;           // the memfd device memory lives in (-1: private memory, not exported yet)
  uint64_t serial = 0;   // names the memfd ("softnpu-<serial>"), so an importer can tell a reused fd number
  bool imported = false; // another process's allocation, opened by snpuIpcOpenMemHandle: not accounted here
  Device* mapped_for = nullptr;  // pinned host memory the device addresses too (snpuHostAllocMapped); not accounted
  bool registered = false;  // the program's own host memory, made pinned by snpuHostRegister: never unmapped here
};

class Memory {
 public:
  explicit Memory(bool protect) : protect_(protect) {}
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  snpuError_t allocate_device(Device* device, size_t size, void** out);
  // Pinned host memory; mapped_for: the device that addresses it too (snpuHostAllocMapped), or null.
  snpuError_t allocate_host(size_t size, void** out, Device* mapped_for = nullptr);
  // The program's host memory [ptr, ptr + size) registered as pinned (snpuHostRegister; mapped_for as above), and
  // unregistered again (ptr is where the registration starts).
  snpuError_t register_host(void* ptr, size_t size, Device* mapped_for);
  snpuError_t unregister_host(void* ptr);
  // Frees the allocation starting at ptr, which must be of the given type.
  snpuError_t free(void* ptr, snpuMemoryType type);

  // Virtual memory (snpuMemAddressReserve and the rest): reserve on a device, map / unmap granules of a reservation,
  // release it (unmapping what is left). Callers wait for the device's work before unmap and release.
  snpuError_t reserve(Device* device, size_t size, void** out);
  snpuError_t map(void* ptr, size_t size);
  snpuError_t unmap_range(void* ptr, size_t size);
  snpuError_t release(void* ptr);

  // Another process's allocation (its memfd, opened by the caller) mapped here as device memory of `device`, and
  // unmapping it again (the caller waits for the device's work first).
  snpuError_t map_imported(Device* device, int fd, size_t size, void** out);
  snpuError_t unmap_imported(void* ptr);

  // Unmaps everything still allocated, returning it to the devices' accounting (snpuShutdown).
  void release_all();

  // The allocation containing ptr. False for memory the runtime did not allocate.
  bool find(const void* ptr, Allocation* out) const;

  // The device allocation or reservation containing ptr, in a memfd (moved there in place the first time: see the
  // top), as *out.
  // Waits for the device code running now on every device. snpuErrorNotPermitted where the host has no memfd.
  snpuError_t share(const void* ptr, Allocation* out);

  // Brackets device code (kernels, copies, memsets): it waits while share() holds device code back, and when memory
  // is protected, device memory is accessible while any device code runs on any device.
  void enter_device_code() {
    device_code_.fetch_add(1, std::memory_order_seq_cst);
    if (held_.load(std::memory_order_seq_cst)) [[unlikely]]
      wait_while_held();
    if (protect_) set_device_code_running(+1);
  }
  void leave_device_code() {
    if (protect_) set_device_code_running(-1);
    device_code_.fetch_sub(1, std::memory_order_release);
  }

 private:
  void wait_while_held();
  void set_device_code_running(int delta);
  void protect_all(int prot);  // called with protect_mutex_ held
  void unmap(const Allocation& a);
  // The reservation holding [ptr, ptr + size), granule-aligned, with every granule mapped (or none): else fails.
  snpuError_t reservation_range(void* ptr, size_t size, bool mapped, const char* call, Allocation** out,
                                size_t* first);
  void account(Device* device, int64_t bytes);

  const bool protect_;
  std::mutex protect_mutex_;  // taken before mutex_
  int device_code_running_ = 0;

  mutable std::shared_mutex mutex_;
  std::map<const char*, Allocation> allocations_;  // by base address
  std::atomic<uint64_t> next_serial_{1};

  // Device code in progress, and share()'s hold on it (a Dekker pair: a thread entering device code counts itself
  // before it looks at held_, share() sets held_ before it looks at the count, so one of them sees the other).
  std::atomic<int> device_code_{0};
  std::atomic<bool> held_{false};
  std::mutex share_mutex_;  // one share() at a time, and no map() during one; taken before protect_mutex_
  std::mutex held_mutex_;
  std::condition_variable held_cv_;
};

}  // namespace softnpu::rt
