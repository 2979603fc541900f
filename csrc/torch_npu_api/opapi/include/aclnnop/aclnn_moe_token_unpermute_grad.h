/* CANN's aclnnMoeTokenUnpermuteGrad: the gradients of aclnnMoeTokenUnpermute. permutedTokensGradOut takes
 * unpermutedTokensGrad[i / topK] (times probs[i] when given) at row sortedIndices[i]; probsGradOut (when probs is
 * given) the dot product of that row of permutedTokens with unpermutedTokensGrad[i / topK]. Two phases
 * (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_UNPERMUTE_GRAD_H_
#define SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_UNPERMUTE_GRAD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteGradGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* unpermutedTokensGrad, const aclTensor* sortedIndices,
    const aclTensor* probsOptional, bool paddedMode, const aclIntArray* restoreShapeOptional,
    const aclTensor* permutedTokensGradOut, const aclTensor* probsGradOut, uint64_t* workspaceSize,
    aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteGrad(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_UNPERMUTE_GRAD_H_ */
