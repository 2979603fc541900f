#include "backend/ops/executor.h"

#include <ATen/EmptyTensor.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>

#include "backend/allocator.h"
#include "backend/cost/cost_model.h"
#include "backend/env.h"
#include "backend/error_code.h"
#include "backend/generator.h"
#include "backend/graph.h"
#include "backend/interrupt.h"
#include "backend/npu_error.h"
#include "backend/ops/cpp_meta.h"
#include "backend/ops/ivalue_tensors.h"
#include "backend/ops/kernel.h"
#include "backend/ops/meta_cache.h"
#include "backend/ops/op_info.h"
#include "backend/ops/storage.h"
#include "backend/ops/widen.h"
#include "backend/profiler/launch_trace.h"
#include "backend/recovery.h"
#include "backend/stream.h"
#include "backend/sync_debug.h"

namespace softnpu {

namespace {

constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

std::atomic<uint64_t> g_sync_points{0};
std::atomic<bool> g_copy_through_cpu{false};

// ------------------------------------------------------------------------------------------------ values

// Rebuilds an IValue with every tensor in it (tensor, tensor list, optional tensor list) replaced by f(tensor).
template <typename F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    const auto in = v.toTensorList();
    out.reserve(in.size());
    for (const at::Tensor& t : in) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    const auto in = v.toListRef();
    if (!in.empty() && std::any_of(in.begin(), in.end(), [](const c10::IValue& e) { return e.isTensor(); })) {
      c10::List<std::optional<at::Tensor>> out;
      out.reserve(in.size());
      for (const auto& e : in) out.push_back(e.isTensor() ? std::optional<at::Tensor>(f(e.toTensor())) : std::nullopt);
      return out;
    }
  }
  return v;
}

// ------------------------------------------------------------------------------------------------ devices

bool is_cpu_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

// The npu device an op runs on, checking that every tensor is on it. 0-dim CPU tensors are allowed anywhere, as in
// CUDA; CPU index tensors (in optional-tensor lists, as in x[idx]) are moved to the device by the caller.
c10::DeviceIndex op_device(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  const auto& schema = info.op.schema();
  c10::DeviceIndex device = -1;
  const c10::Argument* first = nullptr;
  // A tensor on another device type is reported once the npu device is known (it may come from a later argument).
  std::optional<c10::Device> stray;
  size_t stray_arg = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool index_list = args[i].isList() && !args[i].isTensorList();
    visit_tensors(args[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (t.device().type() != kNPU) {
        if (!stray && !is_cpu_scalar(t) && !(index_list && t.device().is_cpu())) {
          stray = t.device();
          stray_arg = i;
        }
        return;
      }
      if (device < 0) {
        device = t.device().index();
        first = &schema.arguments()[i];
      } else {
        TORCH_CHECK(t.device().index() == device,
                    "Expected all tensors to be on the same device, but got ", schema.arguments()[i].name(),
                    " is on ", t.device(), ", different from other tensors on npu:", static_cast<int>(device),
                    " (when checking argument ", first->name(), " in method ", info.name, ")");
      }
    });
  }
  for (size_t i = 0; i < args.size() && device < 0; ++i) {
    if (args[i].isDevice() && args[i].toDevice().type() == kNPU) {
      const auto d = args[i].toDevice();
      device = d.has_index() ? d.index() : c10::DeviceIndex(getCurrentNPUStream().device_index());
    }
  }
  for (int g : info.generator_args) {
    if (!args[g].isGenerator()) continue;
    const auto gen_device = args[g].toGenerator().device();
    TORCH_CHECK(gen_device.type() == kNPU, "Expected a 'npu' device type for generator but found '",
                gen_device.type(), "'");
    if (device < 0) device = gen_device.index();
  }
  TORCH_CHECK(device >= 0, info.name, ": no npu tensor or device among the arguments");
  TORCH_CHECK(!stray, "Expected all tensors to be on the same device, but got ", schema.arguments()[stray_arg].name(),
              " is on ", *stray, ", different from other tensors on npu:", static_cast<int>(device),
              " (when checking argument in method ", info.name, ")");
  return device;
}

