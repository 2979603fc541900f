// torch_npu's error checks for ACL calls: a failed call (an aclError other than ACL_ERROR_NONE) raises c10::Error
// with ACL's message for the calling thread.
#pragma once

#include <c10/util/Exception.h>

#include "third_party/acl/inc/acl/acl_base.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"
#include "torch_npu/csrc/core/npu/npu_log.h"

namespace c10_npu {

// The calling thread's most recent ACL error message (aclGetRecentErrMsg: reading it clears it), or "" when there is
// none.
C10_NPU_API const char* c10_npu_get_error_message();

}  // namespace c10_npu

#define NPU_CHECK_ERROR(err_code, ...)                                                                            \
  do {                                                                                                            \
    const auto npu_check_error_code_ = (err_code);                                                                \
    if (npu_check_error_code_ != ACL_ERROR_NONE) {                                                                \
      const char* npu_check_error_msg_ = aclGetRecentErrMsg();                                                    \
      TORCH_CHECK(false, __func__, ":", __FILE__, ":", __LINE__, " NPU function error: ", #err_code,              \
                  ", error code is ", npu_check_error_code_, npu_check_error_msg_ ? "\n" : "",                    \
                  npu_check_error_msg_ ? npu_check_error_msg_ : "");                                              \
    }                                                                                                             \
  } while (0)

#define NPU_CHECK_WARN(err_code)                                                                                  \
  do {                                                                                                            \
    const auto npu_check_warn_code_ = (err_code);                                                                 \
    if (npu_check_warn_code_ != ACL_ERROR_NONE) {                                                                 \
      TORCH_WARN("NPU warning: ", #err_code, ", error code is ", npu_check_warn_code_);                           \
    }                                                                                                             \
  } while (0)

#define TORCH_NPU_WARN(...) TORCH_WARN(__VA_ARGS__)
#define TORCH_NPU_WARN_ONCE(...) TORCH_WARN_ONCE(__VA_ARGS__)
