// Devices and contexts. A context is a device for the threads that make it current: aclrtSetDevice makes the
// device's default context current, aclrtCreateContext a new one. The runtime's current device (per thread) follows
// the current context. Destroyed contexts stay allocated (marked dead) so that a thread still holding one as current
// gets ACL_ERROR_RT_CONTEXT_NULL instead of reading freed memory; aclFinalize marks every context dead.
#include <atomic>
#include <map>
#include <vector>

#include "internal.h"

namespace softnpu::acl {

namespace {

struct Context {
  int device;
  bool is_default;
  std::atomic<bool> alive{true};
};

std::mutex g_contexts_mu;
std::map<int, Context*> g_default_contexts;  // never freed: a device's default context lives with the process
std::vector<Context*> g_user_contexts;       // live ones, for aclFinalize
thread_local Context* t_current = nullptr;

bool valid_device(int32_t device, const char* call, aclError* error) {
  int count = 0;
  if (auto e = snpuGetDeviceCount(&count)) {
    *error = runtime_error(e, call);
    return false;
  }
  if (device < 0 || device >= count) {
    *error = fail(ACL_ERROR_RT_INVALID_DEVICEID, std::string(call) + ": device " + std::to_string(device) +
                                                     " does not exist (this host has " + std::to_string(count) +
                                                     " devices, 0 to " + std::to_string(count - 1) + ")");
    return false;
  }
  return true;
}

Context* default_context(int device) {
  std::lock_guard<std::mutex> lock(g_contexts_mu);
  auto& c = g_default_contexts[device];
  if (!c) c = new Context{device, true};
  return c;
}

}  // namespace

void release_contexts() {
  std::lock_guard<std::mutex> lock(g_contexts_mu);
  for (auto& [device, c] : g_default_contexts) c->alive.store(false, std::memory_order_release);
  g_default_contexts.clear();
  for (auto* c : g_user_contexts) c->alive.store(false, std::memory_order_release);
  g_user_contexts.clear();
}

aclError require_context(const char* call) {
  if (!initialized()) return not_initialized(call);
  if (!t_current && framework_owned()) return ACL_SUCCESS;  // the runtime's current device, torch.npu's
  if (!t_current || !t_current->alive.load(std::memory_order_acquire))
    return fail(ACL_ERROR_RT_CONTEXT_NULL,
                std::string(call) + ": the thread has no current context; call aclrtSetDevice or aclrtSetCurrentContext");
  // The runtime's current device may have been changed by other code on this thread (torch.npu.set_device).
  if (auto e = snpuSetDevice(t_current->device)) return runtime_error(e, call);
  return ACL_SUCCESS;
}

}  // namespace softnpu::acl

using namespace softnpu::acl;

extern "C" {

aclError aclrtGetRunMode(aclrtRunMode* runMode) {
  ACL_REQUIRE_INIT("aclrtGetRunMode");
  if (!runMode) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetRunMode: runMode is null");
  *runMode = ACL_HOST;
  return ACL_SUCCESS;
}

const char* aclrtGetSocName(void) {
  if (!initialized()) {
    not_initialized("aclrtGetSocName");
    return nullptr;
  }
  static const std::string name = softnpu::offline::device_soc_version();
  return name.c_str();
}

aclError aclrtGetDeviceCount(uint32_t* count) {
  ACL_REQUIRE_INIT("aclrtGetDeviceCount");
  if (!count) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is null");
  int n = 0;
  if (auto e = snpuGetDeviceCount(&n)) return runtime_error(e, "aclrtGetDeviceCount");
  *count = static_cast<uint32_t>(n);
  return ACL_SUCCESS;
}

aclError aclrtSetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtSetDevice");
  aclError error = ACL_SUCCESS;
  if (!valid_device(deviceId, "aclrtSetDevice", &error)) return error;
  if (auto e = snpuSetDevice(deviceId)) return runtime_error(e, "aclrtSetDevice");
  t_current = default_context(deviceId);
  return ACL_SUCCESS;
}

aclError aclrtResetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtResetDevice");
  aclError error = ACL_SUCCESS;
  if (!valid_device(deviceId, "aclrtResetDevice", &error)) return error;
  int previous = 0;
  if (auto e = snpuGetDevice(&previous)) return runtime_error(e, "aclrtResetDevice");
  snpuError_t e = snpuSetDevice(deviceId);
  if (!e) e = snpuDeviceSynchronize();
  snpuSetDevice(previous);
  if (t_current && t_current->device == deviceId) t_current = nullptr;
  return e ? runtime_error(e, "aclrtResetDevice") : ACL_SUCCESS;
}

aclError aclrtGetDevice(int32_t* deviceId) {
  ACL_REQUIRE_CONTEXT("aclrtGetDevice");
  if (!deviceId) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is null");
  *deviceId = t_current->device;
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeDevice(void) {
  ACL_REQUIRE_CONTEXT("aclrtSynchronizeDevice");
  if (auto e = snpuDeviceSynchronize()) return runtime_error(e, "aclrtSynchronizeDevice");
  return ACL_SUCCESS;
}

aclError aclrtCreateContext(aclrtContext* context, int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtCreateContext");
  if (!context) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateContext: context is null");
  aclError error = ACL_SUCCESS;
  if (!valid_device(deviceId, "aclrtCreateContext", &error)) return error;
  if (auto e = snpuSetDevice(deviceId)) return runtime_error(e, "aclrtCreateContext");
  auto* c = new Context{deviceId, false};
  {
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    g_user_contexts.push_back(c);
  }
  t_current = c;
  *context = c;
  return ACL_SUCCESS;
}

aclError aclrtDestroyContext(aclrtContext context) {
  ACL_REQUIRE_INIT("aclrtDestroyContext");
  auto* c = static_cast<Context*>(context);
  if (!c) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyContext: context is null");
  if (c->is_default)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyContext: a device's default context is released by "
                                         "aclrtResetDevice, not destroyed");
  if (!c->alive.exchange(false)) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyContext: context already destroyed");
  {
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    std::erase(g_user_contexts, c);
  }
  if (t_current == c) t_current = nullptr;
  int previous = 0;
  snpuError_t e = snpuGetDevice(&previous);
  if (!e) e = snpuSetDevice(c->device);
  if (!e) e = snpuDeviceSynchronize();
  snpuSetDevice(previous);
  return e ? runtime_error(e, "aclrtDestroyContext") : ACL_SUCCESS;
}

aclError aclrtSetCurrentContext(aclrtContext context) {
  ACL_REQUIRE_INIT("aclrtSetCurrentContext");
  auto* c = static_cast<Context*>(context);
  if (!c || !c->alive.load(std::memory_order_acquire))
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetCurrentContext: the context is null or destroyed");
  if (auto e = snpuSetDevice(c->device)) return runtime_error(e, "aclrtSetCurrentContext");
  t_current = c;
  return ACL_SUCCESS;
}

aclError aclrtGetCurrentContext(aclrtContext* context) {
  ACL_REQUIRE_CONTEXT("aclrtGetCurrentContext");
  if (!context) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetCurrentContext: context is null");
  *context = t_current;
  return ACL_SUCCESS;
}

}