// CPU index tensors become npu tensors; other values are left in place (copying an IValue costs two atomic
// reference count updates per tensor, on every launch).
void move_indices_to_device(c10::IValue& v, c10::DeviceIndex device) {
  if (!v.isList() || v.isTensorList()) return;
  bool any_cpu = false;
  visit_tensors(v, [&](const at::Tensor& t) { any_cpu |= t.defined() && t.device().is_cpu() && t.dim() > 0; });
  if (!any_cpu) return;
  v = map_tensors(v, [&](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.dim() > 0 ? t.to(c10::Device(kNPU, device)) : t;
  });
}

// ------------------------------------------------------------------------------------------------ meta

at::Tensor to_meta(const at::Tensor& t) {
  // Wrapped numbers (Python scalars) stay CPU scalars, as Meta kernels, including those written in Python, expect.
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  at::Tensor m = at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type(), std::nullopt,
                                                std::nullopt, std::nullopt);
  if (t.is_conj()) m._set_conj(true);
  if (t.is_neg()) m._set_neg(true);
  return m;
}

c10::IValue meta_value(const c10::IValue& v) {
  if (v.isDevice() && v.toDevice().type() == kNPU) return c10::Device(c10::DeviceType::Meta);
  if (v.isGenerator()) return c10::IValue();
  return map_tensors(v, to_meta);
}

// Meta kernels check less than CPU kernels (max() of an empty tensor: the Meta kernel gives a 0-dim result, the CPU
// kernel raises; and max.unary_out, which the launch would run, does not check either). When no tensor argument has
// data, the CPU kernel itself costs nothing on the host: it runs there too, so every check it makes from shapes alone
// raises at the call, as on the CPU. Not for ops that draw random numbers (they would advance the CPU
// generator) nor for ones whose outputs are large (an empty input may still ask for a big output: new_full).
constexpr int64_t kProbeMaxOutputElements = 4096;

// Zero-size tensors may view a non-empty storage (x[:0]), and ops that address storage (as_strided_copy) see it: the
// stand-ins get storages of the same size, so probing is bounded by their size too.
constexpr size_t kProbeMaxStorageBytes = 1 << 20;

bool all_tensors_empty(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  if (!info.generator_args.empty()) return false;
  bool any = false, empty = true;
  for (const auto& a : args) {
    visit_tensors(a, [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() != kNPU) return;
      any = true;
      empty = empty && t.numel() == 0 && t.storage().nbytes() <= kProbeMaxStorageBytes;
    });
  }
  return any && empty;
}

bool small_outputs(const MetaResult& meta) {
  int64_t elements = 0;
  for (const auto& r : meta.returns) visit_tensors(r, [&](const at::Tensor& t) { elements += t.defined() ? t.numel() : 0; });
  return elements <= kProbeMaxOutputElements;
}

// A CPU tensor with t's metadata over zeroed bytes as many as t's storage holds (the CPU kernel reads none of them
// through t's elements: there are none).
at::Tensor cpu_stand_in(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNPU) return t;
  const at::Tensor bytes = at::zeros({static_cast<int64_t>(t.storage().nbytes())}, at::TensorOptions(at::kByte));
  at::Tensor c = at::empty({0}, t.options().device(c10::kCPU));
  c.set_(bytes.storage(), t.storage_offset(), t.sizes(), t.strides());
  if (t.is_conj()) c._set_conj(true);
  if (t.is_neg()) c._set_neg(true);
  return c;
}

// Whether a tensor argument is in a dtype the op computes wider (ops/widen.h), which its CPU kernel refuses.
bool widens(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  if (!info.widened_dtypes) return false;
  bool any = false;
  for (const auto& a : args)
    visit_tensors(a, [&](const at::Tensor& t) { any = any || (t.defined() && in_mask(info.widened_dtypes, t.scalar_type())); });
  return any;
}

