/* CANN's aclnnApplyAdamWV2: one AdamW step in place on varRef, mRef, vRef (and maxGradNormOptionalRef, the running
 * maximum of v, when amsgrad). step (shape [1], int64 or float32) is the number of steps taken before this one: the
 * bias corrections use t = step + 1. Decoupled weight decay: var -= lr * weightDecay * var before the update; maximize
 * descends on -grad. Two phases (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_APPLY_ADAM_W_V2_H_
#define SOFTNPU_ACLNNOP_ACLNN_APPLY_ADAM_W_V2_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, aclTensor* maxGradNormOptionalRef, const aclTensor* grad,
    const aclTensor* step, float lr, float beta1, float beta2, float weightDecay, float eps, bool amsgrad,
    bool maximize, uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnApplyAdamWV2(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_APPLY_ADAM_W_V2_H_ */
