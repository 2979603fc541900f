// torch_npu's at_npu::native::NPUNativeFunctions: its native ops callable from C++. Each goes through the dispatcher
// (npu tensors: the op path on the current stream), as torch_npu's do through its registrations.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/TensorOptions.h>

#include <optional>
#include <tuple>

namespace at_npu::native {

struct NPUNativeFunctions {
  static at::Tensor add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha = 1);
  static at::Tensor add(const at::Tensor& self, const c10::Scalar& other, const c10::Scalar& alpha = 1);
  static at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,
                             at::Tensor& out);
  static at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha = 1);
  static at::Tensor mul(const at::Tensor& self, const at::Tensor& other);
  static at::Tensor div(const at::Tensor& self, const at::Tensor& other);
  static at::Tensor matmul(const at::Tensor& self, const at::Tensor& other);
  static at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking = false);
  static at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype = std::nullopt,
                          std::optional<at::Layout> layout = std::nullopt,
                          std::optional<at::Device> device = std::nullopt, std::optional<bool> pin_memory = std::nullopt,
                          std::optional<at::MemoryFormat> memory_format = std::nullopt);
  static at::Tensor empty_with_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype = std::nullopt,
                                      std::optional<at::Layout> layout = std::nullopt,
                                      std::optional<at::Device> device = std::nullopt,
                                      std::optional<bool> pin_memory = std::nullopt, int64_t acl_format = 2);
  static at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format);
  static at::Tensor& npu_format_cast_(at::Tensor& self, int64_t acl_format);
  static int64_t get_npu_format(const at::Tensor& self);
  static int64_t get_storage_size(const at::Tensor& self);
  static at::Tensor npu_dtype_cast(const at::Tensor& self, at::ScalarType dtype);
  static at::Tensor contiguous(const at::Tensor& self, at::MemoryFormat memory_format = at::MemoryFormat::Contiguous);
  static std::tuple<at::Tensor, at::Tensor> npu_rms_norm(const at::Tensor& self, const at::Tensor& gamma,
                                                         double epsilon = 1e-6);
  static at::Tensor npu_swiglu(const at::Tensor& self, int64_t dim = -1);
  static at::Tensor npu_rotary_mul(const at::Tensor& self, const at::Tensor& r1, const at::Tensor& r2);
};

}  // namespace at_npu::native