// Runs the CPU kernel on data-free CPU stand-ins of the arguments, for its checks: throws its error. The outputs stay
// as the Meta kernel infers them (where the two differ, as in the saved statistics of native_layer_norm in float16,
// npu follows the Meta kernel, which describes the accelerator kernels, for empty inputs as for others).
void probe_cpu(OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const auto& a : args) {
    stack.push_back(a.isDevice() && a.toDevice().type() == kNPU ? c10::IValue(c10::Device(c10::kCPU))
                                                                  : map_tensors(a, cpu_stand_in));
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  info.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
}

// Shape inference is softnpu's own work: a user's TorchDispatchMode or TorchFunctionMode must not see what a Python Meta
// kernel (the ops ATen has no C++ one for) calls.
class HiddenFromUserModes {
 public:
  HiddenFromUserModes() : saved_(at::impl::PythonTorchFunctionTLS::get_disabled_state()) {
    at::impl::PythonTorchFunctionTLS::set_disabled_state(at::impl::TorchFunctionDisabledState::ALL_DISABLED);
  }
  ~HiddenFromUserModes() { at::impl::PythonTorchFunctionTLS::set_disabled_state(saved_); }
  HiddenFromUserModes(const HiddenFromUserModes&) = delete;
  HiddenFromUserModes& operator=(const HiddenFromUserModes&) = delete;

 private:
  c10::impl::ExcludeDispatchKeyGuard no_python_{
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::PreDispatch})};
  at::impl::TorchFunctionDisabledState saved_;
};

// Runs the Meta kernel: ATen's C++ one where it has one (cpp_meta.h: no Python runs), else the dispatcher's. Returns
// null if it cannot infer the outputs (any error: data-dependent shapes, or an input
// error that the CPU kernel then reports itself, with its own exception type). An error the CPU kernel raises from
// the shapes of data-free arguments is thrown at once.
std::shared_ptr<MetaResult> run_meta(OpInfo& info, c10::ArrayRef<c10::IValue> args, std::exception_ptr* error) {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const auto& a : args) stack.push_back(meta_value(a));
  auto result = std::make_shared<MetaResult>();
  for (int i : info.out_args) result->out_args.push_back(stack[i]);
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const HiddenFromUserModes hidden;
    const c10::DispatchKeySet meta(c10::DispatchKey::Meta);
    if (const c10::KernelFunction* cpp = cpp_meta_kernel(info.op)) {
      cpp->callBoxed(info.op, meta, &stack);
    } else {
      info.op.redispatchBoxed(meta, &stack);
    }
  } catch (...) {
    *error = std::current_exception();
    return nullptr;
  }
  result->returns.assign(stack.begin(), stack.end());
  if (info.meta_fix) info.meta_fix(args, result->returns);
  if (all_tensors_empty(info, args) && small_outputs(*result) && !widens(info, args)) probe_cpu(info, args);
  return result;
}

// ------------------------------------------------------------------------------------------------ outputs

