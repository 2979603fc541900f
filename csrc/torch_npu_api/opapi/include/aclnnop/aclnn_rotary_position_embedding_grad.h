/* CANN's aclnnRotaryPositionEmbeddingGrad: dxOut from dy; dcosOut and dsinOut (reduced to cos' and sin's shapes) when
 * xOptional is given and they are not empty. Two phases (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_ROTARY_POSITION_EMBEDDING_GRAD_H_
#define SOFTNPU_ACLNNOP_ACLNN_ROTARY_POSITION_EMBEDDING_GRAD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(
    const aclTensor* dy, const aclTensor* cos, const aclTensor* sin, const aclTensor* xOptional, int64_t mode,
    const aclTensor* dxOut, const aclTensor* dcosOut, const aclTensor* dsinOut, uint64_t* workspaceSize,
    aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnRotaryPositionEmbeddingGrad(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_ROTARY_POSITION_EMBEDDING_GRAD_H_ */
