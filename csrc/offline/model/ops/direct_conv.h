// Direct 2-D convolutions with filters packed once at load: the convolutions Winograd does not take (other filter
// sizes, strides, dilations, and the 3x3 ones on small maps). ATen's oneDNN convolution reorders its filter on every
// call (the whole of a 512x512x3x3 filter, 9.4 MB, per call at batch 1); this kernel reads it packed as it computes:
// six output positions by 64 output channels in registers, one input value broadcast against four filter vectors.
//
// The executor's layout pass (executor.cpp) packs the filters into npu device memory and marks the nodes; the Conv
// kernel (nn.cpp) runs `conv`. AVX-512F, as Winograd's (winograd::available).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace softnpu::offline::direct {

// Whether a convolution takes this kernel: a float [OC, C, KH, KW] filter with OC a multiple of 16, one group.
bool supported(const at::Tensor& weight, int64_t group);

// The packed filter: float [OC, KH, KW, C] in size, stored as OC/64 panels of [KH, KW, C, 64] (the last panel as
// wide as OC's remainder).
at::Tensor pack_filter(const at::Tensor& weight);

// relu?(conv(x, weight) + bias + residual) for a float NCHW-shaped x (any memory format), with the filter from
// pack_filter; bias and residual (of the output's shape) may be undefined. pad_top/pad_left are the begin pads,
// out_h/out_w the output size. Channels-last output, rounded to float16 values when `half`.
at::Tensor conv(const at::Tensor& x, const at::Tensor& filter, const at::Tensor& bias, const at::Tensor& residual,
                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations, int64_t pad_top,
                int64_t pad_left, int64_t out_h, int64_t out_w, bool relu, bool half);

}  // namespace softnpu::offline::direct
