#include "fault.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "device.h"
#include "log.h"

namespace softnpu::rt {

namespace {

struct Armed {
  snpuFaultKind kind;
  int device;
  int64_t stream_id;
  uint64_t remaining;  // matching events until it fires (1: the next)
  int code;
  std::string message;
  size_t size;
};

struct DeviceFaults {
  bool stopped = false;
  bool hang = false;
  uint64_t hang_after = 0;  // tasks still to run before the hang starts
  uint64_t delay_us = 0;
  std::vector<std::pair<void*, size_t>> uce;
};

// Guards everything below; the task path takes it only while some fault is armed or a device is stopped (g_active).
std::mutex g_mutex;
std::condition_variable g_hang_cv;
std::vector<Armed> g_armed;
std::vector<DeviceFaults> g_devices;  // by visible index, grown on demand
std::atomic<bool> g_active{false};
// Some device has a UCE range: kernels look at the memory they touch (range_has_uce) only then.
std::atomic<bool> g_uce{false};

DeviceFaults& faults_of(int device) {
  if (static_cast<size_t>(device) >= g_devices.size()) g_devices.resize(device + 1);
  return g_devices[device];
}

void update_active() {
  bool active = !g_armed.empty();
  bool uce = false;
  for (const DeviceFaults& f : g_devices) {
    active = active || f.stopped || f.hang || f.delay_us || !f.uce.empty();
    uce = uce || !f.uce.empty();
  }
  g_active.store(active, std::memory_order_release);
  g_uce.store(uce, std::memory_order_release);
}

bool overlaps(const std::vector<std::pair<void*, size_t>>& ranges, const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto& [base, size] : ranges) {
    const auto b = reinterpret_cast<uintptr_t>(base);
    if (a < b + size && b < a + n) return true;
  }
  return false;
}

void fill(KernelError* error, const Task& task, Device* d, Stream* s, int code, std::string message) {
  error->kernel_name = task.name;
  error->message = std::move(message);
  error->code = code;
  error->device = d->index;
  error->stream_id = s->id;
}

// Ascend's text for an AI core exception, as torch_npu shows it after a failed stream synchronize.
std::string inner_error(int code) {
  return "ACL stream synchronize failed, error code:" + std::to_string(code) +
         "\nEZ9999: Inner Error!\nEZ9999: The error from device(chipId:0, dieId:0), serial number is 1, there is an "
         "aicore error exception (injected by softnpu's snpuFaultInject)";
}

}  // namespace

snpuError_t inject_fault(const snpuFault& f) {
  std::lock_guard lock(g_mutex);
  const uint64_t at = f.at == 0 ? 1 : f.at;
  switch (f.kind) {
    case snpuFaultKernelError:
      g_armed.push_back({f.kind, f.device, f.stream_id, at,
                         f.code ? f.code : SNPU_ACL_ERROR_RT_AICORE_EXCEPTION,
                         f.message ? f.message : inner_error(f.code ? f.code : SNPU_ACL_ERROR_RT_AICORE_EXCEPTION), 0});
      break;
    case snpuFaultMemoryUce:
      if (f.device < 0 || !f.ptr || f.size == 0) return fail(snpuErrorInvalidValue, "snpuFaultInject: a UCE needs a device and a range");
      // The memory itself goes bad: the copies reading it fail here (intercept), kernels when they see they touch it
      // (range_has_uce), from now until a restart repairs it.
      faults_of(f.device).uce.emplace_back(f.ptr, f.size);
      break;
    case snpuFaultDeviceHang:
    case snpuFaultSlow:
      if (f.device < 0) return fail(snpuErrorInvalidValue, "snpuFaultInject: a hang or a slow device needs a device");
      if (f.kind == snpuFaultSlow) {
        faults_of(f.device).delay_us = f.delay_us;
      } else {
        faults_of(f.device).hang = true;
        faults_of(f.device).hang_after = at - 1;
      }
      break;
    case snpuFaultOutOfMemory:
      g_armed.push_back({f.kind, f.device, -1, at, 0, "", f.size});
      break;
    default:
      return fail(snpuErrorInvalidValue, "snpuFaultInject: unknown fault kind " + std::to_string(int(f.kind)));
  }
  SNPU_LOG(log::kWarning, "fault injected: kind %d on device %d at %llu", int(f.kind), f.device,
           static_cast<unsigned long long>(at));
  update_active();
  return snpuSuccess;
}

