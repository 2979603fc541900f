/* AscendCL (CANN's acl/acl.h) over softnpu: what an Ascend inference program includes and links (-lascendcl). */
#ifndef INC_EXTERNAL_ACL_ACL_H_
#define INC_EXTERNAL_ACL_ACL_H_

#include "acl_base.h"
#include "acl_mdl.h"
#include "acl_op.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SYNC. Starts ACL (configPath: a JSON configuration file, or NULL; read for existence, its options are not used).
 * ACL_ERROR_REPEAT_INITIALIZE if ACL is already initialized, ACL_ERROR_INVALID_FILE for a path that cannot be read. */
ACL_FUNC_VISIBILITY aclError aclInit(const char* configPath);
/* SYNC. Waits for every device's work and unloads every model still loaded; ACL may be initialized again after.
 * ACL_ERROR_REPEAT_FINALIZE if ACL is not initialized. */
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* INC_EXTERNAL_ACL_ACL_H_ */
