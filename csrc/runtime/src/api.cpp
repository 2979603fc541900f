// The extern "C" functions of runtime.h: argument checks, then the work in the file of its concept.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "activity.h"
#include "fault.h"
#include "interrupt.h"
#include "copy.h"
#include "errors.h"
#include "graph.h"
#include "kernel.h"
#include "runtime_state.h"
#include "soc.h"
#include "softnpu/runtime.h"

using namespace softnpu::rt;

namespace {

// No exception may cross the C boundary.
template <class F>
snpuError_t guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(snpuErrorMemoryAllocation, "the host is out of memory");
  } catch (const std::exception& e) {
    return fail(snpuErrorInternal, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(snpuErrorInternal, "internal error: unknown exception");
  }
}

snpuError_t null_argument(const char* call, const char* name) {
  return fail(snpuErrorInvalidValue, std::string(call) + ": " + name + " is NULL");
}

snpuError_t not_in_kernel(const char* call) {
  return fail(snpuErrorNotPermitted,
              std::string(call) + " is not allowed inside a kernel: it waits for the device, which could deadlock");
}

std::atomic<uint64_t> g_next_stream_id{1};  // process-unique; 0 is every default stream

}  // namespace

extern "C" {

// ---------------------------------------------------------------- errors

const char* snpuGetErrorName(snpuError_t error) { return error_name(error); }

const char* snpuGetLastErrorMessage(void) { return last_error_message(); }

snpuError_t snpuGetLastKernelError(const char** kernel_name, const char** message, int* code, int* device,
                                   uint64_t* stream_id) {
  const KernelError* e = last_kernel_error();
  if (!e) return fail(snpuErrorInvalidValue, "snpuGetLastKernelError: no kernel error was reported to this thread");
  if (kernel_name) *kernel_name = e->kernel_name.c_str();
  if (message) *message = e->message.c_str();
  if (code) *code = e->code;
  if (device) *device = e->device;
  if (stream_id) *stream_id = e->stream_id;
  return snpuSuccess;
}

// ---------------------------------------------------------------- init

snpuError_t snpuInit(void) {
  return guarded([&] {
    Runtime* rt;
    return acquire_runtime(&rt);
  });
}

int snpuIsForkedChild(void) { return forked_child() ? 1 : 0; }

int snpuIsInitialized(void) { return initialized_runtime() ? 1 : 0; }

snpuError_t snpuSetInterruptCheck(snpuInterruptCheckFn check) {
  set_interrupt_check(check);
  return snpuSuccess;
}

snpuError_t snpuShutdown(void) {
  return guarded([&] {
    if (in_kernel()) return not_in_kernel("snpuShutdown");
    return shutdown_runtime();
  });
}

// ---------------------------------------------------------------- devices

snpuError_t snpuGetDeviceCount(int* count) {
  return guarded([&] {
    if (!count) return null_argument("snpuGetDeviceCount", "count");
    return visible_device_count(count);
  });
}

snpuError_t snpuSetDevice(int device) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuSetDevice");
    set_current_device(*rt, device);
    d->counters();  // the process now uses the device, as a CUDA context would
    return snpuSuccess;
  });
}

snpuError_t snpuGetDevice(int* device) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!device) return null_argument("snpuGetDevice", "device");
    *device = current_device_index(*rt);
    return snpuSuccess;
  });
}

snpuError_t snpuGetDeviceProperties(snpuDeviceProp* prop, int device) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!prop) return null_argument("snpuGetDeviceProperties", "prop");
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuGetDeviceProperties");
    *prop = snpuDeviceProp{};
    set_soc_properties(prop, soc_profiles()[rt->config.soc]);
    prop->total_memory = d->capacity;
    prop->compute_threads = d->cores;
    prop->physical_index = d->physical;
    return snpuSuccess;
  });
}

