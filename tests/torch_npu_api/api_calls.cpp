// A test extension: calls of torch_npu's C++ API with torch_npu's signatures (libs/init_npu.h, NPUEvent, NPUStream,
// NPUFunctions, NPUFormat, NPUException, NPUCachingAllocator's trace tracker, OpCommand's inputs, ACL's
// aclrtMallocAlign32 from inside torch_npu's process), each returning what tests/test_torch_npu_cpp_api.py checks.
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "third_party/acl/inc/acl/acl.h"
#include "third_party/op-plugin/op_plugin/include/ops.h"
#include "torch_npu/csrc/aten/NPUGeneratorImpl.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUEvent.h"
#include "torch_npu/csrc/core/npu/NPUException.h"
#include "torch_npu/csrc/core/npu/NPUFormat.h"
#include "torch_npu/csrc/core/npu/NPUFunctions.h"
#include "torch_npu/csrc/core/npu/NPUHooksInterface.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/distributed/ProcessGroupHCCL.hpp"
#include "torch_npu/csrc/framework/OpCommand.h"
#include "torch_npu/csrc/libs/init_npu.h"

namespace py = pybind11;
using at_npu::native::OpCommand;

namespace {

// init_npu, synchronize and current_device (C++ programs without Python), then finalize_npu.
py::dict device_lifecycle(int64_t device) {
  py::dict out;
  torch_npu::init_npu(static_cast<c10::DeviceIndex>(device));
  out["current_after_init"] = static_cast<int>(c10::npu::current_device());
  torch_npu::init_npu(std::string("npu:") + std::to_string(device));
  torch_npu::init_npu(at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  torch::npu::synchronize();
  torch::npu::synchronize(device);
  torch_npu::finalize_npu();
  int32_t current = -1;
  out["get_device_status"] = static_cast<int>(c10_npu::GetDevice(&current));
  out["get_device"] = current;
  out["set_device_status"] = static_cast<int>(c10_npu::SetDevice(static_cast<c10::DeviceIndex>(device)));
  out["set_device_bad_status"] = static_cast<int>(c10_npu::SetDevice(c10_npu::device_count() + 1));
  return out;
}

// An event recorded around an op: timed, a runtime event, movable.
py::dict events(at::Tensor x) {
  py::dict out;
  c10_npu::NPUEvent start;
  c10_npu::NPUEvent end(ACL_EVENT_TIME_LINE);
  out["created_before_record"] = start.isCreated();
  out["device_before_record"] = start.device().has_value();
  start.record();
  at::Tensor y = x.mul(2).sum();
  end.record(c10_npu::getCurrentNPUStream());
  c10_npu::NPUEvent moved(std::move(end));
  moved.synchronize();
  out["query"] = moved.query();
  out["elapsed_ms_nonnegative"] = start.elapsed_time(moved) >= 0.0f;
  out["event_handle"] = moved.event() != nullptr && static_cast<aclrtEvent>(moved) == moved.event();
  out["device"] = moved.device().has_value() ? moved.device()->index() : -1;
  out["acl_sync"] = static_cast<int>(aclrtSynchronizeEvent(moved.event()));
  return out;
}

// An interprocess event's handle, and an event opened from it in this process: recorded work waits.
py::dict ipc_event(at::Tensor x) {
  py::dict out;
  c10_npu::NPUEvent shared(ACL_EVENT_IPC | ACL_EVENT_SYNC);
  aclrtIpcEventHandle handle;
  shared.ipc_handle(&handle);
  out["created_by_handle"] = shared.isCreated();
  c10_npu::NPUEvent opened(c10_npu::current_device(), &handle);
  at::Tensor y = x.mul(3);
  shared.record();
  opened.block(c10_npu::getCurrentNPUStream());
  opened.synchronize();
  out["opened_query"] = opened.query();
  out["result"] = y;
  try {
    c10_npu::NPUEvent plain;
    plain.ipc_handle(&handle);
    out["plain_ipc_error"] = "";
  } catch (const c10::Error& e) {
    out["plain_ipc_error"] = e.msg();
  }
  return out;
}

py::dict streams() {
  py::dict out;
  c10_npu::NPUStream pool = c10_npu::getNPUStreamFromPool();
  out["pool_is_not_default"] = pool != c10_npu::getDefaultNPUStream();
  out["marked_before"] = pool.isDataPreprocessStream();
  pool.setDataPreprocessStream(true);
  // The mark belongs to the stream, not to this NPUStream value.
  out["marked_copy"] = c10_npu::NPUStream(pool.unwrap()).isDataPreprocessStream();
  pool.setDataPreprocessStream(false);
  out["marked_after"] = pool.isDataPreprocessStream();
  out["need_empty_same_handle"] = pool.stream(true) == pool.stream();
  c10_npu::setCurrentNPUStream(pool);
  out["current_is_pool"] = c10_npu::getCurrentNPUStream() == pool;
  c10_npu::stream_synchronize(pool.stream());
  c10_npu::setCurrentNPUStream(c10_npu::getDefaultNPUStream());
  return out;
}

// The synchronization debug mode is torch.npu's: set here, read there and back.
int sync_debug_mode(int mode) {
  const auto previous = c10_npu::warning_state().get_sync_debug_mode();
  c10_npu::warning_state().set_sync_debug_mode(static_cast<c10_npu::SyncDebugMode>(mode));
  const int now = static_cast<int>(c10_npu::warning_state().get_sync_debug_mode());
  if (mode == static_cast<int>(c10_npu::SyncDebugMode::L_ERROR)) {
    try {
      c10_npu::warn_or_error_on_sync();
    } catch (const c10::Error&) {
      c10_npu::warning_state().set_sync_debug_mode(previous);
      return now + 100;  // raised, as the mode says
    }
  }
  c10_npu::warning_state().set_sync_debug_mode(previous);
  return now;
}

py::dict formats(at::Tensor x) {
  py::dict out;
  out["storage_sizes"] = at_npu::native::get_npu_storage_sizes(x);
  at::Tensor swapped = at_npu::native::empty_with_swapped_memory({3, 4}, at::kFloat, x.device());
  out["swapped"] = swapped;
  out["format"] = at_npu::native::get_npu_format(x);
  return out;
}

std::string acl_error_message() {
  void* ptr = nullptr;
  aclrtMalloc(&ptr, 0, ACL_MEM_MALLOC_HUGE_FIRST);  // size 0: ACL_ERROR_INVALID_PARAM, with a message
  return c10_npu::c10_npu_get_error_message();
}

// OpCommand's other inputs: tensor lists, a common dtype, a scalar as an npu tensor, host values of a shape, an
// attribute given only under a condition.
py::dict op_command_inputs(at::Tensor a, at::Tensor b) {
  py::dict out;
  at::Tensor sum = at::empty_like(a);
  OpCommand().Name("Add").Inputs({a, b}).Output(sum).Run();
  out["inputs"] = sum;

  at::Tensor ints = a.to(at::kInt);
  at::Tensor unified = at::empty_like(a);
  at_npu::native::UnifiedResult common;
  common.common_type = at::kFloat;
  OpCommand cmd;
  cmd.Name("Add").Expect(common).Input(ints).Input(b).Output(unified);
  cmd.DynamicInputReg(nullptr, {{2, 0}});
  cmd.Run();
  out["expect"] = unified;

  at::Tensor plus_scalar = at::empty_like(a);
  OpCommand().Name("Add").Input(a).InputScalarToNPUTensor(2.5, at::kFloat).Output(plus_scalar).Run();
  out["scalar_tensor"] = plus_scalar;

  const std::vector<int64_t> perm = {1, 0};
  at::Tensor transposed = at::empty({a.size(1), a.size(0)}, a.options());
  OpCommand()
      .Name("Transpose")
      .Input(a)
      .Input(c10::ArrayRef<int64_t>(perm), at::IntArrayRef{2}, at::kLong)
      .Output(transposed)
      .Run();
  out["host_values"] = transposed;

  const std::vector<double> addend(a.numel(), 0.25);
  at::Tensor plus_host = at::empty_like(a);
  OpCommand()
      .Name("Add")
      .Input(a)
      .Input(c10::ArrayRef<double>(addend), a.sizes(), at::kFloat)
      .Output(plus_host)
      .Run();
  out["host_doubles"] = plus_host;

  at::Tensor reduced = at::empty({a.size(0)}, a.options());
  OpCommand()
      .Name("ReduceSum")
      .Input(a)
      .Input(at::IntArrayRef{1})
      .Attr("keep_dims", true, false)
      .Output(reduced)
      .Run();
  out["attr_cond"] = reduced;
  return out;
}

// torch_npu's generator pattern: the default generator as at_npu::NPUGeneratorImpl, a draw under its mutex.
py::dict generator(int64_t seed) {
  py::dict out;
  at::Generator gen = at_npu::detail::getDefaultNPUGenerator();
  auto* impl = at::check_generator<at_npu::NPUGeneratorImpl>(gen);
  out["seed_before"] = impl->current_seed();
  impl->set_current_seed(static_cast<uint64_t>(seed));
  impl->set_offset(8);
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    const auto [s, offset] = impl->philox_engine_inputs(10);  // advances by 12: 10 rounded up to a multiple of 4
    out["draw"] = std::vector<uint64_t>{s, offset};
    const at_npu::PhiloxNpuState state = impl->philox_npu_state(4);
    out["state"] = std::vector<uint64_t>{state.seed_.val, state.offset_.val, state.captured_ ? 1u : 0u};
  }
  out["offset_after"] = impl->get_offset();
  out["philox_offset"] = impl->philox_offset_per_thread();
  std::shared_ptr<at_npu::NPUGeneratorImpl> copy = impl->clone();
  out["clone"] = std::vector<uint64_t>{copy->current_seed(), copy->get_offset()};
  out["device_type_npu"] = at_npu::NPUGeneratorImpl::device_type() == c10::DeviceType::PrivateUse1;
  at::Generator fresh = at_npu::detail::createNPUGenerator(0);
  out["fresh_seed"] = at::check_generator<at_npu::NPUGeneratorImpl>(fresh)->current_seed();
  return out;
}

// The registered PrivateUse1 hooks are torch_npu's NPUHooksInterface.
py::dict hooks() {
  py::dict out;
  const auto* npu_hooks = dynamic_cast<const c10_npu::NPUHooksInterface*>(c10_npu::get_npu_hooks());
  out["is_npu_hooks"] = npu_hooks != nullptr;
  out["same_generator"] = npu_hooks != nullptr && npu_hooks->getDefaultGenerator(0) == at_npu::detail::getDefaultNPUGenerator(0);
  out["available"] = npu_hooks != nullptr && npu_hooks->isAvailable();
  return out;
}

// torch_npu's batched point-to-point on the process group's hccl backend: send `out` to and receive `in` from peer.
void batch_isend_irecv(py::object backend_obj, at::Tensor out, at::Tensor in, int64_t peer) {
  const auto backend = backend_obj.cast<c10::intrusive_ptr<c10d::Backend>>();
  auto* hccl = dynamic_cast<c10d_npu::ProcessGroupHCCL*>(backend.get());
  TORCH_CHECK(hccl != nullptr, "the backend is not a c10d_npu::ProcessGroupHCCL");
  std::vector<std::string> ops{"isend", "irecv"};
  std::vector<at::Tensor> tensors{out, in};
  py::gil_scoped_release release;
  hccl->batch_isend_irecv(ops, tensors, {peer, peer})->wait();
}

at::Tensor dropout_gen_mask(at::Tensor self, std::vector<int64_t> size, double p, int64_t seed, int64_t offset) {
  return at_npu::native::npu_dropout_gen_mask(self, size, p, seed, offset, false, false);
}

std::atomic<int64_t> g_segment_allocs{0};
std::atomic<int64_t> g_segment_frees{0};
std::atomic<int64_t> g_allocs{0};

void attach_trace_tracker() {
  c10_npu::NPUCachingAllocator::attachAllocatorTraceTracker(
      [](const c10_npu::NPUCachingAllocator::TraceEntry& te) {
        if (te.action_ == c10_npu::NPUCachingAllocator::TraceEntry::SEGMENT_ALLOC) ++g_segment_allocs;
        if (te.action_ == c10_npu::NPUCachingAllocator::TraceEntry::SEGMENT_FREE) ++g_segment_frees;
        if (te.action_ == c10_npu::NPUCachingAllocator::TraceEntry::ALLOC) ++g_allocs;
      });
}

py::dict trace_counts() {
  py::dict out;
  out["segment_alloc"] = g_segment_allocs.load();
  out["segment_free"] = g_segment_frees.load();
  out["alloc"] = g_allocs.load();
  return out;
}

// What an extension's own allocator does inside torch_npu's process: ACL memory without aclInit / aclrtSetDevice.
py::dict acl_malloc_align32(int64_t bytes) {
  py::dict out;
  void* ptr = nullptr;
  out["malloc"] = static_cast<int>(aclrtMallocAlign32(&ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
  out["aligned"] = reinterpret_cast<uintptr_t>(ptr) % 32 == 0;
  out["memset"] = static_cast<int>(aclrtMemset(ptr, bytes, 7, bytes));
  std::vector<uint8_t> host(bytes);
  out["memcpy"] =
      static_cast<int>(aclrtMemcpy(host.data(), bytes, ptr, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
  out["all_sevens"] = std::all_of(host.begin(), host.end(), [](uint8_t v) { return v == 7; });
  out["free"] = static_cast<int>(aclrtFree(ptr));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("device_lifecycle", &device_lifecycle);
  m.def("events", &events);
  m.def("ipc_event", &ipc_event);
  m.def("streams", &streams);
  m.def("sync_debug_mode", &sync_debug_mode);
  m.def("formats", &formats);
  m.def("acl_error_message", &acl_error_message);
  m.def("op_command_inputs", &op_command_inputs);
  m.def("generator", &generator);
  m.def("hooks", &hooks);
  m.def("dropout_gen_mask", &dropout_gen_mask);
  m.def("batch_isend_irecv", &batch_isend_irecv);
  m.def("attach_trace_tracker", &attach_trace_tracker);
  m.def("trace_counts", &trace_counts);
  m.def("acl_malloc_align32", &acl_malloc_align32);
}
