// ai.onnx.ml ops on numeric tensors (the string-valued ones need string tensors, which ATen has not).
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

Kernel binarizer(const OpContext& ctx) {
  double threshold = ctx.attrs.f("threshold", 0.0f);
  return [threshold](const Tensors& in, Tensors& out) { out[0] = (in[0] > threshold).to(in[0].scalar_type()); };
}

// The indices select along the last axis; a 1-D input gives a [1, k] result.
Kernel array_feature_extractor(const OpContext&) {
  return [](const Tensors& in, Tensors& out) {
    auto x = in[0].dim() == 1 ? in[0].unsqueeze(0) : in[0];
    out[0] = at::index_select(x, -1, in[1].to(at::kLong).reshape({-1}));
  };
}

const bool registered = register_ops({
    {"ai.onnx.ml:Binarizer", binarizer},
    {"ai.onnx.ml:ArrayFeatureExtractor", array_feature_extractor},
});

}  // namespace

}  // namespace softnpu::offline
