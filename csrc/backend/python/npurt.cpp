#include "backend/python/npurt.h"

#include <cstdint>

#include "acl/acl_base.h"
#include "acl/error_codes/rt_error_codes.h"
#include "softnpu/runtime.h"

namespace py = pybind11;

namespace softnpu {

namespace {

// ACL's code for a runtime error, as libascendcl returns it for the same failure (csrc/offline/acl/error.cpp).
int acl_code(snpuError_t err) {
  switch (err) {
    case snpuSuccess: return ACL_SUCCESS;
    case snpuErrorInvalidValue:
    case snpuErrorInvalidPointer: return ACL_ERROR_RT_PARAM_INVALID;
    case snpuErrorInvalidDevice: return ACL_ERROR_RT_INVALID_DEVICEID;
    case snpuErrorMemoryAllocation: return ACL_ERROR_RT_MEMORY_ALLOCATION;
    case snpuErrorInvalidHandle: return ACL_ERROR_RT_INVALID_HANDLE;
    case snpuErrorNotPermitted: return ACL_ERROR_RT_NO_PERMISSION;
    case snpuErrorStreamCaptureUnsupported:
    case snpuErrorStreamCaptureInvalidated: return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    default: return ACL_ERROR_RT_INTERNAL_ERROR;
  }
}

// npuStreamCreate(address of an aclrtStream): a stream of the current device at the default priority, its handle
// written at the address (a ctypes.c_void_p's), as aclrtCreateStream.
int stream_create(uintptr_t handle_out) {
  if (handle_out == 0) return ACL_ERROR_INVALID_PARAM;
  py::gil_scoped_release no_gil;
  return acl_code(snpuStreamCreate(reinterpret_cast<snpuStream_t*>(handle_out), 0));
}

// npuStreamDestroy(handle): waits for the stream's work, then destroys it, as aclrtDestroyStream.
int stream_destroy(uintptr_t handle) {
  if (handle == 0) return ACL_ERROR_INVALID_PARAM;
  py::gil_scoped_release no_gil;
  return acl_code(snpuStreamDestroy(reinterpret_cast<snpuStream_t>(handle)));
}

}  // namespace

void register_npurt_bindings(py::module_& m) {
  py::module_ rt = m.def_submodule("_npurt", "the NPU runtime's raw calls (torch.npu.npurt())");
  rt.def("npuStreamCreate", &stream_create, py::arg("stream_ptr"));
  rt.def("npuStreamDestroy", &stream_destroy, py::arg("stream"));
}

}  // namespace softnpu
