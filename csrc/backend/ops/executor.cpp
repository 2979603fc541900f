#include "backend/ops/executor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/TensorGeometry.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>

#include "backend/allocator.h"
#include "backend/env.h"
#include "backend/generator.h"
#include "backend/npu_error.h"
#include "backend/ops/meta_cache.h"
#include "backend/ops/op_info.h"
#include "backend/ops/storage.h"
#include "backend/profiler/launch_trace.h"
#include "backend/stream.h"

namespace softnpu {

namespace {

constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

std::atomic<uint64_t> g_sync_points{0};

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

template <typename F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef())
      if (e.isTensor()) f(e.toTensor());
  }
}

// ------------------------------------------------------------------------------------------------ devices

bool is_cpu_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

// The npu device an op runs on, checking that every tensor is on it. 0-dim CPU tensors are allowed anywhere, as in
// CUDA; CPU index tensors (in optional-tensor lists, as in x[idx]) are moved to the device by the caller.
c10::DeviceIndex op_device(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  const auto& schema = info.op.schema();
  c10::DeviceIndex device = -1;
  const c10::Argument* first = nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() != kNPU) return;
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
  for (size_t i = 0; i < args.size(); ++i) {
    const bool index_list = args[i].isList() && !args[i].isTensorList();
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() == kNPU || is_cpu_scalar(t) || (index_list && t.device().is_cpu()))
        return;
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but got ", schema.arguments()[i].name(),
                  " is on ", t.device(), ", different from other tensors on npu:", static_cast<int>(device),
                  " (when checking argument in method ", info.name, ")");
    });
  }
  return device;
}

// CPU index tensors become npu tensors; other values are kept.
c10::IValue move_indices_to_device(const c10::IValue& v, c10::DeviceIndex device) {
  if (!v.isList() || v.isTensorList()) return v;
  bool any_cpu = false;
  for_each_tensor(v, [&](const at::Tensor& t) { any_cpu |= t.defined() && t.device().is_cpu() && t.dim() > 0; });
  if (!any_cpu) return v;
  return map_tensors(v, [&](const at::Tensor& t) {
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

// Runs the Meta kernel. Returns null if it cannot infer the outputs (any error: data-dependent shapes, or an input
// error that the CPU kernel then reports itself, with its own exception type).
std::shared_ptr<MetaResult> run_meta(OpInfo& info, c10::ArrayRef<c10::IValue> args, std::exception_ptr* error) {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const auto& a : args) stack.push_back(meta_value(a));
  auto result = std::make_shared<MetaResult>();
  for (int i : info.out_args) result->out_args.push_back(stack[i]);
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    info.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  } catch (...) {
    *error = std::current_exception();
    return nullptr;
  }
  result->returns.assign(stack.begin(), stack.end());
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

// ------------------------------------------------------------------------------------------------ kernels

// CPU tensors over the device memory of npu tensors, for the CPU kernel. Tensors sharing a storage get views of one
// CPU storage, so ATen's aliasing checks see what they would see on the device.
//
// A few CPU kernels grow an output's storage while computing (e.g. huber_loss.out computes elementwise, then
// reduces). So the storages are resizable, with the CPU allocator; a storage the kernel moved to host memory has its
// bytes copied back into device memory afterwards (restore()).
class CpuAliases {
 public:
  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (t.device().is_cpu()) {
      // A 0-dim CPU tensor: its value as of the launch (the host may change it before the kernel runs). Wrapped
      // numbers come from Python scalars and cannot change.
      return t.unsafeGetTensorImpl()->is_wrapped_number() ? t : t.clone();
    }
    c10::StorageImpl* src = t.storage().unsafeGetStorageImpl();
    Entry* entry = nullptr;
    for (auto& e : storages_)
      if (e.key == src) entry = &e;
    if (!entry) {
      void* base = src->mutable_data();
      storages_.push_back(Entry{src, base, src->nbytes(),
                                c10::Storage(c10::Storage::use_byte_size_t(), src->nbytes(),
                                             c10::DataPtr(base, c10::Device(c10::kCPU)), c10::GetCPUAllocator(),
                                             /*resizable=*/true)});
      entry = &storages_.back();
    }
    auto alias = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(entry->cpu),
                                                          c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    alias.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) alias._set_conj(true);
    if (t.is_neg()) alias._set_neg(true);
    return alias;
  }

  // On the compute thread, after the kernel: whether the kernel moved some storage to host memory.
  bool moved() {
    for (auto& e : storages_)
      if (e.cpu.mutable_data() != e.base) return true;
    return false;
  }

  // Copies the bytes of moved storages back into device memory.
  void restore() {
    for (auto& e : storages_) {
      void* now = e.cpu.mutable_data();
      if (now != e.base && now != nullptr) std::memcpy(e.base, now, std::min(e.nbytes, e.cpu.nbytes()));
    }
  }

  // Points every storage at its device memory again (dropping what a kernel wrote elsewhere).
  void reset() {
    for (auto& e : storages_) {
      e.cpu.unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(e.base, c10::Device(c10::kCPU)));
      e.cpu.set_nbytes(e.nbytes);
    }
  }

 private:
  struct Entry {
    c10::StorageImpl* key;  // the npu storage: compared on the host only, never dereferenced by the kernel
    void* base;
    size_t nbytes;
    c10::Storage cpu;
  };
  c10::SmallVector<Entry, 4> storages_;
};

