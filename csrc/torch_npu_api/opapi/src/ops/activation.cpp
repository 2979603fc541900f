// aclnnRelu, Silu, Softmax.
#include <ATen/ATen.h>

#include "aclnnop/aclnn_relu.h"
#include "aclnnop/aclnn_silu.h"
#include "aclnnop/aclnn_softmax.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                      aclOpExecutor** executor) {
  return get_workspace("aclnnRelu", {self, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), y = to_tensor(out)]() mutable { y.copy_(at::relu(s)); };
  });
}

aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor* self, aclTensor* out, uint64_t* workspaceSize,
                                      aclOpExecutor** executor) {
  return get_workspace("aclnnSilu", {self, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), y = to_tensor(out)]() mutable { at::silu_out(y, s); };
  });
}

aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor* self, int64_t dim, aclTensor* out, uint64_t* workspaceSize,
                                         aclOpExecutor** executor) {
  return get_workspace("aclnnSoftmax", {self, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), dim, y = to_tensor(out)]() mutable { at::_softmax_out(y, s, dim, false); };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnRelu)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnSilu)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnSoftmax)
