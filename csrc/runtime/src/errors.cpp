#include "errors.h"

#include <utility>

namespace softnpu::rt {

namespace {

thread_local std::string t_last_message;
thread_local KernelError t_last_kernel_error;
thread_local bool t_has_kernel_error = false;

}  // namespace

snpuError_t fail(snpuError_t code, std::string message) {
  t_last_message = std::move(message);
  return code;
}

const char* last_error_message() { return t_last_message.c_str(); }

const char* error_name(snpuError_t code) {
  switch (code) {
    case snpuSuccess: return "snpuSuccess";
    case snpuErrorNotReady: return "snpuErrorNotReady";
    case snpuErrorInvalidValue: return "snpuErrorInvalidValue";
    case snpuErrorInvalidDevice: return "snpuErrorInvalidDevice";
    case snpuErrorMemoryAllocation: return "snpuErrorMemoryAllocation";
    case snpuErrorInvalidHandle: return "snpuErrorInvalidHandle";
    case snpuErrorInvalidPointer: return "snpuErrorInvalidPointer";
    case snpuErrorKernelFailed: return "snpuErrorKernelFailed";
    case snpuErrorInvalidConfig: return "snpuErrorInvalidConfig";
    case snpuErrorNotPermitted: return "snpuErrorNotPermitted";
    case snpuErrorInternal: return "snpuErrorInternal";
    case snpuErrorForked: return "snpuErrorForked";
    case snpuErrorStreamCaptureUnsupported: return "snpuErrorStreamCaptureUnsupported";
    case snpuErrorStreamCaptureInvalidated: return "snpuErrorStreamCaptureInvalidated";
    case snpuErrorInterrupted: return "snpuErrorInterrupted";
  }
  return "snpuErrorUnknown";
}

snpuError_t report_kernel_error(KernelError error, bool launch_blocking) {
  std::string message = "kernel '" + error.kernel_name + "' failed on device " + std::to_string(error.device) +
                        " (stream " + std::to_string(error.stream_id) + ") with code " +
                        std::to_string(error.code) + ": " + error.message;
  if (!launch_blocking)
    message +=
        ". Kernels run asynchronously, so it may have been launched before the call that reports it; set "
        "ASCEND_LAUNCH_BLOCKING=1 to have each launch report its own error";
  t_last_kernel_error = std::move(error);
  t_has_kernel_error = true;
  return fail(snpuErrorKernelFailed, std::move(message));
}

const KernelError* last_kernel_error() { return t_has_kernel_error ? &t_last_kernel_error : nullptr; }

}  // namespace softnpu::rt
