// softnpu._C's side of tensor formats (backend/format.h): the query through which format.cpp reads
// torch.npu.config.allow_internal_format.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace softnpu {

void register_format_bindings(pybind11::module_& m);

}  // namespace softnpu