snpuError_t snpuGetSocProfile(const char* name, snpuSocProfile* profile) {
  return guarded([&] {
    if (!profile) return null_argument("snpuGetSocProfile", "profile");
    int index = -1;
    if (name) {
      index = soc_index(name);
      if (index < 0)
        return fail(snpuErrorInvalidValue, std::string("snpuGetSocProfile: '") + name +
                                               "' is not a chip softnpu presents: expected one of " + soc_names());
    } else if (snpuError_t e = selected_soc(&index)) {
      return e;
    }
    *profile = soc_profiles()[index];
    return snpuSuccess;
  });
}

snpuError_t snpuGetSocProfileCount(int* count) {
  if (!count) return null_argument("snpuGetSocProfileCount", "count");
  *count = static_cast<int>(soc_profiles().size());
  return snpuSuccess;
}

snpuError_t snpuGetSocProfileByIndex(int index, snpuSocProfile* profile) {
  if (!profile) return null_argument("snpuGetSocProfileByIndex", "profile");
  if (index < 0 || index >= static_cast<int>(soc_profiles().size()))
    return fail(snpuErrorInvalidValue, "snpuGetSocProfileByIndex: index " + std::to_string(index) +
                                           " is not in the table (0 to " +
                                           std::to_string(soc_profiles().size() - 1) + ")");
  *profile = soc_profiles()[index];
  return snpuSuccess;
}

snpuError_t snpuMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!free_bytes) return null_argument("snpuMemGetInfo", "free_bytes");
    if (!total_bytes) return null_argument("snpuMemGetInfo", "total_bytes");
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuMemGetInfo");
    uint64_t used = std::min<uint64_t>(d->memory_used.load(std::memory_order_relaxed), d->capacity);
    *free_bytes = d->capacity - used;
    *total_bytes = d->capacity;
    return snpuSuccess;
  });
}

snpuError_t snpuDeviceSynchronize(void) { return snpuDeviceSynchronizeTimeout(UINT64_MAX); }

snpuError_t snpuDeviceSynchronizeTimeout(uint64_t timeout_us) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (in_kernel()) return not_in_kernel("snpuDeviceSynchronize");
    if (snpuError_t e = check_unsafe_in_capture(rt->current_device(), "snpuDeviceSynchronize")) return e;
    return rt->current_device()->synchronize(true, deadline_after(timeout_us));
  });
}

// ---------------------------------------------------------------- memory

snpuError_t snpuMalloc(void** ptr, size_t size) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return null_argument("snpuMalloc", "ptr");
    if (size && malloc_fails(rt->current_device()->index, size))
      return fail(snpuErrorMemoryAllocation, "snpuMalloc: out of device memory (an injected fault, snpuFaultInject)");
    return rt->memory.allocate_device(rt->current_device(), size, ptr);
  });
}

snpuError_t snpuFree(void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return snpuSuccess;
    if (in_kernel()) return not_in_kernel("snpuFree");
    Allocation a;
    if (!rt->memory.find(ptr, &a) || a.base != ptr || a.type != snpuMemoryTypeDevice)
      return rt->memory.free(ptr, snpuMemoryTypeDevice);  // fails, saying why
    if (snpuError_t e = check_unsafe_in_capture(a.device, "snpuFree")) return e;
    // As cudaFree: queued kernels never see freed memory. Their errors stay for the caller's next sync.
    a.device->synchronize(false);
    return rt->memory.free(ptr, snpuMemoryTypeDevice);
  });
}

snpuError_t snpuMemGetGranularity(size_t* granularity) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!granularity) return null_argument("snpuMemGetGranularity", "granularity");
    *granularity = kMapGranularity;
    return snpuSuccess;
  });
}

snpuError_t snpuMemAddressReserve(void** ptr, size_t size) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return null_argument("snpuMemAddressReserve", "ptr");
    return rt->memory.reserve(rt->current_device(), size, ptr);
  });
}

snpuError_t snpuMemMap(void* ptr, size_t size) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    Allocation a;
    if (size && rt->memory.find(ptr, &a) && a.device && malloc_fails(a.device->index, size))
      return fail(snpuErrorMemoryAllocation, "snpuMemMap: out of device memory (an injected fault, snpuFaultInject)");
    return rt->memory.map(ptr, size);
  });
}

