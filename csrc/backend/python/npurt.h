// softnpu._C._npurt: torch.npu.npurt(), the runtime's raw calls for Python (torch_npu's npurt over aclrt*, as
// torch.cuda.cudart() over cudart): stream create/destroy and host memory registration on the runtime of
// softnpu/runtime.h, each returning ACL's error code as an int (0 on success) instead of raising.
#pragma once

#include <pybind11/pybind11.h>

namespace softnpu {

void register_npurt_bindings(pybind11::module_& m);

}  // namespace softnpu
