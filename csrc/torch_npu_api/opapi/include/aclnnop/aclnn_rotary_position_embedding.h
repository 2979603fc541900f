/* CANN's aclnnRotaryPositionEmbedding: out = x * cos + rotate(x) * sin, broadcasting cos and sin; mode 0 rotates
 * halves (rotate_half), 1 interleaved pairs. Two phases (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_ROTARY_POSITION_EMBEDDING_H_
#define SOFTNPU_ACLNNOP_ACLNN_ROTARY_POSITION_EMBEDDING_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(
    const aclTensor* x, const aclTensor* cos, const aclTensor* sin, int64_t mode, const aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnRotaryPositionEmbedding(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_ROTARY_POSITION_EMBEDDING_H_ */
