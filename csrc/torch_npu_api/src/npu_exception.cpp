// c10_npu_get_error_message (NPUException.h): ACL's message for the calling thread, as torch_npu's.
#include "torch_npu/csrc/core/npu/NPUException.h"

namespace c10_npu {

const char* c10_npu_get_error_message() {
  const char* message = aclGetRecentErrMsg();
  return message != nullptr ? message : "";
}

}  // namespace c10_npu
