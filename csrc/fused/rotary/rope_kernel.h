// The kernels of the rotary embeddings (npu_rotary_mul, npu_rotary_position_embedding, npu_apply_rotary_pos_emb):
//   forward   y  = x * cos + rotate(x) * sin,
//   backward  dx = g * cos + rotate^T(g * sin), dcos = sum(g * x), dsin = sum(g * rotate(x)) over the dims cos and
//             sin are broadcast along,
// cos and sin broadcast to x, where rotate works within blocks of the last dim: each block's halves (a, b) become
// (-b, a). The block is the whole last dim for "half" (rotate_half, GPT-NeoX, LLaMA), half of it for "quarter", and 2
// for "interleave" (GPT-J pairs).
//
// One pass over memory: each row of x (its last dim) is read once, with its cos/sin row found through the broadcast,
// and its result written where the caller points (the device output, or x itself in place), in vectors of the compute
// type (the row kernels in rope_kernel.cc), in parallel over rows; the composite makes five passes (chunk/cat,
// negation, two products, the sum) with a temporary each. The table gradients are accumulated per table row, in
// parallel over table rows, so no two threads add into one row and the sums do not depend on the number of threads.
#pragma once

#include <ATen/ATen.h>

#include "fused/cpu_kernels.h"

namespace softnpu::fused {

// cos or sin as the kernels read them: x's dtype, last dim x's, contiguous (no copy when it is so already).
inline at::Tensor rope_table(const at::Tensor& t, const at::Tensor& x) {
  auto shape = t.sizes().vec();
  shape.back() = x.size(-1);
  return t.to(x.scalar_type()).expand(shape).contiguous();
}

// y = x * cos + rotate(x) * sin (cos and sin broadcast to x, their last dim x's or 1); y has x's shape and dtype, and
// may be x (in place).
inline void rope_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t block,
                         const at::Tensor& y) {
  if (x.numel() == 0) return;
  const bool direct = y.is_contiguous() && (x.is_contiguous() || y.is_same(x));
  const at::Tensor out = direct ? y : at::empty(x.sizes(), x.options());
  const at::Tensor xc = x.contiguous(), c = rope_table(cos, x), s = rope_table(sin, x);
  SOFTNPU_CPU_KERNEL(rope_forward, x.scalar_type(), RopeRows(x.sizes(), c.sizes()), block / 2, xc.const_data_ptr(),
                     c.const_data_ptr(), s.const_data_ptr(), out.data_ptr());
  if (!direct) y.copy_(out);
}

// dx (grad's shape and dtype) and, with x, dcos and dsin (cos's and sin's shapes and dtypes; cos and sin of one
// shape): the transpose of rope_forward and the table gradients, in one pass over grad and x.
inline void rope_backward(const at::Tensor& grad, const at::Tensor& cos, const at::Tensor& sin,
                          const std::optional<at::Tensor>& x, int64_t block, const at::Tensor& dx,
                          const at::Tensor& dcos, const at::Tensor& dsin) {
  const bool tables = x.has_value() && x->defined();
  if (grad.numel() == 0) {
    if (tables) {
      dcos.zero_();
      dsin.zero_();
    }
    return;
  }
  const bool direct = dx.is_contiguous();
  const at::Tensor out = direct ? dx : at::empty(grad.sizes(), grad.options());
  const at::Tensor g = grad.contiguous(), c = rope_table(cos, grad), s = rope_table(sin, grad);
  const at::Tensor xc = tables ? x->to(grad.scalar_type()).contiguous() : at::Tensor();
  const RopeRows rows(grad.sizes(), c.sizes());
  const auto acc = at::toOpMathType(grad.scalar_type());
  const at::Tensor sums = tables ? at::zeros({2, rows.table_rows, rows.D}, grad.options().dtype(acc)) : at::Tensor();
  SOFTNPU_CPU_KERNEL(rope_backward, grad.scalar_type(), rows, block / 2, g.const_data_ptr(),
                     tables ? xc.const_data_ptr() : nullptr, c.const_data_ptr(), s.const_data_ptr(), out.data_ptr(),
                     tables ? sums[0].data_ptr() : nullptr, tables ? sums[1].data_ptr() : nullptr);
  if (tables) {
    dcos.copy_(sums[0].view(c.sizes()).sum_to_size(cos.sizes()));
    dsin.copy_(sums[1].view(s.sizes()).sum_to_size(sin.sizes()));
  }
  if (!direct) dx.copy_(out);
}

}  // namespace softnpu::fused
