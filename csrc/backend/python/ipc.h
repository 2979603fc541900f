// softnpu._C's bindings of npu storage sharing (backend/ipc.h), which python/softnpu/multiprocessing builds
// torch.multiprocessing's reductions on.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace softnpu {

void register_ipc_bindings(pybind11::module_& m);

}  // namespace softnpu
