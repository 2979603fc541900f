// aclnnCast, InplaceCopy, InplaceZero, InplaceFillScalar.
#include <ATen/ATen.h>

#include "aclnnop/aclnn_cast.h"
#include "aclnnop/aclnn_copy.h"
#include "aclnnop/aclnn_fill_scalar.h"
#include "aclnnop/aclnn_zero.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_scalar;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self, const aclDataType dtype, aclTensor* out,
                                      uint64_t* workspaceSize, aclOpExecutor** executor) {
  if (out != nullptr && out->dtype != dtype) return ACLNN_ERR_PARAM_INVALID;
  return get_workspace("aclnnCast", {self, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), y = to_tensor(out)]() mutable { y.copy_(s); };
  });
}

aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor* selfRef, const aclTensor* src, uint64_t* workspaceSize,
                                             aclOpExecutor** executor) {
  return get_workspace("aclnnInplaceCopy", {selfRef, src}, workspaceSize, executor, [&] {
    return [s = to_tensor(selfRef), src = to_tensor(src)]() mutable { s.copy_(src); };
  });
}

aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor* selfRef, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnInplaceZero", {selfRef}, workspaceSize, executor, [&] {
    return [s = to_tensor(selfRef)]() mutable { s.zero_(); };
  });
}

aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor* selfRef, const aclScalar* value,
                                                   uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnInplaceFillScalar", {selfRef, value}, workspaceSize, executor, [&] {
    return [s = to_tensor(selfRef), v = to_scalar(value)]() mutable { s.fill_(v); };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnCast)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnInplaceCopy)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnInplaceZero)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnInplaceFillScalar)
