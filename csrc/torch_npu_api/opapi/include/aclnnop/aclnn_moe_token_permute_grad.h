/* CANN's aclnnMoeTokenPermuteGrad: the gradient of aclnnMoeTokenPermute's tokens. out [T, H] row t is the sum over k
 * of permutedTokensOutputGrad[sortedIndices[t * numTopk + k]] (rows beyond the permuted ones add nothing). Two
 * phases (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_PERMUTE_GRAD_H_
#define SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_PERMUTE_GRAD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenPermuteGradGetWorkspaceSize(
    const aclTensor* permutedTokensOutputGrad, const aclTensor* sortedIndices, int64_t numTopk, bool paddedMode,
    const aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenPermuteGrad(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_PERMUTE_GRAD_H_ */