void clear_faults() {
  std::lock_guard lock(g_mutex);
  g_armed.clear();
  for (DeviceFaults& f : g_devices) f.delay_us = 0;
  update_active();
}

bool intercept(Device* d, Stream* s, const Task& task, KernelError* error) {
  if (!g_active.load(std::memory_order_acquire)) return false;
  std::unique_lock lock(g_mutex);
  DeviceFaults& f = faults_of(d->index);
  if (f.hang) {
    if (f.hang_after > 0) {
      --f.hang_after;
    } else {
      // The task never completes: this compute thread holds it until the device is stopped.
      g_hang_cv.wait(lock, [&] { return f.stopped || !f.hang; });
    }
  }
  if (f.stopped) {
    fill(error, task, d, s, SNPU_ACL_ERROR_RT_DEVICE_TASK_ABORT, "FORCE STOP");
    return true;
  }
  if (task.kind == TaskKind::kCopy && overlaps(f.uce, task.copy.src, task.copy.size)) {
    fill(error, task, d, s, SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR, "UCE ERROR");
    return true;
  }
  if (task.kind != TaskKind::kKernel) return false;
  for (auto it = g_armed.begin(); it != g_armed.end(); ++it) {
    if (it->kind != snpuFaultKernelError || (it->device >= 0 && it->device != d->index) ||
        (it->stream_id >= 0 && static_cast<uint64_t>(it->stream_id) != s->id))
      continue;
    if (--it->remaining > 0) continue;
    fill(error, task, d, s, it->code, it->message);
    g_armed.erase(it);
    update_active();
    return true;
  }
  const uint64_t delay = f.delay_us;
  lock.unlock();
  if (delay) std::this_thread::sleep_for(std::chrono::microseconds(delay));
  return false;
}

bool malloc_fails(int device, size_t size) {
  if (!g_active.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(g_mutex);
  for (auto it = g_armed.begin(); it != g_armed.end(); ++it) {
    if (it->kind != snpuFaultOutOfMemory || (it->device >= 0 && it->device != device)) continue;
    if (it->remaining == 0) {
      // Fired: the device stays full for this size and larger (the allocator frees its cache and retries, as it
      // would against a real full device) until a smaller allocation goes through.
      if (size >= it->size) return true;
      g_armed.erase(it);
      update_active();
      return false;
    }
    if (size < it->size || --it->remaining > 0) continue;
    it->size = size;
    return true;
  }
  return false;
}

snpuError_t stop_device(Device* d) {
  {
    std::lock_guard lock(g_mutex);
    faults_of(d->index).stopped = true;
    update_active();
  }
  g_hang_cv.notify_all();
  return snpuSuccess;
}

snpuError_t restart_device(Device* d) {
  {
    std::lock_guard lock(g_mutex);
    DeviceFaults& f = faults_of(d->index);
    f.stopped = false;
    f.hang = false;
    f.uce.clear();
    update_active();
  }
  g_hang_cv.notify_all();
  d->drop_errors();
  return snpuSuccess;
}

bool uce_active() { return g_uce.load(std::memory_order_acquire); }

bool range_has_uce(const void* ptr, size_t size) {
  if (!uce_active()) return false;
  std::lock_guard lock(g_mutex);
  for (const DeviceFaults& f : g_devices)
    if (overlaps(f.uce, ptr, size)) return true;
  return false;
}

std::vector<std::pair<void*, size_t>> uce_ranges(int device) {
  std::lock_guard lock(g_mutex);
  return static_cast<size_t>(device) < g_devices.size() ? g_devices[device].uce
                                                        : std::vector<std::pair<void*, size_t>>{};
}

}  // namespace softnpu::rt
