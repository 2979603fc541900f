// Sparse COO tensors on npu: tensors of the SparsePrivateUse1 key whose indices and values are npu tensors, as
// torch_npu's are. ATen splits the sparse ops in two (sparse_ops.def, which gen_sparse_ops.py writes from
// native_functions.yaml):
//   - device-generic kernels (SparseCPU's is SparseCUDA's): construction, _indices/_values, coalesce, to_dense, sum,
//     elementwise ops on the values, ... They only reshape metadata and call other ops, so npu runs the same kernel:
//     the work they do lands on npu's dense op path, asynchronous on the current stream.
//   - device-specific kernels (_coalesce, add.out, mul.out, addmm, bmm, index_select, ...) read the data. npu launches
//     the SparseCPU kernel on the current stream, where a compute thread runs it over CPU views of the indices' and
//     values' device memory, as the op path does for dense ops. A result whose shape is known without the data (dense
//     results: sparse + dense, sparse @ dense) is preallocated and the launch is asynchronous; a sparse result's
//     number of elements depends on the data, so those launches are sync points (counted, as the op path's): the host
//     waits for the kernel and moves its result into device memory. They are device kernels, not host fallbacks (as
//     torch_npu's are kernels of the chip), so TORCH_NPU_FALLBACK_CPU_DISABLE leaves them be.
// max() is torch_npu's own sparse op (op-plugin's: the maximum of the dense form); ATen has none.
// Everything else on a sparse npu tensor (and the compressed layouts, CSR and its kin) raises NotImplementedError
// naming the op, at the call.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/graph.h"
#include "backend/npu_error.h"
#include "backend/ops/executor.h"
#include "backend/ops/kernel.h"
#include "backend/ops/op_info.h"
#include "backend/profiler/launch_trace.h"
#include "backend/stream.h"
#include "backend/sync_debug.h"
#include "common/kernel_threads.h"
#include "softnpu/runtime.h"

// ATen's linear index of COO indices (native/sparse/FlattenIndicesCommon.h, not among the installed headers): a
// DispatchStub with CPU and CUDA kernels, which ATen's own functions call directly (the invariant checks of
// sparse_coo_tensor, through no op npu could take over). npu registers its own below.
namespace at::native {
using flatten_indices_fn = at::Tensor (*)(const at::Tensor& indices, c10::IntArrayRef size);
DECLARE_DISPATCH(flatten_indices_fn, flatten_indices_stub)
}  // namespace at::native

namespace softnpu {

namespace {

constexpr c10::DeviceType kNPU = c10::DeviceType::PrivateUse1;

void refuse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  // ATen's wording for an op without a kernel for the backend (as for SparseCPU, SparseCUDA), then what to do.
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.operator_name(),
                              "' with arguments from the 'SparseNPU' backend: npu has no kernel of this op for sparse "
                              "COO tensors (and no compressed layouts, CSR and its kin, at all). Make the tensor dense "
                              "(tensor.to_dense()) or run the op on the CPU.");
}

void refuse_compressed(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.operator_name(),
                              "' on npu: npu supports the sparse COO layout (torch.sparse_coo) only, not CSR, CSC, "
                              "BSR or BSC. Keep compressed sparse tensors on the CPU.");
}

// ------------------------------------------------------------------------------------------------ device-generic

// The device of the op's first npu tensor, made current while its kernel runs: the tensors a device-generic kernel
// creates go to the current device, as on CUDA.
std::optional<c10::Device> npu_device_of(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  for (const auto& a : torch::jit::last(stack, n))
    if (a.isTensor() && a.toTensor().defined() && a.toTensor().device().type() == kNPU) return a.toTensor().device();
  return std::nullopt;
}

void run_generic(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OptionalDeviceGuard guard(npu_device_of(op, *stack));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::SparseCPU), stack);
}

// Each nonzero's position in the row-major order of the sparse dims, from npu ops on the indices (asynchronous).
at::Tensor flatten_indices_npu(const at::Tensor& indices, c10::IntArrayRef size) {
  const int64_t sparse_dim = indices.size(0);
  at::Tensor flat = at::zeros({indices.size(1)}, indices.options().dtype(c10::kLong));
  int64_t stride = 1;
  for (int64_t d = sparse_dim - 1; d >= 0; --d) {
    flat.add_(indices.select(0, d), stride);
    stride *= size[d];
  }
  return flat;
}

