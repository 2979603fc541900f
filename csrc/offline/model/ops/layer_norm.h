// LayerNormalization over the last axis of a float tensor, one row at a time in registers (AVX-512F): ATen's
// native_layer_norm also allocates and writes the mean and the inverse deviation, which ONNX's single-output node
// never reads, and on the tiny BERT's 64 x 128 rows took 10-13 us per call where this takes a few.
#pragma once

#include <ATen/core/Tensor.h>

namespace softnpu::offline::layer_norm {

// Whether `normalize` takes it: a float x normalized over its last dim (of n values), float scale and bias (bias may be
// undefined) of n values, on a host with AVX-512F.
bool applies(const at::Tensor& x, int64_t axis, const at::Tensor& scale, const at::Tensor& bias);

// (x - mean) / sqrt(var + eps) * scale + bias over each row of the last dim.
at::Tensor normalize(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& bias, double eps);

}  // namespace softnpu::offline::layer_norm
