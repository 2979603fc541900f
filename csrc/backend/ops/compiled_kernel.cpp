#include "backend/ops/compiled_kernel.h"

#include <c10/util/Exception.h>

#include <string>

#include "backend/npu_error.h"
#include "backend/ops/kernel.h"
#include "backend/profiler/launch_trace.h"
#include "backend/stream.h"

namespace softnpu {

extern "C" const char* softnpu_launch_compiled_kernel(int device, const char* name, snpuKernelFn fn, void* arg,
                                                      snpuKernelCleanupFn cleanup) {
  thread_local std::string message;
  try {
    const NPUStream stream = getCurrentNPUStream(static_cast<c10::DeviceIndex>(device));
    const profiler::LaunchScope traced(name);
    NPU_CHECK(snpuLaunchKernel(stream.handle(), name, fn, arg, cleanup));
    return nullptr;
  } catch (const std::exception& e) {
    // c10::Error's what() carries a C++ backtrace; its message is what the user needs.
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    message = c10_error ? c10_error->msg() : e.what();
    return message.c_str();
  }
}

extern "C" void softnpu_compiled_kernel_threads(uint64_t work_bytes) {
  set_kernel_threads(snpuKernelThreadBudget(work_bytes));
}

}  // namespace softnpu
