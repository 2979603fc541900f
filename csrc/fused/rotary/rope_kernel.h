// The single-pass kernel of the rotary embeddings (npu_rotary_position_embedding, npu_apply_rotary_pos_emb):
//   y = x * cos + rotate(x) * sin, cos and sin broadcast to x,
// where rotate works within blocks of the last dim: each block's halves (a, b) become (-b, a). The block is the whole
// last dim for "half" (rotate_half, GPT-NeoX), half of it for "quarter", and 2 for "interleave" (GPT-J pairs).
// One pass over x, per row of the last dim in float32, in parallel over rows; y may be x itself (in place).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <vector>

namespace softnpu::fused {

// rotate(x)[d] in block-local terms: the partner index and its sign.
inline int64_t rope_partner(int64_t d, int64_t block, float* sign) {
  const int64_t i = d % block, half = block / 2;
  *sign = i < half ? -1.f : 1.f;
  return i < half ? d + half : d - half;
}

// y = x * cos + rotate(x) * sin; cos and sin must broadcast to x (their last dim x's).
inline void rope_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t block,
                         at::Tensor& y) {
  const int64_t D = x.size(-1);
  const int64_t rows = D == 0 ? 0 : x.numel() / D;
  const at::Tensor xc = x.contiguous();
  // cos/sin as float32 with x's shape by strides (0 on the broadcast dims): row r starts at offset(r).
  const at::Tensor c = cos.to(at::kFloat).contiguous().expand(x.sizes());
  const at::Tensor s = sin.to(at::kFloat).contiguous().expand(x.sizes());
  const auto sizes = x.sizes();
  const auto cstr = c.strides();
  const auto sstr = s.strides();
  const float* cp = c.const_data_ptr<float>();
  const float* sp = s.const_data_ptr<float>();
  const bool inplace = y.is_same(x) && x.is_contiguous();
  at::Tensor out = inplace || y.is_contiguous() ? y : at::empty_like(y, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rope_forward", [&] {
    const scalar_t* xp = xc.const_data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> row(D);
      for (int64_t r = begin; r < end; ++r) {
        int64_t rem = r, co = 0, so = 0;
        for (int64_t dim = static_cast<int64_t>(sizes.size()) - 2; dim >= 0; --dim) {
          const int64_t idx = rem % sizes[dim];
          rem /= sizes[dim];
          co += idx * cstr[dim];
          so += idx * sstr[dim];
        }
        const scalar_t* xr = xp + r * D;
        for (int64_t d = 0; d < D; ++d) {
          float sign;
          const int64_t p = rope_partner(d, block, &sign);
          row[d] = static_cast<float>(xr[d]) * cp[co + d] + sign * static_cast<float>(xr[p]) * sp[so + d];
        }
        scalar_t* yr = op + r * D;
        for (int64_t d = 0; d < D; ++d) yr[d] = static_cast<scalar_t>(row[d]);
      }
    });
  });
  if (!out.is_same(y)) y.copy_(out);
}

}  // namespace softnpu::fused
