#include "backend/ops/kernel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "backend/generator.h"
#include "backend/npu_error.h"
#include "backend/overflow.h"
#include "backend/ops/cube.h"
#include "backend/ops/ivalue_tensors.h"
#include "backend/ops/meta_cache.h"
#include "backend/ops/op_info.h"
#include "backend/ops/widen.h"
#include "softnpu/runtime.h"

namespace softnpu {

// ------------------------------------------------------------------------------------------------ host side

void TensorRef::assign(const at::Tensor& t) {
  sizes.clear();
  strides.clear();
  if (!t.defined()) {
    kind = Kind::kUndefined;
    return;
  }
  dtype = t.scalar_type();
  if (t.device().is_cpu()) {
    // Only 0-dim CPU tensors reach a kernel (the executor checks): read now, the host owns the memory.
    kind = Kind::kCpuScalar;
    value = t.item();
    wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    conj = neg = false;
    return;
  }
  kind = Kind::kDevice;
  identity = t.unsafeGetTensorImpl();
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  base = storage->mutable_data();
  nbytes = storage->nbytes();
  offset = t.storage_offset();
  sizes.assign(t.sizes().begin(), t.sizes().end());
  strides.assign(t.strides().begin(), t.strides().end());
  conj = t.is_conj();
  neg = t.is_neg();
}

namespace {

bool holds_tensors(const c10::IValue& v) {
  if (v.isTensor() || v.isTensorList()) return true;
  if (!v.isList()) return false;
  for (const auto& e : v.toListRef())
    if (e.isTensor()) return true;
  return false;
}

struct Pool {
  std::mutex mutex;
  std::vector<KernelLaunch*> free;
};

Pool& pool() {
  static Pool* p = new Pool();  // leaked: compute threads may recycle while the process exits
  return *p;
}

// The records a launching thread has taken from the pool in one batch: the pool's mutex, which the compute threads
// take for every record they hand back, is taken once per batch rather than once per launch. A thread that exits
// hands its batch back.
struct LocalRecords {
  std::vector<KernelLaunch*> free;
  ~LocalRecords() {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.free.insert(p.free.end(), free.begin(), free.end());
  }
};

}  // namespace

KernelLaunch* KernelLaunch::acquire(OpInfo* info) {
  thread_local LocalRecords local;
  if (local.free.empty()) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    local.free.swap(p.free);
  }
  KernelLaunch* k;
  if (local.free.empty()) {
    k = new KernelLaunch();
  } else {
    k = local.free.back();
    local.free.pop_back();
  }
  k->info = info;
  return k;
}

void KernelLaunch::add_slot(std::vector<TensorSlot>& slots, uint32_t position, const c10::IValue& value) {
  TensorSlot slot;
  slot.kind = value.isTensor()       ? TensorSlot::Kind::kTensor
              : value.isTensorList() ? TensorSlot::Kind::kList
                                     : TensorSlot::Kind::kOptionalList;
  slot.position = position;
  slot.first = static_cast<uint32_t>(refs.size());
  visit_tensors(value, [&](const at::Tensor& t) {
    refs.emplace_back();
    refs.back().assign(t);
  });
  slot.count = static_cast<uint32_t>(refs.size()) - slot.first;
  slots.push_back(slot);
}

void KernelLaunch::add_argument(const c10::IValue& value) {
  if (holds_tensors(value)) {
    add_slot(argument_slots, static_cast<uint32_t>(stack.size()), value);
    stack.emplace_back();
  } else {
    stack.push_back(value);
  }
}

void KernelLaunch::add_output(uint32_t return_index, const c10::IValue& output) {
  add_slot(output_slots, return_index, output);
}

// ------------------------------------------------------------------------------------------------ compute side