at::Tensor empty_npu(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype) {
  return at::detail::empty_strided_generic(sizes, strides, NPUCachingAllocator::get(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

// Fresh npu outputs shaped like the Meta kernel's returns.
c10::IValue allocate_like(const c10::IValue& meta) {
  return map_tensors(meta, [](const at::Tensor& m) {
    return m.defined() ? empty_npu(m.sizes(), m.strides(), m.scalar_type()) : m;
  });
}

// Gives an out= tensor the sizes and strides the op would give it (growing its storage if needed), so the kernel
// never has to resize device memory.
void apply_out_metadata(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  if (!out.defined() || (out.sizes() == sizes && out.strides() == strides)) return;
  auto* impl = out.unsafeGetTensorImpl();
  const size_t needed = at::detail::computeStorageNbytes(sizes, strides, out.itemsize(), impl->storage_offset());
  if (needed > impl->storage().nbytes()) resize_storage_bytes(impl->storage().unsafeGetStorageImpl(), needed);
  impl->set_sizes_and_strides(sizes, strides, impl->storage_offset());
}

// Whether the op resizes an out= tensor that overlaps itself (an expanded tensor) or another argument
// (x.logical_and_(y) runs logical_and.out(x, y, out=x)): CPU kernels check such an out= tensor before resizing it, and
// reject it, which resizing it here would hide. Such launches take the synchronizing path, where the kernel resizes it.
bool resizes_overlapping_out(const OpInfo& info, c10::ArrayRef<c10::IValue> args, const MetaResult& meta) {
  for (size_t j = 0; j < info.out_args.size(); ++j) {
    const at::Tensor& out = args[info.out_args[j]].toTensor();
    const at::Tensor& m = meta.out_args[j].toTensor();
    if (!out.defined() || (out.sizes() == m.sizes() && out.strides() == m.strides())) continue;
    if (at::has_internal_overlap(out) != at::MemOverlap::No) return true;
    bool shared = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (static_cast<int>(i) == info.out_args[j]) continue;
      visit_tensors(args[i], [&](const at::Tensor& t) {
        shared = shared || (t.defined() && t.has_storage() && t.storage().is_alias_of(out.storage()));
      });
    }
    if (shared) return true;
  }
  return false;
}

// Whether a written tensor (out=, in-place self) partially overlaps another argument: x[1:].add_(x[:-1]),
// torch.cat([a, b], out=t) with t over a's memory. CPU kernels check this before writing and raise, each by its own
// rule (TensorIterator refuses a partial overlap, cat any overlap); the Meta kernels cannot (meta tensors have no
// addresses). Such launches take the synchronizing path, where the CPU kernel sees the true aliasing and its error
// is raised at the call. A written tensor that is exactly another argument (torch.add(x, y, out=x)) stays async.
// Tensor lists (the foreach ops) are not compared: quadratic in the parameters, on every optimizer step.
bool partially_overlaps(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  for (int w : info.written_args) {
    if (!args[w].isTensor()) continue;
    const at::Tensor& out = args[w].toTensor();
    if (!out.defined() || out.numel() == 0 || !out.has_storage()) continue;
    const auto* impl = out.unsafeGetTensorImpl();
    const c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
    const size_t begin = impl->storage_offset() * out.itemsize();
    const size_t end = at::detail::computeStorageNbytes(out.sizes(), out.strides(), out.itemsize(), impl->storage_offset());
    for (size_t i = 0; i < args.size(); ++i) {
      if (static_cast<int>(i) == w) continue;
      bool overlap = false;
      visit_tensors(args[i], [&](const at::Tensor& t) {
        if (overlap || !t.defined() || t.numel() == 0 || !t.has_storage() || t.unsafeGetTensorImpl() == impl ||
            t.storage().unsafeGetStorageImpl() != storage)
          return;
        const size_t t_begin = t.storage_offset() * t.itemsize();
        const size_t t_end = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize(), t.storage_offset());
        const bool same_view = t_begin == begin && t.sizes() == out.sizes() && t.strides() == out.strides() &&
                               t.scalar_type() == out.scalar_type();
        overlap = !same_view && t_begin < end && begin < t_end;
      });
      if (overlap) return true;
    }
  }
  return false;
}

// ------------------------------------------------------------------------------------------------ launches

// The CPU kernel's arguments: tensors as the kernel will rebuild them, the CPU device for npu devices, seeds drawn
// now from the npu generators (so RNG state is ordered with launches, as the host issues them).
void prepare_arguments(const OpInfo& info, c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device,
                       KernelLaunch& k) {
  for (const auto& a : args) {
    if (a.isDevice() && a.toDevice().type() == kNPU) {
      k.stack.emplace_back(c10::Device(c10::kCPU));
    } else {
      k.add_argument(a);
    }
  }
  for (int g : info.generator_args) {
    const at::Generator gen = args[g].isGenerator() ? args[g].toGenerator() : default_generator(device);
    auto* impl = gen.get<NPUGeneratorImpl>();
    std::lock_guard<std::mutex> lock(impl->mutex_);
    k.seeds.emplace_back(g, impl->draw());
    k.stack[g] = c10::IValue();
  }
}

// args and outputs (the fresh returns) only describe the kernel to the profiler's cost estimate.
void launch(const OpInfo& info, const NPUStream& stream, KernelLaunch* k, c10::ArrayRef<c10::IValue> args,
            c10::ArrayRef<c10::IValue> outputs) {
  const profiler::LaunchScope traced(
      info.name.c_str(), [&] { return cost::estimate_op(cost::selected_chip(), info, args, outputs); });
  if (C10_UNLIKELY(capture_underway())) k->replayable = true;
  // On failure the runtime has already handed the record back through recycle_kernel; while the queue is full it
  // has not taken it, so an interrupted wait for room hands it back here.
  for (;;) {
    const snpuError_t err =
        snpuLaunchKernelTimeout(stream.handle(), info.name.c_str(), run_kernel, k, recycle_kernel, kInterruptPollMicros);
    if (err != snpuErrorNotReady) {
      NPU_CHECK(err);
      return;
    }
    try {
      poll_interrupt();
    } catch (...) {
      recycle_kernel(k);
      throw;
    }
  }
}

// ------------------------------------------------------------------------------------------------ sync path

// An argument the CPU kernel wrote (`cpu`, over its device memory), as the kernel left it: resized in place, it gets
// the new sizes and strides; moved to host memory (its storage grown), also the data.
void adopt_written(const at::Tensor& device, const at::Tensor& cpu) {
  if (!device.defined() || !cpu.defined()) return;
  const bool moved = cpu.storage().data() != device.storage().data();
  if (!moved && device.sizes() == cpu.sizes() && device.strides() == cpu.strides()) return;
  apply_out_metadata(device, cpu.sizes(), cpu.strides());
  if (moved && cpu.numel() > 0) device.copy_(cpu);
}

c10::IValue to_device(const OpInfo& info, const c10::IValue& v, const NPUStream& stream) {
  return map_tensors(v, [&](const at::Tensor& cpu) {
    if (!cpu.defined()) return cpu;
    TORCH_CHECK_NOT_IMPLEMENTED(cpu.layout() == c10::kStrided, info.name, " returns a ", cpu.layout(),
                                " tensor: npu supports only strided tensors");
    const at::Tensor src = cpu.contiguous();
    at::Tensor dst = empty_npu(src.sizes(), src.strides(), src.scalar_type());
    if (src.nbytes() > 0) {
      // From pageable memory: staged, so the CPU result may go as soon as the call returns.
      NPU_CHECK(snpuMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), snpuMemcpyHostToDevice,
                                stream.handle()));
    }
    return dst;
  });
}

