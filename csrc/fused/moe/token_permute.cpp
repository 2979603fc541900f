// npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False) -> (permuted_tokens, sorted_indices)
// and its inverse npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
// restore_shape=None) -> unpermuted_tokens, as torch_npu (aclnnMoeTokenPermute / Unpermute) documents them:
//   order = stable argsort(flatten(indices)), sorted_indices = argsort(order) (int32: where each (token, k) pair
//   lands), permuted_tokens[sorted_indices[i]] = tokens[i // topK] for the first num_out_tokens positions;
//   unpermuted[t] = sum_k probs[t, k] * permuted_tokens[sorted_indices[t * topK + k]] (dropped positions add 0).
// So unpermute(permute(x)) with probs of ones is x * topK, and with one expert per token it is x.
//
// The kernels are single passes: a stable counting sort of the expert ids, then one row copy (permute) or one row
// accumulation in float32 (unpermute) per output row, in parallel over rows, where the composite (argsort, argsort,
// index_select; index_select, multiply, reshape, sum) makes three to four passes and as many temporaries.
// Backward: npu_moe_token_permute_grad (the unpermute of the gradient, without probs) and
// npu_moe_token_unpermute_grad (the gradient scattered back, probs' gradient the rows' dot products).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_moe_token_permute(Tensor tokens, Tensor indices, int? num_out_tokens=None, bool padded_mode=False) "
        "-> (Tensor, Tensor)");
  // The out= forms let the op path write the results straight into the device outputs (no copy).
  m.def("npu_moe_token_permute.out(Tensor tokens, Tensor indices, int? num_out_tokens=None, bool padded_mode=False, "
        "*, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))");
  m.def("npu_moe_token_unpermute.out(Tensor permuted_tokens, Tensor sorted_indices, Tensor? probs=None, "
        "bool padded_mode=False, int[]? restore_shape=None, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("npu_moe_token_permute_grad(Tensor tokens, Tensor grad_permuted_tokens, Tensor indices, "
        "Tensor sorted_indices, bool padded_mode=False) -> Tensor");
  m.def("npu_moe_token_unpermute(Tensor permuted_tokens, Tensor sorted_indices, Tensor? probs=None, "
        "bool padded_mode=False, int[]? restore_shape=None) -> Tensor");
  m.def("npu_moe_token_unpermute_grad(Tensor permuted_tokens, Tensor grad_unpermuted_tokens, Tensor sorted_indices, "
        "Tensor? probs=None, bool padded_mode=False, int[]? restore_shape=None) -> (Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

void check_floating(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, op,
              ": ", name, " must be float16, bfloat16 or float32, got ", t.scalar_type());
}

void check_index(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, op, ": ", name,
              " must be int32 or int64, got ", t.scalar_type());
}

void refuse_padded(bool padded_mode, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(!padded_mode, op, ": padded_mode=True is not supported (as on torch_npu)");
}

int64_t topk_of(const at::Tensor& indices) { return indices.dim() == 1 ? 1 : indices.size(1); }

int64_t out_rows(std::optional<int64_t> num_out_tokens, int64_t flat) {
  const int64_t v = num_out_tokens.value_or(0);
  return v > 0 ? std::min(v, flat) : std::max<int64_t>(v + flat, 0);
}

void check_permute(const at::Tensor& tokens, const at::Tensor& indices, bool padded_mode, const char* op) {
  refuse_padded(padded_mode, op);
  TORCH_CHECK(tokens.dim() == 2, op, ": The dims of input tokens should be 2 dimensional, but got ", tokens.dim(),
              "-dimensional.");
  TORCH_CHECK(indices.dim() == 1 || indices.dim() == 2, op,
              ": The dims of input indices should be 2 or 1 dimensional, but got ", indices.dim(), "-dimensional.");
  TORCH_CHECK(indices.size(0) == tokens.size(0), op, ": indices must have one row per token (", tokens.size(0),
              "), got ", indices.size(0));
  check_floating(tokens, op, "tokens");
  check_index(indices, op, "indices");
}

