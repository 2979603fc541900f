// aclnnMatmul: torch.matmul's semantics into out.
#include <ATen/ATen.h>

#include "aclnnop/aclnn_matmul.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor* self, const aclTensor* mat2, aclTensor* out,
                                        int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor) {
  if (cubeMathType < 0 || cubeMathType > 3) return ACLNN_ERR_PARAM_INVALID;
  return get_workspace("aclnnMatmul", {self, mat2, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), m = to_tensor(mat2), y = to_tensor(out)]() mutable { at::matmul_out(y, s, m); };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnMatmul)
