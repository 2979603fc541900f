// softnpu._C: the few entry points the Python device module (python/softnpu) needs beyond what torch already exposes
// for an accelerator (torch.Stream, torch.Event, torch.accelerator and its memory functions, which reach the backend
// through the guard, hooks and allocator). Every call that may wait releases the GIL.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/allocator.h"
#include "backend/device.h"
#include "backend/generator.h"
#include "backend/guard.h"
#include "backend/npu_error.h"
#include "backend/ops/compiled_kernel.h"
#include "backend/ops/cube.h"
#include "backend/ops/executor.h"
#include "backend/stream.h"
#include "common/env.h"

namespace py = pybind11;

namespace softnpu {

namespace {

py::tuple stream_tuple(const NPUStream& s) {
  return py::make_tuple(s.id(), static_cast<int>(s.device_index()), static_cast<int>(c10::DeviceType::PrivateUse1));
}

py::dict device_properties(int device) {
  check_device_index(device);
  snpuDeviceProp prop{};
  NPU_CHECK(snpuGetDeviceProperties(&prop, device));
  py::dict d;
  d["name"] = std::string(prop.name);
  d["total_memory"] = prop.total_memory;
  d["compute_threads"] = prop.compute_threads;
  d["physical_index"] = prop.physical_index;
  return d;
}

py::dict runtime_stats(int device) {
  check_device_index(device);
  snpuDeviceStats s{};
  NPU_CHECK(snpuGetDeviceStats(device, &s));
  py::dict d;
  d["memory_in_use"] = s.memory_in_use;
  d["memory_peak"] = s.memory_peak;
  d["kernels_launched"] = s.kernels_launched;
  d["kernels_completed"] = s.kernels_completed;
  d["busy_ns"] = s.busy_ns;
  d["sync_waits"] = s.sync_waits;
  return d;
}

// A kernel that keeps the stream busy for a while: torch.npu._sleep, for tests of asynchrony (as torch.cuda._sleep).
int sleep_kernel(void* arg) {
  const auto ns = reinterpret_cast<intptr_t>(arg);
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
  return 0;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "softnpu: the npu device's bindings (use torch.npu)";

  m.def("_init", [] { init_runtime(); });
  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_device_count_noexcept", [] { return static_cast<int>(device_count_noexcept()); });
  m.def("_is_in_bad_fork", [] { return in_bad_fork(); });
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int d) { set_device(static_cast<c10::DeviceIndex>(d)); });
  m.def("_exchange_device", [](int d) {
    if (d < 0) return -1;
    return static_cast<int>(exchange_device(static_cast<c10::DeviceIndex>(d)));
  });
  m.def("_get_device_properties", &device_properties);
  // For the Python bindings of Inductor's compiled kernels (python/softnpu/inductor/launch.py).
  m.attr("_compiled_kernel_launch") = py::capsule(reinterpret_cast<void*>(&softnpu_launch_compiled_kernel),
                                                  kCompiledKernelLaunchCapsule);
  m.def("_runtime_stats", &runtime_stats);
  m.def(
      "_synchronize",
      [](int device) {
        const auto prev = exchange_device(static_cast<c10::DeviceIndex>(device));
        const snpuError_t err = snpuDeviceSynchronize();
        set_device(prev);
        NPU_CHECK(err);
      },
      py::call_guard<py::gil_scoped_release>());

  m.def("_current_stream", [](int device) { return stream_tuple(getCurrentNPUStream(device)); });
  m.def("_default_stream", [](int device) { return stream_tuple(getDefaultNPUStream(device)); });
  m.def("_set_stream", [](int64_t stream_id, int device) {
    setCurrentNPUStream(stream_for(static_cast<c10::DeviceIndex>(device), stream_id));
  });
  m.def("_stream_priority_range", [] {
    int least = 0, greatest = 0;
    NPU_CHECK(snpuDeviceGetStreamPriorityRange(&least, &greatest));
    return py::make_tuple(least, std::max(greatest, -(kStreamPriorityLevels - 1)));
  });
  m.def(
      "_sleep",
      [](double seconds) {
        NPU_CHECK(snpuLaunchKernel(getCurrentNPUStream().handle(), "softnpu::sleep", sleep_kernel,
                                   reinterpret_cast<void*>(static_cast<intptr_t>(seconds * 1e9)), nullptr));
      },
      py::call_guard<py::gil_scoped_release>());

  // torch.Event.elapsed_time accepts only torch.Event itself as `other`; torch.npu.Event subclasses it.
  m.def(
      "_event_elapsed_time",
      [](uintptr_t start, uintptr_t end) {
        return NPUGuardImpl().elapsedTime(reinterpret_cast<void*>(start), reinterpret_cast<void*>(end), -1);
      },
      py::call_guard<py::gil_scoped_release>());

  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(device))));
  });

  m.def("_memory_snapshot", [] {
    py::list segments;
    for (const auto& seg : NPUCachingAllocator::get()->snapshot()) {
      py::dict s;
      s["device"] = static_cast<int>(seg.device);
      s["address"] = seg.address;
      s["total_size"] = seg.total_size;
      s["allocated_size"] = seg.allocated_size;
      s["active_size"] = seg.active_size;
      s["requested_size"] = seg.requested_size;
      s["stream"] = reinterpret_cast<uintptr_t>(seg.stream);
      s["segment_type"] = seg.is_large ? "large" : "small";
      py::list blocks;
      for (const auto& b : seg.blocks) {
        py::dict bd;
        bd["size"] = b.size;
        bd["requested_size"] = b.requested_size;
        bd["state"] = b.allocated ? "active_allocated" : (b.active ? "active_pending_free" : "inactive");
        blocks.append(bd);
      }
      s["blocks"] = blocks;
      segments.append(s);
    }
    return segments;
  });

  m.def("_sync_points", [] {
    py::list out;
    for (const auto& c : sync_point_counts()) out.append(py::make_tuple(c.op, c.count));
    return py::make_tuple(total_sync_points(), out);
  });

  m.def("_set_copy_through_cpu", &set_copy_through_cpu);

  m.def("_cube_compute", [] { return cube_description(); });

  m.def("_env_table", [] {
    py::list out;
    for (const auto& v : env::kTable) out.append(py::make_tuple(v.name, v.layer, v.kind, v.default_text, v.doc));
    return out;
  });
}

}  // namespace softnpu
