// aclnnAdd, Adds, InplaceAdd, Sub, Mul, Muls, InplaceMul, Div: ATen's out= and in-place ops on the npu views.
#include <ATen/ATen.h>

#include "aclnnop/aclnn_add.h"
#include "aclnnop/aclnn_div.h"
#include "aclnnop/aclnn_mul.h"
#include "aclnnop/aclnn_sub.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_scalar;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor* self, const aclTensor* other, const aclScalar* alpha,
                                     aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnAdd", {self, other, alpha, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), o = to_tensor(other), a = to_scalar(alpha), y = to_tensor(out)]() mutable {
      at::add_out(y, s, o, a);
    };
  });
}

aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor* self, const aclScalar* other, const aclScalar* alpha,
                                      aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnAdds", {self, other, alpha, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), o = to_scalar(other), a = to_scalar(alpha), y = to_tensor(out)]() mutable {
      at::add_out(y, s, at::scalar_tensor(o, s.options().device(at::kCPU)), a);
    };
  });
}

aclnnStatus aclnnInplaceAddGetWorkspaceSize(aclTensor* selfRef, const aclTensor* other, const aclScalar* alpha,
                                            uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnInplaceAdd", {selfRef, other, alpha}, workspaceSize, executor, [&] {
    return [s = to_tensor(selfRef), o = to_tensor(other), a = to_scalar(alpha)]() mutable { s.add_(o, a); };
  });
}

aclnnStatus aclnnSubGetWorkspaceSize(const aclTensor* self, const aclTensor* other, const aclScalar* alpha,
                                     aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnSub", {self, other, alpha, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), o = to_tensor(other), a = to_scalar(alpha), y = to_tensor(out)]() mutable {
      at::sub_out(y, s, o, a);
    };
  });
}

aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor* self, const aclTensor* other, aclTensor* out,
                                     uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnMul", {self, other, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), o = to_tensor(other), y = to_tensor(out)]() mutable { at::mul_out(y, s, o); };
  });
}

aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor* self, const aclScalar* other, aclTensor* out,
                                      uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnMuls", {self, other, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), o = to_scalar(other), y = to_tensor(out)]() mutable {
      at::mul_out(y, s, at::scalar_tensor(o, s.options().device(at::kCPU)));
    };
  });
}

aclnnStatus aclnnInplaceMulGetWorkspaceSize(aclTensor* selfRef, const aclTensor* other, uint64_t* workspaceSize,
                                            aclOpExecutor** executor) {
  return get_workspace("aclnnInplaceMul", {selfRef, other}, workspaceSize, executor, [&] {
    return [s = to_tensor(selfRef), o = to_tensor(other)]() mutable { s.mul_(o); };
  });
}

aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor* self, const aclTensor* other, aclTensor* out,
                                     uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnDiv", {self, other, out}, workspaceSize, executor, [&] {
    return [s = to_tensor(self), o = to_tensor(other), y = to_tensor(out)]() mutable { at::div_out(y, s, o); };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnAdd)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnAdds)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnInplaceAdd)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnSub)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnMul)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnMuls)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnInplaceMul)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnDiv)
