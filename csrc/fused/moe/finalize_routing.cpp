// npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
// export_for_source_row, drop_pad_mode=0, k=1) -> out: the MoE combine of torch_npu's documentation,
//   out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] * (rows[src_to_dst[i, k]] + bias[export_for_source_row[i, k]]),
// with src_to_dst[i, k] = expanded_src_to_dst_row[k * N + i] for drop_pad_mode 0 and 1 (column order) and [i * K + k]
// for 2 and 3 (row order); modes 1 and 3 (drop-pad) take rows as [E, C, H] and a -1 index as a dropped (zero) row.
// K is scales' second dim (k without scales). Computed in float32, out in the rows' dtype. An inference op.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schema (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_moe_finalize_routing(Tensor expanded_permuted_rows, Tensor? skip1, Tensor? skip2, Tensor? bias, "
        "Tensor? scales, Tensor expanded_src_to_dst_row, Tensor? export_for_source_row, int? drop_pad_mode=0, "
        "int? k=1) -> Tensor");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_moe_finalize_routing";

struct Dims {
  int64_t n, k, h, mode;
};

Dims check(const at::Tensor& rows, const std::optional<at::Tensor>& skip1, const std::optional<at::Tensor>& skip2,
           const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scales,
           const at::Tensor& src_to_dst, const std::optional<at::Tensor>& expert, std::optional<int64_t> drop_pad_mode,
           std::optional<int64_t> k_opt) {
  const int64_t mode = drop_pad_mode.value_or(0);
  TORCH_CHECK(mode >= 0 && mode <= 3, OP, ": drop_pad_mode must be in [0, 3], got ", mode);
  const bool drop_pad = mode == 1 || mode == 3;
  TORCH_CHECK(rows.dim() == (drop_pad ? 3 : 2), OP, ": expanded_permuted_rows must be ",
              drop_pad ? "[E, C, H] with drop_pad_mode 1 or 3" : "[NUM_ROWS * K, H]", ", got ", rows.sizes());
  TORCH_CHECK(src_to_dst.dim() == 1 && src_to_dst.scalar_type() == at::kInt, OP,
              ": expanded_src_to_dst_row must be 1-D int32, got ", src_to_dst.scalar_type(), " ", src_to_dst.sizes());
  const int64_t k = given(scales) ? scales->size(1) : k_opt.value_or(1);
  TORCH_CHECK(k > 0 && src_to_dst.size(0) % k == 0, OP, ": expanded_src_to_dst_row's length ", src_to_dst.size(0),
              " must be a multiple of K = ", k);
  const int64_t n = src_to_dst.size(0) / k, h = rows.size(-1);
  if (given(scales))
    TORCH_CHECK(scales->dim() == 2 && scales->size(0) == n, OP, ": scales must be [NUM_ROWS, K] = [", n, ", ", k,
                "], got ", scales->sizes());
  for (const auto* skip : {&skip1, &skip2})
    if (given(*skip))
      TORCH_CHECK(skip->value().sizes() == c10::IntArrayRef({n, h}), OP, ": skip1 and skip2 must be [", n, ", ", h,
                  "], got ", skip->value().sizes());
  if (given(bias)) {
    TORCH_CHECK(bias->dim() == 2 && bias->size(1) == h, OP, ": bias must be [E, H] with H = ", h, ", got ",
                bias->sizes());
    TORCH_CHECK(given(expert) && expert->sizes() == c10::IntArrayRef({n, k}), OP,
                ": bias needs export_for_source_row of shape [", n, ", ", k, "]");
  }
  return {n, k, h, mode};
}

at::Tensor finalize_meta(const at::Tensor& rows, const std::optional<at::Tensor>& skip1,
                         const std::optional<at::Tensor>& skip2, const std::optional<at::Tensor>& bias,
                         const std::optional<at::Tensor>& scales, const at::Tensor& src_to_dst,
                         const std::optional<at::Tensor>& expert, std::optional<int64_t> drop_pad_mode,
                         std::optional<int64_t> k) {
  const Dims d = check(rows, skip1, skip2, bias, scales, src_to_dst, expert, drop_pad_mode, k);
  return at::empty({d.n, d.h}, rows.options());
}

at::Tensor finalize_cpu(const at::Tensor& rows, const std::optional<at::Tensor>& skip1,
                        const std::optional<at::Tensor>& skip2, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& scales, const at::Tensor& src_to_dst,
                        const std::optional<at::Tensor>& expert, std::optional<int64_t> drop_pad_mode,
                        std::optional<int64_t> k) {
  const Dims d = check(rows, skip1, skip2, bias, scales, src_to_dst, expert, drop_pad_mode, k);
  const at::Tensor flat = rows.reshape({-1, d.h}).to(at::kFloat);
  const at::Tensor idx = (d.mode <= 1 ? src_to_dst.view({d.k, d.n}).t() : src_to_dst.view({d.n, d.k})).to(at::kLong);
  // [N, K, H]: each row's chosen expert outputs (dropped ones, index -1, as zeros).
  at::Tensor picked = flat.index_select(0, idx.clamp_min(0).reshape(-1)).view({d.n, d.k, d.h});
  picked.mul_(idx.ge(0).unsqueeze(-1));
  if (given(bias)) picked.add_(bias->to(at::kFloat).index_select(0, expert->reshape(-1).to(at::kLong))
                                   .view({d.n, d.k, d.h}));
  if (given(scales)) picked.mul_(scales->to(at::kFloat).unsqueeze(-1));
  at::Tensor out = picked.sum(1);
  if (given(skip1)) out.add_(skip1->to(at::kFloat));
  if (given(skip2)) out.add_(skip2->to(at::kFloat));
  return out.to(rows.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_moe_finalize_routing", finalize_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("npu_moe_finalize_routing", finalize_cpu); }

}  // namespace softnpu::fused