// sorted_indices (int32): the position of each flattened (token, k) in the stable order of its expert id.
at::Tensor sorted_positions(const at::Tensor& indices) {
  const at::Tensor flat = indices.reshape(-1).to(at::kLong).contiguous();
  const int64_t n = flat.numel();
  const int64_t* key = flat.data_ptr<int64_t>();
  at::Tensor pos = at::empty({n}, indices.options().dtype(at::kInt));
  int32_t* out = pos.data_ptr<int32_t>();
  if (n == 0) return pos;
  const auto [lo, hi] = std::minmax_element(key, key + n);
  const int64_t range = *hi - *lo + 1;
  if (range <= 4 * n + 1024) {  // counting sort: expert ids are a small range
    std::vector<int64_t> start(range + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++start[key[i] - *lo + 1];
    std::partial_sum(start.begin(), start.end(), start.begin());
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(start[key[i] - *lo]++);
  } else {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
    for (int64_t p = 0; p < n; ++p) out[order[p]] = static_cast<int32_t>(p);
  }
  return pos;
}

std::tuple<at::Tensor, at::Tensor> permute_meta(const at::Tensor& tokens, const at::Tensor& indices,
                                                std::optional<int64_t> num_out_tokens, bool padded_mode) {
  check_permute(tokens, indices, padded_mode, "npu_moe_token_permute");
  return {at::empty({out_rows(num_out_tokens, indices.numel()), tokens.size(1)}, tokens.options()),
          at::empty({indices.numel()}, indices.options().dtype(at::kInt))};
}

void permute_into(const at::Tensor& tokens, const at::Tensor& indices, at::Tensor& out, at::Tensor& sorted_out) {
  const int64_t rows = out.size(0), topk = topk_of(indices), hidden = tokens.size(1);
  at::Tensor sorted = sorted_positions(indices);
  if (sorted_out.is_contiguous()) {
    sorted_out.copy_(sorted);
    sorted = sorted_out;
  } else {
    sorted_out.copy_(sorted);
  }
  const at::Tensor src = tokens.contiguous();
  at::Tensor dst_t = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  const int32_t* pos = sorted.data_ptr<int32_t>();
  const int64_t row_bytes = hidden * src.element_size();
  const char* in = static_cast<const char*>(src.const_data_ptr());
  char* dst = static_cast<char*>(dst_t.data_ptr());
  at::parallel_for(0, sorted.numel(), 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      if (pos[i] < rows) std::memcpy(dst + pos[i] * row_bytes, in + (i / topk) * row_bytes, row_bytes);
  });
  if (!dst_t.is_same(out)) out.copy_(dst_t);
}

std::tuple<at::Tensor, at::Tensor> permute_cpu(const at::Tensor& tokens, const at::Tensor& indices,
                                               std::optional<int64_t> num_out_tokens, bool padded_mode) {
  check_permute(tokens, indices, padded_mode, "npu_moe_token_permute");
  at::Tensor out = at::empty({out_rows(num_out_tokens, indices.numel()), tokens.size(1)}, tokens.options());
  at::Tensor sorted = at::empty({indices.numel()}, indices.options().dtype(at::kInt));
  permute_into(tokens, indices, out, sorted);
  return {out, sorted};
}

std::tuple<at::Tensor&, at::Tensor&> permute_out(const at::Tensor& tokens, const at::Tensor& indices,
                                                 std::optional<int64_t> num_out_tokens, bool padded_mode,
                                                 at::Tensor& out0, at::Tensor& out1) {
  check_permute(tokens, indices, padded_mode, "npu_moe_token_permute");
  const int64_t rows = out_rows(num_out_tokens, indices.numel());
  TORCH_CHECK(out0.sizes() == c10::IntArrayRef({rows, tokens.size(1)}) && out0.scalar_type() == tokens.scalar_type() &&
                  out1.dim() == 1 && out1.size(0) == indices.numel() && out1.scalar_type() == at::kInt,
              "npu_moe_token_permute.out: out0 must be [", rows, ", ", tokens.size(1), "] of tokens' dtype and out1 [",
              indices.numel(), "] int32");
  permute_into(tokens, indices, out0, out1);
  return {out0, out1};
}

