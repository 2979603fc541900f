// aclInit / aclFinalize: ACL's initialized state, which every runtime and model call checks first.
#include <atomic>
#include <fstream>

#include "internal.h"

namespace softnpu::acl {

namespace {
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_framework{false};
std::mutex g_init_mu;
}  // namespace

bool initialized() {
  if (g_initialized.load(std::memory_order_acquire)) return true;
  if (!g_framework.load(std::memory_order_acquire)) return false;
  // The framework's own aclInit, at the first ACL call (torch_npu's happens at its device initialization).
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (!g_initialized.load(std::memory_order_relaxed) && g_framework.load(std::memory_order_relaxed) &&
      snpuInit() == snpuSuccess)
    g_initialized.store(true, std::memory_order_release);
  return g_initialized.load(std::memory_order_acquire);
}

bool framework_owned() { return g_framework.load(std::memory_order_acquire); }

aclError not_initialized(const char* call) {
  return fail(ACL_ERROR_UNINITIALIZE, std::string(call) + ": ACL is not initialized; call aclInit first");
}

}  // namespace softnpu::acl

using namespace softnpu::acl;

extern "C" {

aclError aclInit(const char* configPath) {
  const bool already = initialized();  // (a framework's setup initializes here)
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (already || g_initialized.load(std::memory_order_relaxed))
    return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: ACL is already initialized");
  if (configPath && *configPath && !std::ifstream(configPath))
    return fail(ACL_ERROR_INVALID_FILE, std::string("aclInit: the configuration file ") + configPath +
                                            " cannot be read");
  if (auto e = snpuInit()) return runtime_error(e, "aclInit");
  g_initialized.store(true, std::memory_order_release);
  return ACL_SUCCESS;
}

aclError aclFinalize(void) {
  if (!initialized()) return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: ACL is not initialized");
  std::lock_guard<std::mutex> lock(g_init_mu);
  // Finalizing ends the framework's setup too: ACL stays uninitialized until the next aclInit.
  g_framework.store(false, std::memory_order_release);
  unload_all();
  release_contexts();
  g_initialized.store(false, std::memory_order_release);
  return ACL_SUCCESS;
}

// softnpu's torch_npu (libtorch_npu.so, when loaded) calls this: in torch_npu's process ACL is initialized by torch_npu
// and every thread that uses a device has it set through aclrtSetDevice, so an extension calls aclrtMalloc and the
// like without aclInit or aclrtSetDevice of its own. Here: ACL initializes at its first call, and a thread without a
// current context works on the runtime's current device (the one torch.npu uses on that thread). Not CANN's API.
ACL_FUNC_VISIBILITY void softnpu_acl_init_for_framework(void) { g_framework.store(true, std::memory_order_release); }

}