// max() of a sparse tensor: torch_npu's (op-plugin's sparse max), the maximum of its dense form, implicit zeros
// included. ATen has no sparse kernel of it.
at::Tensor max_of_dense_form(const at::Tensor& self) { return self.to_dense().max(); }

// A dense op whose CPU kernel is also CUDA's: it composes other ops, run on npu tensors as they are.
void run_device_generic(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OptionalDeviceGuard guard(npu_device_of(op, *stack));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// dense -> COO (Tensor.to_sparse()): ATen's dense_to_sparse is every backend's kernel (nonzero, index, ...).
void dense_to_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() != "layout") continue;
    const c10::IValue& layout = (*stack)[stack->size() - args.size() + i];
    TORCH_CHECK_NOT_IMPLEMENTED(layout.isNone() || layout.toLayout() == c10::kSparse,
                                "Could not run '", op.operator_name(), "' to layout ", layout.toLayout(),
                                " on npu: npu supports the sparse COO layout (torch.sparse_coo) only, not CSR, CSC, BSR or BSC");
  }
  run_device_generic(op, stack);
}

// ------------------------------------------------------------------------------------------------ device-specific

// A tensor argument as the compute thread rebuilds it: a strided tensor, or a COO tensor from its two parts.
struct Operand {
  size_t position = 0;
  const void* identity = nullptr;  // the host's TensorImpl: one host tensor is one CPU tensor (sspaddmm's self is out)
  bool sparse = false;
  bool written = false;
  bool own_parts = false;  // sparse, and the kernel writes it (as this argument or another one: add_'s self is out)
  TensorRef dense;  // strided (device memory, or a 0-dim CPU tensor by value)
  TensorRef indices, values;
  c10::SmallVector<int64_t, 5> sizes;
  int64_t sparse_dim = 0;
  int64_t dense_dim = 0;
  bool coalesced = false;
};

// What a synchronizing launch hands the waiting host: the returns, the written sparse arguments as the kernel left
// them (both with host-owned parts), or the error.
struct SyncResult {
  torch::jit::Stack returns;
  std::vector<at::Tensor> written;
  std::exception_ptr error;
};

struct SparseLaunch {
  explicit SparseLaunch(const c10::OperatorHandle& handle) : op(handle) {}
  c10::OperatorHandle op;
  torch::jit::Stack stack;  // the arguments; tensor positions filled on the compute thread
  std::vector<Operand> operands;
  std::vector<std::pair<size_t, TensorRef>> outputs;  // fresh dense returns: return index, preallocated tensor
  std::shared_ptr<SyncResult> sync;
};

// CPU tensors over device memory, built on the compute thread. Their storages do not own the memory: a result that
// still points into one is copied (host_owned) before the host takes it.
class Views {
 public:
  at::Tensor strided(const TensorRef& r) {
    switch (r.kind) {
      case TensorRef::Kind::kUndefined:
        return at::Tensor();
      case TensorRef::Kind::kCpuScalar: {
        at::Tensor t = at::scalar_tensor(r.value, at::TensorOptions().dtype(r.dtype));
        if (r.wrapped_number) t.unsafeGetTensorImpl()->set_wrapped_number(true);
        return t;
      }
      case TensorRef::Kind::kDevice:
        break;
    }
    c10::Storage storage(c10::Storage::use_byte_size_t(), r.nbytes, c10::DataPtr(r.base, c10::Device(c10::kCPU)),
                         nullptr, /*resizable=*/false);
    bases_.push_back(r.base);
    auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                      c10::scalarTypeToTypeMeta(r.dtype));
    t.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes, r.strides, r.offset);
    if (r.conj) t._set_conj(true);
    if (r.neg) t._set_neg(true);
    return t;
  }

  at::Tensor make(const Operand& o) {
    for (const auto& [identity, tensor] : made_)
      if (identity == o.identity) return tensor;
    at::Tensor t;
    if (o.sparse) {
      // A sparse tensor the kernel writes gets parts of its own, which the kernel may resize (device memory cannot
      // grow under it); the host adopts them once the kernel has run.
      at::Tensor indices = strided(o.indices), values = strided(o.values);
      if (o.own_parts) {
        indices = indices.clone();
        values = values.clone();
      }
      t = at::_sparse_coo_tensor_with_dims_and_tensors(o.sparse_dim, o.dense_dim, o.sizes, indices, values,
                                                       values.options().layout(c10::kSparse), o.coalesced);
    } else {
      t = strided(o.dense);
    }
    if (o.identity) made_.emplace_back(o.identity, t);
    return t;
  }

  // t, or a copy of it if it still reads device memory.
  at::Tensor host_owned(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (t.is_sparse()) {
      const at::Tensor indices = host_owned(t._indices()), values = host_owned(t._values());
      return at::_sparse_coo_tensor_with_dims_and_tensors(t.sparse_dim(), t.dense_dim(), t.sizes(), indices, values,
                                                          values.options().layout(c10::kSparse), t.is_coalesced());
    }
    if (!t.has_storage()) return t;
    const void* data = t.storage().data();
    for (const void* base : bases_)
      if (base == data) return t.clone();
    return t;
  }

 private:
  std::vector<const void*> bases_;
  std::vector<std::pair<const void*, at::Tensor>> made_;
};

