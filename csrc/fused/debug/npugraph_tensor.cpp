// torch_npu's aclgraph DFX ops: print_npugraph_tensor and save_npugraph_tensor print or save a tensor when the
// stream reaches them, so captured into an NPU graph they do at every replay. Their schemas and Meta kernels (nothing
// to infer: they return nothing) are here; their CPU and npu kernels are Python's, since their work is print and
// torch.save (python/softnpu/npu/graph_tensor_dump.py registers them).
#include <torch/library.h>

// torch_npu's schemas (argument names, order, defaults).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("print_npugraph_tensor(Tensor input, *, str? tensor_name=None) -> ()");
  m.def("save_npugraph_tensor(Tensor input, *, str? save_path=None, bool overwrite=False) -> ()");
  m.def("save_npugraph_tensor.tensor_list(Tensor[] input, *, str? save_path=None, bool overwrite=False) -> ()");
}

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("print_npugraph_tensor", [](const at::Tensor&, const std::optional<c10::string_view>&) {});
  m.impl("save_npugraph_tensor", [](const at::Tensor&, const std::optional<c10::string_view>&, bool) {});
  m.impl("save_npugraph_tensor.tensor_list", [](at::TensorList, const std::optional<c10::string_view>&, bool) {});
}
