// softnpu._C: the few entry points the Python device module (python/softnpu) needs beyond what torch already exposes
// for an accelerator (torch.Stream, torch.Event, torch.accelerator and its memory functions, which reach the backend
// through the guard, hooks and allocator). Every call that may wait releases the GIL.
#include <ATen/Context.h>
#include <ATen/core/CachingHostAllocator.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/DynamicTypes.h>
#include <unistd.h>

#include <optional>

#include "backend/ops/cpp_meta.h"
#include "backend/allocator.h"
#include "backend/cost/python.h"
#include "backend/device.h"
#include "backend/error_code.h"
#include "backend/generator.h"
#include "backend/graph.h"
#include "backend/guard.h"
#include "backend/interrupt.h"
#include "backend/python/format.h"
#include "backend/python/host_func.h"
#include "backend/python/graph_tree.h"
#include "backend/python/ipc.h"
#include "backend/python/ipc_event.h"
#include "backend/python/mstx.h"
#include "backend/python/npurt.h"
#include "backend/python/npu_trace.h"
#include "backend/npu_error.h"
#include "backend/recovery.h"
#include "backend/ops/compiled_kernel.h"
#include "backend/overflow.h"
#include "backend/ops/cube.h"
#include "backend/ops/executor.h"
#include "backend/ops/fft_plan_cache.h"
#include "backend/ops/op_info.h"
#include "backend/ops/widen.h"
#include "backend/env.h"
#include "backend/stream.h"
#include "backend/sync_debug.h"
#include "common/env.h"

namespace py = pybind11;

