// npu_moe_token_permute_with_routing_map(tokens, routing_map, *, probs=None, num_out_tokens=None, drop_and_pad=False)
// -> (permuted_tokens, permuted_probs, sorted_indices): Megatron's permute by a routing map [num_tokens, num_experts]
// (True: the token goes to the expert), expert by expert, tokens in order within an expert:
//   slots = [(t, e) for e in experts for t in tokens if routing_map[t, e]],
//   permuted_tokens[j] = tokens[t_j], permuted_probs[j] = probs[t_j, e_j], sorted_indices[j] = t_j (int32).
// The output has num_out_tokens rows (default num_tokens), rounded down to a multiple of num_tokens as torch_npu's
// shape function does; rows past the routed slots are zero. With drop_and_pad each expert gets capacity =
// num_out_tokens // num_experts slots: its routed tokens in order, then (padding) its unrouted tokens in order,
// truncated to the capacity. Without probs, permuted_probs is an empty tensor (torch_npu returns None).
// Backward: npu_moe_token_permute_with_routing_map_grad(permuted_token_out_grad, probs_grad, sorted_indices,
// routing_map, experts_num, tokens_num, drop_and_pad) -> (tokens_grad, probs_grad), each slot's gradient added to
// its token (and to its (token, expert) probability).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_moe_token_permute_with_routing_map(Tensor tokens, Tensor routing_map, *, Tensor? probs=None, "
        "int? num_out_tokens=None, bool drop_and_pad=False) -> (Tensor, Tensor, Tensor)");
  m.def("npu_moe_token_permute_with_routing_map_grad(Tensor permuted_token_out_grad, Tensor? probs_grad, "
        "Tensor sorted_indices, Tensor routing_map, SymInt experts_num, SymInt tokens_num, bool drop_and_pad) "
        "-> (Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_moe_token_permute_with_routing_map";

int64_t out_rows(const at::Tensor& routing_map, std::optional<int64_t> num_out_tokens, bool drop_and_pad) {
  const int64_t n = num_out_tokens.value_or(routing_map.size(0));
  const int64_t unit = routing_map.size(drop_and_pad ? 1 : 0);
  return unit == 0 ? 0 : n / unit * unit;
}

void check(const at::Tensor& tokens, const at::Tensor& routing_map, const std::optional<at::Tensor>& probs,
           std::optional<int64_t> num_out_tokens) {
  TORCH_CHECK(tokens.dim() == 2, OP, ": tokens must be 2-D [num_tokens, hidden], got ", tokens.sizes());
  TORCH_CHECK(routing_map.dim() == 2 && routing_map.size(0) == tokens.size(0), OP,
              ": routing_map must be [num_tokens, num_experts] with num_tokens = ", tokens.size(0), ", got ",
              routing_map.sizes());
  TORCH_CHECK(routing_map.scalar_type() == at::kBool || routing_map.scalar_type() == at::kChar, OP,
              ": routing_map must be bool or int8, got ", routing_map.scalar_type());
  TORCH_CHECK(at::isFloatingType(tokens.scalar_type()), OP, ": tokens must be floating point, got ",
              tokens.scalar_type());
  if (given(probs))
    TORCH_CHECK(probs->sizes() == routing_map.sizes(), OP, ": probs ", probs->sizes(),
                " must have routing_map's shape ", routing_map.sizes());
  TORCH_CHECK(!num_out_tokens || *num_out_tokens >= 0, OP, ": num_out_tokens must be non-negative, got ",
              *num_out_tokens);
}

// The (token, expert) of each output row, -1 for rows past the routed slots.
std::vector<std::pair<int64_t, int64_t>> slots(const at::Tensor& routing_map, int64_t rows, bool drop_and_pad) {
  const at::Tensor map = routing_map.to(at::kBool).contiguous();
  const bool* r = map.data_ptr<bool>();
  const int64_t T = map.size(0), E = map.size(1);
  std::vector<std::pair<int64_t, int64_t>> out;
  out.reserve(rows);
  if (drop_and_pad) {
    const int64_t capacity = E == 0 ? 0 : rows / E;
    for (int64_t e = 0; e < E; ++e) {
      int64_t taken = 0;
      for (int pass = 0; pass < 2 && taken < capacity; ++pass)
        for (int64_t t = 0; t < T && taken < capacity; ++t)
          if (r[t * E + e] == (pass == 0)) out.emplace_back(t, e), ++taken;
      for (; taken < capacity; ++taken) out.emplace_back(-1, -1);
    }
  } else {
    for (int64_t e = 0; e < E && static_cast<int64_t>(out.size()) < rows; ++e)
      for (int64_t t = 0; t < T && static_cast<int64_t>(out.size()) < rows; ++t)
        if (r[t * E + e]) out.emplace_back(t, e);
  }
  out.resize(rows, {-1, -1});
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> permute_meta(const at::Tensor& tokens, const at::Tensor& routing_map,
                                                            const std::optional<at::Tensor>& probs,
                                                            std::optional<int64_t> num_out_tokens,
                                                            bool drop_and_pad) {
  check(tokens, routing_map, probs, num_out_tokens);
  const int64_t rows = out_rows(routing_map, num_out_tokens, drop_and_pad);
  return {at::empty({rows, tokens.size(1)}, tokens.options()),
          given(probs) ? at::empty({rows}, probs->options()) : at::empty({0}, tokens.options()),
          at::empty({rows}, tokens.options().dtype(at::kInt))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> permute_cpu(const at::Tensor& tokens, const at::Tensor& routing_map,
                                                           const std::optional<at::Tensor>& probs,
                                                           std::optional<int64_t> num_out_tokens, bool drop_and_pad) {
  check(tokens, routing_map, probs, num_out_tokens);
  const int64_t rows = out_rows(routing_map, num_out_tokens, drop_and_pad);
  const auto s = slots(routing_map, rows, drop_and_pad);
  const at::Tensor src = tokens.contiguous();
  at::Tensor out = at::empty({rows, tokens.size(1)}, tokens.options());
  at::Tensor sorted = at::empty({rows}, tokens.options().dtype(at::kInt));
  int32_t* si = sorted.data_ptr<int32_t>();
  const int64_t row_bytes = tokens.size(1) * src.element_size();
  const char* in = static_cast<const char*>(src.const_data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const int64_t t = s[j].first;
      si[j] = static_cast<int32_t>(std::max<int64_t>(t, 0));
      if (t >= 0) std::memcpy(dst + j * row_bytes, in + t * row_bytes, row_bytes);
      else std::memset(dst + j * row_bytes, 0, row_bytes);
    }
  });
  at::Tensor pprobs = at::empty({0}, tokens.options());
  if (given(probs)) {
    const at::Tensor p = probs->to(at::kDouble).contiguous();
    const double* pp = p.data_ptr<double>();
    at::Tensor acc = at::empty({rows}, p.options());
    double* a = acc.data_ptr<double>();
    const int64_t E = routing_map.size(1);
    for (int64_t j = 0; j < rows; ++j) a[j] = s[j].first >= 0 ? pp[s[j].first * E + s[j].second] : 0.0;
    pprobs = acc.to(probs->scalar_type());
  }
  return {out, pprobs, sorted};
}

std::tuple<at::Tensor, at::Tensor> grad_meta(const at::Tensor& grad, const std::optional<at::Tensor>& probs_grad,
                                             const at::Tensor& sorted, const at::Tensor& routing_map,
                                             c10::SymInt experts_num, c10::SymInt tokens_num, bool drop_and_pad) {
  TORCH_CHECK(grad.dim() == 2 && sorted.dim() == 1 && grad.size(0) == sorted.size(0),
              "npu_moe_token_permute_with_routing_map_grad: permuted_token_out_grad ", grad.sizes(),
              " must be 2-D with one row per sorted_indices entry (", sorted.sizes(), ")");
  const int64_t T = tokens_num.expect_int(), E = experts_num.expect_int();
  return {at::empty({T, grad.size(1)}, grad.options()),
          given(probs_grad) ? at::empty({T, E}, probs_grad->options()) : at::empty({0}, grad.options())};
}

std::tuple<at::Tensor, at::Tensor> grad_cpu(const at::Tensor& grad, const std::optional<at::Tensor>& probs_grad,
                                            const at::Tensor& sorted, const at::Tensor& routing_map,
                                            c10::SymInt experts_num, c10::SymInt tokens_num, bool drop_and_pad) {
  grad_meta(grad, probs_grad, sorted, routing_map, experts_num, tokens_num, drop_and_pad);
  const int64_t T = tokens_num.expect_int(), E = experts_num.expect_int(), H = grad.size(1);
  const auto s = slots(routing_map, grad.size(0), drop_and_pad);
  // Per token, the slots holding it: each token's row is then summed by one thread.
  std::vector<std::vector<int64_t>> of_token(T);
  for (int64_t j = 0; j < static_cast<int64_t>(s.size()); ++j)
    if (s[j].first >= 0) of_token[s[j].first].push_back(j);
  const at::Tensor g = grad.contiguous();
  at::Tensor dtokens = at::empty({T, H}, grad.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "permute_routing_map_grad", [&] {
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    scalar_t* dp = dtokens.data_ptr<scalar_t>();
    at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(H);
      for (int64_t t = begin; t < end; ++t) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (const int64_t j : of_token[t])
          for (int64_t h = 0; h < H; ++h) acc[h] += static_cast<float>(gp[j * H + h]);
        for (int64_t h = 0; h < H; ++h) dp[t * H + h] = static_cast<scalar_t>(acc[h]);
      }
    });
  });
  at::Tensor dprobs = at::empty({0}, grad.options());
  if (given(probs_grad)) {
    const at::Tensor pg = probs_grad->to(at::kDouble).contiguous();
    at::Tensor acc = at::zeros({T, E}, pg.options());
    double* a = acc.data_ptr<double>();
    const double* p = pg.data_ptr<double>();
    for (int64_t j = 0; j < static_cast<int64_t>(s.size()); ++j)
      if (s[j].first >= 0) a[s[j].first * E + s[j].second] += p[j];
    dprobs = acc.to(probs_grad->scalar_type());
  }
  return {dtokens, dprobs};
}

using PermuteSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                  const std::optional<at::Tensor>&,
                                                                  std::optional<int64_t>, bool);
using GradSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const std::optional<at::Tensor>&,
                                                   const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt,
                                                   bool);

class PermuteFunction : public torch::autograd::Function<PermuteFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& tokens,
                                                const at::Tensor& routing_map, const std::optional<at::Tensor>& probs,
                                                std::optional<int64_t> num_out_tokens, bool drop_and_pad) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<PermuteSig>("npu::npu_moe_token_permute_with_routing_map");
    auto [out, pprobs, sorted] = op.call(tokens, routing_map, probs, num_out_tokens, drop_and_pad);
    ctx->save_for_backward({sorted, routing_map});
    ctx->saved_data["drop_and_pad"] = drop_and_pad;
    ctx->saved_data["tokens_num"] = tokens.size(0);
    ctx->saved_data["has_probs"] = given(probs);
    ctx->mark_non_differentiable({sorted});
    return {out, pprobs, sorted};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<GradSig>("npu::npu_moe_token_permute_with_routing_map_grad");
    const auto s = ctx->get_saved_variables();
    const bool has_probs = ctx->saved_data["has_probs"].toBool();
    std::optional<at::Tensor> pg;
    if (has_probs) pg = grads[1];
    auto [dtokens, dprobs] = op.call(grads[0], pg, s[0], s[1], s[1].size(1), ctx->saved_data["tokens_num"].toInt(),
                                     ctx->saved_data["drop_and_pad"].toBool());
    return {dtokens, at::Tensor(), has_probs ? dprobs : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> permute_autograd(const at::Tensor& tokens,
                                                                const at::Tensor& routing_map,
                                                                const std::optional<at::Tensor>& probs,
                                                                std::optional<int64_t> num_out_tokens,
                                                                bool drop_and_pad) {
  auto out = PermuteFunction::apply(tokens, routing_map, probs, num_out_tokens, drop_and_pad);
  return {out[0], out[1], out[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_moe_token_permute_with_routing_map", permute_meta);
  m.impl("npu_moe_token_permute_with_routing_map_grad", grad_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_moe_token_permute_with_routing_map", permute_cpu);
  m.impl("npu_moe_token_permute_with_routing_map_grad", grad_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_moe_token_permute_with_routing_map", permute_autograd); }

}  // namespace softnpu::fused