// out[t] = sum_k w[t, k] * src[sorted[t * topk + k]] (positions past src's rows add nothing), in float32.
void gather_sum(const at::Tensor& src, const at::Tensor& sorted, const at::Tensor& weights, int64_t topk,
                at::Tensor& out) {
  const at::Tensor s = src.contiguous();
  const at::Tensor idx = sorted.to(at::kLong).contiguous();
  const at::Tensor w = weights.defined() ? weights.to(at::kFloat).contiguous() : at::Tensor();
  const int64_t hidden = s.size(1), rows = s.size(0), tokens = out.size(0);
  const int64_t* ix = idx.data_ptr<int64_t>();
  const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
  for (int64_t i = 0; i < idx.numel(); ++i)
    TORCH_CHECK(ix[i] >= 0, "npu_moe_token_unpermute: sorted_indices must be non-negative, got ", ix[i]);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, s.scalar_type(), "gather_sum", [&] {
    const scalar_t* in = s.const_data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(hidden);
      for (int64_t t = begin; t < end; ++t) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t k = 0; k < topk; ++k) {
          const int64_t r = ix[t * topk + k];
          if (r >= rows) continue;
          const float c = wp ? wp[t * topk + k] : 1.f;
          const scalar_t* row = in + r * hidden;
          for (int64_t h = 0; h < hidden; ++h) acc[h] += c * static_cast<float>(row[h]);
        }
        for (int64_t h = 0; h < hidden; ++h) o[t * hidden + h] = static_cast<scalar_t>(acc[h]);
      }
    });
  });
}

void check_unpermute(const at::Tensor& permuted, const at::Tensor& sorted, const std::optional<at::Tensor>& probs,
                     bool padded_mode, const char* op) {
  refuse_padded(padded_mode, op);
  TORCH_CHECK(permuted.dim() == 2, op, ": The dims of input permuted_tokens should be 2 dimensional, but got ",
              permuted.dim(), "-dimensional.");
  TORCH_CHECK(sorted.dim() == 1, op, ": The dims of input sorted_indices should be 1 dimensional, but got ",
              sorted.dim(), "-dimensional.");
  check_floating(permuted, op, "permuted_tokens");
  check_index(sorted, op, "sorted_indices");
  if (given(probs)) {
    TORCH_CHECK(probs->dim() == 2, op, ": The dims of input probs should be 2 dimensional, but got ", probs->dim(),
                "-dimensional.");
    TORCH_CHECK(probs->numel() == sorted.numel(), op, ": probs ", probs->sizes(),
                " must hold one weight per entry of sorted_indices (", sorted.numel(), ")");
    check_floating(*probs, op, "probs");
  }
}

int64_t unpermuted_rows(const at::Tensor& sorted, const std::optional<at::Tensor>& probs) {
  return sorted.size(0) / (given(probs) ? probs->size(1) : 1);
}

at::Tensor unpermute_meta(const at::Tensor& permuted, const at::Tensor& sorted, const std::optional<at::Tensor>& probs,
                          bool padded_mode, at::OptionalIntArrayRef restore_shape) {
  check_unpermute(permuted, sorted, probs, padded_mode, "npu_moe_token_unpermute");
  return at::empty({unpermuted_rows(sorted, probs), permuted.size(1)}, permuted.options());
}

at::Tensor unpermute_cpu(const at::Tensor& permuted, const at::Tensor& sorted, const std::optional<at::Tensor>& probs,
                         bool padded_mode, at::OptionalIntArrayRef restore_shape) {
  check_unpermute(permuted, sorted, probs, padded_mode, "npu_moe_token_unpermute");
  at::Tensor out = at::empty({unpermuted_rows(sorted, probs), permuted.size(1)}, permuted.options());
  gather_sum(permuted, sorted, given(probs) ? *probs : at::Tensor(), given(probs) ? probs->size(1) : 1, out);
  return out;
}

at::Tensor& unpermute_out(const at::Tensor& permuted, const at::Tensor& sorted, const std::optional<at::Tensor>& probs,
                          bool padded_mode, at::OptionalIntArrayRef restore_shape, at::Tensor& out) {
  check_unpermute(permuted, sorted, probs, padded_mode, "npu_moe_token_unpermute");
  TORCH_CHECK(out.sizes() == c10::IntArrayRef({unpermuted_rows(sorted, probs), permuted.size(1)}) &&
                  out.scalar_type() == permuted.scalar_type() && out.is_contiguous(),
              "npu_moe_token_unpermute.out: out must be a contiguous [", unpermuted_rows(sorted, probs), ", ",
              permuted.size(1), "] tensor of permuted_tokens' dtype");
  gather_sum(permuted, sorted, given(probs) ? *probs : at::Tensor(), given(probs) ? probs->size(1) : 1, out);
  return out;
}

