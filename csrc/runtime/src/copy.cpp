#include "copy.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "graph.h"
#include "kernel.h"
#include "parallel_copy.h"
#include "runtime_state.h"
#include "staging.h"

namespace softnpu::rt {

namespace {

// What the runtime knows of one side of a copy.
struct Side {
  bool device = false;     // device memory, the whole range inside one allocation
  Device* owner = nullptr;
  bool pinned = false;     // the whole range inside one pinned allocation
  bool mapped = false;     // ... which its device addresses too (snpuHostAllocMapped): either side of a copy
};

snpuError_t classify(const Runtime& rt, const void* p, size_t size, const char* call, const char* role, Side* out) {
  Allocation a;
  *out = Side{};
  if (!rt.memory.find(p, &a)) return snpuSuccess;
  size_t offset = static_cast<size_t>(static_cast<const char*>(p) - a.base);
  bool fits = size <= a.size - offset;
  if (a.type == snpuMemoryTypeHost) {
    out->pinned = fits;
    // Its device pointer is the host pointer: taken as device memory unless the copy's kind says host.
    out->mapped = fits && a.mapped_for;
    out->device = out->mapped;
    out->owner = out->mapped ? a.mapped_for : nullptr;
    return snpuSuccess;
  }
  if (!fits) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "%s: %zu bytes at %s %p (offset %zu) overrun its device allocation of %zu bytes at %p", call, size,
                  role, p, offset, a.size, static_cast<void*>(a.base));
    return fail(snpuErrorInvalidValue, text);
  }
  out->device = true;
  out->owner = a.device;
  return snpuSuccess;
}

const char* kind_name(snpuMemcpyKind kind) {
  switch (kind) {
    case snpuMemcpyHostToHost: return "snpuMemcpyHostToHost";
    case snpuMemcpyHostToDevice: return "snpuMemcpyHostToDevice";
    case snpuMemcpyDeviceToHost: return "snpuMemcpyDeviceToHost";
    case snpuMemcpyDeviceToDevice: return "snpuMemcpyDeviceToDevice";
    default: return "snpuMemcpyDefault";
  }
}

snpuError_t wrong_side(const char* call, snpuMemcpyKind kind, const char* role, const void* p, bool want_device) {
  char text[256];
  std::snprintf(text, sizeof(text), "%s: %s needs %s memory as %s, but %s %p is %s memory", call, kind_name(kind),
                want_device ? "device" : "host", role, role, p, want_device ? "host" : "device");
  return fail(snpuErrorInvalidPointer, text);
}

struct CopyPlan {
  Task task{};
  Device* device = nullptr;  // owner of the device side; null for host to host
  bool pageable = false;     // a host side is not pinned: the copy must complete before the call returns
  bool stage = false;        // host to device from pageable memory: staged instead (copy_async)
};

