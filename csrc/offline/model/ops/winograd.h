// Convolutions with 3x3 filters and stride 1 by Winograd's minimal filtering, F(m x m, 3 x 3) (Lavin and Gray, 2016):
// each m x m block of outputs is (m + 2)^2 products of transformed inputs and transformed filters instead of 9 m^2,
// the transforms being additions. resnet18's 3x3 convolutions are three quarters of its work; oneDNN's direct
// convolutions (ATen's) take longer than onnxruntime's whole model on them, F(4x4) takes 4x fewer multiplications.
//
// Conversion marks the convolutions with their tile size m (passes.cpp, `tile_size`); at load, the executor
// transforms their filters once, into npu device memory (executor.cpp), and the Conv kernel (nn.cpp) runs `conv`.
// The kernels are AVX-512F: on a host without it (`available`), every convolution stays ATen's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace softnpu::offline::winograd {

// Whether this host has the kernels (AVX-512F and FMA).
bool available();

// The output tile size m for a convolution with `positions` outputs per channel and run (batch x height x width):
// 4, 2, or 0 (not a Winograd case: another filter or stride, or too few positions to pay for reading the larger
// transformed filter).
int tile_size(const at::Tensor& weight, int64_t group, const std::vector<int64_t>& strides,
              const std::vector<int64_t>& dilations, int64_t positions);

// The transformed filter of a float [OC, C, 3, 3] weight: float [(m + 2)^2, OC, C], each element's [OC, C] block
// stored as OC/64 panels of [C, 64] (the last panel as wide as OC's remainder, a multiple of 16).
at::Tensor transform_filter(const at::Tensor& weight, int m);

// relu?(conv(x, weight) + bias + residual) for a float NCHW-shaped x (any memory format), with the filter from
// transform_filter; bias and residual (of the output's shape) may be undefined. pad_top/pad_left are the begin pads,
// out_h/out_w the output size (the end pads follow). Channels-last output, rounded to float16 values when `half` (an
// fp16 node's storage, in the same pass).
at::Tensor conv(const at::Tensor& x, const at::Tensor& filter, int m, const at::Tensor& bias,
                const at::Tensor& residual, int64_t pad_top, int64_t pad_left, int64_t out_h, int64_t out_w, bool relu,
                bool half);

}  // namespace softnpu::offline::winograd
