// Device memory (the runtime's npu memory, so npu-smi and the device's free memory count it), pinned host memory,
// copies and memsets. Every pointer ACL is handed is checked against the runtime's allocations first, so a bad
// pointer or an overrunning size is an error number, not a fault.
#include <string>

#include "internal.h"

namespace softnpu::acl {

aclError check_memory(const void* ptr, size_t size, bool pinned_ok, const std::string& what) {
  snpuPointerAttributes attr{};
  if (!ptr) return fail(ACL_ERROR_INVALID_PARAM, what + " is null");
  if (snpuPointerGetAttributes(&attr, ptr) != snpuSuccess || attr.type == snpuMemoryTypeUnregistered ||
      (attr.type == snpuMemoryTypeHost && !pinned_ok))
    return fail(ACL_ERROR_INVALID_PARAM,
                what + (pinned_ok ? " is not device memory (aclrtMalloc) or pinned host memory (aclrtMallocHost)"
                                  : " is not device memory (aclrtMalloc)"));
  auto offset = static_cast<size_t>(static_cast<const char*>(ptr) - static_cast<const char*>(attr.base));
  if (size > attr.size - offset)
    return fail(ACL_ERROR_INVALID_PARAM, what + ": " + std::to_string(size) + " bytes from it overrun its allocation (" +
                                             std::to_string(attr.size - offset) + " bytes left)");
  return ACL_SUCCESS;
}

namespace {

// What a copy's kind says each side is, checked against the runtime's view of the pointers.
aclError check_copy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind, const char* call) {
  if (count > destMax)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": count (" + std::to_string(count) +
                                             ") is larger than destMax (" + std::to_string(destMax) + ")");
  if (kind < ACL_MEMCPY_HOST_TO_HOST || kind > ACL_MEMCPY_DEFAULT)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": kind " + std::to_string(kind) + " is not an aclrtMemcpyKind");
  if (!dst || !src) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": dst and src must not be null");
  if (count == 0) return ACL_SUCCESS;
  auto side = [&](const void* p, bool device_by_kind, const char* name) -> aclError {
    snpuPointerAttributes attr{};
    if (snpuPointerGetAttributes(&attr, p) != snpuSuccess)
      return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": " + name + " is not a valid pointer");
    bool device = attr.type == snpuMemoryTypeDevice;
    if (kind != ACL_MEMCPY_DEFAULT && device != device_by_kind)
      return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the kind says " + name + " is " +
                                               (device_by_kind ? "device" : "host") + " memory, but it is " +
                                               (device ? "device" : "host") + " memory");
    if (device) return check_memory(p, count, false, std::string(call) + ": " + name);
    return ACL_SUCCESS;
  };
  bool dst_device = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  bool src_device = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  if (auto e = side(dst, dst_device, "dst")) return e;
  return side(src, src_device, "src");
}

snpuMemcpyKind to_runtime(aclrtMemcpyKind kind) { return static_cast<snpuMemcpyKind>(kind); }

aclError malloc_device(void** devPtr, size_t size, aclrtMemMallocPolicy policy, const std::string& call) {
  ACL_REQUIRE_CONTEXT(call.c_str());
  if (!devPtr) return fail(ACL_ERROR_INVALID_PARAM, call + ": devPtr is null");
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, call + ": size must be greater than 0");
  if (policy < ACL_MEM_MALLOC_HUGE_FIRST || policy > ACL_MEM_MALLOC_NORMAL_ONLY_P2P)
    return fail(ACL_ERROR_INVALID_PARAM, call + ": policy " + std::to_string(policy) + " is not an aclrtMemMallocPolicy");
  if (auto e = snpuMalloc(devPtr, size)) return runtime_error(e, call.c_str());
  return ACL_SUCCESS;
}

}  // namespace

}  // namespace softnpu::acl

using namespace softnpu::acl;

extern "C" {

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  return malloc_device(devPtr, size, policy, "aclrtMalloc");
}

