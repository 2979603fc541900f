// softnpu._C._launch_host_func, _subscribe_report, _unsubscribe_report: torch_npu's host functions on a stream
// (python/softnpu/npu/host_func.py).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace softnpu {

void register_host_func_bindings(pybind11::module_& m);

}  // namespace softnpu