// A kernel's check of its arguments failed at the call: raised again with torch_npu's suffix for an op's invalid
// parameter (ERR01001 OPS, as op-plugin's checks of the same arguments), keeping the message that names the op and
// the Python type (IndexError, ValueError, ...). Other failures (out of memory, device faults) go on unchanged.
template <typename E>
[[noreturn]] void throw_with_ops_code(const E& e) {
  throw E(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          std::string(e.what_without_backtrace()) + error_code(SubModule::OPS, ErrCode::PARAM));
}

[[noreturn]] void rethrow_kernel_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::IndexError& e) {
    throw_with_ops_code(e);
  } catch (const c10::ValueError& e) {
    throw_with_ops_code(e);
  } catch (const c10::TypeError& e) {
    throw_with_ops_code(e);
  } catch (const c10::NotImplementedError& e) {
    throw_with_ops_code(e);
  } catch (const c10::LinAlgError& e) {
    throw_with_ops_code(e);
  } catch (const c10::Error& e) {
    // Subclasses not listed above (distributed, finiteness checks) keep their own type.
    if (typeid(e) != typeid(c10::Error)) throw;
    throw_with_ops_code(e);
  }
}

void run_synchronizing(OpInfo& info, const NPUStream& stream, c10::ArrayRef<c10::IValue> args,
                       torch::jit::Stack* stack, std::exception_ptr meta_error) {
  if (fallback_cpu_disabled()) {
    std::string cause;
    if (meta_error) {
      try {
        std::rethrow_exception(meta_error);
      } catch (const c10::Error& e) {
        cause = e.what_without_backtrace();
      } catch (const std::exception& e) {
        cause = e.what();
      }
    }
    TORCH_CHECK(false, info.name,
                " needs a host fallback (it would synchronize with the device: its output shape could not be inferred "
                "without the data, or a tensor it writes overlaps another argument), and "
                "TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids host fallbacks.",
                cause.empty() ? "" : " Shape inference said: ", cause);
  }
  info.sync_points.fetch_add(1, std::memory_order_relaxed);
  g_sync_points.fetch_add(1, std::memory_order_relaxed);
  check_sync_debug(info.name.c_str());

  // The kernel writes the tensors themselves, so the CPU kernel sees their true aliasing (and rejects an out= tensor
  // that overlaps an input, as on the CPU); what it resizes is taken over once the host has waited for it.
  KernelLaunch* k = KernelLaunch::acquire(&info);
  prepare_arguments(info, args, stream.device_index(), *k);
  auto result = std::make_shared<SyncResult>();
  k->sync = result;
  launch(info, stream, k, args, {});
  stream.synchronize();
  if (result->error) rethrow_kernel_error(result->error);

  for (int i : info.written_args) {
    std::vector<at::Tensor> written;
    visit_tensors(result->arguments[i], [&](const at::Tensor& t) { written.push_back(t); });
    size_t j = 0;
    visit_tensors(args[i], [&](const at::Tensor& t) {
      if (j < written.size()) adopt_written(t, written[j++]);
    });
  }
  c10::SmallVector<c10::IValue, 2> returns;
  for (size_t r = 0; r < info.return_alias.size(); ++r) {
    const int alias = info.return_alias[r];
    returns.push_back(alias >= 0 ? args[alias] : to_device(info, result->returns[r], stream));
  }
  torch::jit::drop(*stack, args.size());  // args point into the stack: dropped last
  for (auto& r : returns) stack->push_back(std::move(r));
}

