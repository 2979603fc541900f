// aclInit / aclFinalize: ACL's initialized state, which every runtime and model call checks first.
#include <atomic>
#include <fstream>

#include "internal.h"

namespace softnpu::acl {

namespace {
std::atomic<bool> g_initialized{false};
std::mutex g_init_mu;
}  // namespace

bool initialized() { return g_initialized.load(std::memory_order_acquire); }

aclError not_initialized(const char* call) {
  return fail(ACL_ERROR_UNINITIALIZE, std::string(call) + ": ACL is not initialized; call aclInit first");
}

}  // namespace softnpu::acl

using namespace softnpu::acl;

extern "C" {

aclError aclInit(const char* configPath) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (initialized()) return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: ACL is already initialized");
  if (configPath && *configPath && !std::ifstream(configPath))
    return fail(ACL_ERROR_INVALID_FILE, std::string("aclInit: the configuration file ") + configPath +
                                            " cannot be read");
  if (auto e = snpuInit()) return runtime_error(e, "aclInit");
  g_initialized.store(true, std::memory_order_release);
  return ACL_SUCCESS;
}

aclError aclFinalize(void) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (!initialized()) return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: ACL is not initialized");
  unload_all();
  release_contexts();
  g_initialized.store(false, std::memory_order_release);
  return ACL_SUCCESS;
}

}
