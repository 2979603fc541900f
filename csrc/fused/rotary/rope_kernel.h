// The kernel of the rotary embeddings (npu_rotary_position_embedding, npu_apply_rotary_pos_emb):
//   y = x * cos + rotate(x) * sin, cos and sin broadcast to x,
// where rotate works within blocks of the last dim: each block's halves (a, b) become (-b, a). The block is the whole
// last dim for "half" (rotate_half, GPT-NeoX), half of it for "quarter", and 2 for "interleave" (GPT-J pairs).
// y may be x itself (in place).
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace softnpu::fused {

// rotate(x)[d] in block-local terms: the partner index and its sign.
inline int64_t rope_partner(int64_t d, int64_t block, float* sign) {
  const int64_t i = d % block, half = block / 2;
  *sign = i < half ? -1.f : 1.f;
  return i < half ? d + half : d - half;
}

// y = x * cos + rotate(x) * sin; cos and sin must broadcast to x (their last dim x's). With (a, b) the blocks'
// halves of x (views, no copies): y_a = a * cos_a - b * sin_a, y_b = b * cos_b + a * sin_b, four passes over half of
// x by ATen's vectorized kernels into y's own halves, where the composite allocates five temporaries (chunk/cat,
// negation, two products, the sum). In place (y is x) the first half goes through a temporary, as both read a.
inline void rope_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t block,
                         at::Tensor& y) {
  const int64_t D = x.size(-1);
  const std::vector<int64_t> split{D / block, 2, block / 2};
  const auto halves = [&](const at::Tensor& t) {
    const at::Tensor v = t.unflatten(-1, split);
    return std::make_pair(v.select(-2, 0), v.select(-2, 1));
  };
  const auto [xa, xb] = halves(x);
  const auto [ca, cb] = halves(cos);
  const auto [sa, sb] = halves(sin);
  const bool inplace = y.is_same(x);
  auto [ya, yb] = halves(y);
  at::Tensor first = inplace ? at::empty(xa.sizes(), x.options()) : ya;
  at::mul_out(first, xa, ca);
  first.addcmul_(xb, sa, -1);
  at::mul_out(yb, xb, cb);
  yb.addcmul_(xa, sb);
  if (inplace) ya.copy_(first);
}

}  // namespace softnpu::fused
