// torch_npu's format functions (acl_format numbers: ND 2, NCHW 0, NHWC 1, FRACTAL_NZ 29, ...): softnpu's format ops
// (torch.ops.npu.*), which keep a plain format as metadata of an ND tensor (csrc/fused/format.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <vector>

#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace at_npu::native {

TORCH_NPU_API int64_t get_npu_format(const at::Tensor& self);
// The storage's shape as torch_npu reports it: the tensor's sizes for the formats softnpu stores (ND data).
TORCH_NPU_API std::vector<int64_t> get_npu_storage_sizes(const at::Tensor& self);
TORCH_NPU_API at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format);
TORCH_NPU_API at::Tensor& npu_format_cast_(at::Tensor& self, int64_t acl_format);
TORCH_NPU_API at::Tensor empty_with_format(
    c10::IntArrayRef sizes,
    const c10::TensorOptions& options,
    int64_t format,
    bool keep_format = false);
// torch_npu.empty_with_swapped_memory: an npu tensor over pinned host memory the device reads and writes in place
// (softnpu's swapped-memory allocator).
TORCH_NPU_API at::Tensor empty_with_swapped_memory(
    c10::IntArrayRef size,
    c10::optional<at::ScalarType> dtype_opt,
    c10::optional<c10::Device> device_opt);

}  // namespace at_npu::native