// torch/csrc/profiler/python/combined_traceback.h declares these, but includes nlohmann/json.hpp, which the installed
// torch does not ship: the declarations are repeated here (libtorch_python exports them).
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void freeDeadCapturedTracebackFrames();
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace softnpu {

namespace {

// The interrupt poll of every host wait (backend/interrupt.h): Ctrl-C becomes KeyboardInterrupt. Python runs signal
// handlers only on the main thread, so only there is the GIL taken for them; while the interpreter shuts down, never.
void poll_python_signals() {
  if (gettid() != getpid() || !Py_IsInitialized() || _Py_IsFinalizing()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::tuple stream_tuple(const NPUStream& s) {
  return py::make_tuple(s.id(), static_cast<int>(s.device_index()), static_cast<int>(c10::DeviceType::PrivateUse1));
}

// The software device's clock, in kHz: one cycle per nanosecond, the resolution of its event timestamps. Reported as
// the devices' clock_rate, and what torch.npu._sleep counts.
constexpr int64_t kDeviceClockKHz = 1000000;

py::dict device_properties(int device) {
  check_device_index(device);
  snpuDeviceProp prop{};
  NPU_CHECK(snpuGetDeviceProperties(&prop, device));
  py::dict d;
  d["name"] = std::string(prop.name);
  d["total_memory"] = prop.total_memory;
  d["compute_threads"] = prop.compute_threads;
  d["clock_rate_khz"] = kDeviceClockKHz;
  d["physical_index"] = prop.physical_index;
  d["soc_version"] = prop.soc_version;
  d["ai_cores"] = prop.ai_cores;
  d["vector_cores"] = prop.vector_cores;
  d["chip_name"] = std::string(prop.chip_name);
  return d;
}

py::dict soc_profile_dict(const snpuSocProfile& p) {
  py::dict d;
  d["name"] = std::string(p.name);
  d["soc_version"] = p.soc_version;
  d["npu_smi_name"] = std::string(p.npu_smi_name);
  d["ai_cores"] = p.ai_cores;
  d["vector_cores"] = p.vector_cores;
  d["hbm_bytes"] = p.hbm_bytes;
  d["clock_mhz"] = p.clock_mhz;
  d["cube_fp16_tflops"] = p.cube_fp16_tflops;
  d["cube_fp32_tflops"] = p.cube_fp32_tflops;
  d["cube_int8_tops"] = p.cube_int8_tops;
  d["vector_fp16_tflops"] = p.vector_fp16_tflops;
  d["hbm_gbps"] = p.hbm_gbps;
  d["l2_bytes"] = p.l2_bytes;
  d["hccs_gbps"] = p.hccs_gbps;
  d["roce_gbps"] = p.roce_gbps;
  d["host_link_gbps"] = p.host_link_gbps;
  d["supports_bf16"] = p.supports_bf16 != 0;
  d["source"] = std::string(p.source);
  return d;
}

// The selected chip's profile (SOFTNPU_SOC_VERSION), or the named one's; readable before the device is initialized.
py::dict soc_profile(std::optional<std::string> name) {
  snpuSocProfile p{};
  NPU_CHECK(snpuGetSocProfile(name ? name->c_str() : nullptr, &p));
  return soc_profile_dict(p);
}

py::list soc_profiles() {
  int count = 0;
  NPU_CHECK(snpuGetSocProfileCount(&count));
  py::list rows;
  for (int i = 0; i < count; ++i) {
    snpuSocProfile p{};
    NPU_CHECK(snpuGetSocProfileByIndex(i, &p));
    rows.append(soc_profile_dict(p));
  }
  return rows;
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

// A kernel that spins for a number of device clock cycles: torch.npu._sleep, for tests of asynchrony (as
// torch.cuda._sleep).
int sleep_kernel(void* arg) {
  const auto cycles = reinterpret_cast<intptr_t>(arg);
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(cycles * 1000000 / kDeviceClockKHz);
  while (std::chrono::steady_clock::now() < until) {
  }
  return 0;
}

using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

std::shared_ptr<c10::GatheredContext> gather_python() { return torch::CapturedTraceback::gather(true, true, false); }
std::shared_ptr<c10::GatheredContext> gather_all() { return torch::CapturedTraceback::gather(true, true, true); }

// torch.npu.memory._record_memory_history's arguments, with the checks and meanings of torch.cuda's.
void record_memory_history(std::optional<std::string> enabled, std::optional<std::string> context,
                           const std::string& stacks, size_t max_entries, bool clear_history,
                           const std::vector<std::string>& skip_actions) {
  std::vector<TraceEntry::Action> skip;
  for (const auto& name : skip_actions) skip.push_back(c10::CachingDeviceAllocator::parseTraceEntryAction(name));
  TORCH_CHECK(!enabled || *enabled == "state" || *enabled == "all",
              "expected enabled to be 'state', 'all' or None, got '", *enabled, "'");
  TORCH_CHECK(!context || *context == "state" || *context == "alloc" || *context == "all",
              "expected context to be 'all', 'alloc', 'state' or None, got '", *context, "'");
  TORCH_CHECK(stacks == "python" || stacks == "all", "expected stacks to be 'python' or 'all', got '", stacks, "'");
  RecordContext when = RecordContext::NEVER;
  if (context) {
    when = *context == "all" ? RecordContext::ALL : *context == "alloc" ? RecordContext::ALLOC : RecordContext::STATE;
    torch::installCapturedTracebackPython();
  }
  NPUCachingAllocator::get()->record_history(enabled.has_value(), stacks == "all" ? &gather_all : &gather_python, when,
                                             enabled && *enabled == "all", max_entries, clear_history, skip);
}

const char* action_name(TraceEntry::Action a) {
  switch (a) {
    case TraceEntry::ALLOC: return "alloc";
    case TraceEntry::FREE_REQUESTED: return "free_requested";
    case TraceEntry::FREE_COMPLETED: return "free_completed";
    case TraceEntry::SEGMENT_ALLOC: return "segment_alloc";
    case TraceEntry::SEGMENT_FREE: return "segment_free";
    case TraceEntry::SEGMENT_MAP: return "segment_map";
    case TraceEntry::SEGMENT_UNMAP: return "segment_unmap";
    case TraceEntry::SNAPSHOT: return "snapshot";
    case TraceEntry::OOM: return "oom";
  }
  return "unknown";
}

// torch.npu.memory._snapshot(): the dictionary torch.cuda.memory._snapshot() returns (the format torch.cuda._memory_viz
// reads), stacks symbolized once for all blocks and events.
py::dict snapshot_dict(c10::MempoolId_t pool) {
  const auto snap = NPUCachingAllocator::get()->snapshot(pool);
  std::vector<torch::CapturedTraceback*> to_symbolize;
  auto index_of = [&](const std::shared_ptr<c10::GatheredContext>& c) -> int64_t {
    auto* t = dynamic_cast<torch::CapturedTraceback*>(c.get());
    if (!t) return -1;
    to_symbolize.push_back(t);
    return static_cast<int64_t>(to_symbolize.size()) - 1;
  };
  std::vector<std::vector<int64_t>> block_frames;
  for (const auto& seg : snap.segments) {
    block_frames.emplace_back();
    for (const auto& b : seg.blocks) block_frames.back().push_back(index_of(b.context_when_allocated));
  }
  std::vector<std::vector<int64_t>> trace_frames;
  for (const auto& trace : snap.device_traces) {
    trace_frames.emplace_back();
    for (const auto& te : trace) trace_frames.back().push_back(index_of(te.context_));
  }
  torch::freeDeadCapturedTracebackFrames();
  const std::vector<py::object> frames = torch::py_symbolize(to_symbolize);
  auto frames_at = [&](int64_t i) -> py::object { return i < 0 ? py::list() : frames[static_cast<size_t>(i)]; };

  py::list segments;
  for (size_t si = 0; si < snap.segments.size(); ++si) {
    const auto& seg = snap.segments[si];
    py::dict s;
    s["device"] = static_cast<int>(seg.device);
    s["address"] = seg.address;
    s["total_size"] = seg.total_size;
    s["allocated_size"] = seg.allocated_size;
    s["active_size"] = seg.active_size;
    s["requested_size"] = seg.requested_size;
    s["stream"] = reinterpret_cast<uintptr_t>(seg.stream);
    s["segment_type"] = seg.is_large ? "large" : "small";
    s["is_expandable"] = seg.is_expandable;
    s["segment_pool_id"] = py::make_tuple(seg.owner_private_pool_id.first, seg.owner_private_pool_id.second);
    s["frames"] = py::list();
    py::list blocks;
    size_t address = seg.address;
    for (size_t bi = 0; bi < seg.blocks.size(); ++bi) {
      const auto& b = seg.blocks[bi];
      py::dict bd;
      bd["address"] = address;
      bd["size"] = b.size;
      bd["requested_size"] = b.requested_size;
      bd["state"] = b.allocated ? "active_allocated" : (b.active ? "active_pending_free" : "inactive");
      bd["frames"] = frames_at(block_frames[si][bi]);
      address += b.size;
      blocks.append(bd);
    }
    s["blocks"] = blocks;
    segments.append(s);
  }
  py::list device_traces;
  for (size_t d = 0; d < snap.device_traces.size(); ++d) {
    py::list trace;
    for (size_t i = 0; i < snap.device_traces[d].size(); ++i) {
      const auto& te = snap.device_traces[d][i];
      py::dict e;
      e["action"] = action_name(te.action_);
      if (te.action_ == TraceEntry::OOM) {
        e["device_free"] = te.addr_;  // for an OOM, c10's TraceEntry keeps the device's free bytes in addr_
        e["addr"] = 0;
      } else {
        e["addr"] = te.addr_;
      }
      e["size"] = te.size_;
      e["stream"] = reinterpret_cast<uintptr_t>(te.stream_);
      e["time_us"] = static_cast<int64_t>(te.time_.t_);
      e["frames"] = frames_at(trace_frames[d][i]);
      e["compile_context"] = te.compile_context_;
      e["user_metadata"] = te.user_metadata_;
      trace.append(e);
    }
    device_traces.append(trace);
  }
  const auto& cfg = allocator_config();
  py::dict settings;
  settings["PYTORCH_NPU_ALLOC_CONF"] = env::raw(env::Var::PYTORCH_NPU_ALLOC_CONF) ? env::raw(env::Var::PYTORCH_NPU_ALLOC_CONF) : "";
  settings["max_split_size"] = cfg.max_split_size == SIZE_MAX ? -1 : static_cast<int64_t>(cfg.max_split_size);
  settings["garbage_collection_threshold"] = cfg.garbage_collection_threshold;
  settings["roundup_power2_divisions"] =
      std::vector<size_t>(std::begin(cfg.roundup_power2_divisions), std::end(cfg.roundup_power2_divisions));
  settings["expandable_segments"] = cfg.expandable_segments;
  py::dict out;
  out["segments"] = segments;
  out["device_traces"] = device_traces;
  out["allocator_settings"] = settings;
  return out;
}

py::dict stat_dict(const c10::CachingAllocator::Stat& st) {
  py::dict d;
  d["current"] = st.current;
  d["peak"] = st.peak;
  d["allocated"] = st.allocated;
  d["freed"] = st.freed;
  return d;
}

py::dict duration_dict(const c10::CachingAllocator::DurationStat& st) {
  py::dict d;
  d["total"] = st.total;
  d["max"] = st.max;
  d["min"] = st.min;
  d["count"] = st.count;
  d["avg"] = st.count ? st.total / st.count : 0;
  return d;
}

// torch.npu.host_memory_stats_as_nested_dict(): ATen's HostStats of the pinned allocator, keyed as torch.cuda's.
py::dict host_stats() {
  const at::HostStats st = at::getHostAllocator(at::kPrivateUse1)->get_stats();
  py::dict d;
  d["allocations"] = stat_dict(st.allocations);
  d["allocated_bytes"] = stat_dict(st.allocated_bytes);
  d["active_requests"] = stat_dict(st.active_requests);
  d["active_bytes"] = stat_dict(st.active_bytes);
  d["num_host_alloc"] = st.num_host_alloc;
  d["num_host_free"] = st.num_host_free;
  d["host_alloc_time"] = duration_dict(st.host_alloc_time);
  d["host_free_time"] = duration_dict(st.host_free_time);
  return d;
}

c10::MempoolId_t pool_id(const py::tuple& t) { return {t[0].cast<c10::CaptureId_t>(), t[1].cast<c10::CaptureId_t>()}; }

}  // namespace

PYBIND11_MODULE(_C, m) {
  set_interrupt_poll(&poll_python_signals);
  m.doc() = "softnpu: the npu device's bindings (use torch.npu)";

  m.def("_init", [] {
    init_runtime();
    // As CUDA's initialization: ATen's context now counts the device as initialized, so Tensor.is_pinned() asks
    // the hooks (memory registered by npurt().npuHostRegister is pinned before any pin_memory() call).
    at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  });
  register_graph_tree_bindings(m);  // torch_npu._C's allocator hooks of NPU graph trees (_npu_getCheckpointState, ...)
  register_ipc_bindings(m);     // _share_npu_, _new_shared_npu, _release_ipc_counter, _ipc_collect
  register_ipc_event_bindings(m);  // _IpcEvent: torch.npu.Event(interprocess=True)
  register_npurt_bindings(m);  // _npurt: torch.npu.npurt()
  register_mstx_bindings(m);  // _mstx: torch.npu.mstx
  register_npu_trace_bindings(m);  // the allocator's records for torch_npu.utils._npu_trace
  register_host_func_bindings(m);  // _launch_host_func, _subscribe_report, _unsubscribe_report
  register_format_bindings(m);  // format.cpp reads torch.npu.config.allow_internal_format through it
  m.def("_cpp_meta_ops", [] { return cpp_meta_ops(); });  // the overloads inferred without Python (tests)
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
  m.def("_soc_profile", &soc_profile, py::arg("name") = py::none());
  m.def("_soc_profiles", &soc_profiles);
  // For the Python bindings of Inductor's compiled kernels (python/softnpu/inductor/launch.py).
  m.attr("_compiled_kernel_launch") = py::capsule(reinterpret_cast<void*>(&softnpu_launch_compiled_kernel),
                                                  kCompiledKernelLaunchCapsule);
  m.attr("_compiled_kernel_threads") = py::capsule(reinterpret_cast<void*>(&softnpu_compiled_kernel_threads),
                                                   kCompiledKernelThreadsCapsule);
  m.def("_runtime_stats", &runtime_stats);
  m.def(
      "_synchronize",
      [](int device) {
        NPUGuardImpl().synchronizeDevice(static_cast<c10::DeviceIndex>(device));
      },
      py::call_guard<py::gil_scoped_release>());

  m.def("_current_stream", [](int device) { return stream_tuple(getCurrentNPUStream(device)); });
  m.def("_default_stream", [](int device) { return stream_tuple(getDefaultNPUStream(device)); });
  m.def("_sync_launch_stream", [](int device) { return stream_tuple(getStreamFromSyncLaunchPool(device)); });
  m.def("_external_stream", [](uintptr_t handle, int device) {
    return stream_tuple(getStreamFromExternal(reinterpret_cast<snpuStream_t>(handle), device));
  });
  // A torch stream's runtime handle (torch_npu: its aclrtStream), what Stream.npu_stream and the raw-stream queries
  // give, and the key the backend reports the stream by to torch.npu._gpu_trace (gpu_trace.h).
  m.def("_stream_handle", [](int64_t stream_id, int device) {
    return reinterpret_cast<uintptr_t>(stream_for(static_cast<c10::DeviceIndex>(device), stream_id).handle());
  });
  m.def("_stream_of_handle", [](uintptr_t handle) -> py::object {
    const auto s = find_stream(reinterpret_cast<snpuStream_t>(handle));
    return s ? py::object(stream_tuple(*s)) : py::object(py::none());
  });
  m.def("_stream_priority", [](int64_t stream_id, int device) {
    return stream_for(static_cast<c10::DeviceIndex>(device), stream_id).priority();
  });
  m.def("_set_stream", [](int64_t stream_id, int device) {
    setCurrentNPUStream(stream_for(static_cast<c10::DeviceIndex>(device), stream_id));
  });
  // The runtime's id of a torch stream (snpuStreamGetInfo): the id the C seam's faults and records name streams by,
  // which is not torch's StreamId (pool streams get runtime ids in creation order, across devices and captures).
  m.def("_runtime_stream_id", [](int64_t stream_id, int device) {
    uint64_t id = 0;
    NPU_CHECK(snpuStreamGetInfo(stream_for(static_cast<c10::DeviceIndex>(device), stream_id).handle(), nullptr,
                                nullptr, &id));
    return id;
  });
  // torch.npu._recovery's block marks (backend/recovery.h), by a storage's data pointer.
  m.def("_npu_data_ptr_is_safe", [](uintptr_t ptr) { return recovery::is_safe(reinterpret_cast<void*>(ptr)); });
  m.def("_mark_npu_data_ptr_unsafe", [](uintptr_t ptr) { recovery::mark_unsafe(reinterpret_cast<void*>(ptr)); });
  m.def("_update_npu_data_ptr", [](uintptr_t ptr) { recovery::mark_safe(reinterpret_cast<void*>(ptr)); });
  m.def("_set_npu_data_unsafe_flag", &recovery::set_check);
  m.def("_get_npu_data_unsafe_flag", &recovery::check_enabled);
  m.def("_stream_priority_range", [] {
    int least = 0, greatest = 0;
    NPU_CHECK(snpuDeviceGetStreamPriorityRange(&least, &greatest));
    return py::make_tuple(least, std::max(greatest, -(kStreamPriorityLevels - 1)));
  });
  m.def(
      "_sleep",
      [](int64_t cycles) {
        TORCH_CHECK_VALUE(cycles >= 0, "torch.npu._sleep: cycles must be non-negative, got ", cycles,
                          error_code(SubModule::PTA, ErrCode::VALUE));
        NPU_CHECK(snpuLaunchKernel(getCurrentNPUStream().handle(), "softnpu::sleep", sleep_kernel,
                                   reinterpret_cast<void*>(static_cast<intptr_t>(cycles)), nullptr));
      },
      py::call_guard<py::gil_scoped_release>());

  // torch_npu's error-code suffix, for the Python side's errors (torch_npu.utils.error_code): one formatter.
  m.def("_error_code", [](int submodule, int code, int rank) {
    return error_code(static_cast<SubModule>(submodule), static_cast<ErrCode>(code), rank);
  });

  // torch.Event.elapsed_time accepts only torch.Event itself as `other`; torch.npu.Event subclasses it.
  m.def(
      "_event_elapsed_time",
      [](uintptr_t start, uintptr_t end) {
        return NPUGuardImpl().elapsedTime(reinterpret_cast<void*>(start), reinterpret_cast<void*>(end), -1);
      },
      py::call_guard<py::gil_scoped_release>());
  // torch_npu's Event.recorded_time: waits for the event, then when its work completed (us, aclrtEventGetTimestamp's).
  m.def(
      "_event_recorded_time",
      [](uintptr_t event) {
        auto e = reinterpret_cast<snpuEvent_t>(event);
        NPU_CHECK(snpuEventSynchronize(e));
        uint64_t us = 0;
        NPU_CHECK(snpuEventGetTimestamp(e, &us));
        return us;
      },
      py::call_guard<py::gil_scoped_release>());
  // torch.npu.backends.fft_plan_cache (torch_npu's _npu_*_fft_plan_cache_* calls).
  m.def("_fft_plan_cache_size", &fft_plan_cache_size);
  m.def("_fft_plan_cache_max_size", &fft_plan_cache_max_size);
  m.def("_set_fft_plan_cache_max_size", &set_fft_plan_cache_max_size);
  m.def("_clear_fft_plan_cache", &clear_fft_plan_cache);
  // torch_npu.erase_stream: the tensor's block no longer waits for the stream when freed (undoes record_stream).
  m.def("_erase_stream", [](const at::Tensor& tensor, int64_t stream_id, int device) {
    NPUCachingAllocator::get()->eraseStream(tensor.storage().data_ptr(),
                                            stream_for(static_cast<c10::DeviceIndex>(device), stream_id).unwrap());
  });

  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(device))));
  });

  m.def("_memory_snapshot", [](const py::tuple& pool) { return snapshot_dict(pool_id(pool)); });
  m.def("_record_memory_history", &record_memory_history);
  m.def("_attach_out_of_memory_observer", [](py::function observer) {
    // Never freed: observers live as long as the allocator, which outlives the interpreter at exit, when dropping a
    // Python reference would crash.
    auto* held = new py::function(std::move(observer));
    NPUCachingAllocator::get()->attach_oom_observer([held](c10::DeviceIndex device, size_t alloc, size_t free_bytes) {
      py::gil_scoped_acquire gil;
      try {
        (*held)(static_cast<int>(device), alloc, free_bytes);
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("the npu out-of-memory observer");
      }
    });
  });
  m.def("_oom_snapshot_config", [] { return py::make_tuple(oom_snapshot_mode(), oom_snapshot_path()); });
  m.def("_set_memory_fraction", [](double fraction, int device) {
    NPUCachingAllocator::get()->set_memory_fraction(fraction, static_cast<c10::DeviceIndex>(device));
  });
  m.def("_set_allocator_settings", [](const std::string& settings) { set_allocator_settings(settings); });
  m.def("_oom_rejections", [](int device) {
    return NPUCachingAllocator::get()->oom_rejections(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_get_memory_fraction", [](int device) {
    return NPUCachingAllocator::get()->memory_fraction(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_mempool_create", [](uintptr_t alloc, uintptr_t free) {
    const auto id = NPUCachingAllocator::get()->create_pool(
        reinterpret_cast<NPUCachingAllocator::PluggableAllocFn>(alloc),
        reinterpret_cast<NPUCachingAllocator::PluggableFreeFn>(free));
    return py::make_tuple(id.first, id.second);
  });
  m.def("_mempool_release", [](const py::tuple& id) { NPUCachingAllocator::get()->release_pool(pool_id(id)); });
  m.def("_mempool_use_count", [](const py::tuple& id) { return NPUCachingAllocator::get()->pool_use_count(pool_id(id)); });
  m.def("_mempool_begin", [](int device, const py::tuple& id) {
    NPUCachingAllocator::get()->begin_allocate_to_pool(static_cast<c10::DeviceIndex>(device), pool_id(id));
  });
  m.def("_mempool_end", [](int device, const py::tuple& id) {
    NPUCachingAllocator::get()->end_allocate_to_pool(static_cast<c10::DeviceIndex>(device), pool_id(id));
  });
  m.def("_raw_alloc", [](size_t nbytes, int device, int64_t stream_id) {
    const NPUStream stream = stream_for(static_cast<c10::DeviceIndex>(device), stream_id);
    const c10::DeviceGuard guard(stream.device());
    return reinterpret_cast<uintptr_t>(NPUCachingAllocator::get()->raw_alloc(nbytes, stream));
  });
  m.def("_change_current_allocator", [](uintptr_t alloc, uintptr_t free) {
    NPUCachingAllocator::get()->use_pluggable(reinterpret_cast<NPUCachingAllocator::PluggableAllocFn>(alloc),
                                              reinterpret_cast<NPUCachingAllocator::PluggableFreeFn>(free));
  });
  m.def("_pluggable_set_device_stats_fn", [](uintptr_t fn) {
    NPUCachingAllocator::get()->set_pluggable_device_stats_fn(
        reinterpret_cast<NPUCachingAllocator::PluggableDeviceStatsFn>(fn));
  });
  m.def("_pluggable_set_reset_peak_status_fn", [](uintptr_t fn) {
    NPUCachingAllocator::get()->set_pluggable_reset_peak_fn(
        reinterpret_cast<NPUCachingAllocator::PluggableResetPeakFn>(fn));
  });
  m.def("_raw_delete", [](uintptr_t ptr) { NPUCachingAllocator::get()->raw_delete(reinterpret_cast<void*>(ptr)); });
  m.def("_host_memory_stats", &host_stats);
  m.def("_reset_accumulated_host_memory_stats",
        [] { at::getHostAllocator(at::kPrivateUse1)->reset_accumulated_stats(); });
  m.def("_reset_peak_host_memory_stats", [] { at::getHostAllocator(at::kPrivateUse1)->reset_peak_stats(); });
  m.def("_host_empty_cache", [] { at::getHostAllocator(at::kPrivateUse1)->empty_cache(); },
        py::call_guard<py::gil_scoped_release>());
  m.def("_get_overflow_flag", [] {
    arm_overflow_check();
    return overflow_flag();
  });
  m.def("_clear_overflow_flag", [] {
    arm_overflow_check();
    clear_overflow_flag();
  });
  py::class_<NPUGraph>(m, "_NPUGraph")
      .def(py::init<>())
      .def("capture_begin",
           [](NPUGraph& g, const py::tuple& pool, int mode) {
             g.capture_begin(pool_id(pool), static_cast<snpuStreamCaptureMode>(mode));
           })
      .def("capture_end", &NPUGraph::capture_end)
      .def("begin_capture_to_if_node", &NPUGraph::begin_capture_to_if_node)
      .def("end_capture_to_conditional_node", &NPUGraph::end_capture_to_conditional_node)
      .def("register_generator_state",
           [](NPUGraph& g, const at::Generator& gen) {
             g.register_generator_state(at::check_generator<NPUGeneratorImpl>(gen)->state());
           })
      .def("replay", &NPUGraph::replay)
      .def("reset", &NPUGraph::reset)
      .def("pool",
           [](const NPUGraph& g) {
             const auto id = g.pool();
             return py::make_tuple(id.first, id.second);
           })
      .def("node_count", &NPUGraph::node_count)
      .def("node_names", &NPUGraph::node_names)
      .def("replay_count", &NPUGraph::replay_count);
  m.def("_graph_pool_handle", [] {
    const auto id = graph_pool_handle();
    return py::make_tuple(id.first, id.second);
  });
  m.def("_is_current_stream_capturing", &current_stream_capturing);
  m.def("_set_sync_debug_mode", [](int mode) { set_sync_debug_mode(static_cast<SyncDebugMode>(mode)); });
  m.def("_get_sync_debug_mode", [] { return static_cast<int>(sync_debug_mode()); });

  m.def("_sync_points", [] {
    py::list out;
    for (const auto& c : sync_point_counts()) out.append(py::make_tuple(c.op, c.count));
    return py::make_tuple(total_sync_points(), out);
  });

  m.def("_set_copy_through_cpu", &set_copy_through_cpu);

  m.def("_cube_compute", [] { return cube_description(); });

  softnpu::cost::register_python(m);

  // How the op path treats an op where ATen's kernels disagree ("aten::histc" or "aten::max.dim"), for the tests that
  // find such ops mechanically: its Meta result corrected to the CPU's (ops/meta_fixes), its float32 contract
  // (ops/cube), the dtypes it computes wider (ops/widen), always synchronizing with the CPU kernel's shapes, the
  // arguments it writes.
  m.def("_op_route", [](const std::string& qualified) {
    const auto dot = qualified.find('.');
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(
        qualified.substr(0, dot).c_str(), dot == std::string::npos ? "" : qualified.substr(dot + 1).c_str());
    const OpInfo& info = op_info(op);
    py::list widened;
    for (int t = 0; t < static_cast<int>(c10::ScalarType::NumOptions); ++t) {
      const auto dtype = static_cast<c10::ScalarType>(t);
      if (in_mask(info.widened_dtypes, dtype)) widened.append(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype))));
    }
    py::dict route;
    route["meta_fix"] = info.meta_fix != nullptr;
    route["float32_contract"] = float32_contract(info.float32_dtypes);
    route["widened"] = widened;
    route["data_dependent"] = info.data_dependent;
    py::list written;
    for (int i : info.written_args) written.append(op.schema().arguments()[i].name());
    route["written"] = written;
    return route;
  });

  m.def("_env_table", [] {
    py::list out;
    for (const auto& v : env::kTable) out.append(py::make_tuple(v.name, v.layer, v.kind, v.default_text, v.doc));
    return out;
  });
}

}  // namespace softnpu
