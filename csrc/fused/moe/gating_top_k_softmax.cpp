// npu_moe_gating_top_k_softmax(x, finished=None, k=1) -> (y, expert_idx, row_idx): the MoE gate as torch_npu
// documents it: y, expert_idx = topk(softmax(x, -1), k) (softmax in float32, y in x's dtype, expert_idx int32), and
// row_idx[i, j] = j * N + i for the N rows (x's leading dims flattened): where row i's j-th choice lands in the
// expert-major order npu_moe_init_routing takes. Rows marked True in finished (shape x.shape[:-1]) take no part:
// their experts are reported as num_experts (TensorRT-LLM's convention, which this kernel comes from). An inference
// op: no backward.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schema (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_moe_gating_top_k_softmax(Tensor x, Tensor? finished=None, int k=1) -> (Tensor, Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_moe_gating_top_k_softmax";

void check(const at::Tensor& x, const std::optional<at::Tensor>& finished, int64_t k) {
  TORCH_CHECK(x.dim() == 2 || x.dim() == 3, OP, ": the x shape support only 2d and 3d, got ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, OP,
              ": x must be float16, bfloat16 or float32, got ", x.scalar_type());
  TORCH_CHECK(k > 0 && k <= x.size(-1) && k <= 1024, OP, ": k must be in (0, min(", x.size(-1), ", 1024)], got ", k);
  if (given(finished))
    TORCH_CHECK(finished->scalar_type() == at::kBool && finished->sizes() == x.sizes().slice(0, x.dim() - 1), OP,
                ": finished must be bool of shape ", x.sizes().slice(0, x.dim() - 1), ", got ",
                finished->scalar_type(), " ", finished->sizes());
}

std::vector<int64_t> out_shape(const at::Tensor& x, int64_t k) {
  auto s = x.sizes().vec();
  s.back() = k;
  return s;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gating_meta(const at::Tensor& x,
                                                           const std::optional<at::Tensor>& finished, int64_t k) {
  check(x, finished, k);
  const auto s = out_shape(x, k);
  return {at::empty(s, x.options()), at::empty(s, x.options().dtype(at::kInt)),
          at::empty(s, x.options().dtype(at::kInt))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gating_cpu(const at::Tensor& x,
                                                          const std::optional<at::Tensor>& finished, int64_t k) {
  check(x, finished, k);
  const auto [values, indices] = at::topk(at::_softmax(x.to(at::kFloat), -1, false), k);
  at::Tensor expert = indices.to(at::kInt);
  if (given(finished)) expert.masked_fill_(finished->unsqueeze(-1), x.size(-1));
  const int64_t rows = x.numel() / x.size(-1);
  const at::Tensor row_idx =
      at::arange(rows * k, x.options().dtype(at::kInt)).view({k, rows}).t().reshape(out_shape(x, k));
  return {values.to(x.scalar_type()), expert, row_idx};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_moe_gating_top_k_softmax", gating_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("npu_moe_gating_top_k_softmax", gating_cpu); }

}  // namespace softnpu::fused
