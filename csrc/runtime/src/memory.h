// Device and pinned host memory. Device memory is host memory mapped per allocation and accounted against the
// device's capacity; a registry ordered by address answers which allocation any pointer (interior ones included)
// belongs to. With SOFTNPU_PROTECT_MEMORY=1 device memory is inaccessible (PROT_NONE) except while device code runs.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "softnpu/runtime.h"

namespace softnpu::rt {

class Device;

struct Allocation {
  char* base = nullptr;
  size_t size = 0;     // as requested
  size_t mapped = 0;   // whole pages, what the capacity accounts
  snpuMemoryType type = snpuMemoryTypeUnregistered;
  Device* device = nullptr;  // owner of device memory
};

class Memory {
 public:
  explicit Memory(bool protect) : protect_(protect) {}
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  snpuError_t allocate_device(Device* device, size_t size, void** out);
  snpuError_t allocate_host(size_t size, void** out);
  // Frees the allocation starting at ptr, which must be of the given type.
  snpuError_t free(void* ptr, snpuMemoryType type);

  // Unmaps everything still allocated, returning it to the devices' accounting (snpuShutdown).
  void release_all();

  // The allocation containing ptr. False for memory the runtime did not allocate.
  bool find(const void* ptr, Allocation* out) const;

  // Brackets device code (kernels, copies, memsets) when memory is protected: device memory is accessible while
  // any device code runs on any device.
  void enter_device_code() {
    if (protect_) set_device_code_running(+1);
  }
  void leave_device_code() {
    if (protect_) set_device_code_running(-1);
  }

 private:
  void set_device_code_running(int delta);
  void protect_all(int prot);  // called with protect_mutex_ held
  void unmap(const Allocation& a);

  const bool protect_;
  std::mutex protect_mutex_;  // taken before mutex_
  int device_code_running_ = 0;

  mutable std::shared_mutex mutex_;
  std::map<const char*, Allocation> allocations_;  // by base address
};

}  // namespace softnpu::rt