snpuError_t snpuMemUnmap(void* ptr, size_t size) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (in_kernel()) return not_in_kernel("snpuMemUnmap");
    Allocation a;
    // As snpuFree: queued kernels never see the pages go. Their errors stay for the caller's next sync.
    if (ptr && rt->memory.find(ptr, &a) && a.pages) a.device->synchronize(false);
    return rt->memory.unmap_range(ptr, size);
  });
}

snpuError_t snpuMemAddressFree(void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (in_kernel()) return not_in_kernel("snpuMemAddressFree");
    Allocation a;
    if (ptr && rt->memory.find(ptr, &a) && a.pages && a.base == ptr) a.device->synchronize(false);
    return rt->memory.release(ptr);
  });
}

snpuError_t snpuMallocHost(void** ptr, size_t size) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return null_argument("snpuMallocHost", "ptr");
    return rt->memory.allocate_host(size, ptr);
  });
}

snpuError_t snpuHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return null_argument("snpuHostAlloc", "ptr");
    if (flags != snpuHostAllocDefault && flags != snpuHostAllocMapped)
      return fail(snpuErrorInvalidValue, "snpuHostAlloc: flags " + std::to_string(flags) +
                                             " is neither snpuHostAllocDefault nor snpuHostAllocMapped");
    return rt->memory.allocate_host(size, ptr, flags == snpuHostAllocMapped ? rt->current_device() : nullptr);
  });
}

snpuError_t snpuHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!device_ptr) return null_argument("snpuHostGetDevicePointer", "device_ptr");
    if (flags != 0)
      return fail(snpuErrorInvalidValue, "snpuHostGetDevicePointer: flags must be 0, not " + std::to_string(flags));
    Allocation a;
    if (!host_ptr || !rt->memory.find(host_ptr, &a) || !a.mapped_for) {
      char text[128];
      std::snprintf(text, sizeof(text), "snpuHostGetDevicePointer: %p is not mapped host memory (snpuHostAllocMapped)",
                    host_ptr);
      return fail(snpuErrorInvalidValue, text);
    }
    *device_ptr = host_ptr;  // one address space: the device addresses the host's pages where the host does
    return snpuSuccess;
  });
}

snpuError_t snpuHostRegister(void* ptr, size_t size, unsigned int flags) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return null_argument("snpuHostRegister", "ptr");
    if (size == 0) return fail(snpuErrorInvalidValue, "snpuHostRegister: size is 0");
    if (flags != snpuHostRegisterDefault && flags != snpuHostRegisterMapped)
      return fail(snpuErrorInvalidValue, "snpuHostRegister: flags " + std::to_string(flags) +
                                             " is neither snpuHostRegisterDefault nor snpuHostRegisterMapped");
    const bool mapped = flags == snpuHostRegisterMapped;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    if (mapped && (reinterpret_cast<uintptr_t>(ptr) % page != 0 || size % page != 0))
      return fail(snpuErrorInvalidValue, "snpuHostRegister: mapped host memory must start and end on a page boundary (" +
                                             std::to_string(page) + " bytes)");
    return rt->memory.register_host(ptr, size, mapped ? rt->current_device() : nullptr);
  });
}

snpuError_t snpuHostUnregister(void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return null_argument("snpuHostUnregister", "ptr");
    Allocation a;
    if (rt->memory.find(ptr, &a) && a.base == ptr && a.registered && a.mapped_for) {
      // Mapped memory is device memory to queued device code: as snpuFreeHost of it, after the device's work.
      if (in_kernel()) return not_in_kernel("snpuHostUnregister of mapped host memory");
      if (snpuError_t e = check_unsafe_in_capture(a.mapped_for, "snpuHostUnregister")) return e;
      a.mapped_for->synchronize(false);
    }
    return rt->memory.unregister_host(ptr);
  });
}

