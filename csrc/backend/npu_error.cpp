#include "backend/npu_error.h"

#include <string>

#include "backend/error_code.h"
#include "backend/interrupt.h"

namespace softnpu {

int kernel_error_code(const std::exception& e) {
  // Most derived first: the c10 hierarchy has OutOfMemoryError and LinAlgError under Error.
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return kKernelOutOfMemoryError;
  if (dynamic_cast<const c10::IndexError*>(&e)) return kKernelIndexError;
  if (dynamic_cast<const c10::ValueError*>(&e)) return kKernelValueError;
  if (dynamic_cast<const c10::TypeError*>(&e)) return kKernelTypeError;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return kKernelNotImplementedError;
  if (dynamic_cast<const c10::LinAlgError*>(&e)) return kKernelLinAlgError;
  return kKernelRuntimeError;
}

namespace {

[[noreturn]] void throw_kernel_error() {
  const char* name = nullptr;
  const char* message = nullptr;
  int code = kKernelRuntimeError;
  int device = -1;
  uint64_t stream_id = 0;
  if (snpuGetLastKernelError(&name, &message, &code, &device, &stream_id) != snpuSuccess) {
    TORCH_CHECK(false, "NPU kernel failed: ", snpuGetLastErrorMessage());
  }
  const std::string text = std::string(message) + "\n(raised by " + name + " on npu:" + std::to_string(device) +
                           ", stream " + std::to_string(stream_id) +
                           ")\nNPU kernel errors are reported asynchronously, at the next synchronizing call, so the "
                           "stacktrace below may point elsewhere.\nFor debugging consider passing "
                           "ASCEND_LAUNCH_BLOCKING=1.";
  switch (code) {
    case kKernelIndexError: TORCH_CHECK_INDEX(false, text);
    case kKernelValueError: TORCH_CHECK_VALUE(false, text);
    case kKernelTypeError: TORCH_CHECK_TYPE(false, text);
    case kKernelNotImplementedError: TORCH_CHECK_NOT_IMPLEMENTED(false, text);
    case kKernelLinAlgError: TORCH_CHECK_LINALG(false, text);
    case kKernelOutOfMemoryError: TORCH_CHECK_WITH(OutOfMemoryError, false, text);
    default: TORCH_CHECK(false, text);
  }
}

}  // namespace

void throw_npu_error(snpuError_t err, const char* what) {
  switch (err) {
    case snpuErrorKernelFailed:
      throw_kernel_error();
    case snpuErrorInterrupted:
      rethrow_interrupt(what);
    case snpuErrorMemoryAllocation:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory: ", snpuGetLastErrorMessage(),
                       error_code(SubModule::PTA, ErrCode::MEMORY));
    case snpuErrorInvalidDevice:
      TORCH_CHECK(false, "NPU error: invalid device ordinal (", snpuGetLastErrorMessage(), ")",
                  error_code(SubModule::PTA, ErrCode::PARAM));
    case snpuErrorInvalidConfig:
      TORCH_CHECK(false, "NPU configuration error: ", snpuGetLastErrorMessage(),
                  error_code(SubModule::PTA, ErrCode::VALUE));
    case snpuErrorForked:
      // torch.cuda's words, so multiprocessing users recognize it.
      TORCH_CHECK(false, "Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, you must use "
                         "the 'spawn' start method", error_code(SubModule::PTA, ErrCode::UNAVAIL));
    default:
      TORCH_CHECK(false, "NPU error: ", snpuGetErrorName(err), ": ", snpuGetLastErrorMessage(), " (in ", what, ")",
                  error_code(SubModule::PTA, ErrCode::ACL));
  }
}

}  // namespace softnpu
