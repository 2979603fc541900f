// 2-D max pooling of channels-last float activations, the layout softnpu's convolutions write. ATen's max_pool2d
// computes and stores an int64 index per output beside the value (it is max_pool2d_with_indices underneath): on
// resnet18's pooling at batch 1, 0.33 ms against onnxruntime's 0.12 ms. AVX-512F, as the convolutions
// (winograd::available); other inputs keep ATen's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace softnpu::offline::pooling {

// Whether max_pool2d takes x: a float, 4-D, channels-last x with channels a multiple of 16, on a host with AVX-512F.
bool supported(const at::Tensor& x);

// ATen's max_pool2d without dilation (symmetric pads of at most half the kernel, ceil_mode as ATen's): NaN in a
// window gives NaN. Channels-last output.
at::Tensor max_pool2d(const at::Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                      const std::vector<int64_t>& pads, bool ceil_mode);

}  // namespace softnpu::offline::pooling
