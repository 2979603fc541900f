// aclnnApplyAdamWV2: an AdamW step as CANN documents it, with ATen ops on the npu tensors (the op path, the given
// stream). Computed in float32 and written back in the tensors' dtype; the step count is read on the host when the
// operator runs (in stream order), as the chip's kernel reads it from device memory.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>

#include "aclnnop/aclnn_apply_adam_w_v2.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor* varRef, aclTensor* mRef, aclTensor* vRef,
                                              aclTensor* maxGradNormOptionalRef, const aclTensor* grad,
                                              const aclTensor* step, float lr, float beta1, float beta2,
                                              float weightDecay, float eps, bool amsgrad, bool maximize,
                                              uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnApplyAdamWV2", {varRef, mRef, vRef, grad, step}, workspaceSize, executor, [&] {
    TORCH_CHECK(!amsgrad || maxGradNormOptionalRef != nullptr, "maxGradNormOptionalRef is required when amsgrad");
    std::optional<at::Tensor> max_v;
    if (amsgrad) max_v = to_tensor(maxGradNormOptionalRef);
    return [var = to_tensor(varRef), m = to_tensor(mRef), v = to_tensor(vRef), max_v = std::move(max_v),
            g = to_tensor(grad), step = to_tensor(step), lr, beta1, beta2, weightDecay, eps, amsgrad,
            maximize]() mutable {
      const double t = step.item<double>() + 1;
      at::Tensor p32 = var.to(at::kFloat), m32 = m.to(at::kFloat), v32 = v.to(at::kFloat);
      at::Tensor g32 = maximize ? -g.to(at::kFloat) : g.to(at::kFloat);
      p32.mul_(1 - static_cast<double>(lr) * weightDecay);
      m32.lerp_(g32, 1 - static_cast<double>(beta1));
      v32.mul_(beta2).addcmul_(g32, g32, 1 - static_cast<double>(beta2));
      at::Tensor second = v32;
      if (amsgrad) {
        at::Tensor running = at::maximum(max_v->to(at::kFloat), v32);
        max_v->copy_(running);
        second = running;
      }
      const double bias1 = 1 - std::pow(static_cast<double>(beta1), t);
      const double bias2 = 1 - std::pow(static_cast<double>(beta2), t);
      at::Tensor denom = second.div(bias2).sqrt_().add_(eps);
      p32.addcdiv_(m32, denom, -static_cast<double>(lr) / bias1);
      var.copy_(p32);
      m.copy_(m32);
      v.copy_(v32);
    };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnApplyAdamWV2)
