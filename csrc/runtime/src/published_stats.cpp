// The publisher side of published_stats.h: creates this process's segment on first use and removes it at shutdown
// and exit. The mapping itself is never unmapped, so counter pointers handed out stay valid even if a compute thread
// still updates them while the process exits; publishing anew (after snpuShutdown, or in a forked child) maps the
// new segment over the same addresses.
#include "published_stats.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sstream>

#include "config.h"
#include "log.h"
#include "safe_file.h"

namespace softnpu::rt::stats {

std::string segment_name(uid_t uid, pid_t pid) {
  return std::string(kSegmentPrefix) + std::to_string(uid) + "." + std::to_string(pid);
}

uint64_t process_start_ticks(pid_t pid) {
  std::string line;
  if (!files::read_small(("/proc/" + std::to_string(pid) + "/stat").c_str(), 4096, &line)) return 0;
  // Field 2 (comm) may hold spaces and parentheses: count fields from the last ')', which ends it.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(fields >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

namespace {

std::mutex g_mutex;                         // guards publishing and first touches
std::atomic<Segment*> g_segment{nullptr};   // what counters() hands out from; null until (re)published
Segment* g_mapping = nullptr;               // our shared mapping, kept for the life of the process
std::string g_name;                         // shm name of the published segment; empty when none is published
bool g_exiting = false;                     // after exit's unpublish: keep counting, never publish again
int g_compute_threads = 0;                  // configuration recorded in each touched device's counters
uint64_t g_capacity = 0;

std::string read_process_name() {
  std::string name;
  files::read_small("/proc/self/comm", 64, &name);
  return name.substr(0, name.find('\n'));
}

void fill_header(Segment* s) {
  s->magic = kMagic;
  s->version = kVersion;
  s->pid = getpid();
  s->start_ticks = process_start_ticks(getpid());
  std::string name = read_process_name();
  std::snprintf(s->process_name, sizeof(s->process_name), "%s", name.c_str());
}

// Opens a new segment under our name. A segment left under it can only come from a dead process that had our pid
// (we are alive and the name holds our pid), so it is replaced.
int create_segment(const std::string& name, std::string* error) {
  std::string path = "/" + name;
  int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) {
    shm_unlink(path.c_str());
    fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) {
    *error = "cannot create shared memory " + path + ": " + std::strerror(errno);
    return -1;
  }
  // The umask may have removed bits from 0600; the reader needs exactly the owner's read and write.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, sizeof(Segment)) != 0) {
    *error = "cannot size shared memory " + path + ": " + std::strerror(errno);
    close(fd);
    shm_unlink(path.c_str());
    return -1;
  }
  return fd;
}

void on_exit() {
  {
    std::lock_guard lock(g_mutex);
    g_exiting = true;
  }
  unpublish();
}

// A forked child must not update or remove its parent's segment: it publishes its own on its next use.
void on_fork_prepare() { g_mutex.lock(); }
void on_fork_parent() { g_mutex.unlock(); }
void on_fork_child() {
  g_segment.store(nullptr, std::memory_order_relaxed);
  g_name.clear();
  g_mutex.unlock();
}

// Process memory when shared memory is unavailable: the runtime still counts, only npu-smi does not see it.
Segment* fallback_segment() {
  static Segment* const segment = static_cast<Segment*>(::operator new(sizeof(Segment), std::align_val_t{64}));
  return segment;
}

// Called with g_mutex held, when no segment is published.
Segment* publish() {
  static std::once_flag hooks;
  std::call_once(hooks, [] {
    std::atexit(on_exit);
    pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
  });

  try {
    Config config = load_config();
    g_compute_threads = config.cores;
    g_capacity = config.memory_bytes;
  } catch (const std::exception&) {
    // The runtime reports a malformed environment itself, before any device is used; nothing to record.
    g_compute_threads = 0;
    g_capacity = 0;
  }

  std::string name = segment_name(geteuid(), getpid());
  std::string error;
  Segment* segment = nullptr;
  // A use during exit, after the segment was removed, must not leave a new one behind.
  int fd = g_exiting ? -1 : create_segment(name, &error);
  if (fd >= 0) {
    int flags = MAP_SHARED | (g_mapping ? MAP_FIXED : 0);
    void* p = mmap(g_mapping, sizeof(Segment), PROT_READ | PROT_WRITE, flags, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      error = "cannot map shared memory /" + name + ": " + std::strerror(errno);
      shm_unlink(("/" + name).c_str());
    } else {
      segment = g_mapping = static_cast<Segment*>(p);
      g_name = name;
    }
  }
  if (!segment) {
    if (!g_exiting) SNPU_LOG(log::kWarning, "%s; npu-smi will not see this process", error.c_str());
    segment = fallback_segment();
  }
  new (segment) Segment();
  fill_header(segment);
  segment->ready.store(1, std::memory_order_release);
  g_segment.store(segment, std::memory_order_release);
  return segment;
}

}  // namespace

DeviceCounters* counters(int physical_device) {
  Segment* s = g_segment.load(std::memory_order_acquire);
  if (s && s->devices[physical_device].touched.load(std::memory_order_acquire)) return &s->devices[physical_device];

  std::lock_guard lock(g_mutex);
  s = g_segment.load(std::memory_order_relaxed);
  if (!s) s = publish();
  DeviceCounters* c = &s->devices[physical_device];
  if (!c->touched.load(std::memory_order_relaxed)) {
    c->compute_threads = static_cast<uint32_t>(g_compute_threads);
    c->capacity = g_capacity;
    c->touched.store(1, std::memory_order_release);  // readers see the configuration once they see touched
  }
  return c;
}

void add_memory(DeviceCounters* c, int64_t delta) {
  uint64_t now = c->memory_in_use.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed) +
                 static_cast<uint64_t>(delta);
  if (delta <= 0) return;
  uint64_t peak = c->memory_peak.load(std::memory_order_relaxed);
  while (now > peak && !c->memory_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void unpublish() {
  std::lock_guard lock(g_mutex);
  if (!g_name.empty()) shm_unlink(("/" + g_name).c_str());
  g_name.clear();
  // The next use publishes anew, unless the process is exiting.
  if (!g_exiting) g_segment.store(nullptr, std::memory_order_release);
}

}  // namespace softnpu::rt::stats
