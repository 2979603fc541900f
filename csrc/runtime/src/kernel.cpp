#include "kernel.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <string>

#include "activity.h"
#include "device.h"
#include "graph.h"
#include "interrupt.h"
#include "log.h"
#include "runtime_state.h"

namespace softnpu::rt {

namespace {

// Kernels running now on all devices: divides the host's cores among them (snpuKernelThreadBudget).
std::atomic<int> g_running_kernels{0};

using Clock = std::chrono::steady_clock;

struct KernelContext {
  Stream* stream = nullptr;  // non-null while a kernel runs on this thread
  Device* device = nullptr;
  const char* name = nullptr;  // the kernel running (a graph's recorded kernel while the graph runs)
  std::string message;
  bool message_set = false;
  uint64_t timed_key = 0;  // a small kernel's key while it runs on one thread and is timed (0: none)
  Clock::time_point timed_start;
};

thread_local KernelContext t_kernel;

// Below this size a kernel runs on one thread: an OpenMP team in a compute thread shares the cores with the launching
// host thread and the other compute threads, and for small work it costs more than it gains. Measured on 2 cores
// (add, npu, per op): 65,536 floats (768 KiB) 8 us on one thread, 14 us on two; 131,072 (1.5 MiB) 21 us against
// 53-85 us; 1,048,576 (12 MiB) 310 us against 280 us.
constexpr uint64_t kSmallKernelBytes = 4 << 20;

// Bytes understate the work of compute-bound kernels: a GEMM of 256x512 by 512x1024 (3.5 MiB) took 2.8 ms on one
// thread against 1.5 ms on two, the fused transformer encoder layer of 16x64x128 (under 1 MiB) 5.7 ms against
// 3.1 ms, GPT-2 tiny's 1024x128 by 128x128 addmm 0.4 ms against 0.25 ms, while memory-bound kernels below
// kSmallKernelBytes take at most about 100 us. So a small kernel that twice in a row runs this long on its one thread
// gets the threads of a large one from then on: learned per kernel name and size, as a real NPU's op picks its cores
// by its shape. Twice, so that one run slowed by the host descheduling it does not decide.
constexpr auto kLongKernel = std::chrono::microseconds(250);

// Kernel name and size -> how often in a row it ran long on one thread (kLearned: it gets the large budget). A lossy
// table of atomic words, the key in the high bits and the count in the low two: a collision forgets a kernel, which
// then learns again.
constexpr uint64_t kCountBits = 3, kLearned = 2;
std::array<std::atomic<uint64_t>, 4096> g_long_kernels{};

uint64_t kernel_key(const char* name, uint64_t work_bytes) {
  uint64_t h = reinterpret_cast<uintptr_t>(name) * 0x9E3779B97F4A7C15ull ^ work_bytes * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  return (h & ~kCountBits) | 4;  // never 0, which marks "not timed" and an empty slot
}

std::atomic<uint64_t>& long_kernel_slot(uint64_t key) { return g_long_kernels[(key >> 2) % g_long_kernels.size()]; }

bool learned_long(uint64_t key) {
  uint64_t entry = long_kernel_slot(key).load(std::memory_order_relaxed);
  return (entry & ~kCountBits) == key && (entry & kCountBits) >= kLearned;
}

// After a timed small kernel: counts a long run, forgets the count after a short one.
void finish_timed_kernel(KernelContext& k) {
  if (k.timed_key == 0) return;
  const bool long_run = Clock::now() - k.timed_start >= kLongKernel;
  std::atomic<uint64_t>& slot = long_kernel_slot(k.timed_key);
  const uint64_t entry = slot.load(std::memory_order_relaxed);
  const uint64_t count = (entry & ~kCountBits) == k.timed_key ? entry & kCountBits : 0;
  if (long_run) {
    slot.store(k.timed_key | std::min(count + 1, kLearned), std::memory_order_relaxed);
  } else if (count != 0) {
    slot.store(0, std::memory_order_relaxed);
  }
  k.timed_key = 0;
}

// The device's compute threads shared among the kernels running now and the streams about to run theirs, so that a
// kernel that starts alone does not keep a full team of threads while another stream's kernel starts beside it.
int share(const Device* device) {
  int busy = std::max({1, g_running_kernels.load(std::memory_order_relaxed), active_stream_count()});
  return std::min(device->cores, std::max(1, device->runtime->config.host_cores / busy));
}

}  // namespace

bool in_kernel() { return t_kernel.stream != nullptr; }

// Work a stream may hold before a launch waits, as CUDA's launch queue is bounded: a host far ahead of the device
// gains nothing by running further ahead, and every queued launch holds memory (its arguments, its outputs).
constexpr uint64_t kMaxQueued = 1024;

snpuError_t launch(Stream* s, Task task, bool wait, Deadline room_deadline) {
  if (StreamCapture* c = s->capture.load(std::memory_order_acquire)) [[unlikely]]
    return capture_task(c, task, wait);
  Device* d = s->device;
  const bool host = !in_kernel();
  // A full queue: the host sleeps until half of it has run, then queues the next half at full speed (waking for each
  // kernel that finishes would cost the host a context switch per launch).
  if (host) {
    const uint64_t next = s->enqueued() + 1;
    if (next > kMaxQueued && !s->reached(next - kMaxQueued)) {
      const WaitResult room = wait_interruptibly(s, next - kMaxQueued / 2, room_deadline, /*spin=*/false);
      if (room == WaitResult::kDeadline) return snpuErrorNotReady;
      if (room == WaitResult::kInterrupted) {
        drop_task(task);
        return interrupted(task.name, "nothing was enqueued");
      }
    }
  }
  // A launch that waits for its own task (a copy into pageable host memory, ASCEND_LAUNCH_BLOCKING) first waits,
  // interruptibly, for the work queued before it: once enqueued, the task is waited for to its end (the host may
  // own the memory it writes).
  const bool waits = host && (wait || d->runtime->config.launch_blocking);
  if (waits && wait_interruptibly(s, s->enqueued(), kNoDeadline) == WaitResult::kInterrupted) {
    drop_task(task);
    return interrupted(task.name, "nothing was enqueued");
  }
  task.correlation_id = activity::correlation_id();
  task.traced = activity::enabled();
  // Logged before enqueueing: once queued, the kernel may run and its name stop being valid.
  SNPU_LOG(log::kInfo, "launch %s on device %d stream %llu", task.name, d->index,
           static_cast<unsigned long long>(s->id));
  // Counted first, so readers never see more kernels completed than launched.
  if (task.kind == TaskKind::kKernel || task.kind == TaskKind::kCopy || task.kind == TaskKind::kMemset)
    d->counters()->kernels_launched.fetch_add(1, std::memory_order_relaxed);
  uint64_t seq = s->enqueue(task);
  return waits ? synchronize(s, seq, kNoDeadline, /*interruptible=*/false) : snpuSuccess;
}

bool run_kernel(Device* device, Stream* s, const Task& task, KernelError* error) {
  KernelContext& k = t_kernel;
  k.stream = s;
  k.device = device;
  k.name = task.name;
  k.message_set = false;
  g_running_kernels.fetch_add(1, std::memory_order_relaxed);
  int code = 0;
  try {
    code = task.kernel.fn(task.kernel.arg);
  } catch (const std::exception& e) {
    code = -1;
    k.message = e.what();
    k.message_set = true;
  } catch (...) {
    code = -1;
    k.message = "the kernel threw an exception that is not a std::exception";
    k.message_set = true;
  }
  finish_timed_kernel(k);
  g_running_kernels.fetch_sub(1, std::memory_order_relaxed);
  k.stream = nullptr;
  k.device = nullptr;
  if (code == 0) return false;
  error->kernel_name = task.name;
  error->message = k.message_set ? k.message : "returned " + std::to_string(code) + " without a message";
  error->code = code;
  error->device = device->index;
  error->stream_id = s->id;
  return true;
}

void drop_task(const Task& task) {
  if (task.kind == TaskKind::kKernel) run_cleanup(task);
  release_task_references(task);
}

void run_cleanup(const Task& task) {
  if (!task.kernel.cleanup) return;
  try {
    task.kernel.cleanup(task.kernel.arg);
  } catch (...) {
    SNPU_LOG(log::kError, "the cleanup of kernel '%s' threw an exception; ignored", task.name);
  }
}

void set_kernel_error_message(const char* message) {
  KernelContext& k = t_kernel;
  if (!k.stream) return;
  k.message = message ? message : "";
  k.message_set = true;
}

int run_recorded_kernel(const Task& task) {
  KernelContext& k = t_kernel;
  const char* graph_name = k.name;
  k.name = task.name;
  const int code = task.kernel.fn(task.kernel.arg);
  finish_timed_kernel(k);
  k.name = graph_name;
  return code;
}

int thread_budget(const Device* device, uint64_t work_bytes) {
  return work_bytes < kSmallKernelBytes ? 1 : share(device);
}

int kernel_thread_budget(uint64_t work_bytes) {
  KernelContext& k = t_kernel;
  if (!k.stream) return 1;
  if (work_bytes >= kSmallKernelBytes) return share(k.device);
  const uint64_t key = kernel_key(k.name, work_bytes);
  if (learned_long(key)) return share(k.device);
  k.timed_key = key;
  k.timed_start = Clock::now();
  return 1;
}

Stream* kernel_current_stream() { return t_kernel.stream; }

}  // namespace softnpu::rt
