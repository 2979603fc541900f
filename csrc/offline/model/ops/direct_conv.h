// Direct 2-D convolutions with filters packed once at load: the convolutions Winograd does not take (other filter
// sizes, strides, dilations, and the 3x3 ones on small maps). ATen's oneDNN convolution reorders its filter on every
// call (the whole of a 512x512x3x3 filter, 9.4 MB, per call at batch 1); this kernel reads it packed as it computes:
// six output positions by 64 output channels in registers, one input value broadcast against four filter vectors.
// A matrix product by a constant matrix (MatMul, Gemm) is the 1x1 convolution of its rows: the same kernel, with the
// matrix packed once at load as a filter, instead of a BLAS call that packs it on every call.
//
// The executor's layout pass (executor.cpp) packs the filters and matrices into npu device memory and marks the nodes;
// the Conv kernel (nn.cpp) runs `conv`, the MatMul and Gemm kernels `matmul`. AVX-512F, as Winograd's (winograd::available).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace softnpu::offline::direct {

// The activation the kernel applies to its output (the lowering's softnpu_activation).
enum class Activation { kNone, kRelu, kGelu, kGeluTanh, kTanh };

// Whether a convolution takes this kernel: a float [OC, C, KH, KW] filter with OC a multiple of 16, one group.
bool supported(const at::Tensor& weight, int64_t group);

// The packed filter: float [OC, KH, KW, C] in size, stored as OC/64 panels of [KH, KW, C, 64] (the last panel as
// wide as OC's remainder).
at::Tensor pack_filter(const at::Tensor& weight);

// act(conv(x, weight) + bias + residual) for a float NCHW-shaped x (any memory format), with the filter from
// pack_filter; bias and residual (of the output's shape) may be undefined. pad_top/pad_left are the begin pads,
// out_h/out_w the output size. Channels-last output, rounded to float16 values when `half`.
at::Tensor conv(const at::Tensor& x, const at::Tensor& filter, const at::Tensor& bias, const at::Tensor& residual,
                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations, int64_t pad_top,
                int64_t pad_left, int64_t out_h, int64_t out_w, Activation act, bool half);

// Whether a matrix product by this constant takes the kernel: a float [K, N] matrix (transposed: [N, K]) with N a
// multiple of 16.
bool matrix_supported(const at::Tensor& b, bool transposed);

// The matrix packed as the filter of a 1x1 convolution with N output channels: [N, 1, 1, K] in size.
at::Tensor pack_matrix(const at::Tensor& b, bool transposed);

// act(a x b + bias + residual) for a float a of [..., K] and b from pack_matrix: [..., N], rounded to float16 values
// when `half`. bias (N values) and residual (of the output's shape) may be undefined.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& packed, const at::Tensor& bias, const at::Tensor& residual,
                  Activation act, bool half);

}  // namespace softnpu::offline::direct