namespace {

// The CPU tensors of one kernel run. Tensors over the same device storage share one CPU storage, and arguments that are
// one tensor on the host are one tensor here, so ATen's aliasing checks (memory overlap, is_same: x.logical_and_(y) is
// logical_and.out(x, y, out=x)) see what they would on the device.
//
// A few CPU kernels grow an output's storage while computing (huber_loss.out computes elementwise, then reduces), so
// the storages are resizable, with the CPU allocator: a storage the kernel moved to host memory has its bytes copied
// back into device memory afterwards (restore), or is pointed at device memory again (reset).
class Views {
 public:
  at::Tensor make(const TensorRef& r) {
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
    // Empty storages hold no data to alias (all may have a null base): each gets its own, or a kernel resizing one
    // empty out= tensor would resize them all.
    Entry* entry = nullptr;
    for (auto& e : storages_) {
      if (e.base != r.base) continue;
      for (const auto& [identity, tensor] : e.tensors)
        if (identity == r.identity) return tensor;
      if (r.nbytes > 0) entry = &e;
    }
    if (!entry) {
      storages_.push_back(Entry{r.base, r.nbytes,
                                c10::Storage(c10::Storage::use_byte_size_t(), r.nbytes,
                                             c10::DataPtr(r.base, c10::Device(c10::kCPU)), c10::GetCPUAllocator(),
                                             /*resizable=*/true),
                                {}});
      entry = &storages_.back();
    }
    auto view = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(entry->cpu),
                                                         c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                         c10::scalarTypeToTypeMeta(r.dtype));
    view.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes, r.strides, r.offset);
    if (r.conj) view._set_conj(true);
    if (r.neg) view._set_neg(true);
    entry->tensors.emplace_back(r.identity, view);
    return view;
  }

  c10::IValue make(const KernelLaunch& k, const TensorSlot& slot) {
    switch (slot.kind) {
      case TensorSlot::Kind::kTensor:
        return make(k.refs[slot.first]);
      case TensorSlot::Kind::kList: {
        c10::List<at::Tensor> list;
        list.reserve(slot.count);
        for (uint32_t i = 0; i < slot.count; ++i) list.push_back(make(k.refs[slot.first + i]));
        return list;
      }
      case TensorSlot::Kind::kOptionalList: {
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(slot.count);
        for (uint32_t i = 0; i < slot.count; ++i) {
          const TensorRef& r = k.refs[slot.first + i];
          list.push_back(r.kind == TensorRef::Kind::kUndefined ? std::nullopt : std::optional<at::Tensor>(make(r)));
        }
        return list;
      }
    }
    return c10::IValue();
  }

  bool moved() {
    for (auto& e : storages_)
      if (e.cpu.mutable_data() != e.base) return true;
    return false;
  }

  void restore() {
    for (auto& e : storages_) {
      void* now = e.cpu.mutable_data();
      if (now != e.base && now != nullptr && e.nbytes > 0)
        std::memcpy(e.base, now, std::min(e.nbytes, e.cpu.nbytes()));
    }
  }

  void reset() {
    for (auto& e : storages_) {
      e.cpu.unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(e.base, c10::Device(c10::kCPU)));
      e.cpu.set_nbytes(e.nbytes);
    }
  }

 private:
  struct Entry {
    void* base;
    size_t nbytes;
    c10::Storage cpu;
    c10::SmallVector<std::pair<const void*, at::Tensor>, 2> tensors;  // made over it, by host identity
  };
  c10::SmallVector<Entry, 4> storages_;
};

at::Generator kernel_generator(uint64_t seed) {
  thread_local at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  gen.set_current_seed(seed);
  return gen;
}

// A result into its preallocated output. The outputs have the shapes ATen's Meta kernels give, which describe the
// accelerator kernels; for a few auxiliary outputs (e.g. native_batch_norm's saved statistics in eval mode) the CPU
// kernel returns another shape, which no device output could take: those are left as the Meta kernel shaped them.
void copy_result(const at::Tensor& dst, const at::Tensor& src) {
  if (!dst.defined() || !src.defined()) return;
  if (dst.sizes() == src.sizes()) {
    kernel_copy(dst, src);
  } else if (dst.numel() == src.numel()) {
    kernel_copy(dst, src.reshape(dst.sizes()));
  }
}

// The op itself; fresh results are copied into the preallocated outputs.
void run_op(KernelLaunch& k, const std::vector<c10::IValue>& outputs) {
  k.info->op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &k.stack);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const c10::IValue& target = outputs[i];
    const c10::IValue& result = k.stack[k.output_slots[i].position];
    if (target.isTensor()) {
      copy_result(target.toTensor(), result.toTensor());
    } else if (target.isTensorList()) {
      const auto dst = target.toTensorList();
      const auto src = result.toTensorList();
      for (size_t j = 0; j < dst.size(); ++j) copy_result(dst.get(j), src.get(j));
    }
  }
}

bool outputs_intact(const KernelLaunch& k, const std::vector<c10::IValue>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSlot& slot = k.output_slots[i];
    size_t j = 0;
    bool intact = true;
    visit_tensors(outputs[i], [&](const at::Tensor& t) {
      const TensorRef& r = k.refs[slot.first + j++];
      intact = intact && t.sizes() == c10::IntArrayRef(r.sizes) && t.strides() == c10::IntArrayRef(r.strides);
    });
    if (!intact) return false;
  }
  return true;
}

