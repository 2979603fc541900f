// op-plugin's C++ functions (third_party/op-plugin/op_plugin/include/ops.h of torch_npu's include directory).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace at_npu::native {

// A dropout mask for a tensor of `size` elements: bit i (least significant first within each byte) is 1, keep, with
// probability 1 - p, drawn from an npu generator at (seed, offset); uint8 of ceil(numel / 128) * 128 / 8 bytes (CANN's
// 128-element alignment), the bytes past those holding the elements 0. On self's device, the current stream;
// parallel and sync are CANN's launch hints, with no meaning here.
TORCH_NPU_API at::Tensor npu_dropout_gen_mask(const at::Tensor &self, at::IntArrayRef size, double p, int64_t seed,
                                              int64_t offset, c10::optional<bool> parallel, c10::optional<bool> sync);

}  // namespace at_npu::native
