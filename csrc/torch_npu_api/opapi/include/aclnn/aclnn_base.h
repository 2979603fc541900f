/* CANN's aclnn base: status numbers, and the object API (acl_meta.h). Every operator has two phases:
 * aclnnXxxGetWorkspaceSize(arguments..., &workspaceSize, &executor) checks the arguments and prepares the run;
 * aclnnXxx(workspace, workspaceSize, executor, stream) enqueues it on the stream and frees the executor. softnpu's
 * operators need no workspace: workspaceSize is 0 (a NULL workspace is accepted). */
#ifndef SOFTNPU_ACLNN_ACLNN_BASE_H_
#define SOFTNPU_ACLNN_ACLNN_BASE_H_

#include "acl/acl_rt.h"
#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

static const aclnnStatus ACLNN_SUCCESS = 0;
static const aclnnStatus ACLNN_ERR_PARAM_NULLPTR = 161001;
static const aclnnStatus ACLNN_ERR_PARAM_INVALID = 161002;
static const aclnnStatus ACLNN_ERR_RUNTIME_ERROR = 361001;
static const aclnnStatus ACLNN_ERR_INNER = 561000;

/* Accepted for CANN's initialization sequence; nothing to set up here. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnInit(const char* configPath);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_ACLNN_ACLNN_BASE_H_ */