// The out= overload writing straight into the outputs. Some out= kernels do not honour preallocated outputs of the
// right shape (they resize them, compute into a grown buffer, or reject them); then the op runs again as itself, and
// later launches with the same argument metadata skip the overload.
void run_out_variant(KernelLaunch& k, const std::vector<c10::IValue>& outputs, Views& views) {
  torch::jit::Stack args(k.stack);
  for (const auto& o : outputs) k.stack.push_back(o);
  bool honoured = true;
  try {
    k.info->out_variant->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &k.stack);
  } catch (const std::exception&) {
    honoured = false;  // the op itself, run below, raises the error if the inputs are at fault
  }
  if (honoured && !views.moved() && outputs_intact(k, outputs)) return;
  k.out_variant_failed->store(true, std::memory_order_relaxed);
  views.reset();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSlot& slot = k.output_slots[i];
    size_t j = 0;
    visit_tensors(outputs[i], [&](const at::Tensor& t) {
      const TensorRef& r = k.refs[slot.first + j++];
      t.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes, r.strides, r.offset);
      t._set_conj(r.conj);
      t._set_neg(r.neg);
    });
  }
  k.stack = std::move(args);
  run_op(k, outputs);
}

// A kernel may leave a tensor it wrote as a conjugate or negative view of what it computed (linalg_lu_solve with
// left=False sets the conj bit of its result). The device tensor keeps the bits it was launched with: the flipped
// bit is applied to the data instead.
void keep_bits(const at::Tensor& t, const TensorRef& r) {
  if (!t.defined()) return;
  if (t.is_conj() != r.conj) {
    t._set_conj(false);
    t.conj_physical_();
    t._set_conj(r.conj);
  }
  if (t.is_neg() != r.neg) {
    t._set_neg(false);
    t.neg_();
    t._set_neg(r.neg);
  }
}

// The tensors of a slot with their refs.
template <typename F>
void for_each_ref(const KernelLaunch& k, const TensorSlot& slot, const c10::IValue& value, F&& f) {
  size_t j = 0;
  visit_tensors(value, [&](const at::Tensor& t) { f(t, k.refs[slot.first + j++]); });
}

// The bytes of the tensors the kernel reads and writes: its size, as the runtime's thread budget weighs it. On the
// cube's float32 route the kernel works on float32 copies: weighed as those, a float16 matmul gets the threads of the
// float32 one.
uint64_t work_bytes(const KernelLaunch& k, bool float32) {
  uint64_t bytes = 0;
  for (const TensorRef& r : k.refs) {
    if (r.kind != TensorRef::Kind::kDevice) continue;
    uint64_t n = float32 ? std::max<size_t>(c10::elementSize(r.dtype), sizeof(float)) : c10::elementSize(r.dtype);
    for (int64_t size : r.sizes) n *= static_cast<uint64_t>(size);
    bytes += n;
  }
  return bytes;
}

// The bytes of device memory a tensor's elements span (its view, not its whole storage), or {nullptr, 0} if none.
std::pair<const char*, size_t> touched_bytes(const TensorRef& r) {
  if (r.kind != TensorRef::Kind::kDevice || !r.base) return {nullptr, 0};
  const auto element = static_cast<int64_t>(c10::elementSize(r.dtype));
  int64_t first = r.offset, last = r.offset;
  for (size_t d = 0; d < r.sizes.size(); ++d) {
    if (r.sizes[d] == 0) return {nullptr, 0};
    const int64_t reach = (r.sizes[d] - 1) * r.strides[d];
    (reach < 0 ? first : last) += reach;
  }
  return {static_cast<const char*>(r.base) + first * element, static_cast<size_t>((last - first + 1) * element)};
}

