// OpPreparation: outputs are at::empty on the source's npu device (the caching allocator, current stream); formats
// through empty_with_format.
#include "torch_npu/csrc/framework/utils/OpPreparation.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include "torch_npu/csrc/core/npu/NPUFormat.h"

namespace at_npu::native {

at::Tensor OpPreparation::apply_tensor(const at::Tensor& src) { return apply_tensor(src, src.sizes()); }

at::Tensor OpPreparation::apply_tensor(const at::Tensor& src, c10::IntArrayRef sizes) {
  return at::empty(sizes, src.options());
}

at::Tensor OpPreparation::apply_tensor(const at::Tensor& src, const c10::TensorOptions& options) {
  return at::empty(src.sizes(), options);
}

at::Tensor OpPreparation::apply_tensor(c10::IntArrayRef sizes, const c10::TensorOptions& options,
                                       const at::Tensor& src) {
  return at::empty(sizes, options.device_opt() ? options : options.device(src.device()));
}

at::Tensor OpPreparation::apply_tensor_with_format(const at::Tensor& src, int64_t format, bool keep_format) {
  return apply_tensor_with_format(src.sizes(), src.options(), format, keep_format);
}

at::Tensor OpPreparation::apply_tensor_with_format(const at::Tensor& src, c10::IntArrayRef sizes, int64_t format,
                                                   bool keep_format) {
  return apply_tensor_with_format(sizes, src.options(), format, keep_format);
}

at::Tensor OpPreparation::apply_tensor_with_format(c10::IntArrayRef sizes, const c10::TensorOptions& options,
                                                   int64_t format, bool keep_format) {
  return empty_with_format(sizes, options, format, keep_format);
}

at::Tensor OpPreparation::apply_tensor_without_format(const at::Tensor& src) {
  return at::empty(src.sizes(), src.options());
}

at::Tensor OpPreparation::apply_tensor_without_format(const at::Tensor& src, c10::IntArrayRef sizes) {
  return at::empty(sizes, src.options());
}

at::Tensor OpPreparation::apply_tensor_without_format(c10::IntArrayRef sizes, const c10::TensorOptions& options) {
  return at::empty(sizes, options);
}

at::Tensor OpPreparation::apply_tensor_with_sizes(c10::IntArrayRef sizes, const c10::TensorOptions& options) {
  return at::empty(sizes, options);
}

void OpPreparation::check_tensor(const std::initializer_list<at::Tensor>& src_list, at::Tensor& dst,
                                 at::ScalarType expect_dtype, c10::IntArrayRef expect_size) {
  for (const auto& src : src_list) {
    TORCH_CHECK(!src.defined() || src.device() == dst.device(), "Expected all tensors to be on the same device, but "
                "found at least two devices, ", src.device(), " and ", dst.device(), "!");
  }
  TORCH_CHECK(dst.scalar_type() == expect_dtype, "Expected out tensor to have dtype ", expect_dtype, ", but got ",
              dst.scalar_type(), " instead");
  if (dst.sizes() != expect_size) dst.resize_(expect_size);
  check_memory(src_list, {dst});
}

void OpPreparation::check_tensor(const std::initializer_list<at::Tensor>& src_list, at::Tensor& dst,
                                 const at::Tensor& expect_tensor) {
  check_tensor(src_list, dst, expect_tensor.scalar_type(), expect_tensor.sizes());
}

void OpPreparation::check_tensor(const std::initializer_list<at::Tensor>& src_list, at::Tensor& dst,
                                 c10::IntArrayRef expect_size) {
  check_tensor(src_list, dst, dst.scalar_type(), expect_size);
}

void OpPreparation::check_memory(const std::initializer_list<at::Tensor>& inputs,
                                 const std::initializer_list<at::Tensor>& outputs) {
  for (const auto& out : outputs) {
    if (!out.defined()) continue;
    at::assert_no_internal_overlap(out);
    for (const auto& in : inputs) {
      if (in.defined()) at::assert_no_partial_overlap(out, in);
    }
  }
}

}  // namespace at_npu::native
