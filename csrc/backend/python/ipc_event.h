// softnpu._C._IpcEvent: backend/ipc_event.h for torch.npu.Event(interprocess=True) (python/softnpu/npu/streams.py).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace softnpu {

void register_ipc_event_bindings(pybind11::module_& m);

}  // namespace softnpu
