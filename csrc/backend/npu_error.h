// Runtime errors as PyTorch errors. A failed runtime call becomes the c10 error a CUDA user would get in the same
// situation; a kernel failure reported at a synchronizing call keeps the exception type the kernel raised
// (IndexError, ValueError, ...), names the op, and carries the ASCEND_LAUNCH_BLOCKING hint.
#pragma once

#include <c10/util/Exception.h>

#include "softnpu/runtime.h"

namespace softnpu {

// Codes a kernel returns to the runtime, so the error raised later has the kernel's own exception type.
enum KernelErrorCode : int {
  kKernelRuntimeError = 1,
  kKernelIndexError,
  kKernelValueError,
  kKernelTypeError,
  kKernelNotImplementedError,
  kKernelLinAlgError,
  kKernelOutOfMemoryError,
};

// The code for an exception caught inside a kernel.
int kernel_error_code(const std::exception& e);

// Throws the c10 error for a failed runtime call (`what` names the call, for messages).
[[noreturn]] void throw_npu_error(snpuError_t err, const char* what);

}  // namespace softnpu

#define NPU_CHECK(EXPR)                                                     \
  do {                                                                      \
    const snpuError_t npu_check_err_ = (EXPR);                              \
    if (C10_UNLIKELY(npu_check_err_ != snpuSuccess))                        \
      ::softnpu::throw_npu_error(npu_check_err_, #EXPR);                    \
  } while (0)
