/* AscendCL's single-operator types (CANN's acl_op.h). softnpu runs operators through aclnn (libopapi.so), not through
 * aclopCompileAndExecute, so only the opaque attribute type is declared: code written against CANN's headers that
 * names it (torch_npu's stub sources) compiles, and no aclop* call is offered. */
#ifndef INC_EXTERNAL_ACL_ACL_OP_H_
#define INC_EXTERNAL_ACL_ACL_OP_H_

#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aclopAttr aclopAttr;

#ifdef __cplusplus
}
#endif

#endif /* INC_EXTERNAL_ACL_ACL_OP_H_ */