// A COO tensor with its values converted (its indices shared).
at::Tensor values_to(const at::Tensor& t, c10::ScalarType dtype) {
  const at::Tensor values = t._values().to(dtype);
  return at::_sparse_coo_tensor_with_dims_and_tensors(t.sparse_dim(), t.dense_dim(), t.sizes(), t._indices(), values,
                                                      values.options().layout(c10::kSparse), t.is_coalesced());
}

// The sums of sparse results in float16/bfloat16 (_coalesce's duplicates, sparse + sparse) accumulate in float32 and
// round once, as the accelerators' kernels do (CUDA's in its accumulate type; torch_npu's matches the CPU in float32).
// The CPU's sum in the dtype itself, or refuse float16 (sparse + sparse). The sparse operands of such a launch are
// widened (one widened tensor per CPU tensor: add_'s self is its out); returns the dtype to round back to, or nullopt.
std::optional<c10::ScalarType> widen_half_sums(SparseLaunch& k) {
  const auto& name = k.op.schema().name();
  const bool sums = name == "aten::_coalesce" ||
                    (name == "aten::add" && std::any_of(k.operands.begin(), k.operands.end(), [](const Operand& o) {
                      return o.written && o.sparse;
                    }));
  if (!sums) return std::nullopt;
  std::optional<c10::ScalarType> half;
  std::vector<std::pair<const void*, at::Tensor>> widened;
  for (const auto& o : k.operands) {
    if (!o.sparse) continue;
    const at::Tensor t = k.stack[o.position].toTensor();
    if (t.scalar_type() != c10::kHalf && t.scalar_type() != c10::kBFloat16) continue;
    half = t.scalar_type();
    auto it = std::find_if(widened.begin(), widened.end(), [&](const auto& w) { return w.first == t.unsafeGetTensorImpl(); });
    if (it == widened.end()) {
      widened.emplace_back(t.unsafeGetTensorImpl(), values_to(t, c10::kFloat));
      it = widened.end() - 1;
    }
    k.stack[o.position] = it->second;
  }
  return half;
}

