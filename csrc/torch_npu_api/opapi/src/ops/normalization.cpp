// aclnnRmsNorm: softnpu's npu_rms_norm op (csrc/fused), its y and rstd copied into the caller's outputs.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "aclnnop/aclnn_rms_norm.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor* x, const aclTensor* gamma, double epsilon,
                                         const aclTensor* yOut, const aclTensor* rstdOut, uint64_t* workspaceSize,
                                         aclOpExecutor** executor) {
  return get_workspace("aclnnRmsNorm", {x, gamma, yOut, rstdOut}, workspaceSize, executor, [&] {
    return [x = to_tensor(x), g = to_tensor(gamma), epsilon, y = to_tensor(yOut), r = to_tensor(rstdOut)]() mutable {
      static const auto op =
          c10::Dispatcher::singleton()
              .findSchemaOrThrow("npu::npu_rms_norm", "")
              .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double)>();
      const auto [y_result, rstd] = op.call(x, g, epsilon);
      y.copy_(y_result);
      r.copy_(rstd.reshape(r.sizes()));
    };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnRmsNorm)
