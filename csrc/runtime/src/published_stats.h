// Live statistics every process publishes for npu-smi: one shared-memory segment per process
// (/dev/shm/softnpu-stats.<uid>.<pid>, mode 0600, so only its user reads it), holding a header and one block of
// counters per physical device. The runtime updates the counters in place with relaxed atomics; management.cpp
// reads the segments of every live process and removes those of dead ones.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace softnpu::rt::stats {

// Counters of one physical device in this process. The host thread writes the launch side, compute threads the
// completion side: kept on separate cache lines so they do not contend.
struct alignas(64) DeviceCounters {
  // Host side.
  std::atomic<uint64_t> memory_in_use{0};     // bytes of device memory held (snpuMalloc minus snpuFree)
  std::atomic<uint64_t> memory_peak{0};       // peak of memory_in_use
  std::atomic<uint64_t> kernels_launched{0};  // kernels, copies and memsets enqueued
  std::atomic<uint64_t> sync_waits{0};        // synchronizing calls that had to wait for the device
  std::atomic<uint32_t> touched{0};           // 1 once the process used the device (npu-smi lists only these)
  uint32_t compute_threads = 0;
  uint64_t capacity = 0;                      // bytes
  // Compute side.
  alignas(64) std::atomic<uint64_t> kernels_completed{0};
  std::atomic<uint64_t> busy_ns{0};           // total time compute threads spent running work
};

constexpr uint32_t kMagic = 0x5550'4E53;  // "SNPU"
constexpr uint32_t kVersion = 1;
constexpr int kMaxDevices = 64;           // SOFTNPU_DEVICE_COUNT's upper bound
constexpr const char* kSegmentPrefix = "softnpu-stats.";

struct Segment {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t start_ticks;        // field 22 of /proc/<pid>/stat: tells a reused pid from the publisher
  char process_name[64];       // /proc/self/comm
  std::atomic<uint32_t> ready; // set last, once the header is complete
  DeviceCounters devices[kMaxDevices];
};

// "softnpu-stats.<uid>.<pid>": the name for shm_open (with a leading '/') and under /dev/shm.
std::string segment_name(uid_t uid, pid_t pid);

// Start time of a process (field 22 of /proc/<pid>/stat), or 0 if it does not exist.
uint64_t process_start_ticks(pid_t pid);

// The counters of a physical device in this process, creating and publishing the segment on first use. Never null:
// if shared memory is unavailable, counters live in process memory (and a warning is logged). Marks the device as
// used by this process (npu-smi lists it), so call it when the device is first used, not when it is created. The
// pointer stays valid until snpuShutdown (and after it, through the process's exit).
DeviceCounters* counters(int physical_device);

// Device memory accounting, keeping the peak.
void add_memory(DeviceCounters* c, int64_t delta);

// Removes this process's segment (at shutdown and at exit).
void unpublish();

}  // namespace softnpu::rt::stats