int run_sparse_kernel(void* arg) {
  auto& k = *static_cast<SparseLaunch*>(arg);
  try {
    uint64_t bytes = 0;
    for (const auto& o : k.operands) {
      for (const TensorRef* r : {&o.dense, &o.indices, &o.values}) {
        if (r->kind != TensorRef::Kind::kDevice) continue;
        uint64_t n = c10::elementSize(r->dtype);
        for (int64_t s : r->sizes) n *= static_cast<uint64_t>(s);
        bytes += n;
      }
    }
    set_kernel_threads(snpuKernelThreadBudget(bytes));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Views views;
    std::vector<std::pair<size_t, at::Tensor>> written;
    for (const auto& o : k.operands) k.stack[o.position] = views.make(o);
    const std::optional<c10::ScalarType> half = widen_half_sums(k);
    for (const auto& o : k.operands)
      if (o.written) written.emplace_back(o.position, k.stack[o.position].toTensor());
    std::vector<std::pair<size_t, at::Tensor>> outputs;
    for (const auto& [index, ref] : k.outputs) outputs.emplace_back(index, views.strided(ref));
    k.op.callBoxed(&k.stack);
    if (half) {
      for (auto& r : k.stack)
        if (r.isTensor() && r.toTensor().is_sparse()) r = values_to(r.toTensor(), *half);
      for (auto& [position, t] : written)
        if (t.is_sparse()) t = values_to(t, *half);
    }
    for (const auto& [index, out] : outputs) out.copy_(k.stack[index].toTensor());
    if (k.sync) {
      for (auto& r : k.stack) k.sync->returns.push_back(r.isTensor() ? views.host_owned(r.toTensor()) : r);
      for (const auto& [position, t] : written) k.sync->written.push_back(t.is_sparse() ? views.host_owned(t) : t);
    }
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

void free_sparse_launch(void* arg) { delete static_cast<SparseLaunch*>(arg); }

bool is_sparse_arg(const c10::IValue& v) { return v.isTensor() && v.toTensor().defined() && v.toTensor().is_sparse(); }

// A host tensor made from a CPU result: COO from npu copies of its parts, strided as an npu copy.
at::Tensor to_npu(const at::Tensor& cpu, c10::Device device) {
  if (!cpu.defined()) return cpu;
  if (!cpu.is_sparse()) return cpu.to(device);
  const at::Tensor values = cpu._values().to(device);
  return at::_sparse_coo_tensor_with_dims_and_tensors(cpu.sparse_dim(), cpu.dense_dim(), cpu.sizes(),
                                                      cpu._indices().to(device), values,
                                                      values.options().layout(c10::kSparse), cpu.is_coalesced());
}

// The argument each return aliases (in-place and out= ops), or -1 for a fresh return.
std::vector<int> return_aliases(const c10::FunctionSchema& schema) {
  std::vector<int> out;
  for (const auto& r : schema.returns()) {
    int alias = -1;
    if (r.alias_info() && r.alias_info()->isWrite()) {
      for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const auto* a = schema.arguments()[i].alias_info();
        if (a && a->isWrite() && a->beforeSets() == r.alias_info()->beforeSets()) alias = static_cast<int>(i);
      }
    }
    out.push_back(alias);
  }
  return out;
}

// The functional ops whose result is dense, a sparse matrix times a dense one (addmm(dense, sparse, dense),
// bmm(sparse, dense)): their outputs are sized before the data exists. Other fresh results are sparse.
bool dense_result(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  const char* factor = schema.name() == "aten::addmm" ? "mat1" : schema.name() == "aten::bmm" ? "self" : nullptr;
  if (!factor) return false;
  for (size_t i = 0; i < args.size(); ++i)
    if (is_sparse_arg(args[i]) != (schema.arguments()[i].name() == factor)) return false;
  return true;
}

// A Meta tensor standing in for t: strided, or (sparse_layout) a COO tensor with no elements and t's dims.
at::Tensor meta_stand_in(const at::Tensor& t, bool sparse_layout) {
  if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) return t;
  const auto options = at::TensorOptions(t.scalar_type()).device(c10::kMeta);
  if (!t.is_sparse()) return at::empty_strided(t.sizes(), t.strides(), options);
  if (!sparse_layout) return at::empty(t.sizes(), options);
  return at::_sparse_coo_tensor_with_dims(t.sparse_dim(), t.dense_dim(), t.sizes(), options.layout(c10::kSparse));
}

// The outputs of an asynchronous launch, sized before the data exists: by the op's SparseMeta kernel where ATen has
// one (it makes the sparse kernel's checks, such as add's equal sizes), else by the dense op's Meta kernel on strided
// stand-ins (the sparse kernels give their dense results the dense op's shape). nullopt if it cannot tell: the launch
// then synchronizes, and the CPU kernel raises its error at the call.
std::optional<torch::jit::Stack> infer_dense(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const bool sparse_meta = op.hasKernelForDispatchKey(c10::DispatchKey::SparseMeta);
  torch::jit::Stack stack;
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    for (const auto& a : args) {
      if (a.isTensor()) {
        stack.emplace_back(meta_stand_in(a.toTensor(), sparse_meta));
      } else if (a.isDevice() && a.toDevice().type() == kNPU) {
        stack.emplace_back(c10::Device(c10::kMeta));
      } else {
        stack.push_back(a);
      }
    }
    op.redispatchBoxed(c10::DispatchKeySet(sparse_meta ? c10::DispatchKey::SparseMeta : c10::DispatchKey::Meta),
                       &stack);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  for (const auto& r : stack)
    if (r.isTensor() && r.toTensor().defined() && r.toTensor().layout() != c10::kStrided) return std::nullopt;
  return stack;
}

