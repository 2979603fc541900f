#include "backend/python/ipc.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Storage.h>

#include "backend/ipc.h"

namespace py = pybind11;

namespace softnpu {

void register_ipc_bindings(py::module_& m) {
  // torch's _share_cuda_ tuple: (device, handle, size, offset, ref counter handle, ref counter offset, event handle,
  // event sync required); the handle is None for an empty storage. No event: the sender waited for its stream.
  m.def("_share_npu_", [](py::handle storage) {
    const SharedStorage s = share_storage(torch::createStorage(storage.ptr()));
    py::object handle = s.handle.empty() ? py::object(py::none()) : py::object(py::bytes(s.handle));
    return py::make_tuple(s.device, handle, s.size_bytes, s.offset_bytes, py::bytes(s.ref_counter_handle),
                          s.ref_counter_offset, py::none(), false);
  });
  m.def("_new_shared_npu", [](int device, const py::bytes& handle, size_t size_bytes, size_t offset_bytes,
                              const py::bytes& ref_counter_handle, uint64_t ref_counter_offset) {
    c10::Storage storage = open_shared_storage(device, handle, size_bytes, offset_bytes, ref_counter_handle,
                                               ref_counter_offset);
    return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(storage)));
  });
  m.def("_release_ipc_counter", [](const py::bytes& ref_counter_handle, uint64_t ref_counter_offset) {
    release_ipc_counter(ref_counter_handle, ref_counter_offset);
  });
  m.def("_ipc_collect", [] { return ipc_collect(); });
}

}  // namespace softnpu