snpuError_t snpuFreeHost(void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return snpuSuccess;
    Allocation a;
    if (rt->memory.find(ptr, &a) && a.base == ptr && a.mapped_for) {
      // Mapped memory is device memory to queued device code: as snpuFree, it goes after the device's work.
      if (in_kernel()) return not_in_kernel("snpuFreeHost of mapped host memory");
      if (snpuError_t e = check_unsafe_in_capture(a.mapped_for, "snpuFreeHost")) return e;
      a.mapped_for->synchronize(false);
    }
    return rt->memory.free(ptr, snpuMemoryTypeHost);
  });
}

snpuError_t snpuPointerGetAttributes(snpuPointerAttributes* attr, const void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!attr) return null_argument("snpuPointerGetAttributes", "attr");
    Allocation a;
    if (ptr && rt->memory.find(ptr, &a)) {
      const Device* device = a.device ? a.device : a.mapped_for;
      *attr = {a.type, device ? device->index : -1, a.base, a.size};
    } else {
      *attr = {snpuMemoryTypeUnregistered, -1, nullptr, 0};
    }
    return snpuSuccess;
  });
}

snpuError_t snpuMemcpy(void* dst, const void* src, size_t size, snpuMemcpyKind kind) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    return copy_sync(*rt, dst, src, size, kind);
  });
}

snpuError_t snpuMemcpyAsync(void* dst, const void* src, size_t size, snpuMemcpyKind kind, snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuMemcpyAsync", &s)) return e;
    return copy_async(*rt, dst, src, size, kind, s);
  });
}

snpuError_t snpuMemsetAsync(void* dst, int value, size_t size, snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuMemsetAsync", &s)) return e;
    return memset_async(*rt, dst, value, size, s);
  });
}

// ---------------------------------------------------------------- streams

snpuError_t snpuDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!least) return null_argument("snpuDeviceGetStreamPriorityRange", "least");
    if (!greatest) return null_argument("snpuDeviceGetStreamPriorityRange", "greatest");
    *least = kLeastPriority;
    *greatest = kGreatestPriority;
    return snpuSuccess;
  });
}

snpuError_t snpuStreamCreate(snpuStream_t* stream, int priority) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!stream) return null_argument("snpuStreamCreate", "stream");
    Device* d = rt->current_device();
    d->counters();
    Stream* s = d->create_stream(std::clamp(priority, kGreatestPriority, kLeastPriority),
                                 g_next_stream_id.fetch_add(1, std::memory_order_relaxed));
    s->handle = stream_handles().insert(s);
    if (!s->handle) {
      d->forget_stream(s);
      s->release();
      return fail(snpuErrorMemoryAllocation, "snpuStreamCreate: too many live streams");
    }
    *stream = static_cast<snpuStream_t>(s->handle);
    return snpuSuccess;
  });
}

snpuError_t snpuStreamDestroy(snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamDestroy", &s)) return e;
    if (s == s->device->default_stream())
      return fail(snpuErrorInvalidHandle, "snpuStreamDestroy: the default stream cannot be destroyed");
    if (in_kernel()) return not_in_kernel("snpuStreamDestroy");
    if (!stream_handles().remove(stream)) return rt->stream(stream, "snpuStreamDestroy", &s);  // destroyed meanwhile
    s->wait_for(s->enqueued());
    s->device->forget_stream(s);
    s->release();
    return snpuSuccess;
  });
}

snpuError_t snpuGetDefaultStream(int device, snpuStream_t* stream) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!stream) return null_argument("snpuGetDefaultStream", "stream");
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuGetDefaultStream");
    *stream = static_cast<snpuStream_t>(d->default_stream()->handle);
    return snpuSuccess;
  });
}

snpuError_t snpuStreamQuery(snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamQuery", &s)) return e;
    if (StreamCapture* c = s->capture.load(std::memory_order_acquire)) return refuse_in_capture(c, "snpuStreamQuery");
    return s->reached(s->enqueued()) ? snpuSuccess : snpuErrorNotReady;
  });
}