void run_device_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  OpInfo& info = op_info(op);
  const size_t num_args = schema.arguments().size();
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, num_args);

  c10::DeviceIndex device = -1;
  for (size_t i = 0; i < num_args; ++i) {
    TORCH_CHECK(!args[i].isTensorList() && !(args[i].isList() && !args[i].toListRef().empty() &&
                                              args[i].toListRef()[0].isTensor()),
                info.name, ": tensor lists of sparse tensors are not supported on npu");
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (t.device().type() != kNPU) {
      TORCH_CHECK(t.device().is_cpu() && t.dim() == 0 && !t.is_sparse(),
                  "Expected all tensors to be on the same device, but got ", schema.arguments()[i].name(), " is on ",
                  t.device(), " (when checking arguments of ", info.name, " on npu)");
      continue;
    }
    TORCH_CHECK(device < 0 || t.device().index() == device, "Expected all tensors to be on the same device, but got ",
                schema.arguments()[i].name(), " is on ", t.device(), ", different from other tensors on npu:",
                static_cast<int>(device), " (when checking arguments of ", info.name, ")");
    device = t.device().index();
  }
  TORCH_CHECK(device >= 0, info.name, ": no npu tensor among the arguments");
  const c10::DeviceGuard guard(c10::Device(kNPU, device));
  const NPUStream stream = getCurrentNPUStream(device);
  // A launch record runs once (the kernel consumes its stack), so a graph's replays could not run it again.
  TORCH_CHECK(!(C10_UNLIKELY(capture_underway()) && current_stream_capturing()), info.name,
              " on sparse tensors cannot be captured in an NPU graph: run it before or after the capture");
  info.launches.fetch_add(1, std::memory_order_relaxed);

  const std::vector<int> aliases = return_aliases(schema);
  bool async = true;
  for (size_t i = 0; i < num_args; ++i) {
    const auto* a = schema.arguments()[i].alias_info();
    if (a && a->isWrite() && is_sparse_arg(args[i])) async = false;
  }
  for (int alias : aliases)
    if (alias < 0 && !dense_result(schema, args)) async = false;
  std::optional<torch::jit::Stack> meta;
  if (async) meta = infer_dense(op, args);
  async = async && meta.has_value();

  auto* k = new SparseLaunch(op);
  std::unique_ptr<SparseLaunch> owned(k);
  for (size_t i = 0; i < num_args; ++i) {
    if (!args[i].isTensor() || !args[i].toTensor().defined()) {
      const bool npu_device = args[i].isDevice() && args[i].toDevice().type() == kNPU;
      k->stack.push_back(npu_device ? c10::IValue(c10::Device(c10::kCPU)) : args[i]);
      continue;
    }
    const at::Tensor& t = args[i].toTensor();
    const auto* a = schema.arguments()[i].alias_info();
    Operand o;
    o.position = i;
    if (t.device().type() == kNPU) o.identity = t.unsafeGetTensorImpl();
    o.written = a && a->isWrite();
    if (t.is_sparse()) {
      o.sparse = true;
      auto* impl = at::sparse::get_sparse_impl(t);
      o.indices.assign(impl->indices());
      o.values.assign(impl->values());
      o.sizes.assign(t.sizes().begin(), t.sizes().end());
      o.sparse_dim = impl->sparse_dim();
      o.dense_dim = impl->dense_dim();
      o.coalesced = impl->coalesced();
    } else {
      if (async && o.written) {
        // out=: sized as the op sizes it, so the kernel writes in place.
        for (size_t r = 0; r < aliases.size(); ++r) {
          if (aliases[r] != static_cast<int>(i)) continue;
          const at::Tensor& m = (*meta)[r].toTensor();
          if (t.sizes() != m.sizes()) t.resize_(m.sizes());
        }
      }
      o.dense.assign(t);
    }
    k->operands.push_back(std::move(o));
    k->stack.emplace_back();
  }
  for (auto& o : k->operands) {
    for (const auto& w : k->operands)
      o.own_parts = o.own_parts || (o.sparse && w.written && w.identity == o.identity && o.identity != nullptr);
  }

  const c10::Device npu(kNPU, device);
  c10::SmallVector<c10::IValue, 2> fresh(aliases.size());
  if (async) {
    for (size_t r = 0; r < aliases.size(); ++r) {
      if (aliases[r] >= 0) continue;
      const at::Tensor& m = (*meta)[r].toTensor();
      at::Tensor out = at::empty_strided(m.sizes(), m.strides(), at::TensorOptions(m.scalar_type()).device(npu));
      k->outputs.emplace_back(r, TensorRef());
      k->outputs.back().second.assign(out);
      fresh[r] = std::move(out);
    }
  } else {
    count_sync_point(op);
    check_sync_debug(info.name.c_str());
    k->sync = std::make_shared<SyncResult>();
  }
  const std::shared_ptr<SyncResult> sync = k->sync;
  {
    const profiler::LaunchScope traced(info.name.c_str());
    owned.release();  // the runtime frees it, after the kernel or on a failed launch
    NPU_CHECK(snpuLaunchKernel(stream.handle(), info.name.c_str(), run_sparse_kernel, k, free_sparse_launch));
  }

  if (sync) {
    stream.synchronize();
    if (sync->error) std::rethrow_exception(sync->error);
    size_t w = 0;
    for (size_t i = 0; i < num_args; ++i) {
      const auto* a = schema.arguments()[i].alias_info();
      if (!(a && a->isWrite()) || !args[i].isTensor() || !args[i].toTensor().defined()) continue;
      const at::Tensor& host = args[i].toTensor();
      const at::Tensor& cpu = sync->written[w++];
      if (!host.is_sparse()) continue;  // a strided tensor was written in place
      auto* impl = at::sparse::get_sparse_impl(host);
      impl->raw_resize_(cpu.sparse_dim(), cpu.dense_dim(), cpu.sizes());
      impl->set_indices_and_values_unsafe(cpu._indices().to(npu), cpu._values().to(npu));
      impl->set_coalesced(cpu.is_coalesced());
    }
    for (size_t r = 0; r < aliases.size(); ++r) {
      if (aliases[r] >= 0) continue;
      const c10::IValue& v = sync->returns[r];
      fresh[r] = v.isTensor() ? c10::IValue(to_npu(v.toTensor(), npu)) : v;
    }
  }
  for (size_t r = 0; r < aliases.size(); ++r)
    if (aliases[r] >= 0) fresh[r] = args[aliases[r]];
  torch::jit::drop(*stack, num_args);
  for (auto& f : fresh) stack->push_back(std::move(f));
}

}  // namespace

}  // namespace softnpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(flatten_indices_stub, &softnpu::flatten_indices_npu)
}  // namespace at::native

