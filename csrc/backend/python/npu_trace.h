// softnpu._C's entry points of torch_npu.utils._npu_trace (python/softnpu/npu_trace.py): the stream sanitizer's switch
// for the allocator's queued records (deallocation, record_stream, eraseStream; backend/gpu_trace.h) and their delivery.
#pragma once

#include <pybind11/pybind11.h>

namespace softnpu {

void register_npu_trace_bindings(pybind11::module_& m);

}  // namespace softnpu
