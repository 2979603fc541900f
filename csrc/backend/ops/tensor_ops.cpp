// Ops with dedicated npu kernels: those that only create or re-describe tensors (allocation, views, storage
// changes), which must never reach the executor, and those that read a value back to the host. Everything else takes
// the generic path (executor.cpp).
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/allocator.h"
#include "backend/npu_error.h"
#include "backend/ops/storage.h"
#include "backend/stream.h"
#include "backend/sync_debug.h"

namespace softnpu {

namespace {

constexpr c10::DispatchKeySet kNPUKeys(c10::DispatchKey::PrivateUse1);

void check_factory_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "npu supports only strided tensors, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

// As ATen's CPU and CUDA factories: under torch.use_deterministic_algorithms(True) with
// torch.utils.deterministic.fill_uninitialized_memory, new memory holds NaN (floating, complex) or the type's maximum
// (integers, bool), filled on the stream like any op, instead of leftover values.
bool fill_uninitialized() {
  const auto& ctx = at::globalContext();
  return ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory();
}

at::Tensor filled_if_deterministic(at::Tensor t) {
  if (C10_UNLIKELY(fill_uninitialized())) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_factory_options(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return filled_if_deterministic(at::detail::empty_generic(size, NPUCachingAllocator::get(), kNPUKeys,
                                                           c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return filled_if_deterministic(at::detail::empty_strided_generic(size, stride, NPUCachingAllocator::get(), kNPUKeys,
                                                                   c10::dtype_or_default(dtype)));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) { return at::native::view_symint(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias_symint(self, size, stride);
}

// Tensor.resize_: as ATen's CPU resize, but device storage grows through the caching allocator and keeps its
// contents with a device copy (the CPU version would memcpy device memory from the host).
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef sym_size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() != size || memory_format.has_value()) {
    impl->set_sizes_contiguous(size);
    if (memory_format.has_value()) {
      TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
      impl->empty_tensor_restride(*memory_format);
    }
  }
  if (impl->numel() > 0) {
    const size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), self.itemsize(),
                                                           impl->storage_offset());
    const auto old_nbytes = static_cast<int64_t>(impl->storage().nbytes());
    if (needed > impl->storage().nbytes()) {
      resize_storage_bytes(impl->storage().unsafeGetStorageImpl(), needed);
      if (C10_UNLIKELY(fill_uninitialized())) at::native::fill_resize_deterministic_(self, old_nbytes);
    }
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt sym_offset,
                               c10::SymIntArrayRef sym_size, c10::SymIntArrayRef sym_stride) {
  const int64_t offset = sym_offset.expect_int();
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  const c10::IntArrayRef stride = C10_AS_INTARRAYREF_SLOW(sym_stride);
  at::native::checkSetStorage(self, std::move(source), offset, size, stride);
  auto* impl = self.unsafeGetTensorImpl();
  if (stride.data() && !stride.empty()) {
    impl->set_sizes_and_strides(size, stride, offset);
  } else {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  }
  if (impl->numel() > 0) {
    const size_t needed =
        at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), self.itemsize(), offset);
    if (needed > impl->storage().nbytes()) resize_storage_bytes(impl->storage().unsafeGetStorageImpl(), needed);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) { return at::native::set_(self, std::move(source)); }

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) { return at::native::set_tensor_(self, source); }

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, NPUCachingAllocator::get(), /*resizable=*/true);
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

// Tensor.item(): a synchronous device-to-host copy of one element, after the work queued on the stream (which
// reports a kernel error of that stream, as CUDA's .item() does).
at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  check_sync_debug("aten::_local_scalar_dense (Tensor.item())");
  const c10::DeviceGuard guard(self.device());
  const NPUStream stream = getCurrentNPUStream();
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  // Ctrl-C interrupts the wait for the queued work; the copy of one element then completes at once.
  stream.synchronize();
  NPU_CHECK(snpuMemcpyAsync(host.data_ptr(), self.const_data_ptr(), self.itemsize(), snpuMemcpyDeviceToHost,
                            stream.handle()));
  if (self.is_conj()) host._set_conj(true);
  if (self.is_neg()) host._set_neg(true);
  return host.item();
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  NPUCachingAllocator::get()->recordStream(self.storage().data_ptr(), stream);
}

// Whether `from`'s TensorImpl may replace `self`'s (set_data, `tensor.data = ...`), which C++'s Module::to and Python's
// nn.Module.to use to move parameters in place. ATen's test knows only its built-in dense backends, so moving a CPU
// parameter to npu would raise in C++ (and give a new Parameter object in Python): dense npu is like dense CPU.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](c10::DispatchKeySet ks) {
    return ks.has(c10::DispatchKey::CPU) || ks.has(c10::DispatchKey::PrivateUse1);
  };
  if (dense(self.key_set()) && dense(from.key_set())) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_", set_empty);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace softnpu