namespace softnpu {

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("max", TORCH_FN(max_of_dense_form));
#define SPARSE_GENERIC_OP(name) m.impl(#name, torch::CppFunction::makeFromBoxedFunction<&run_generic>());
#define SPARSE_DEVICE_OP(name) m.impl(#name, torch::CppFunction::makeFromBoxedFunction<&run_device_op>());
#include "backend/ops/sparse_ops.def"
#undef SPARSE_GENERIC_OP
#undef SPARSE_DEVICE_OP
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse", torch::CppFunction::makeFromBoxedFunction<&dense_to_sparse>());
  m.impl("_to_sparse.sparse_dim", torch::CppFunction::makeFromBoxedFunction<&dense_to_sparse>());
  // EmbeddingBag's backward: CPU's and CUDA's kernel, which composes ops and, with sparse=True, makes a COO gradient
  // (the op path's synchronizing run would refuse a sparse result).
  m.impl("_embedding_bag_backward", torch::CppFunction::makeFromBoxedFunction<&run_device_generic>());
  // The invariant checks of a COO tensor made from npu parts (torch.sparse.check_sparse_tensor_invariants): they
  // read the indices (bounds; coalescedness through a CPU/CUDA-only DispatchStub), so the CPU's composite runs as a
  // launch on the stream, a sync point raising at the call.
  m.impl("_validate_sparse_coo_tensor_args", torch::CppFunction::makeFromBoxedFunction<&run_device_op>());
  // Refused before the conversion runs, rather than after it (its result could not be an npu tensor).
  for (const char* name : {"_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse_compressed>());
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse>()); }
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse>()); }

}  // namespace softnpu
