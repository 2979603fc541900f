// torch_npu's format functions as calls of softnpu's format ops through the dispatcher (csrc/fused/format.cpp).
#include "torch_npu/csrc/core/npu/NPUFormat.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace at_npu::native {

namespace {

template <typename Signature>
c10::TypedOperatorHandle<Signature> npu_op(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).typed<Signature>();
}

}  // namespace

int64_t get_npu_format(const at::Tensor& self) {
  static const auto op = npu_op<int64_t(const at::Tensor&)>("npu::get_npu_format");
  return op.call(self);
}

std::vector<int64_t> get_npu_storage_sizes(const at::Tensor& self) {
  return std::vector<int64_t>(self.sizes().begin(), self.sizes().end());
}

at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format) {
  static const auto op = npu_op<at::Tensor(const at::Tensor&, int64_t)>("npu::npu_format_cast");
  return op.call(self, acl_format);
}

at::Tensor& npu_format_cast_(at::Tensor& self, int64_t acl_format) {
  static const auto op = npu_op<at::Tensor&(at::Tensor&, int64_t)>("npu::npu_format_cast_", "acl_format");
  return op.call(self, acl_format);
}

at::Tensor empty_with_format(c10::IntArrayRef sizes, const c10::TensorOptions& options, int64_t format,
                             bool keep_format) {
  static const auto op =
      npu_op<at::Tensor(c10::IntArrayRef, std::optional<at::ScalarType>, std::optional<at::Layout>,
                        std::optional<at::Device>, std::optional<bool>, int64_t)>("npu::empty_with_format");
  return op.call(sizes, c10::optTypeMetaToScalarType(options.dtype_opt()), options.layout_opt(),
                 options.device_opt(), options.pinned_memory_opt(), format);
}

at::Tensor empty_with_swapped_memory(c10::IntArrayRef size, c10::optional<at::ScalarType> dtype_opt,
                                     c10::optional<c10::Device> device_opt) {
  static const auto op = npu_op<at::Tensor(c10::IntArrayRef, std::optional<at::ScalarType>, std::optional<at::Device>)>(
      "npu::empty_with_swapped_memory");
  return op.call(size, dtype_opt, device_opt);
}

}  // namespace at_npu::native
