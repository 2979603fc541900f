// aclnnMoeTokenPermute / Unpermute and their gradients: softnpu's npu_moe_token_permute family (csrc/fused/moe), the
// results copied into the caller's outputs.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

#include "aclnnop/aclnn_moe_token_permute.h"
#include "aclnnop/aclnn_moe_token_permute_grad.h"
#include "aclnnop/aclnn_moe_token_unpermute.h"
#include "aclnnop/aclnn_moe_token_unpermute_grad.h"
#include "executor.h"
#include "objects.h"

using torch_npu_api::opapi::get_workspace;
using torch_npu_api::opapi::to_tensor;

namespace {

template <typename Signature>
c10::TypedOperatorHandle<Signature> npu_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

std::optional<at::Tensor> optional_tensor(const aclTensor* t) {
  return t == nullptr ? std::nullopt : std::optional<at::Tensor>(to_tensor(t));
}

}  // namespace

extern "C" {

aclnnStatus aclnnMoeTokenPermuteGetWorkspaceSize(const aclTensor* tokens, const aclTensor* indices,
                                                 int64_t numOutTokens, bool paddedMode,
                                                 const aclTensor* permuteTokensOut, const aclTensor* sortedIndicesOut,
                                                 uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace(
      "aclnnMoeTokenPermute", {tokens, indices, permuteTokensOut, sortedIndicesOut}, workspaceSize, executor, [&] {
        return [t = to_tensor(tokens), i = to_tensor(indices), numOutTokens, paddedMode,
                out = to_tensor(permuteTokensOut), sorted = to_tensor(sortedIndicesOut)]() mutable {
          static const auto op = npu_op<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, std::optional<int64_t>, bool)>("npu::npu_moe_token_permute");
          const auto [permuted, positions] = op.call(t, i, numOutTokens, paddedMode);
          out.copy_(permuted);
          sorted.copy_(positions);
        };
      });
}

aclnnStatus aclnnMoeTokenPermuteGradGetWorkspaceSize(const aclTensor* permutedTokensOutputGrad,
                                                     const aclTensor* sortedIndices, int64_t numTopk, bool paddedMode,
                                                     const aclTensor* out, uint64_t* workspaceSize,
                                                     aclOpExecutor** executor) {
  return get_workspace(
      "aclnnMoeTokenPermuteGrad", {permutedTokensOutputGrad, sortedIndices, out}, workspaceSize, executor, [&] {
        TORCH_CHECK(numTopk > 0, "numTopk must be positive, got ", numTopk);
        return [grad = to_tensor(permutedTokensOutputGrad), sorted = to_tensor(sortedIndices), numTopk, paddedMode,
                o = to_tensor(out)]() mutable {
          static const auto op =
              npu_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool)>(
                  "npu::npu_moe_token_permute_grad");
          // The op reads the tokens' and indices' shapes only (the gradient is a gather-sum over sorted positions):
          // the output stands for the tokens, an unfilled [T, topK] tensor for the indices.
          const at::Tensor indices = at::empty({o.size(0), numTopk}, sorted.options());
          o.copy_(op.call(o, grad, indices, sorted, paddedMode));
        };
      });
}

aclnnStatus aclnnMoeTokenUnpermuteGetWorkspaceSize(const aclTensor* permutedTokens, const aclTensor* sortedIndices,
                                                   const aclTensor* probsOptional, bool paddedMode,
                                                   const aclIntArray* restoreShapeOptional, const aclTensor* out,
                                                   uint64_t* workspaceSize, aclOpExecutor** executor) {
  return get_workspace(
      "aclnnMoeTokenUnpermute", {permutedTokens, sortedIndices, out}, workspaceSize, executor, [&] {
        return [permuted = to_tensor(permutedTokens), sorted = to_tensor(sortedIndices),
                probs = optional_tensor(probsOptional), paddedMode, o = to_tensor(out)]() mutable {
          static const auto op =
              npu_op<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool,
                                at::OptionalIntArrayRef)>("npu::npu_moe_token_unpermute");
          // restore_shape matters only in padded mode, which the op refuses.
          o.copy_(op.call(permuted, sorted, probs, paddedMode, std::nullopt));
        };
      });
}

aclnnStatus aclnnMoeTokenUnpermuteGradGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* unpermutedTokensGrad, const aclTensor* sortedIndices,
    const aclTensor* probsOptional, bool paddedMode, const aclIntArray* restoreShapeOptional,
    const aclTensor* permutedTokensGradOut, const aclTensor* probsGradOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  return get_workspace(
      "aclnnMoeTokenUnpermuteGrad", {permutedTokens, unpermutedTokensGrad, sortedIndices, permutedTokensGradOut},
      workspaceSize, executor, [&] {
        return [permuted = to_tensor(permutedTokens), grad = to_tensor(unpermutedTokensGrad),
                sorted = to_tensor(sortedIndices), probs = optional_tensor(probsOptional), paddedMode,
                grad_permuted = to_tensor(permutedTokensGradOut),
                grad_probs = probsOptional == nullptr ? std::optional<at::Tensor>() : optional_tensor(probsGradOut)]()
            mutable {
          static const auto op = npu_op<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool,
              at::OptionalIntArrayRef)>("npu::npu_moe_token_unpermute_grad");
          const auto [dx, dprobs] = op.call(permuted, grad, sorted, probs, paddedMode, std::nullopt);
          grad_permuted.copy_(dx);
          if (grad_probs) grad_probs->copy_(dprobs);
        };
      });
}

}  // extern "C"

SOFTNPU_ACLNN_SECOND_PHASE(aclnnMoeTokenPermute)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnMoeTokenPermuteGrad)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnMoeTokenUnpermute)
SOFTNPU_ACLNN_SECOND_PHASE(aclnnMoeTokenUnpermuteGrad)