// Results of a synchronizing launch, handed back to the waiting host thread.
struct SyncResult {
  torch::jit::Stack returns;
  std::exception_ptr error;
};

struct KernelLaunch {
  OpInfo* info;
  torch::jit::Stack stack;                                 // the op's arguments, as the CPU kernel takes them
  c10::SmallVector<std::pair<size_t, uint64_t>, 1> seeds;  // generator argument -> seed drawn at launch
  // Per return: the CPU alias of its preallocated device output (None for returns that alias an argument). Empty
  // when the op has no fresh returns.
  std::vector<c10::IValue> outputs;
  std::vector<at::TensorGeometry> output_geometry;  // their metadata, when the out= overload runs
  bool use_out_variant = false;
  std::shared_ptr<const MetaResult> meta;
  std::shared_ptr<SyncResult> sync;
  CpuAliases aliases;

  explicit KernelLaunch(OpInfo* i) : info(i) {}
};

// Intra-op parallelism of the kernel: the budget the runtime grants, set through OpenMP's per-thread setting so the
// user's torch.set_num_threads for CPU work is left alone.
void set_kernel_threads(int n) {
  thread_local int current = -1;
  if (n == current) return;
  at::internal::lazy_init_num_threads();
  static const auto omp_set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (omp_set) omp_set(n);
  current = n;
}

at::Generator kernel_generator(uint64_t seed) {
  thread_local at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  gen.set_current_seed(seed);
  return gen;
}

template <typename F>
void for_each_output(KernelLaunch& k, F&& f) {
  for (const auto& o : k.outputs) for_each_tensor(o, f);
}

// A result into its preallocated output. The outputs have the shapes ATen's Meta kernels give, which describe the
// accelerator kernels; for a few auxiliary outputs (e.g. native_batch_norm's saved statistics in eval mode) the CPU
// kernel returns another shape, which no device output could take: those are left as the Meta kernel shaped them.
void copy_result(const at::Tensor& dst, const at::Tensor& src) {
  if (!dst.defined() || !src.defined()) return;
  if (dst.sizes() == src.sizes()) {
    dst.copy_(src);
  } else if (dst.numel() == src.numel()) {
    dst.copy_(src.reshape(dst.sizes()));
  }
}

// The op itself; fresh results are copied into the preallocated outputs.
void run_op(KernelLaunch& k) {
  k.info->op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &k.stack);
  for (size_t r = 0; r < k.outputs.size(); ++r) {
    const c10::IValue& target = k.outputs[r];
    if (target.isTensor()) {
      copy_result(target.toTensor(), k.stack[r].toTensor());
    } else if (target.isTensorList()) {
      const auto dst = target.toTensorList();
      const auto src = k.stack[r].toTensorList();
      for (size_t i = 0; i < dst.size(); ++i) copy_result(dst.get(i), src.get(i));
    }
  }
}

