// NPUNativeFunctions: ATen's functions and softnpu's npu ops through the dispatcher.
#include "torch_npu/csrc/aten/NPUNativeFunctions.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "torch_npu/csrc/core/npu/NPUFormat.h"

namespace at_npu::native {

namespace {

template <typename Signature>
c10::TypedOperatorHandle<Signature> npu_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace

at::Tensor NPUNativeFunctions::add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  return at::add(self, other, alpha);
}
at::Tensor NPUNativeFunctions::add(const at::Tensor& self, const c10::Scalar& other, const c10::Scalar& alpha) {
  return at::add(self, other, alpha);
}
at::Tensor& NPUNativeFunctions::add_out(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,
                                        at::Tensor& out) {
  return at::add_out(out, self, other, alpha);
}
at::Tensor NPUNativeFunctions::sub(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  return at::sub(self, other, alpha);
}
at::Tensor NPUNativeFunctions::mul(const at::Tensor& self, const at::Tensor& other) { return at::mul(self, other); }
at::Tensor NPUNativeFunctions::div(const at::Tensor& self, const at::Tensor& other) { return at::div(self, other); }
at::Tensor NPUNativeFunctions::matmul(const at::Tensor& self, const at::Tensor& other) {
  return at::matmul(self, other);
}
at::Tensor& NPUNativeFunctions::copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  return self.copy_(src, non_blocking);
}
at::Tensor NPUNativeFunctions::empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                     std::optional<at::Layout> layout, std::optional<at::Device> device,
                                     std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  return at::empty(size, dtype, layout, device, pin_memory, memory_format);
}
at::Tensor NPUNativeFunctions::empty_with_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                                 std::optional<bool> pin_memory, int64_t acl_format) {
  return at_npu::native::empty_with_format(
      size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory), acl_format);
}
at::Tensor NPUNativeFunctions::npu_format_cast(const at::Tensor& self, int64_t acl_format) {
  return at_npu::native::npu_format_cast(self, acl_format);
}
at::Tensor& NPUNativeFunctions::npu_format_cast_(at::Tensor& self, int64_t acl_format) {
  return at_npu::native::npu_format_cast_(self, acl_format);
}
int64_t NPUNativeFunctions::get_npu_format(const at::Tensor& self) { return at_npu::native::get_npu_format(self); }
int64_t NPUNativeFunctions::get_storage_size(const at::Tensor& self) {
  static const auto op = npu_op<int64_t(const at::Tensor&)>("npu::get_storage_size");
  return op.call(self);
}
at::Tensor NPUNativeFunctions::npu_dtype_cast(const at::Tensor& self, at::ScalarType dtype) { return self.to(dtype); }
at::Tensor NPUNativeFunctions::contiguous(const at::Tensor& self, at::MemoryFormat memory_format) {
  return self.contiguous(memory_format);
}
std::tuple<at::Tensor, at::Tensor> NPUNativeFunctions::npu_rms_norm(const at::Tensor& self, const at::Tensor& gamma,
                                                                    double epsilon) {
  static const auto op =
      npu_op<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double)>("npu::npu_rms_norm");
  return op.call(self, gamma, epsilon);
}
at::Tensor NPUNativeFunctions::npu_swiglu(const at::Tensor& self, int64_t dim) {
  static const auto op = npu_op<at::Tensor(const at::Tensor&, int64_t)>("npu::npu_swiglu");
  return op.call(self, dim);
}
at::Tensor NPUNativeFunctions::npu_rotary_mul(const at::Tensor& self, const at::Tensor& r1, const at::Tensor& r2) {
  static const auto op = npu_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           c10::string_view)>("npu::npu_rotary_mul");
  return op.call(self, r1, r2, "half");
}

}  // namespace at_npu::native
