#include "backend/python/npu_trace.h"

#include <pybind11/stl.h>

#include <chrono>
#include <thread>
#include <tuple>
#include <vector>

#include "softnpu/runtime.h"

#include "backend/gpu_trace.h"

namespace py = pybind11;

namespace softnpu {

namespace {

// Waits until the streams' queued work has completed, without synchronizing in the sanitizer's view (a query is no
// ordering) and without taking a kernel's error (which the program's next synchronization raises): a kernel's launch
// record releases its tensors when the kernel has run, so a tensor the host dropped while a kernel used it is freed
// only then. A stream that cannot be queried (capturing, destroyed) is not waited for. Polled without the GIL in
// 20 ms slices, between which Ctrl-C raises KeyboardInterrupt.
void settle(const std::vector<uintptr_t>& streams) {
  for (uintptr_t handle : streams) {
    auto* stream = reinterpret_cast<snpuStream_t>(handle);
    for (;;) {
      snpuError_t state;
      {
        py::gil_scoped_release no_gil;
        const auto slice_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
        while ((state = snpuStreamQuery(stream)) == snpuErrorNotReady && std::chrono::steady_clock::now() < slice_end)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (state != snpuErrorNotReady) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }
}

}  // namespace

void register_npu_trace_bindings(py::module_& m) {
  m.def("_npu_trace_queue_allocator_records", [](bool enabled) {
    gpu_trace::g_allocator_records_enabled.store(enabled, std::memory_order_relaxed);
  });
  m.def(
      "_npu_trace_take_allocator_records",
      [](const std::vector<uintptr_t>& settle_streams) {
        settle(settle_streams);
        std::vector<std::tuple<int, uintptr_t, uintptr_t>> out;
        for (const auto& r : gpu_trace::take_allocator_records())
          out.emplace_back(static_cast<int>(r.kind), r.data_ptr, r.stream);
        return out;
      },
      py::arg("settle_streams") = std::vector<uintptr_t>{});
}

}  // namespace softnpu
