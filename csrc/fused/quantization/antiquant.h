// Weight-only (antiquant) dequantization, shared by npu_weight_quant_batchmatmul and npu_grouped_matmul's antiquant
// form: ANTIQUANT(weight) = (weight + antiquant_offset) * antiquant_scale in x's dtype, each step rounded to it as the
// chip's vector unit computes, per tensor / per output channel, or per group of `group` rows along K.
#pragma once

#include <ATen/ATen.h>

namespace softnpu::fused {

// weight [K, N] (any integer or float dtype) dequantized in `dtype`. scale (and offset, when defined): one element,
// [N] or [1, N] (per channel), or [ceil(K / group), N] (per group). The scale rows broadcast over their group's rows
// ([groups, group, N], no [K, N] copies of them), K padded to whole groups and cut back.
inline at::Tensor antiquantize(const at::Tensor& weight, const at::Tensor& scale, const at::Tensor& offset,
                               int64_t group, c10::ScalarType dtype) {
  const int64_t k = weight.size(0), n = weight.size(1), groups = (k + group - 1) / group;
  const auto rows = [](const at::Tensor& t) { return t.dim() == 2 ? t.unsqueeze(1) : t.reshape({1, 1, -1}); };
  at::Tensor w = weight.to(dtype);
  if (groups * group != k) w = at::constant_pad_nd(w, {0, 0, 0, groups * group - k});
  w = w.reshape({groups, group, n});
  if (offset.defined()) w.add_(rows(offset));
  w.mul_(rows(scale));
  return w.reshape({groups * group, n}).narrow(0, 0, k);
}

}  // namespace softnpu::fused
