// The runtime's global state: created by snpuInit (or any first call) from the configuration, torn down by
// snpuShutdown, and created anew by the next call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config.h"
#include "device.h"
#include "event.h"
#include "handles.h"
#include "memory.h"
#include "softnpu/runtime.h"
#include "stream.h"

namespace softnpu::rt {

class Runtime {
 public:
  Runtime(const Config& config, uint64_t epoch);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Config config;
  const uint64_t epoch;  // distinguishes this runtime from earlier ones (per-thread current device)
  Memory memory;
  std::vector<std::unique_ptr<Device>> devices;

  // The device with that visible index, or null.
  Device* device(int index) const;
  // The calling thread's current device.
  Device* current_device() const;

  // Resolve caller handles, failing with snpuErrorInvalidHandle and a message naming the call. A NULL stream is
  // the current device's default stream.
  snpuError_t stream(snpuStream_t handle, const char* call, Stream** out) const;
  snpuError_t event(snpuEvent_t handle, const char* call, Event** out) const;
  snpuError_t invalid_device(int index, const char* call) const;
};

// Whether this process is a child forked after the runtime was initialized (runtime.h, Fork).
bool forked_child();

// The runtime if it is initialized, else null (never creates it).
Runtime* initialized_runtime();

// The number of visible devices: the runtime's, or before initialization the configuration's (runtime.h).
snpuError_t visible_device_count(int* count);
// The row of soc_profiles() the devices present as: the runtime's, or before initialization the configuration's.
// Does not initialize the runtime.
snpuError_t selected_soc(int* index);

// The runtime, creating it on first use. Fails with snpuErrorInvalidConfig (message naming the variable) when the
// environment is malformed, and with snpuErrorForked in a child forked after initialization.
snpuError_t acquire_runtime(Runtime** out);

// Waits for all work, then destroys the runtime: handles become invalid, memory is freed, statistics unpublished.
// snpuErrorForked in a child forked after initialization.
snpuError_t shutdown_runtime();

int current_device_index(const Runtime& rt);
void set_current_device(const Runtime& rt, int index);

// Process-wide, so handles from before a shutdown stay recognizably invalid.
HandleTable<Stream>& stream_handles();
HandleTable<Event>& event_handles();

}  // namespace softnpu::rt