snpuError_t snpuStreamSynchronize(snpuStream_t stream) { return snpuStreamSynchronizeTimeout(stream, UINT64_MAX); }

snpuError_t snpuStreamSynchronizeTimeout(snpuStream_t stream, uint64_t timeout_us) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamSynchronize", &s)) return e;
    if (in_kernel()) return not_in_kernel("snpuStreamSynchronize");
    if (StreamCapture* c = s->capture.load(std::memory_order_acquire))
      return refuse_in_capture(c, "snpuStreamSynchronize");
    return synchronize(s, s->enqueued(), deadline_after(timeout_us));
  });
}

snpuError_t snpuStreamWaitEvent(snpuStream_t stream, snpuEvent_t event) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    Event* ev;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamWaitEvent", &s)) return e;
    if (snpuError_t e = rt->event(event, "snpuStreamWaitEvent", &ev)) return e;
    const uint64_t event_capture = ev->capture_id();
    if (event_capture != 0 || s->capture.load(std::memory_order_acquire)) return wait_in_capture(s, event_capture);
    Event::Capture capture = ev->capture();
    if (!capture.stream) return snpuSuccess;  // never recorded: complete
    if (capture.stream == s || capture.stream->reached(capture.seq)) {
      capture.stream->release();  // stream order or completion already gives what the wait would
      return snpuSuccess;
    }
    Task task{};
    task.kind = TaskKind::kWait;
    task.name = "StreamWaitEvent";
    task.wait.stream = capture.stream;  // the task keeps the captured reference
    task.wait.seq = capture.seq;
    return launch(s, task, false);
  });
}

snpuError_t snpuStreamGetInfo(snpuStream_t stream, int* device, int* priority, uint64_t* id) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamGetInfo", &s)) return e;
    if (device) *device = s->device->index;
    if (priority) *priority = s->priority;
    if (id) *id = s->id;
    return snpuSuccess;
  });
}

// ---------------------------------------------------------------- events

snpuError_t snpuEventCreate(snpuEvent_t* event, unsigned flags) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!event) return null_argument("snpuEventCreate", "event");
    if (flags & ~unsigned(snpuEventDisableTiming))
      return fail(snpuErrorInvalidValue, "snpuEventCreate: unknown flags " + std::to_string(flags));
    Event* ev = new Event((flags & snpuEventDisableTiming) == 0);
    ev->handle = event_handles().insert(ev);
    if (!ev->handle) {
      ev->release();
      return fail(snpuErrorMemoryAllocation, "snpuEventCreate: too many live events");
    }
    *event = static_cast<snpuEvent_t>(ev->handle);
    return snpuSuccess;
  });
}

snpuError_t snpuEventDestroy(snpuEvent_t event) {
  return guarded([&] {
    Runtime* rt;
    Event* ev;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->event(event, "snpuEventDestroy", &ev)) return e;
    if (!event_handles().remove(event)) return rt->event(event, "snpuEventDestroy", &ev);  // destroyed meanwhile
    ev->release();
    return snpuSuccess;
  });
}

snpuError_t snpuEventRecord(snpuEvent_t event, snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    Event* ev;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->event(event, "snpuEventRecord", &ev)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuEventRecord", &s)) return e;
    if (StreamCapture* c = s->capture.load(std::memory_order_acquire)) return record_in_capture(c, ev);
    uint64_t seq = ev->record(s);
    if (rt->config.launch_blocking && !in_kernel()) return synchronize(s, seq);
    return snpuSuccess;
  });
}

snpuError_t snpuEventQuery(snpuEvent_t event) {
  return guarded([&] {
    Runtime* rt;
    Event* ev;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->event(event, "snpuEventQuery", &ev)) return e;
    return ev->complete() ? snpuSuccess : snpuErrorNotReady;
  });
}

snpuError_t snpuEventSynchronize(snpuEvent_t event) { return snpuEventSynchronizeTimeout(event, UINT64_MAX); }