// The out= overload writing straight into the outputs. Some out= kernels do not honour preallocated outputs of the
// right shape (they resize them, or compute into a grown buffer); then the op runs again as itself, and later
// launches with the same argument metadata skip the overload.
void run_out_variant(KernelLaunch& k) {
  torch::jit::Stack args(k.stack);
  for (const auto& o : k.outputs) k.stack.push_back(o);
  k.info->out_variant->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &k.stack);
  bool intact = !k.aliases.moved();
  size_t i = 0;
  for_each_output(k, [&](const at::Tensor& t) {
    const auto& g = k.output_geometry[i++];
    intact = intact && t.sizes() == g.sizes() && t.strides() == g.strides();
  });
  if (intact) return;
  k.meta->out_variant_failed.store(true, std::memory_order_relaxed);
  k.aliases.reset();
  i = 0;
  for_each_output(k, [&](const at::Tensor& t) {
    const auto& g = k.output_geometry[i++];
    t.unsafeGetTensorImpl()->set_sizes_and_strides(g.sizes(), g.strides(), g.storage_offset());
  });
  k.stack = std::move(args);
  run_op(k);
}

int run_kernel(void* arg) {
  auto& k = *static_cast<KernelLaunch*>(arg);
  try {
    set_kernel_threads(snpuKernelThreadBudget());
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    for (const auto& [index, seed] : k.seeds) k.stack[index] = kernel_generator(seed);
    if (k.use_out_variant) {
      run_out_variant(k);
    } else {
      run_op(k);
    }
    k.aliases.restore();
    if (k.sync) k.sync->returns = std::move(k.stack);
    return 0;
  } catch (const std::exception& e) {
    if (k.sync) {
      k.sync->error = std::current_exception();
      return 0;
    }
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    snpuKernelSetErrorMessage(c10_error ? c10_error->what_without_backtrace() : e.what());
    return kernel_error_code(e);
  }
}

void free_kernel(void* arg) { delete static_cast<KernelLaunch*>(arg); }

// The CPU kernel's arguments: CPU aliases for tensors, the CPU device for npu devices, seeds for generators.
void prepare_arguments(const OpInfo& info, c10::ArrayRef<c10::IValue> args, KernelLaunch& k) {
  k.stack.reserve(args.size() + info.op.schema().returns().size());
  for (const auto& a : args) {
    if (a.isDevice() && a.toDevice().type() == kNPU) {
      k.stack.emplace_back(c10::Device(c10::kCPU));
    } else {
      k.stack.push_back(map_tensors(a, std::ref(k.aliases)));
    }
  }
  for (int g : info.generator_args) {
    const at::Generator gen = args[g].isGenerator() ? args[g].toGenerator()
                                                    : default_generator(getCurrentNPUStream().device_index());
    auto* impl = gen.get<NPUGeneratorImpl>();
    std::lock_guard<std::mutex> lock(impl->mutex_);
    k.seeds.emplace_back(g, impl->next_kernel_seed());
    k.stack[g] = c10::IValue();
  }
}

void launch(const OpInfo& info, const NPUStream& stream, std::unique_ptr<KernelLaunch> k) {
  const profiler::LaunchScope traced(info.name.c_str());
  NPU_CHECK(snpuLaunchKernel(stream.handle(), info.name.c_str(), run_kernel, k.release(), free_kernel));
}

// ------------------------------------------------------------------------------------------------ sync path

c10::IValue to_device(const c10::IValue& v, const NPUStream& stream) {
  return map_tensors(v, [&](const at::Tensor& cpu) {
    if (!cpu.defined()) return cpu;
    const at::Tensor src = cpu.contiguous();
    at::Tensor dst = empty_npu(src.sizes(), src.strides(), src.scalar_type());
    if (src.nbytes() > 0) {
      // From pageable memory: complete when the call returns.
      NPU_CHECK(snpuMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), snpuMemcpyHostToDevice,
                                stream.handle()));
    }
    return dst;
  });
}

