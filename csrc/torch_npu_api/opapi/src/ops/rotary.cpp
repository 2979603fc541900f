// aclnnRotaryPositionEmbedding and its gradient: softnpu's npu_rotary_position_embedding (csrc/fused/rotary), the
// results copied into the caller's outputs.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

#include "aclnnop/aclnn_rotary_position_embedding.h"
#include "aclnnop/aclnn_rotary_position_embedding_grad.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_tensor;

extern "C" {

aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor* x, const aclTensor* cos,
                                                         const aclTensor* sin, int64_t mode, const aclTensor* out,
                                                         uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnRotaryPositionEmbedding", {x, cos, sin, out}, workspaceSize, executor, [&] {
    return [x = to_tensor(x), c = to_tensor(cos), s = to_tensor(sin), mode, o = to_tensor(out)]() mutable {
      static const auto op =
          c10::Dispatcher::singleton()
              .findSchemaOrThrow("npu::npu_rotary_position_embedding", "")
              .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
      o.copy_(op.call(x, c, s, mode));
    };
  });
}

aclnnStatus aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(const aclTensor* dy, const aclTensor* cos,
                                                             const aclTensor* sin, const aclTensor* xOptional,
                                                             int64_t mode, const aclTensor* dxOut,
                                                             const aclTensor* dcosOut, const aclTensor* dsinOut,
                                                             uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace("aclnnRotaryPositionEmbeddingGrad", {dy, cos, sin, dxOut}, workspaceSize, executor, [&] {
    // cos' and sin's gradients are asked for by non-empty outputs (MindSpeed passes [0] tensors when they need none).
    const bool trig_grads = xOptional != nullptr && dcosOut != nullptr && dsinOut != nullptr &&
                            !dcosOut->view_dims.empty() && dcosOut->view_dims[0] != 0;
    std::optional<at::Tensor> x;
    if (xOptional != nullptr) x = to_tensor(xOptional);
    return [g = to_tensor(dy), c = to_tensor(cos), s = to_tensor(sin), x = std::move(x), mode, dx = to_tensor(dxOut),
            dcos = trig_grads ? to_tensor(dcosOut) : at::Tensor(), dsin = trig_grads ? to_tensor(dsinOut) : at::Tensor(),
            trig_grads]() mutable {
      static const auto op = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("npu::npu_rotary_position_embedding_backward", "")
                                 .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                     const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, int64_t)>();
      const auto [grad_x, grad_cos, grad_sin] = op.call(g, c, s, trig_grads ? x : std::nullopt, mode);
      dx.copy_(grad_x);
      if (trig_grads) {
        dcos.copy_(grad_cos);
        dsin.copy_(grad_sin);
      }
    };
  });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnRotaryPositionEmbedding)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnRotaryPositionEmbeddingGrad)
