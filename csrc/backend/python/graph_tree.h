// softnpu._C's bindings of the caching allocator's hooks for NPU graph trees (torch_npu.npu._graph_tree, Inductor's
// CUDA graph trees for npu): what torch._C._cuda_* gives CUDA's, under torch_npu._C's names.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace softnpu {

void register_graph_tree_bindings(pybind11::module_& m);

}  // namespace softnpu