snpuError_t snpuEventSynchronizeTimeout(snpuEvent_t event, uint64_t timeout_us) {
  return guarded([&] {
    Runtime* rt;
    Event* ev;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->event(event, "snpuEventSynchronize", &ev)) return e;
    if (in_kernel()) return not_in_kernel("snpuEventSynchronize");
    Event::Capture capture = ev->capture();
    if (!capture.stream) return snpuSuccess;
    snpuError_t result = synchronize(capture.stream, capture.seq, deadline_after(timeout_us));
    capture.stream->release();
    return result;
  });
}

namespace {

// The completion time (steady clock, ns) of a timed, recorded and completed event; `which` names it in the errors.
snpuError_t completed_at(Event* event, const char* api, const std::string& which, int64_t* ns) {
  if (!event->timing)
    return fail(snpuErrorInvalidHandle, std::string(api) + ": the " + which +
                                            " was created with snpuEventDisableTiming");
  switch (event->timestamp(ns)) {
    case Event::TimeState::kNotRecorded:
      return fail(snpuErrorInvalidHandle, std::string(api) + ": the " + which + " was never recorded");
    case Event::TimeState::kNotReady:
      return fail(snpuErrorNotReady, std::string(api) + ": the " + which + " has not completed");
    case Event::TimeState::kValid:
      break;
  }
  return snpuSuccess;
}

}  // namespace

snpuError_t snpuEventElapsedTime(float* ms, snpuEvent_t start, snpuEvent_t end) {
  return guarded([&] {
    Runtime* rt;
    Event* events[2];
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ms) return null_argument("snpuEventElapsedTime", "ms");
    if (snpuError_t e = rt->event(start, "snpuEventElapsedTime", &events[0])) return e;
    if (snpuError_t e = rt->event(end, "snpuEventElapsedTime", &events[1])) return e;
    int64_t ns[2];
    for (int i = 0; i < 2; ++i) {
      if (snpuError_t e = completed_at(events[i], "snpuEventElapsedTime", i == 0 ? "start event" : "end event", &ns[i]))
        return e;
    }
    *ms = static_cast<float>(static_cast<double>(ns[1] - ns[0]) / 1e6);
    return snpuSuccess;
  });
}

snpuError_t snpuEventGetTimestamp(snpuEvent_t event, uint64_t* us) {
  return guarded([&] {
    Runtime* rt;
    Event* ev;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!us) return null_argument("snpuEventGetTimestamp", "us");
    if (snpuError_t e = rt->event(event, "snpuEventGetTimestamp", &ev)) return e;
    int64_t ns;
    if (snpuError_t e = completed_at(ev, "snpuEventGetTimestamp", "event", &ns)) return e;
    *us = static_cast<uint64_t>(ns / 1000);
    return snpuSuccess;
  });
}

// ---------------------------------------------------------------- kernels

snpuError_t snpuLaunchKernel(snpuStream_t stream, const char* name, snpuKernelFn fn, void* arg,
                             snpuKernelCleanupFn cleanup) {
  return snpuLaunchKernelTimeout(stream, name, fn, arg, cleanup, UINT64_MAX);
}

snpuError_t snpuLaunchKernelTimeout(snpuStream_t stream, const char* name, snpuKernelFn fn, void* arg,
                                    snpuKernelCleanupFn cleanup, uint64_t timeout_us) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    snpuError_t e = acquire_runtime(&rt);
    if (!e) e = rt->stream(stream, "snpuLaunchKernel", &s);
    if (!e && !fn) e = null_argument("snpuLaunchKernel", "fn");
    if (!e && !name) e = null_argument("snpuLaunchKernel", "name");
    if (e) {
      if (cleanup) cleanup(arg);  // the kernel will never run: arg is still released exactly once
      return e;
    }
    Task task{};
    task.kind = TaskKind::kKernel;
    task.name = name;
    task.kernel.fn = fn;
    task.kernel.arg = arg;
    task.kernel.cleanup = cleanup;
    return launch(s, task, false, deadline_after(timeout_us));
  });
}

