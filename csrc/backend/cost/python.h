// softnpu._C's entry points of the cost model (python.cpp says which).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace softnpu::cost {

void register_python(pybind11::module& m);

}  // namespace softnpu::cost