void run_synchronizing(OpInfo& info, const NPUStream& stream, const std::vector<c10::IValue>& args,
                       torch::jit::Stack* stack, std::exception_ptr meta_error) {
  if (fallback_cpu_disabled()) {
    if (meta_error) std::rethrow_exception(meta_error);
    TORCH_CHECK(false, info.name,
                " needs a host fallback (its output shape depends on the data, so it synchronizes with the device), "
                "and TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids host fallbacks.");
  }
  info.sync_points.fetch_add(1, std::memory_order_relaxed);
  g_sync_points.fetch_add(1, std::memory_order_relaxed);

  auto k = std::make_unique<KernelLaunch>(&info);
  prepare_arguments(info, args, *k);
  // out= tensors may need resizing, which device memory cannot do from a CPU kernel: the kernel writes into fresh
  // CPU tensors, copied back below.
  std::vector<at::Tensor> out_temps;
  for (int i : info.out_args) {
    const at::Tensor& out = args[i].toTensor();
    out_temps.push_back(at::empty({0}, out.options().device(c10::kCPU)));
    k->stack[i] = out_temps.back();
  }
  auto result = std::make_shared<SyncResult>();
  k->sync = result;
  launch(info, stream, std::move(k));
  stream.synchronize();
  if (result->error) std::rethrow_exception(result->error);

  for (size_t j = 0; j < info.out_args.size(); ++j) {
    const at::Tensor& out = args[info.out_args[j]].toTensor();
    const at::Tensor& temp = out_temps[j];
    apply_out_metadata(out, temp.sizes(), temp.strides());
    out.copy_(temp);
  }
  torch::jit::drop(*stack, args.size());
  const auto& returns = result->returns;
  for (size_t r = 0; r < info.return_alias.size(); ++r) {
    const int alias = info.return_alias[r];
    stack->push_back(alias >= 0 ? args[alias] : to_device(returns[r], stream));
  }
}

// ------------------------------------------------------------------------------------------------ the path

void execute(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = op_info(op);
  const size_t num_args = op.schema().arguments().size();

  if (info.is_view) {
    // Metadata only: ATen's CPU kernel builds the view over the same storage without touching data.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }

  const c10::DeviceIndex device = op_device(info, torch::jit::last(*stack, num_args));
  const c10::DeviceGuard guard(c10::Device(kNPU, device));
  const NPUStream stream = getCurrentNPUStream(device);
  info.launches.fetch_add(1, std::memory_order_relaxed);

  std::vector<c10::IValue> args;
  args.reserve(num_args);
  for (auto& v : torch::jit::last(*stack, num_args)) args.push_back(move_indices_to_device(v, device));

  std::exception_ptr meta_error;
  std::shared_ptr<const MetaResult> meta;
  if (info.has_meta && !info.returns_non_tensor) {
    MetaKey key;
    const bool keyed = build_meta_key(args, &key);
    if (keyed) meta = info.meta_cache().find(key);
    if (!meta) {
      auto fresh = run_meta(info, args, &meta_error);
      if (fresh && keyed) info.meta_cache().insert(std::move(key), fresh);
      meta = std::move(fresh);
    }
  }
  if (!meta) {
    run_synchronizing(info, stream, args, stack, meta_error);
    return;
  }

  for (size_t j = 0; j < info.out_args.size(); ++j) {
    const at::Tensor& m = meta->out_args[j].toTensor();
    apply_out_metadata(args[info.out_args[j]].toTensor(), m.sizes(), m.strides());
  }
  std::vector<c10::IValue> fresh(info.return_alias.size());
  for (size_t r = 0; r < fresh.size(); ++r)
    if (info.return_alias[r] < 0) fresh[r] = allocate_like(meta->returns[r]);

  auto k = std::make_unique<KernelLaunch>(&info);
  prepare_arguments(info, args, *k);
  if (info.fresh_returns > 0) {
    k->outputs.resize(fresh.size());
    for (size_t r = 0; r < fresh.size(); ++r)
      if (info.return_alias[r] < 0) k->outputs[r] = map_tensors(fresh[r], std::ref(k->aliases));
    // An out= overload cannot take an undefined output (a gradient not asked for, as in convolution_backward).
    bool all_defined = true;
    for_each_output(*k, [&](const at::Tensor& t) { all_defined = all_defined && t.defined(); });
    k->use_out_variant =
        all_defined && info.out_variant.has_value() && !meta->out_variant_failed.load(std::memory_order_relaxed);
    if (k->use_out_variant) {
      for_each_output(*k, [&](const at::Tensor& t) { k->output_geometry.emplace_back(t); });
      k->meta = meta;
    }
  }
  launch(info, stream, std::move(k));

  torch::jit::drop(*stack, num_args);
  for (size_t r = 0; r < fresh.size(); ++r) {
    const int alias = info.return_alias[r];
    stack->push_back(alias >= 0 ? args[alias] : std::move(fresh[r]));
  }
}

}  // namespace

void execute_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) { execute(op, stack); }

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

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&execute>()); }

}  // namespace softnpu
