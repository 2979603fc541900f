// softnpu._C._mstx (torch_npu._C._mstx): the entry points behind torch.npu.mstx (python/softnpu/npu/mstx.py) —
// markers and ranges on the profiler's timeline, as torch_npu's MstxMgr.
#pragma once

#include <pybind11/pybind11.h>

namespace softnpu {

void register_mstx_bindings(pybind11::module_& m);

}  // namespace softnpu
