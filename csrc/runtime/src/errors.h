// The calling thread's last error: every public call that fails records a message here (snpuGetLastErrorMessage),
// and a reported kernel failure keeps its details (snpuGetLastKernelError).
#pragma once

#include <cstdint>
#include <string>

#include "softnpu/runtime.h"

namespace softnpu::rt {

// Records message as the calling thread's last error message and returns code, so failures read
// `return fail(snpuErrorInvalidValue, "...")`.
snpuError_t fail(snpuError_t code, std::string message);

// The calling thread's last error message ("" if no call failed yet).
const char* last_error_message();

// "snpuErrorMemoryAllocation"; "snpuErrorUnknown" for a value outside the enum.
const char* error_name(snpuError_t code);

// A kernel failure kept by its stream until a synchronizing call reports it.
struct KernelError {
  std::string kernel_name;
  std::string message;
  int code = 0;
  int device = -1;
  uint64_t stream_id = 0;
};

// Makes error the calling thread's last reported kernel error and returns snpuErrorKernelFailed, with a message
// naming the kernel. Unless launches are already blocking, the message suggests ASCEND_LAUNCH_BLOCKING=1.
snpuError_t report_kernel_error(KernelError error, bool launch_blocking);

// The calling thread's last reported kernel error, or null if none was reported.
const KernelError* last_kernel_error();

}  // namespace softnpu::rt