at::Tensor permute_grad_meta(const at::Tensor& tokens, const at::Tensor& grad, const at::Tensor& indices,
                             const at::Tensor& sorted, bool padded_mode) {
  check_permute(tokens, indices, padded_mode, "npu_moe_token_permute_grad");
  check_unpermute(grad, sorted, std::nullopt, padded_mode, "npu_moe_token_permute_grad");
  return at::empty(tokens.sizes(), grad.options());
}

at::Tensor permute_grad_cpu(const at::Tensor& tokens, const at::Tensor& grad, const at::Tensor& indices,
                            const at::Tensor& sorted, bool padded_mode) {
  check_permute(tokens, indices, padded_mode, "npu_moe_token_permute_grad");
  check_unpermute(grad, sorted, std::nullopt, padded_mode, "npu_moe_token_permute_grad");
  at::Tensor out = at::empty(tokens.sizes(), grad.options());
  gather_sum(grad, sorted, at::Tensor(), topk_of(indices), out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> unpermute_grad_meta(const at::Tensor& permuted, const at::Tensor& grad,
                                                       const at::Tensor& sorted,
                                                       const std::optional<at::Tensor>& probs, bool padded_mode,
                                                       at::OptionalIntArrayRef restore_shape) {
  check_unpermute(permuted, sorted, probs, padded_mode, "npu_moe_token_unpermute_grad");
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == unpermuted_rows(sorted, probs) && grad.size(1) == permuted.size(1),
              "npu_moe_token_unpermute_grad: grad_unpermuted_tokens ", grad.sizes(), " must be [",
              unpermuted_rows(sorted, probs), ", ", permuted.size(1), "]");
  return {at::empty(permuted.sizes(), grad.options()),
          given(probs) ? at::empty(probs->sizes(), probs->options()) : at::empty({0}, grad.options())};
}

// grad_permuted[sorted[i]] = grad[i // topk] * probs[i]; grad_probs[i] = <permuted[sorted[i]], grad[i // topk]>.
std::tuple<at::Tensor, at::Tensor> unpermute_grad_cpu(const at::Tensor& permuted, const at::Tensor& grad,
                                                      const at::Tensor& sorted, const std::optional<at::Tensor>& probs,
                                                      bool padded_mode, at::OptionalIntArrayRef restore_shape) {
  auto [dperm, dprobs] = unpermute_grad_meta(permuted, grad, sorted, probs, padded_mode, restore_shape);
  dperm = at::zeros(permuted.sizes(), grad.options());
  const bool with_probs = given(probs);
  const int64_t topk = with_probs ? probs->size(1) : 1;
  const at::Tensor g = grad.contiguous(), p = permuted.contiguous();
  const at::Tensor idx = sorted.to(at::kLong).contiguous();
  const at::Tensor w = with_probs ? probs->to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor dw = with_probs ? at::zeros({sorted.numel()}, grad.options().dtype(at::kFloat)) : at::Tensor();
  const int64_t hidden = g.size(1), rows = p.size(0);
  const int64_t* ix = idx.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "unpermute_grad", [&] {
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    scalar_t* dp = dperm.data_ptr<scalar_t>();
    const float* wp = with_probs ? w.data_ptr<float>() : nullptr;
    float* dwp = with_probs ? dw.data_ptr<float>() : nullptr;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.scalar_type(), "unpermute_grad_p", [&] {
      const scalar_t* pp = p.const_data_ptr<scalar_t>();
      // Each permuted row has one source (sorted is a permutation), so rows are written without races.
      at::parallel_for(0, idx.numel(), 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t r = ix[i];
          if (r >= rows) continue;
          const auto* gr = gp + (i / topk) * hidden;
          const float c = wp ? wp[i] : 1.f;
          float dot = 0.f;
          for (int64_t h = 0; h < hidden; ++h) {
            const float gv = static_cast<float>(gr[h]);
            dp[r * hidden + h] = static_cast<std::remove_pointer_t<decltype(dp)>>(gv * c);
            dot += gv * static_cast<float>(pp[r * hidden + h]);
          }
          if (dwp) dwp[i] = dot;
        }
      });
    });
  });
  if (with_probs) dprobs = dw.view(probs->sizes()).to(probs->scalar_type());
  return {dperm, dprobs};
}

using PermuteSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, std::optional<int64_t>,
                                                      bool);
using PermuteGradSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool);
using UnpermuteSig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool,
                                at::OptionalIntArrayRef);
using UnpermuteGradSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                            const std::optional<at::Tensor>&, bool,
                                                            at::OptionalIntArrayRef);

class PermuteFunction : public torch::autograd::Function<PermuteFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& tokens,
                                                const at::Tensor& indices, std::optional<int64_t> num_out_tokens,
                                                bool padded_mode) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<PermuteSig>("npu::npu_moe_token_permute");
    auto [out, sorted] = op.call(tokens, indices, num_out_tokens, padded_mode);
    ctx->save_for_backward({tokens, indices, sorted});
    ctx->saved_data["padded_mode"] = padded_mode;
    ctx->mark_non_differentiable({sorted});
    return {out, sorted};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<PermuteGradSig>("npu::npu_moe_token_permute_grad");
    const auto s = ctx->get_saved_variables();
    return {op.call(s[0], grads[0], s[1], s[2], ctx->saved_data["padded_mode"].toBool()), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

class UnpermuteFunction : public torch::autograd::Function<UnpermuteFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& permuted,
                                                const at::Tensor& sorted, const std::optional<at::Tensor>& probs,
                                                bool padded_mode, at::OptionalIntArrayRef restore_shape) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<UnpermuteSig>("npu::npu_moe_token_unpermute");
    at::Tensor out = op.call(permuted, sorted, probs, padded_mode, restore_shape);
    ctx->save_for_backward({permuted, sorted, probs.value_or(at::Tensor())});
    ctx->saved_data["padded_mode"] = padded_mode;
    if (restore_shape) ctx->saved_data["restore_shape"] = restore_shape->vec();
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<UnpermuteGradSig>("npu::npu_moe_token_unpermute_grad");
    const auto s = ctx->get_saved_variables();
    std::optional<at::Tensor> probs;
    if (s[2].defined()) probs = s[2];
    std::optional<std::vector<int64_t>> restore;
    if (ctx->saved_data.count("restore_shape")) restore = ctx->saved_data["restore_shape"].toIntVector();
    auto [dperm, dprobs] = op.call(s[0], grads[0], s[1], probs, ctx->saved_data["padded_mode"].toBool(),
                                   restore ? at::OptionalIntArrayRef(*restore) : at::OptionalIntArrayRef());
    return {dperm, at::Tensor(), probs ? dprobs : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> permute_autograd(const at::Tensor& tokens, const at::Tensor& indices,
                                                    std::optional<int64_t> num_out_tokens, bool padded_mode) {
  auto out = PermuteFunction::apply(tokens, indices, num_out_tokens, padded_mode);
  return {out[0], out[1]};
}

at::Tensor unpermute_autograd(const at::Tensor& permuted, const at::Tensor& sorted,
                              const std::optional<at::Tensor>& probs, bool padded_mode,
                              at::OptionalIntArrayRef restore_shape) {
  return UnpermuteFunction::apply(permuted, sorted, probs, padded_mode, restore_shape)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_moe_token_permute", permute_meta);
  m.impl("npu_moe_token_permute_grad", permute_grad_meta);
  m.impl("npu_moe_token_unpermute", unpermute_meta);
  m.impl("npu_moe_token_unpermute_grad", unpermute_grad_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_moe_token_permute", permute_cpu);
  m.impl("npu_moe_token_permute.out", permute_out);
  m.impl("npu_moe_token_permute_grad", permute_grad_cpu);
  m.impl("npu_moe_token_unpermute", unpermute_cpu);
  m.impl("npu_moe_token_unpermute.out", unpermute_out);
  m.impl("npu_moe_token_unpermute_grad", unpermute_grad_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) {
  m.impl("npu_moe_token_permute", permute_autograd);
  m.impl("npu_moe_token_unpermute", unpermute_autograd);
}

}  // namespace softnpu::fused