void snpuKernelSetErrorMessage(const char* message) { set_kernel_error_message(message); }

int snpuKernelThreadBudget(uint64_t work_bytes) { return kernel_thread_budget(work_bytes); }

snpuStream_t snpuKernelCurrentStream(void) {
  Stream* s = kernel_current_stream();
  return s ? static_cast<snpuStream_t>(s->handle) : nullptr;
}

// ---------------------------------------------------------------- graphs

snpuError_t snpuStreamBeginCapture(snpuStream_t stream, snpuStreamCaptureMode mode) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamBeginCapture", &s)) return e;
    return begin_capture(s, mode);
  });
}

snpuError_t snpuStreamEndCapture(snpuStream_t stream, snpuGraph_t* graph) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!graph) return null_argument("snpuStreamEndCapture", "graph");
    if (snpuError_t e = rt->stream(stream, "snpuStreamEndCapture", &s)) return e;
    Graph* g;
    snpuError_t e = end_capture(s, &g);
    *graph = reinterpret_cast<snpuGraph_t>(g);
    return e;
  });
}

snpuError_t snpuStreamBeginCaptureToIfNode(snpuStream_t stream, const void* pred) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamBeginCaptureToIfNode", &s)) return e;
    return begin_if_node(s, pred);
  });
}

snpuError_t snpuStreamEndCaptureToConditionalNode(snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamEndCaptureToConditionalNode", &s)) return e;
    return end_conditional_node(s);
  });
}

snpuError_t snpuStreamIsCapturing(snpuStream_t stream, snpuStreamCaptureStatus* status) {
  if (!status) return guarded([&] { return null_argument("snpuStreamIsCapturing", "status"); });
  return snpuStreamGetCaptureInfo(stream, status, nullptr);
}

snpuError_t snpuStreamGetCaptureInfo(snpuStream_t stream, snpuStreamCaptureStatus* status, uint64_t* id) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (snpuError_t e = rt->stream(stream, "snpuStreamGetCaptureInfo", &s)) return e;
    StreamCapture* c = s->capture.load(std::memory_order_acquire);
    if (id) *id = c ? c->id : 0;
    if (!status) return snpuSuccess;
    if (!c) {
      *status = snpuStreamCaptureStatusNone;
    } else {
      std::lock_guard<std::mutex> lock(c->mutex);
      *status = c->invalidated ? snpuStreamCaptureStatusInvalidated : snpuStreamCaptureStatusActive;
    }
    return snpuSuccess;
  });
}

snpuError_t snpuGraphGetNodeCount(snpuGraph_t graph, size_t* count) {
  return guarded([&] {
    if (!graph) return null_argument("snpuGraphGetNodeCount", "graph");
    if (!count) return null_argument("snpuGraphGetNodeCount", "count");
    *count = reinterpret_cast<Graph*>(graph)->tasks.size();
    return snpuSuccess;
  });
}

snpuError_t snpuGraphGetNodeName(snpuGraph_t graph, size_t index, const char** name) {
  return guarded([&] {
    if (!graph) return null_argument("snpuGraphGetNodeName", "graph");
    if (!name) return null_argument("snpuGraphGetNodeName", "name");
    const auto& tasks = reinterpret_cast<Graph*>(graph)->tasks;
    if (index >= tasks.size())
      return fail(snpuErrorInvalidValue, "snpuGraphGetNodeName: node " + std::to_string(index) + " of a graph of " +
                                             std::to_string(tasks.size()));
    *name = tasks[index].name;
    return snpuSuccess;
  });
}

snpuError_t snpuGraphLaunch(snpuGraph_t graph, snpuStream_t stream) {
  return guarded([&] {
    Runtime* rt;
    Stream* s;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!graph) return null_argument("snpuGraphLaunch", "graph");
    if (snpuError_t e = rt->stream(stream, "snpuGraphLaunch", &s)) return e;
    return launch_graph(reinterpret_cast<Graph*>(graph), s);
  });
}

