/* CANN's aclnnMatmul: matrix product with torch.matmul's broadcasting; cubeMathType (0 KEEP_DTYPE, 1
 * ALLOW_FP32_DOWN_PRECISION, 2 USE_FP16, 3 USE_HF32) selects precision on the cube unit and is accepted: softnpu
 * computes half inputs in float32 and rounds once. Two phases (aclnn/aclnn_base.h). */
#ifndef SOFTNPU_ACLNNOP_ACLNN_MATMUL_H_
#define SOFTNPU_ACLNNOP_ACLNN_MATMUL_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMatmulGetWorkspaceSize(
    const aclTensor* self, const aclTensor* mat2, aclTensor* out, int8_t cubeMathType,
    uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMatmul(void* workspace, uint64_t workspaceSize,
    aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNNOP_ACLNN_MATMUL_H_ */
