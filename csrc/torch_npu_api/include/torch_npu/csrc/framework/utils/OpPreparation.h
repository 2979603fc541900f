// torch_npu's OpPreparation: output tensors for an operator (on the source's npu device, from the caching allocator
// on the current stream) and the checks of out= arguments.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <initializer_list>

namespace at_npu::native {

class OpPreparation {
 public:
  static at::Tensor apply_tensor(const at::Tensor& src);
  static at::Tensor apply_tensor(const at::Tensor& src, c10::IntArrayRef sizes);
  static at::Tensor apply_tensor(const at::Tensor& src, const c10::TensorOptions& options);
  static at::Tensor apply_tensor(c10::IntArrayRef sizes, const c10::TensorOptions& options, const at::Tensor& src);
  static at::Tensor apply_tensor_with_format(const at::Tensor& src, int64_t format, bool keep_format = false);
  static at::Tensor apply_tensor_with_format(const at::Tensor& src, c10::IntArrayRef sizes, int64_t format,
                                             bool keep_format = false);
  static at::Tensor apply_tensor_with_format(c10::IntArrayRef sizes, const c10::TensorOptions& options,
                                             int64_t format, bool keep_format = false);
  static at::Tensor apply_tensor_without_format(const at::Tensor& src);
  static at::Tensor apply_tensor_without_format(const at::Tensor& src, c10::IntArrayRef sizes);
  static at::Tensor apply_tensor_without_format(c10::IntArrayRef sizes, const c10::TensorOptions& options);
  static at::Tensor apply_tensor_with_sizes(c10::IntArrayRef sizes, const c10::TensorOptions& options);

  // An out= tensor: resized to expect_size (as ATen's out= ops do) after checking dtype and device.
  static void check_tensor(const std::initializer_list<at::Tensor>& src_list, at::Tensor& dst,
                           at::ScalarType expect_dtype, c10::IntArrayRef expect_size);
  static void check_tensor(const std::initializer_list<at::Tensor>& src_list, at::Tensor& dst,
                           const at::Tensor& expect_tensor);
  static void check_tensor(const std::initializer_list<at::Tensor>& src_list, at::Tensor& dst,
                           c10::IntArrayRef expect_size);
  // Outputs must not partially overlap inputs (ATen's overlap check).
  static void check_memory(const std::initializer_list<at::Tensor>& inputs,
                           const std::initializer_list<at::Tensor>& outputs);

  // The older names.
  static at::Tensor ApplyTensor(const at::Tensor& src) { return apply_tensor(src); }
  static at::Tensor ApplyTensor(const at::Tensor& src, c10::IntArrayRef sizes) { return apply_tensor(src, sizes); }
  static at::Tensor ApplyTensor(c10::IntArrayRef sizes, const c10::TensorOptions& options, const at::Tensor& src) {
    return apply_tensor(sizes, options, src);
  }
  static at::Tensor ApplyTensorWithFormat(c10::IntArrayRef sizes, const c10::TensorOptions& options, int64_t format,
                                          bool keep_format = false) {
    return apply_tensor_with_format(sizes, options, format, keep_format);
  }
  static at::Tensor ApplyTensorWithSizes(c10::IntArrayRef sizes, const c10::TensorOptions& options) {
    return apply_tensor_with_sizes(sizes, options);
  }
};

}  // namespace at_npu::native
