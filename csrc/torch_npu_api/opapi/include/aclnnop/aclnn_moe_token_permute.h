/* CANN's aclnnMoeTokenPermute: tokens [T, H] gathered into expert order. indices [T] or [T, topK] (int32/int64);
 * permuteTokensOut [numOutTokens, H] takes tokens[i / topK] at row sortedIndicesOut[i] for each flattened (token, k)
 * i whose position is below numOutTokens; sortedIndicesOut [T * topK] (int32) is that position (a stable sort of the
 * expert ids, not sliced). paddedMode true is refused, as in CANN. Two phases (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_PERMUTE_H_
#define SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_PERMUTE_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenPermuteGetWorkspaceSize(
    const aclTensor* tokens, const aclTensor* indices, int64_t numOutTokens, bool paddedMode,
    const aclTensor* permuteTokensOut, const aclTensor* sortedIndicesOut, uint64_t* workspaceSize,
    aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeTokenPermute(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_MOE_TOKEN_PERMUTE_H_ */
