// Kernels: launching work onto a stream, and what a kernel sees while it runs (its stream, its error message, its
// thread budget).
#pragma once

#include "errors.h"
#include "stream.h"

namespace softnpu::rt {

class Device;

// True on a compute thread while it runs a kernel: calls that would wait for the device are refused there.
bool in_kernel();

// Enqueues task on s (stamping the launching thread's correlation id) and counts it. Waits for it and reports its
// error when wait is set or ASCEND_LAUNCH_BLOCKING=1, except inside a kernel, which must never wait. A full queue
// makes it wait for room first, until room_deadline: then it returns snpuErrorNotReady, having enqueued nothing.
// The waits before enqueueing are interruptible (interrupt.h): snpuErrorInterrupted, the task dropped.
snpuError_t launch(Stream* s, Task task, bool wait, Deadline room_deadline = kNoDeadline);

// Compute side: runs a kernel task on the calling thread. Returns true if it failed, with *error filled.
bool run_kernel(Device* device, Stream* s, const Task& task, KernelError* error);
// Compute side, inside a graph's task: runs one of its recorded kernels, seen by the thread budget as that kernel.
int run_recorded_kernel(const Task& task);
// Compute side: the task's cleanup, once, after the kernel ran.
void run_cleanup(const Task& task);
// A task that will never run (its launch was interrupted): the kernel's cleanup, the references it holds.
void drop_task(const Task& task);

// Threads a kernel or copy of work_bytes starting now on the device may use: one for small work, else its compute
// threads, shared among the work running or queued on all devices, never more than the host's cores.
int thread_budget(const Device* device, uint64_t work_bytes);

// The kernel-context calls of runtime.h. kernel_thread_budget is thread_budget, except that a small kernel that ran
// long on one thread (learned per name and size) gets the budget of a large one.
void set_kernel_error_message(const char* message);
int kernel_thread_budget(uint64_t work_bytes);
Stream* kernel_current_stream();

}  // namespace softnpu::rt