// A kernel touching device memory with an uncorrectable error fails as the chip's does (ACL_ERROR_RT_DEVICE_MEM_ERROR,
// "UCE ERROR", torch_npu's text), naming the operands hit; empty if it touches none.
std::string uce_operands(const KernelLaunch& k) {
  std::string hit;
  const auto& schema = k.info->op.schema();
  auto check = [&](const TensorSlot& slot, const std::string& what) {
    for (uint32_t i = 0; i < slot.count; ++i) {
      const TensorRef& r = k.refs[slot.first + i];
      const auto [bytes, size] = touched_bytes(r);
      if (!size || !snpuMemRangeHasUce(bytes, size)) continue;
      char range[64];
      std::snprintf(range, sizeof(range), "%p, %zu bytes", static_cast<const void*>(bytes), size);
      hit += c10::str("\n  ", what, slot.count > 1 ? "[" + std::to_string(i) + "]" : "", ": ", r.dtype,
                      c10::IntArrayRef(r.sizes), " at ", range);
    }
  };
  for (const auto& slot : k.argument_slots) check(slot, "argument '" + schema.arguments()[slot.position].name() + "'");
  for (const auto& slot : k.output_slots) {
    const std::string& name = schema.returns()[slot.position].name();
    check(slot, name.empty() ? "result " + std::to_string(slot.position) : "result '" + name + "'");
  }
  if (hit.empty()) return hit;
  return "UCE ERROR\n" + k.info->name + " touched device memory with an uncorrectable error (ACL error " +
         std::to_string(SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR) + ", ACL_ERROR_RT_DEVICE_MEM_ERROR); the tensors hit:" +
         hit;
}

}  // namespace

int run_kernel(void* arg) {
  auto& k = *static_cast<KernelLaunch*>(arg);
  try {
    // One atomic load while no device memory has a UCE (snpuFaultInject); then the operands are checked.
    if (C10_UNLIKELY(snpuMemUceActive())) {
      const std::string uce = uce_operands(k);
      if (!uce.empty()) {
        TORCH_CHECK(!k.sync, uce);  // a synchronizing launch hands the error to its waiting host thread
        snpuKernelSetErrorMessage(uce.c_str());
        return SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR;
      }
    }
    if (C10_UNLIKELY(k.replayable)) {
      if (k.pristine.empty()) {
        k.pristine = k.stack;
      } else {
        k.stack = k.pristine;
      }
    }
    const bool float32 = k.info->float32_dtypes && runs_in_float32(k);
    const bool widened = !float32 && k.info->widened_dtypes && runs_widened(k);
    set_kernel_threads(snpuKernelThreadBudget(work_bytes(k, float32)));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Views views;
    for (const auto& slot : k.argument_slots) k.stack[slot.position] = views.make(k, slot);
    for (const auto& [index, draw] : k.seeds) k.stack[index] = kernel_generator(draw.kernel_seed());
    if (k.sync) k.sync->arguments = k.stack;
    std::vector<c10::IValue> outputs;
    outputs.reserve(k.output_slots.size());
    for (const auto& slot : k.output_slots) outputs.push_back(views.make(k, slot));
    c10::SmallVector<std::pair<at::Tensor, const TensorRef*>, 4> written;
    const auto& written_args = k.info->written_args;
    for (const auto& slot : k.argument_slots) {
      if (std::find(written_args.begin(), written_args.end(), static_cast<int>(slot.position)) == written_args.end())
        continue;
      for_each_ref(k, slot, k.stack[slot.position], [&](const at::Tensor& t, const TensorRef& r) {
        written.emplace_back(t, &r);
      });
    }
    if (float32) {
      if (!run_half_gemm(k.stack, k, outputs)) {
        const unsigned dtypes = k.info->float32_dtypes;
        WideOperands operands(k.stack, k, [dtypes](c10::ScalarType d) { return float32_operand(dtypes, d); },
                              float32_contract_operands(k));
        run_op(k, outputs);
        operands.write_back();
      }
    } else if (widened) {
      const uint64_t dtypes = k.info->widened_dtypes;
      WideOperands operands(k.stack, k, [dtypes](c10::ScalarType d) { return wider_dtype(dtypes, d); });
      run_op(k, outputs);
      operands.write_back();
      if (k.sync) narrow_returns(k.stack, k);
    } else if (k.use_out_variant) {
      run_out_variant(k, outputs, views);
      for (size_t i = 0; i < outputs.size(); ++i)
        for_each_ref(k, k.output_slots[i], outputs[i], [](const at::Tensor& t, const TensorRef& r) {
          keep_bits(t, r);
        });
    } else {
      run_op(k, outputs);
    }
    for (const auto& [t, r] : written) keep_bits(t, *r);
    check_overflow(outputs);
    for (const auto& [t, r] : written) check_overflow(t);
    views.restore();
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

void recycle_kernel(void* arg) {
  auto* k = static_cast<KernelLaunch*>(arg);
  k->stack.clear();
  k->refs.clear();
  k->argument_slots.clear();
  k->output_slots.clear();
  k->seeds.clear();
  k->replayable = false;
  k->pristine.clear();
  k->use_out_variant = false;
  k->out_variant_failed.reset();
  k->sync.reset();
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.free.push_back(k);
}

}  // namespace softnpu
