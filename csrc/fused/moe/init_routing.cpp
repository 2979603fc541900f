// npu_moe_init_routing(x, row_idx, expert_idx, active_num) -> (expanded_x, expanded_row_idx, expanded_expert_idx):
// the MoE dispatch of torch_npu's documentation (its numpy equivalent): with perm the stable argsort of the flattened
// expert_idx [N, k], expanded_expert_idx = the sorted experts, src = row_idx.flatten()[perm] (the source row of each
// expanded row), expanded_row_idx[src[i]] = i, and expanded_x[i] = x[src[i] % N] for the first min(active_num, N) * k
// rows. Index outputs int32. An inference op: no backward.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schema (argument names, order, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_moe_init_routing(Tensor x, Tensor row_idx, Tensor expert_idx, int active_num) "
        "-> (Tensor, Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_moe_init_routing";

void check(const at::Tensor& x, const at::Tensor& row_idx, const at::Tensor& expert_idx, int64_t active_num) {
  TORCH_CHECK(x.dim() == 2, OP, ": x must be 2-D [num_rows, hidden], got ", x.sizes());
  TORCH_CHECK(row_idx.dim() == 2 && row_idx.size(0) == x.size(0) && expert_idx.sizes() == row_idx.sizes(), OP,
              ": row_idx and expert_idx must be [num_rows, k] with num_rows = ", x.size(0), ", got ",
              row_idx.sizes(), " and ", expert_idx.sizes());
  TORCH_CHECK(row_idx.scalar_type() == at::kInt && expert_idx.scalar_type() == at::kInt, OP,
              ": row_idx and expert_idx must be int32, got ", row_idx.scalar_type(), " and ",
              expert_idx.scalar_type());
  TORCH_CHECK(active_num >= 0, OP, ": active_num must be non-negative, got ", active_num);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> init_routing_meta(const at::Tensor& x, const at::Tensor& row_idx,
                                                                 const at::Tensor& expert_idx, int64_t active_num) {
  check(x, row_idx, expert_idx, active_num);
  const int64_t n = x.size(0), k = row_idx.size(1);
  return {at::empty({std::min(n, active_num) * k, x.size(1)}, x.options()), at::empty({n * k}, row_idx.options()),
          at::empty({n * k}, row_idx.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> init_routing_cpu(const at::Tensor& x, const at::Tensor& row_idx,
                                                                const at::Tensor& expert_idx, int64_t active_num) {
  check(x, row_idx, expert_idx, active_num);
  const int64_t n = x.size(0), k = row_idx.size(1);
  const auto [sorted, perm] = at::sort(expert_idx.reshape(-1), /*stable=*/true, 0, false);
  const at::Tensor src = row_idx.reshape(-1).index_select(0, perm).to(at::kLong);
  at::Tensor expanded_row_idx = at::empty({n * k}, row_idx.options());
  expanded_row_idx.index_put_({src}, at::arange(n * k, row_idx.options()));
  const int64_t active = std::min(n, active_num) * k;
  at::Tensor expanded_x = x.index_select(0, src.narrow(0, 0, active).remainder(n));
  return {expanded_x, expanded_row_idx, sorted};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_moe_init_routing", init_routing_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("npu_moe_init_routing", init_routing_cpu); }

}  // namespace softnpu::fused