// ------------------------------------------------------------------------------------------------ the path

// After a device fault (torch.npu._recovery): the tensors an op reads must not be in blocks marked unsafe. Its out=
// arguments are only written.
void check_inputs_safe(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (std::find(info.out_args.begin(), info.out_args.end(), static_cast<int>(i)) != info.out_args.end()) continue;
    visit_tensors(args[i], [](const at::Tensor& t) { recovery::check_safe(t); });
  }
}

void execute(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = op_info(op);
  const size_t num_args = op.schema().arguments().size();

  if (info.is_view) {
    // Metadata only: ATen's CPU kernel builds the view over the same storage without touching data.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }

  if (C10_UNLIKELY(recovery::any_unsafe()) && recovery::check_enabled())
    check_inputs_safe(info, torch::jit::last(*stack, num_args));

  const c10::DeviceIndex device = op_device(info, torch::jit::last(*stack, num_args));
  const c10::DeviceGuard guard(c10::Device(kNPU, device));
  const NPUStream stream = getCurrentNPUStream(device);
  if (C10_UNLIKELY(g_copy_through_cpu.load(std::memory_order_relaxed))) {
    stream.synchronize();
    at::native::cpu_fallback(op, stack);
    return;
  }
  info.launches.fetch_add(1, std::memory_order_relaxed);

  // The arguments stay on the stack (CPU index tensors replaced by npu ones) until the returns take their place.
  const size_t base = stack->size() - num_args;
  for (size_t i = base; i < stack->size(); ++i) move_indices_to_device((*stack)[i], device);
  const c10::ArrayRef<c10::IValue> args(stack->data() + base, num_args);

  std::exception_ptr meta_error;
  std::shared_ptr<const MetaResult> meta;
  if (info.has_meta && !info.data_dependent) {
    MetaKey key;
    const bool keyed = build_meta_key(args, &key);
    if (keyed) meta = info.meta_cache().find(key);
    if (!meta) {
      auto fresh = run_meta(info, args, &meta_error);
      if (fresh && keyed) info.meta_cache().insert(std::move(key), fresh);
      meta = std::move(fresh);
    }
  }
  if (!meta || resizes_overlapping_out(info, args, *meta) || partially_overlaps(info, args)) {
    run_synchronizing(info, stream, args, stack, meta_error);
    return;
  }

  for (size_t j = 0; j < info.out_args.size(); ++j) {
    const at::Tensor& m = meta->out_args[j].toTensor();
    apply_out_metadata(args[info.out_args[j]].toTensor(), m.sizes(), m.strides());
  }
  c10::SmallVector<c10::IValue, 2> fresh(info.return_alias.size());
  for (size_t r = 0; r < fresh.size(); ++r)
    if (info.return_alias[r] < 0) fresh[r] = allocate_like(meta->returns[r]);

  KernelLaunch* k = KernelLaunch::acquire(&info);
  prepare_arguments(info, args, device, *k);
  bool all_defined = true;
  for (size_t r = 0; r < fresh.size(); ++r) {
    if (info.return_alias[r] >= 0) continue;
    k->add_output(static_cast<uint32_t>(r), fresh[r]);
    visit_tensors(fresh[r], [&](const at::Tensor& t) { all_defined = all_defined && t.defined(); });
  }
  // An out= overload cannot take an undefined output (a gradient not asked for, as in convolution_backward).
  if (all_defined && info.out_variant.has_value() && !meta->out_variant_failed->load(std::memory_order_relaxed)) {
    k->use_out_variant = true;
    k->out_variant_failed = meta->out_variant_failed;
  }
  launch(info, stream, k, args, fresh);

  for (size_t r = 0; r < fresh.size(); ++r)
    if (info.return_alias[r] >= 0) fresh[r] = args[info.return_alias[r]];
  torch::jit::drop(*stack, num_args);
  for (auto& f : fresh) stack->push_back(std::move(f));
}

}  // namespace