snpuError_t snpuGraphDestroy(snpuGraph_t graph) {
  return guarded([&] {
    if (graph) reinterpret_cast<Graph*>(graph)->release();
    return snpuSuccess;
  });
}

// ---------------------------------------------------------------- activity

snpuError_t snpuActivityEnable(int enable) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    activity::set_enabled(enable != 0);
    return snpuSuccess;
  });
}

snpuError_t snpuActivitySetCorrelationId(uint64_t id) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    activity::set_correlation_id(id);
    return snpuSuccess;
  });
}

snpuError_t snpuActivityDrain(snpuActivityRecord* out, size_t capacity, size_t* count) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!count) return null_argument("snpuActivityDrain", "count");
    if (!out && capacity > 0) return null_argument("snpuActivityDrain", "out");
    *count = activity::drain(out, capacity);
    return snpuSuccess;
  });
}

// ---------------------------------------------------------------- statistics

snpuError_t snpuGetDeviceStats(int device, snpuDeviceStats* stats) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!stats) return null_argument("snpuGetDeviceStats", "stats");
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuGetDeviceStats");
    *stats = snpuDeviceStats{};
    if (const softnpu::rt::stats::DeviceCounters* c = d->counters_if_used()) {
      stats->memory_in_use = c->memory_in_use.load(std::memory_order_relaxed);
      stats->memory_peak = c->memory_peak.load(std::memory_order_relaxed);
      stats->kernels_launched = c->kernels_launched.load(std::memory_order_relaxed);
      stats->kernels_completed = c->kernels_completed.load(std::memory_order_relaxed);
      stats->busy_ns = c->busy_ns.load(std::memory_order_relaxed);
      stats->sync_waits = c->sync_waits.load(std::memory_order_relaxed);
    }
    return snpuSuccess;
  });
}

// ---------------------------------------------------------------- faults on demand

snpuError_t snpuFaultInject(const snpuFault* fault) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!fault) return null_argument("snpuFaultInject", "fault");
    if (fault->device >= 0 && !rt->device(fault->device)) return rt->invalid_device(fault->device, "snpuFaultInject");
    if (fault->kind == snpuFaultMemoryUce) {
      Allocation a;
      if (!rt->memory.find(fault->ptr, &a) || !a.device || a.device->index != fault->device)
        return fail(snpuErrorInvalidValue, "snpuFaultInject: the UCE range is not device memory of that device");
    }
    return inject_fault(*fault);
  });
}

snpuError_t snpuFaultClear(void) {
  clear_faults();
  return snpuSuccess;
}

snpuError_t snpuDeviceStop(int device) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuDeviceStop");
    return stop_device(d);
  });
}

snpuError_t snpuDeviceRestart(int device) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    Device* d = rt->device(device);
    if (!d) return rt->invalid_device(device, "snpuDeviceRestart");
    return restart_device(d);
  });
}

int snpuMemUceActive(void) { return uce_active() ? 1 : 0; }

int snpuMemRangeHasUce(const void* ptr, size_t size) { return size && range_has_uce(ptr, size) ? 1 : 0; }

snpuError_t snpuDeviceGetUceInfo(int device, void** addrs, size_t* sizes, size_t capacity, size_t* count) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!count) return null_argument("snpuDeviceGetUceInfo", "count");
    if (capacity && (!addrs || !sizes)) return null_argument("snpuDeviceGetUceInfo", "addrs and sizes");
    if (!rt->device(device)) return rt->invalid_device(device, "snpuDeviceGetUceInfo");
    const auto ranges = uce_ranges(device);
    *count = std::min(capacity, ranges.size());
    for (size_t i = 0; i < *count; ++i) {
      addrs[i] = ranges[i].first;
      sizes[i] = ranges[i].second;
    }
    return snpuSuccess;
  });
}

}  // extern "C"
