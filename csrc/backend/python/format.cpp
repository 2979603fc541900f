#include "backend/python/format.h"

#include "backend/format.h"

namespace py = pybind11;

namespace softnpu {

namespace {

// torch.npu.config.allow_internal_format as it is now (the user sets it at any time); torch_npu's default (True)
// while torch.npu.config does not exist or Python is gone.
bool allow_internal_format() {
  if (!Py_IsInitialized()) return true;
  py::gil_scoped_acquire gil;
  try {
    py::object config = py::module_::import("torch").attr("npu").attr("config");
    return py::getattr(config, "allow_internal_format", py::bool_(true)).cast<bool>();
  } catch (py::error_already_set&) {
    return true;
  }
}

}  // namespace

void register_format_bindings(py::module_&) { set_internal_format_query(&allow_internal_format); }

}  // namespace softnpu