void execute_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) { execute(op, stack); }

void set_copy_through_cpu(bool enabled) { g_copy_through_cpu.store(enabled, std::memory_order_relaxed); }

std::vector<SyncPointCount> sync_point_counts() {
  std::vector<SyncPointCount> out;
  for (OpInfo* info : all_op_infos()) {
    const uint64_t n = info->sync_points.load(std::memory_order_relaxed);
    if (n > 0) out.push_back({info->name, n});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
  return out;
}

uint64_t total_sync_points() { return g_sync_points.load(std::memory_order_relaxed); }

void count_sync_point(const c10::OperatorHandle& op) {
  op_info(op).sync_points.fetch_add(1, std::memory_order_relaxed);
  g_sync_points.fetch_add(1, std::memory_order_relaxed);
}

void take_over_aten_ops(torch::Library& m, const std::function<bool(const c10::OperatorHandle&)>& take) {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const auto op = dispatcher.findOp(name);
    if (!op || !take(*op)) continue;
    const std::string qualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    m.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&execute>());
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&execute>()); }

// A backend fallback only sees ops without a device-generic kernel. Structured ops have one for every backend
// (CompositeExplicitAutogradNonFunctional): it would run their shape logic on the host, allocate, then call the out=
// op, which comes here anyway. Taking them over directly makes each one launch, with the cached shape inference.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  take_over_aten_ops(m, [](const c10::OperatorHandle& op) {
    return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
           !op.hasTag(at::Tag::inplace_view);
  });
}

}  // namespace softnpu
