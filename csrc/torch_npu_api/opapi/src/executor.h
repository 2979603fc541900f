// aclOpExecutor: what an operator's first phase prepares (the ATen ops to run on npu tensors over the caller's
// memory) and its second phase runs on the given stream, through the dispatcher and the op path like any op.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "aclnn/aclnn_base.h"

struct aclOpExecutor {
  std::string name;
  std::function<void()> run;
};

namespace torch_npu_api::opapi {

// The first phase: raises nothing. A null required argument is ACLNN_ERR_PARAM_NULLPTR; an error while reading the
// arguments ACLNN_ERR_PARAM_INVALID (with a warning naming it). prepare() returns the work to run.
aclnnStatus get_workspace(const char* name, std::initializer_list<const void*> required, uint64_t* workspace_size,
                          aclOpExecutor** executor, const std::function<std::function<void()>()>& prepare);
// The second phase: the work on the stream (a torch.npu stream runs it directly; another stream, one of
// aclrtCreateStream's, is ordered before and after it through events), then the executor is freed. An error raised by
// the ops (shapes, dtypes) is ACLNN_ERR_INNER with a warning naming it.
aclnnStatus run(void* workspace, uint64_t workspace_size, aclOpExecutor* executor, aclrtStream stream);

}  // namespace torch_npu_api::opapi

// The second phase of an operator whose first phase used get_workspace.
#define SOFTNPU_ACLNN_SECOND_PHASE(op)                                                                          \
  extern "C" ACL_FUNC_VISIBILITY aclnnStatus op(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, \
                                                aclrtStream stream) {                                           \
    return torch_npu_api::opapi::run(workspace, workspaceSize, executor, stream);                               \
  }
