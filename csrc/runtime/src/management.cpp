// The management interface (management.h): the physical devices of the configuration, and the reader side of the
// statistics every process publishes (published_stats.h). It never initializes the runtime, so npu-smi costs the
// devices nothing.
#include "softnpu/management.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <string>
#include <vector>

#include "../../common/env.h"
#include "config.h"
#include "errors.h"
#include "published_stats.h"
#include "safe_file.h"
#include "soc.h"

namespace softnpu::rt {
namespace {

// Runs the body of a C call: no exception may cross the C interface.
template <typename F>
snpuError_t guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const env::EnvError& e) {
    return fail(snpuErrorInvalidConfig, e.what());
  } catch (const std::bad_alloc&) {
    return fail(snpuErrorMemoryAllocation, "the host is out of memory");
  } catch (const std::exception& e) {
    return fail(snpuErrorInternal, std::string("internal error: ") + e.what());
  }
}

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The pid in "softnpu-stats.<uid>.<pid>" when the name is one of this user's segments, else -1.
pid_t segment_pid(const char* name, const std::string& prefix) {
  if (std::strncmp(name, prefix.c_str(), prefix.size()) != 0) return -1;
  const char* digits = name + prefix.size();
  if (*digits == '\0' || std::strlen(digits) > 9) return -1;
  for (const char* p = digits; *p; ++p)
    if (*p < '0' || *p > '9') return -1;
  return static_cast<pid_t>(std::atol(digits));
}

bool process_exists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// A mapped segment, unmapped when done.
class Mapping {
 public:
  // /dev/shm is writable by every local user: anything may sit under a segment's name. Only a regular file of ours
  // of exactly a segment's size is mapped (another size is a segment still being created, one from another version
  // of softnpu, or a planted file); a FIFO or a symlink is neither opened for blocking nor followed.
  Mapping(int shm_dir, const char* name) {
    files::Expect expect{true, off_t(sizeof(stats::Segment)), off_t(sizeof(stats::Segment))};
    std::string why;
    int fd = files::open_checked(shm_dir, name, expect, &why);
    if (fd < 0) return;
    void* p = mmap(nullptr, sizeof(stats::Segment), PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) segment_ = static_cast<const stats::Segment*>(p);
    close(fd);
  }
  ~Mapping() {
    if (segment_) munmap(const_cast<stats::Segment*>(segment_), sizeof(stats::Segment));
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // The segment once its publisher completed the header, else null.
  const stats::Segment* ready() const {
    if (!segment_ || segment_->ready.load(std::memory_order_acquire) != 1) return nullptr;
    if (segment_->magic != stats::kMagic || segment_->version != stats::kVersion) return nullptr;
    return segment_;
  }

 private:
  const stats::Segment* segment_ = nullptr;
};

void append_usage(const stats::Segment& s, std::vector<snpuMgmtProcessUsage>* out) {
  for (int d = 0; d < stats::kMaxDevices; ++d) {
    const stats::DeviceCounters& c = s.devices[d];
    if (!c.touched.load(std::memory_order_acquire)) continue;
    snpuMgmtProcessUsage u{};
    u.pid = s.pid;
    std::snprintf(u.process_name, sizeof(u.process_name), "%.*s", int(sizeof(s.process_name)), s.process_name);
    u.device = d;
    u.memory_in_use = c.memory_in_use.load(std::memory_order_relaxed);
    u.memory_peak = c.memory_peak.load(std::memory_order_relaxed);
    u.busy_ns = c.busy_ns.load(std::memory_order_relaxed);
    u.kernels_launched = c.kernels_launched.load(std::memory_order_relaxed);
    u.compute_threads = int(c.compute_threads);
    u.sample_ns = monotonic_ns();
    out->push_back(u);
  }
}

// Every live process's usage; removes the segments of dead processes.
std::vector<snpuMgmtProcessUsage> list_usage() {
  std::vector<snpuMgmtProcessUsage> usage;
  std::string prefix = std::string(stats::kSegmentPrefix) + std::to_string(geteuid()) + ".";
  DIR* dir = opendir("/dev/shm");
  if (!dir) return usage;  // no shared memory: publishers kept their statistics in process memory
  while (dirent* entry = readdir(dir)) {
    pid_t pid = segment_pid(entry->d_name, prefix);
    if (pid <= 0) continue;
    std::string name = entry->d_name;
    if (!process_exists(pid)) {
      shm_unlink(("/" + name).c_str());
      continue;
    }
    Mapping mapping(dirfd(dir), entry->d_name);
    const stats::Segment* s = mapping.ready();
    if (!s || s->pid != pid) continue;
    // A live pid that started at another time is a new process that reused the pid of a dead publisher.
    if (stats::process_start_ticks(pid) != s->start_ticks) {
      shm_unlink(("/" + name).c_str());
      continue;
    }
    append_usage(*s, &usage);
  }
  closedir(dir);
  return usage;
}

}  // namespace
}  // namespace softnpu::rt

using namespace softnpu::rt;

extern "C" {

snpuError_t snpuMgmtGetDeviceCount(int* count) {
  return guarded([&] {
    if (!count) return fail(snpuErrorInvalidValue, "snpuMgmtGetDeviceCount: count is NULL");
    *count = load_config().physical_device_count;
    return snpuSuccess;
  });
}

snpuError_t snpuMgmtGetDeviceProperties(snpuDeviceProp* prop, int device) {
  return guarded([&] {
    if (!prop) return fail(snpuErrorInvalidValue, "snpuMgmtGetDeviceProperties: prop is NULL");
    Config config = load_config();
    if (device < 0 || device >= config.physical_device_count)
      return fail(snpuErrorInvalidDevice, "device " + std::to_string(device) + " does not exist: there are " +
                                              std::to_string(config.physical_device_count) +
                                              " (SOFTNPU_DEVICE_COUNT)");
    *prop = snpuDeviceProp{};
    set_soc_properties(prop, soc_profiles()[config.soc]);
    prop->total_memory = config.memory_bytes;
    prop->compute_threads = config.cores;
    prop->physical_index = device;
    return snpuSuccess;
  });
}

snpuError_t snpuMgmtListProcessUsage(snpuMgmtProcessUsage* out, size_t capacity, size_t* count) {
  return guarded([&] {
    if (!count) return fail(snpuErrorInvalidValue, "snpuMgmtListProcessUsage: count is NULL");
    if (!out && capacity > 0) return fail(snpuErrorInvalidValue, "snpuMgmtListProcessUsage: out is NULL");
    std::vector<snpuMgmtProcessUsage> usage = list_usage();
    for (size_t i = 0; i < usage.size() && i < capacity; ++i) out[i] = usage[i];
    *count = usage.size();
    return snpuSuccess;
  });
}

}  // extern "C"
