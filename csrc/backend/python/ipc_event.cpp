#include "backend/python/ipc_event.h"

#include "backend/ipc_event.h"

namespace py = pybind11;

namespace softnpu {

void register_ipc_event_bindings(py::module_& m) {
  using release_gil = py::call_guard<py::gil_scoped_release>;
  py::class_<IpcEvent, std::shared_ptr<IpcEvent>>(m, "_IpcEvent")
      .def(py::init([](int device) { return std::make_shared<IpcEvent>(static_cast<c10::DeviceIndex>(device)); }))
      .def_static("open",
                  [](int device, const py::bytes& handle) {
                    return std::make_shared<IpcEvent>(static_cast<c10::DeviceIndex>(device),
                                                      static_cast<std::string>(handle));
                  })
      .def_property_readonly("device", [](const IpcEvent& e) { return static_cast<int>(e.device()); })
      .def("handle", [](const IpcEvent& e) { return py::bytes(e.handle()); })
      .def(
          "record",
          [](IpcEvent& e, int64_t stream_id, int device) {
            e.record(stream_for(static_cast<c10::DeviceIndex>(device), stream_id));
          },
          release_gil())
      .def(
          "wait",
          [](IpcEvent& e, int64_t stream_id, int device) {
            e.wait(stream_for(static_cast<c10::DeviceIndex>(device), stream_id));
          },
          release_gil())
      .def("query", &IpcEvent::query)
      .def("synchronize", &IpcEvent::synchronize, release_gil());
}

}  // namespace softnpu