// CANN's aclrtMalloc pads a request by 32 bytes and aclrtMallocAlign32 only rounds it up to 32; the software NPU's
// allocations are not padded (and are aligned beyond 32), so both are the same allocation.
aclError aclrtMallocAlign32(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  return malloc_device(devPtr, size, policy, "aclrtMallocAlign32");
}

aclError aclrtFree(void* devPtr) {
  ACL_REQUIRE_INIT("aclrtFree");
  snpuPointerAttributes attr{};
  if (!devPtr || snpuPointerGetAttributes(&attr, devPtr) != snpuSuccess || attr.type != snpuMemoryTypeDevice ||
      attr.base != devPtr)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: the pointer is not the start of device memory from aclrtMalloc");
  if (auto e = snpuFree(devPtr)) return runtime_error(e, "aclrtFree");
  return ACL_SUCCESS;
}

aclError aclrtMallocHost(void** hostPtr, size_t size) {
  ACL_REQUIRE_CONTEXT("aclrtMallocHost");
  if (!hostPtr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: hostPtr is null");
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: size must be greater than 0");
  if (auto e = snpuMallocHost(hostPtr, size)) return runtime_error(e, "aclrtMallocHost");
  return ACL_SUCCESS;
}

aclError aclrtFreeHost(void* hostPtr) {
  ACL_REQUIRE_INIT("aclrtFreeHost");
  snpuPointerAttributes attr{};
  if (!hostPtr || snpuPointerGetAttributes(&attr, hostPtr) != snpuSuccess || attr.type != snpuMemoryTypeHost ||
      attr.base != hostPtr)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost: the pointer is not the start of memory from aclrtMallocHost");
  if (auto e = snpuFreeHost(hostPtr)) return runtime_error(e, "aclrtFreeHost");
  return ACL_SUCCESS;
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  ACL_REQUIRE_CONTEXT("aclrtMemcpy");
  if (auto e = check_copy(dst, destMax, src, count, kind, "aclrtMemcpy")) return e;
  if (count == 0) return ACL_SUCCESS;
  if (auto e = snpuMemcpy(dst, src, count, to_runtime(kind))) return runtime_error(e, "aclrtMemcpy");
  return ACL_SUCCESS;
}

aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream) {
  ACL_REQUIRE_CONTEXT("aclrtMemcpyAsync");
  if (auto e = check_copy(dst, destMax, src, count, kind, "aclrtMemcpyAsync")) return e;
  if (count == 0) return ACL_SUCCESS;
  if (auto e = snpuMemcpyAsync(dst, src, count, to_runtime(kind), static_cast<snpuStream_t>(stream)))
    return runtime_error(e, "aclrtMemcpyAsync");
  return ACL_SUCCESS;
}

aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
  ACL_REQUIRE_CONTEXT("aclrtMemsetAsync");
  if (count > maxCount)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemsetAsync: count (" + std::to_string(count) +
                                             ") is larger than maxCount (" + std::to_string(maxCount) + ")");
  if (auto e = check_memory(devPtr, count, false, "aclrtMemsetAsync: devPtr")) return e;
  if (auto e = snpuMemsetAsync(devPtr, value, count, static_cast<snpuStream_t>(stream)))
    return runtime_error(e, "aclrtMemsetAsync");
  return ACL_SUCCESS;
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (auto e = aclrtMemsetAsync(devPtr, maxCount, value, count, nullptr)) return e;
  if (auto e = snpuStreamSynchronize(nullptr)) return runtime_error(e, "aclrtMemset");
  return ACL_SUCCESS;
}

aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free, size_t* total) {
  ACL_REQUIRE_CONTEXT("aclrtGetMemInfo");
  if (!free || !total) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: free and total must not be null");
  if (attr < ACL_DDR_MEM || attr > ACL_HBM_MEM_P2P_NORMAL)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: attr " + std::to_string(attr) + " is not an aclrtMemAttr");
  int device = 0;
  if (auto e = snpuGetDevice(&device)) return runtime_error(e, "aclrtGetMemInfo");
  if (auto e = snpuMemGetInfo(device, free, total)) return runtime_error(e, "aclrtGetMemInfo");
  return ACL_SUCCESS;
}

}
