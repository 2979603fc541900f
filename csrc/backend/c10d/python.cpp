// softnpu._c10d: ProcessGroupHCCL for Python, as a torch.distributed Backend (python/softnpu/distributed.py registers
// it as "hccl"). A module of its own, imported after torch.distributed: its class derives from
// torch._C._distributed_c10d.Backend, which torch registers only when torch.distributed is imported.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/c10d/process_group_hccl.h"

namespace py = pybind11;

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "softnpu: the hccl collective backend (use torch.distributed)";
  py::class_<softnpu::ProcessGroupHCCL, c10::intrusive_ptr<softnpu::ProcessGroupHCCL>>(
      m, "ProcessGroupHCCL", py::module_::import("torch._C._distributed_c10d").attr("Backend"),
      "torch.distributed's `hccl` backend for npu tensors, carried by a Gloo backend of the same group")
      // torch_npu's signature: the Gloo backend is created here, on the same store.
      .def(py::init([](const py::object& store, int rank, int size, std::chrono::milliseconds timeout) {
             auto gloo = py::module_::import("torch._C._distributed_c10d")
                             .attr("ProcessGroupGloo")(store, rank, size, timeout)
                             .cast<c10::intrusive_ptr<c10d::Backend>>();
             return c10::make_intrusive<softnpu::ProcessGroupHCCL>(std::move(gloo));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
}
