#include "executor.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <memory>

#include "backend/npu_error.h"
#include "softnpu/runtime.h"
#include "stream_of_handle.h"

namespace torch_npu_api::opapi {

aclnnStatus get_workspace(const char* name, std::initializer_list<const void*> required, uint64_t* workspace_size,
                          aclOpExecutor** executor, const std::function<std::function<void()>()>& prepare) {
  if (workspace_size == nullptr || executor == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  for (const void* arg : required) {
    if (arg == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  }
  try {
    *executor = new aclOpExecutor{name, prepare()};
  } catch (const std::exception& e) {
    TORCH_WARN(name, "GetWorkspaceSize: ", e.what());
    return ACLNN_ERR_PARAM_INVALID;
  }
  *workspace_size = 0;
  return ACLNN_SUCCESS;
}

namespace {

// Orders `after` behind the work queued on `before` so far.
void order(snpuStream_t before, snpuStream_t after) {
  snpuEvent_t event = nullptr;
  NPU_CHECK(snpuEventCreate(&event, snpuEventDisableTiming));
  const snpuError_t recorded = snpuEventRecord(event, before);
  const snpuError_t waited = recorded == snpuSuccess ? snpuStreamWaitEvent(after, event) : recorded;
  snpuEventDestroy(event);
  NPU_CHECK(waited);
}

}  // namespace

aclnnStatus run(void* workspace, uint64_t workspace_size, aclOpExecutor* executor, aclrtStream stream) {
  if (executor == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  const std::unique_ptr<aclOpExecutor> owned(executor);
  try {
    // A null stream is the current device's default stream, as in ACL.
    snpuStream_t given = stream != nullptr ? static_cast<snpuStream_t>(stream) : softnpu::getDefaultNPUStream().handle();
    if (const auto npu_stream = stream_of_handle(given)) {
      const c10::StreamGuard guard(npu_stream->unwrap());
      executor->run();
    } else {
      // A stream outside torch.npu's: the ops run on the current stream, between two waits that keep the given
      // stream's order (the ops after its earlier work, its later work after the ops).
      const auto current = softnpu::getCurrentNPUStream();
      order(given, current.handle());
      executor->run();
      order(current.handle(), given);
    }
  } catch (const std::exception& e) {
    TORCH_WARN(executor->name, ": ", e.what());
    return ACLNN_ERR_INNER;
  }
  return ACLNN_SUCCESS;
}

}  // namespace torch_npu_api::opapi
