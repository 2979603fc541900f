// Launching kernels compiled outside the op path (Inductor's C++ kernels, python/softnpu/inductor/) on the current
// stream of their device, exactly as the op path launches its own: enqueued, traced by the profiler, failures
// raised at the next synchronizing call. The entry point has C linkage because the compiled kernels' Python bindings
// reach it through a PyCapsule of softnpu._C (`_compiled_kernel_launch`), not by linking against softnpu.
#pragma once

#include "softnpu/runtime.h"

namespace softnpu {

// Enqueues fn(arg) on the current stream of the device; cleanup(arg) runs after it (or at once if the launch fails).
// name must outlive the kernel (the binding's string literal: bindings are never unloaded). Returns NULL, or the
// error's message (valid until the next call on this thread) when the launch failed.
extern "C" const char* softnpu_launch_compiled_kernel(int device, const char* name, snpuKernelFn fn, void* arg,
                                                      snpuKernelCleanupFn cleanup);

// Called by a compiled kernel as it starts, on its compute thread: bounds the OpenMP team of its parallel regions by
// the runtime's thread budget for work_bytes (snpuKernelThreadBudget), as the op path does for eager kernels.
// Inductor's kernels open `#pragma omp parallel` without num_threads (when compiled for the host's cores), so the
// team is this thread's OpenMP setting.
extern "C" void softnpu_compiled_kernel_threads(uint64_t work_bytes);

// The names of the capsules holding softnpu_launch_compiled_kernel and softnpu_compiled_kernel_threads.
constexpr const char* kCompiledKernelLaunchCapsule = "softnpu._C._compiled_kernel_launch";
constexpr const char* kCompiledKernelThreadsCapsule = "softnpu._C._compiled_kernel_threads";

}  // namespace softnpu
