#include "kernel.h"

#include <algorithm>
#include <exception>
#include <string>

#include "activity.h"
#include "device.h"
#include "graph.h"
#include "log.h"
#include "runtime_state.h"

namespace softnpu::rt {

namespace {

// Kernels running now on all devices: divides the host's cores among them (snpuKernelThreadBudget).
std::atomic<int> g_running_kernels{0};

struct KernelContext {
  Stream* stream = nullptr;  // non-null while a kernel runs on this thread
  Device* device = nullptr;
  std::string message;
  bool message_set = false;
};

thread_local KernelContext t_kernel;

// Below this size a kernel runs on one thread: an OpenMP team in a compute thread shares the cores with the launching
// host thread and the other compute threads, and for small work it costs more than it gains. Measured on 2 cores
// (add, npu, per op): 65,536 floats (768 KiB) 8 us on one thread, 14 us on two; 131,072 (1.5 MiB) 21 us against
// 53-85 us; 1,048,576 (12 MiB) 310 us against 280 us.
constexpr uint64_t kSmallKernelBytes = 4 << 20;

}  // namespace

bool in_kernel() { return t_kernel.stream != nullptr; }

// Work a stream may hold before a launch waits, as CUDA's launch queue is bounded: a host far ahead of the device
// gains nothing by running further ahead, and every queued launch holds memory (its arguments, its outputs).
constexpr uint64_t kMaxQueued = 1024;

snpuError_t launch(Stream* s, Task task, bool wait, Deadline room_deadline) {
  if (StreamCapture* c = s->capture.load(std::memory_order_acquire)) [[unlikely]]
    return capture_task(c, task, wait);
  Device* d = s->device;
  // A full queue: the host sleeps until half of it has run, then queues the next half at full speed (waking for each
  // kernel that finishes would cost the host a context switch per launch).
  if (!in_kernel()) {
    const uint64_t next = s->enqueued() + 1;
    if (next > kMaxQueued && !s->reached(next - kMaxQueued) &&
        !s->wait_until(next - kMaxQueued / 2, room_deadline, /*spin=*/false))
      return snpuErrorNotReady;
  }
  task.correlation_id = activity::correlation_id();
  // Logged before enqueueing: once queued, the kernel may run and its name stop being valid.
  SNPU_LOG(log::kInfo, "launch %s on device %d stream %llu", task.name, d->index,
           static_cast<unsigned long long>(s->id));
  // Counted first, so readers never see more kernels completed than launched.
  if (task.kind == TaskKind::kKernel || task.kind == TaskKind::kCopy || task.kind == TaskKind::kMemset)
    d->counters()->kernels_launched.fetch_add(1, std::memory_order_relaxed);
  uint64_t seq = s->enqueue(task);
  if (in_kernel()) return snpuSuccess;
  if (wait || d->runtime->config.launch_blocking) return synchronize(s, seq);
  return snpuSuccess;
}

bool run_kernel(Device* device, Stream* s, const Task& task, KernelError* error) {
  KernelContext& k = t_kernel;
  k.stream = s;
  k.device = device;
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

int thread_budget(const Device* device, uint64_t work_bytes) {
  // Shared among the kernels running now and the streams about to run theirs, so that a kernel that starts alone
  // does not keep a full team of threads while another stream's kernel starts beside it.
  if (work_bytes < kSmallKernelBytes) return 1;
  int busy = std::max({1, g_running_kernels.load(std::memory_order_relaxed), active_stream_count()});
  int share = std::max(1, device->runtime->config.host_cores / busy);
  return std::min(device->cores, share);
}

int kernel_thread_budget(uint64_t work_bytes) {
  const KernelContext& k = t_kernel;
  return k.stream ? thread_budget(k.device, work_bytes) : 1;
}

Stream* kernel_current_stream() { return t_kernel.stream; }

}  // namespace softnpu::rt