snpuError_t plan_copy(const Runtime& rt, void* dst, const void* src, size_t size, snpuMemcpyKind kind,
                      const char* call, CopyPlan* plan) {
  if (kind < snpuMemcpyHostToHost || kind > snpuMemcpyDefault)
    return fail(snpuErrorInvalidValue, std::string(call) + ": " + std::to_string(kind) + " is not a snpuMemcpyKind");
  if (size == 0) return snpuSuccess;  // nothing to check either: empty buffers may be NULL
  if (!dst || !src) return fail(snpuErrorInvalidValue, std::string(call) + ": NULL " + (dst ? "src" : "dst"));
  Side d, s;
  if (snpuError_t e = classify(rt, dst, size, call, "dst", &d)) return e;
  if (snpuError_t e = classify(rt, src, size, call, "src", &s)) return e;
  if (kind == snpuMemcpyDefault) {
    kind = d.device ? (s.device ? snpuMemcpyDeviceToDevice : snpuMemcpyHostToDevice)
                    : (s.device ? snpuMemcpyDeviceToHost : snpuMemcpyHostToHost);
  }
  bool dst_device = kind == snpuMemcpyHostToDevice || kind == snpuMemcpyDeviceToDevice;
  bool src_device = kind == snpuMemcpyDeviceToHost || kind == snpuMemcpyDeviceToDevice;
  if (d.mapped) d.device = dst_device;
  if (s.mapped) s.device = src_device;
  if (d.device != dst_device) return wrong_side(call, kind, "dst", dst, dst_device);
  if (s.device != src_device) return wrong_side(call, kind, "src", src, src_device);

  static constexpr const char* kNames[] = {"Memcpy HtoH", "Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD"};
  plan->task.kind = TaskKind::kCopy;
  plan->task.name = kNames[kind];
  plan->task.copy.dst = dst;
  plan->task.copy.src = src;
  plan->task.copy.size = size;
  plan->task.copy.staging = nullptr;  // Task{} zeroes only the union's first member
  plan->device = src_device ? s.owner : d.owner;
  plan->pageable = (!dst_device && !d.pinned) || (!src_device && !s.pinned);
  plan->task.copy.kind = kind;
  plan->task.copy.pageable = plan->pageable;
  plan->stage = dst_device && !src_device && !s.pinned;
  return snpuSuccess;
}

snpuError_t refuse_in_kernel(const char* call, const char* why) {
  return fail(snpuErrorNotPermitted, std::string(call) + " is not allowed inside a kernel: " + why);
}

}  // namespace

snpuError_t copy_sync(Runtime& rt, void* dst, const void* src, size_t size, snpuMemcpyKind kind) {
  CopyPlan plan;
  if (snpuError_t e = plan_copy(rt, dst, src, size, kind, "snpuMemcpy", &plan)) return e;
  if (size == 0) return snpuSuccess;
  if (in_kernel()) return refuse_in_kernel("snpuMemcpy", "it waits for the device, which could deadlock");
  Device* device = plan.device ? plan.device : rt.current_device();
  if (snpuError_t e = check_unsafe_in_capture(device, "snpuMemcpy")) return e;
  return launch(device->default_stream(), plan.task, true);
}

snpuError_t copy_async(Runtime& rt, void* dst, const void* src, size_t size, snpuMemcpyKind kind, Stream* s) {
  CopyPlan plan;
  if (snpuError_t e = plan_copy(rt, dst, src, size, kind, "snpuMemcpyAsync", &plan)) return e;
  if (size == 0) return snpuSuccess;
  if (plan.stage) {
    // Host to device from pageable memory: staged, so neither the caller's buffer nor the host waits.
    void* staging = staging_acquire(size);
    parallel_memcpy(staging, src, size, thread_budget(s->device, size));
    plan.task.copy.src = staging;
    plan.task.copy.staging = staging;
    return launch(s, plan.task, false);
  }
  if (plan.pageable && in_kernel())
    return refuse_in_kernel("snpuMemcpyAsync with pageable host memory",
                            "it waits for the copy to complete, which could deadlock; use pinned memory");
  return launch(s, plan.task, plan.pageable);
}

snpuError_t memset_async(Runtime& rt, void* dst, int value, size_t size, Stream* s) {
  if (size == 0) return snpuSuccess;
  if (!dst) return fail(snpuErrorInvalidValue, "snpuMemsetAsync: NULL dst");
  Side d;
  if (snpuError_t e = classify(rt, dst, size, "snpuMemsetAsync", "dst", &d)) return e;
  if (!d.device) {
    char text[128];
    std::snprintf(text, sizeof(text), "snpuMemsetAsync: dst %p is not device memory", dst);
    return fail(snpuErrorInvalidPointer, text);
  }
  Task task{};
  task.kind = TaskKind::kMemset;
  task.name = "Memset";
  task.memset.dst = dst;
  task.memset.value = value;
  task.memset.size = size;
  return launch(s, task, false);
}

}  // namespace softnpu::rt
