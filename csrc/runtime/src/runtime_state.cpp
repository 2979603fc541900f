#include "runtime_state.h"

#include "soc.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <string>

#include "../../common/env.h"
#include "log.h"
#include "published_stats.h"
#include "soc.h"

namespace softnpu::rt {

namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::mutex g_lifecycle_mutex;  // serializes creation and shutdown
uint64_t g_epoch = 0;          // guarded by g_lifecycle_mutex
// A runtime exists, or is being created or destroyed (guarded writes, under g_lifecycle_mutex).
std::atomic<bool> g_in_use{false};
std::atomic<bool> g_forked{false};  // a child forked while the runtime was in use

// A child forked while the runtime was in use only marks itself: its Runtime, queues and locks (the lifecycle lock
// included, which another thread may have held) are copies whose compute threads do not exist here, so nothing may
// touch them, not even to free them.
void on_fork_child() {
  if (g_in_use.load(std::memory_order_relaxed)) g_forked.store(true, std::memory_order_relaxed);
}

snpuError_t forked_error() {
  return fail(snpuErrorForked,
              "the runtime was initialized before this process was forked, and its compute threads exist only in "
              "the parent: a forked child cannot use the devices (start child processes with spawn, or fork before "
              "the first use)");
}

struct CurrentDevice {
  uint64_t epoch = 0;
  int index = 0;
};
thread_local CurrentDevice t_current;

}  // namespace

HandleTable<Stream>& stream_handles() {
  static auto* const table = new HandleTable<Stream>;  // never destroyed: compute threads outlive static destructors
  return *table;
}

HandleTable<Event>& event_handles() {
  static auto* const table = new HandleTable<Event>;
  return *table;
}

Runtime::Runtime(const Config& config, uint64_t epoch) : config(config), epoch(epoch), memory(config.protect_memory) {
  for (size_t i = 0; i < config.visible.size(); ++i) {
    devices.push_back(std::make_unique<Device>(this, static_cast<int>(i), config.visible[i], config.cores,
                                               config.memory_bytes));
    Stream* s = devices.back()->default_stream();
    s->handle = stream_handles().insert(s);
  }
}

Runtime::~Runtime() {
  // Kernels may launch more work, on any device: wait until all devices are idle at once.
  for (bool idle = false; !idle;) {
    for (auto& d : devices) d->synchronize(false);
    idle = std::all_of(devices.begin(), devices.end(), [](const auto& d) { return d->idle(); });
  }
  for (Event* e : event_handles().remove_all()) e->release();
  for (Stream* s : stream_handles().remove_all()) {
    if (s == s->device->default_stream()) continue;  // owned by its device
    s->device->forget_stream(s);
    s->release();
  }
  for (auto& d : devices) d->stop();
  memory.release_all();
}

Device* Runtime::device(int index) const {
  return index >= 0 && index < static_cast<int>(devices.size()) ? devices[index].get() : nullptr;
}

Device* Runtime::current_device() const { return devices[current_device_index(*this)].get(); }

snpuError_t Runtime::stream(snpuStream_t handle, const char* call, Stream** out) const {
  if (!handle) {
    *out = current_device()->default_stream();
    return snpuSuccess;
  }
  *out = stream_handles().find(handle);
  if (*out) return snpuSuccess;
  return fail(snpuErrorInvalidHandle, std::string(call) + ": the stream handle is not a live stream (destroyed, "
                                                          "created before snpuShutdown, or never created)");
}

snpuError_t Runtime::event(snpuEvent_t handle, const char* call, Event** out) const {
  *out = handle ? event_handles().find(handle) : nullptr;
  if (*out) return snpuSuccess;
  return fail(snpuErrorInvalidHandle,
              std::string(call) + (handle ? ": the event handle is not a live event (destroyed, created before "
                                            "snpuShutdown, or never created)"
                                          : ": the event is NULL"));
}

snpuError_t Runtime::invalid_device(int index, const char* call) const {
  return fail(snpuErrorInvalidDevice, std::string(call) + ": device " + std::to_string(index) +
                                          " does not exist; " + std::to_string(devices.size()) +
                                          " devices are visible (SOFTNPU_DEVICE_COUNT, ASCEND_RT_VISIBLE_DEVICES)");
}

bool forked_child() { return g_forked.load(std::memory_order_relaxed); }

Runtime* initialized_runtime() { return g_runtime.load(std::memory_order_acquire); }

snpuError_t visible_device_count(int* count) {
  if (forked_child()) return forked_error();
  if (Runtime* rt = initialized_runtime()) {
    *count = static_cast<int>(rt->devices.size());
    return snpuSuccess;
  }
  try {
    *count = static_cast<int>(load_config().visible.size());
  } catch (const env::EnvError& e) {
    return fail(snpuErrorInvalidConfig, e.what());
  }
  return snpuSuccess;
}

snpuError_t selected_soc(int* index) {
  if (Runtime* rt = initialized_runtime()) {
    *index = rt->config.soc;
    return snpuSuccess;
  }
  try {
    *index = load_config().soc;
  } catch (const env::EnvError& e) {
    return fail(snpuErrorInvalidConfig, e.what());
  }
  return snpuSuccess;
}

snpuError_t acquire_runtime(Runtime** out) {
  if (forked_child()) return forked_error();
  Runtime* rt = g_runtime.load(std::memory_order_acquire);
  if (!rt) {
    std::lock_guard lock(g_lifecycle_mutex);
    rt = g_runtime.load(std::memory_order_relaxed);
    if (!rt) {
      static std::once_flag fork_handler;
      std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
      g_in_use.store(true, std::memory_order_relaxed);
      Config config;
      try {
        config = load_config();
      } catch (const env::EnvError& e) {
        g_in_use.store(false, std::memory_order_relaxed);
        return fail(snpuErrorInvalidConfig, e.what());
      }
      log::configure(config.log_level, config.log_to_stdout, config.log_dir);
      rt = new Runtime(config, ++g_epoch);
      g_runtime.store(rt, std::memory_order_release);
      SNPU_LOG(log::kInfo, "runtime initialized: %zu devices presenting as %s, %d compute threads each, %llu MiB each%s%s",
               config.visible.size(), soc_profiles()[config.soc].name, config.cores, static_cast<unsigned long long>(config.memory_bytes >> 20),
               config.launch_blocking ? ", launch blocking" : "", config.protect_memory ? ", memory protected" : "");
    }
  }
  *out = rt;
  return snpuSuccess;
}

snpuError_t shutdown_runtime() {
  if (forked_child()) return forked_error();  // waiting for the parent's devices would never end
  std::lock_guard lock(g_lifecycle_mutex);
  Runtime* rt = g_runtime.load(std::memory_order_relaxed);
  if (!rt) return snpuSuccess;
  delete rt;
  g_runtime.store(nullptr, std::memory_order_release);
  SNPU_LOG(log::kInfo, "runtime shut down");
  log::close();
  stats::unpublish();
  g_in_use.store(false, std::memory_order_relaxed);
  return snpuSuccess;
}

int current_device_index(const Runtime& rt) { return t_current.epoch == rt.epoch ? t_current.index : 0; }

void set_current_device(const Runtime& rt, int index) { t_current = {rt.epoch, index}; }

}  // namespace softnpu::rt
