/* CANN's aclnnRmsNorm: RMS normalization over gamma's trailing dims: yOut = x * rstd * gamma, rstdOut = 1 /
 * sqrt(mean(x^2) + epsilon) (float32, x's shape with the normalized dims kept as 1). Two phases
 * (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_RMS_NORM_H_
#define SOFTNPU_ACLNNOP_ACLNN_RMS_NORM_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnRmsNormGetWorkspaceSize(
    const aclTensor* x, const aclTensor* gamma, double epsilon, const aclTensor* yOut, const aclTensor* rstdOut,
    uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnRmsNorm(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_RMS_NORM_H_ */
