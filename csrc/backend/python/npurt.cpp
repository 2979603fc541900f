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

// aclrtHostRegisterV2's flags (CANN's acl_rt.h; ACL's headers here predate them).
constexpr uint32_t kAclHostRegMapped = 0x2;
constexpr uint32_t kAclHostRegIoMemory = 0x4;
constexpr uint32_t kAclHostRegReadOnly = 0x8;
constexpr uint32_t kAclHostRegPinned = 0x10000000;

// npuHostRegister(ptr, size, flags), as aclrtHostRegisterV2: the program's host memory made pinned
// (ACL_HOST_REG_PINNED: copies from and to it are asynchronous) and, with ACL_HOST_REG_MAPPED, addressed by the current
// device too (page-aligned ranges only). ACL's reserved IOMEMORY and READONLY are not supported, as on Ascend.
int host_register(uintptr_t ptr, uint64_t size, uint32_t flags) {
  if (ptr == 0 || size == 0) return ACL_ERROR_INVALID_PARAM;
  if (flags & (kAclHostRegIoMemory | kAclHostRegReadOnly)) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  if (flags == 0 || (flags & ~(kAclHostRegMapped | kAclHostRegPinned)) != 0) return ACL_ERROR_INVALID_PARAM;
  py::gil_scoped_release no_gil;
  const unsigned int mode = (flags & kAclHostRegMapped) ? snpuHostRegisterMapped : snpuHostRegisterDefault;
  return acl_code(snpuHostRegister(reinterpret_cast<void*>(ptr), size, mode));
}

// npuHostUnregister(ptr), as aclrtHostUnregister.
int host_unregister(uintptr_t ptr) {
  if (ptr == 0) return ACL_ERROR_INVALID_PARAM;
  py::gil_scoped_release no_gil;
  return acl_code(snpuHostUnregister(reinterpret_cast<void*>(ptr)));
}

}  // namespace

void register_npurt_bindings(py::module_& m) {
  py::module_ rt = m.def_submodule("_npurt", "the NPU runtime's raw calls (torch.npu.npurt())");
  rt.def("npuHostRegister", &host_register, py::arg("ptr"), py::arg("size"), py::arg("flags"));
  rt.def("npuHostUnregister", &host_unregister, py::arg("ptr"));
  rt.def("npuStreamCreate", &stream_create, py::arg("stream_ptr"));
  rt.def("npuStreamDestroy", &stream_destroy, py::arg("stream"));
}

}  // namespace softnpu
