// ACL's error record: the calling thread's recent message (aclGetRecentErrMsg) and the runtime's errors as ACL's
// numbers.
#include <cstring>

#include "internal.h"

namespace softnpu::acl {

namespace {

struct Recent {
  std::string message;
  bool unread = false;
};
thread_local Recent recent;

}  // namespace

aclError fail(aclError code, const std::string& message) {
  recent.message = message;
  recent.unread = true;
  return code;
}

aclError runtime_error(snpuError_t error, const char* call) {
  std::string what = std::string(call) + ": " + snpuGetLastErrorMessage();
  switch (error) {
    case snpuSuccess: return ACL_SUCCESS;
    case snpuErrorInvalidValue:
    case snpuErrorInvalidPointer: return fail(ACL_ERROR_RT_PARAM_INVALID, what);
    case snpuErrorInvalidDevice: return fail(ACL_ERROR_RT_INVALID_DEVICEID, what);
    case snpuErrorMemoryAllocation: return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, what);
    case snpuErrorInvalidHandle: return fail(ACL_ERROR_RT_INVALID_HANDLE, what);
    case snpuErrorNotPermitted: return fail(ACL_ERROR_RT_NO_PERMISSION, what);
    case snpuErrorInvalidConfig: return fail(ACL_ERROR_RT_DEV_SETUP_ERROR, what);
    case snpuErrorStreamCaptureUnsupported:
    case snpuErrorStreamCaptureInvalidated: return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, what);
    case snpuErrorKernelFailed: {
      const char* name = nullptr;
      const char* message = nullptr;
      if (snpuGetLastKernelError(&name, &message, nullptr, nullptr, nullptr) != snpuSuccess)
        return fail(ACL_ERROR_RT_AICORE_EXCEPTION, what);
      // The model's runs are one kernel named "om_model" (csrc/offline/model/executor.cpp); its message names the node.
      bool model = name && std::strcmp(name, "om_model") == 0;
      return fail(model ? ACL_ERROR_RT_MODEL_EXECUTE : ACL_ERROR_RT_AICORE_EXCEPTION,
                  std::string(call) + ": " + (model ? "model execution failed: " : "kernel failed: ") +
                      (message ? message : ""));
    }
    default: return fail(ACL_ERROR_RT_INTERNAL_ERROR, what);
  }
}

}  // namespace softnpu::acl

extern "C" {

const char* aclGetRecentErrMsg(void) {
  auto& r = softnpu::acl::recent;
  if (!r.unread) return nullptr;
  r.unread = false;
  return r.message.c_str();
}

}
