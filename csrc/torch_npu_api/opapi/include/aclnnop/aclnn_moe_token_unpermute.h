/* CANN's aclnnMoeTokenUnpermute: the inverse of aclnnMoeTokenPermute. out [T, H] row t is the sum over k of
 * permutedTokens[sortedIndices[t * topK + k]], weighted by probsOptional[t, k] when given (topK is probs' second
 * dimension, else 1). restoreShapeOptional is read only in padded mode, which is refused as in CANN. Two phases
 * (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_UNPERMUTE_H_
#define SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_UNPERMUTE_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermuteGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* sortedIndices, const aclTensor* probsOptional, bool paddedMode,
    const aclIntArray* restoreShapeOptional, const aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenUnpermute(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_UNPERMUTE_H_ */
