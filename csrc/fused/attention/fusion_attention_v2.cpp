// npu_fusion_attention_v2: MindSpeed's entry to torch_npu's fused attention (its --use-fusion-attn-v2), which adds to
// npu_fusion_attention the place of pse (pse_type) and MLA's rope inputs. It is composed of npu_fusion_attention
// (a CompositeImplicitAutograd kernel), so its autograd, Meta shapes and npu launch are npu_fusion_attention's:
//   pse_type 1:  Softmax(Mask(scale * (pse + query @ key^T)))   (npu_fusion_attention's formula)
//   pse_type 0:  Softmax(Mask(scale * query @ key^T + pse))     (pse / scale given to npu_fusion_attention)
//   query_rope / key_rope: the scores gain query_rope @ key_rope^T (concatenated to query and key along D; value
//   padded with zero columns to key's width and attention_out cut back to value's).
// pse_type 2 and 3 (ALiBi generated inside from slopes, with q_start_idx / kv_start_idx), sink, dropout_mask and a
// softmax_layout other than the default raise a RuntimeError. seed and offset are accepted and ignored: the dropout
// draws from the query device's generator, as npu_fusion_attention's does.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_fusion_attention_v2(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, *, "
        "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, Tensor? query_rope=None, "
        "Tensor? key_rope=None, float scale=1., float keep_prob=1., int pre_tokens=2147483647, "
        "int next_tokens=2147483647, int inner_precise=0, int[]? prefix=None, int[]? actual_seq_qlen=None, "
        "int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, bool sync=False, "
        "int pse_type=1, int[]? q_start_idx=None, int[]? kv_start_idx=None, str softmax_layout=\"\", "
        "Tensor? sink=None, Tensor? dropout_mask=None, int seed=0, int offset=0) "
        "-> (Tensor, Tensor, Tensor, Tensor, int, int, int)");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_fusion_attention_v2";
using Opt = std::optional<at::Tensor>;
using Public = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, int64_t, int64_t, int64_t>;
using PublicSig = Public(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, c10::string_view,
                         const Opt&, const Opt&, const Opt&, double, double, int64_t, int64_t, int64_t,
                         c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, int64_t, bool,
                         bool);

// A rope part joined to a query-like tensor along its head dim (the last dim, or H's per-head slices for BSH/SBH).
at::Tensor join(const at::Tensor& t, const at::Tensor& rope, c10::string_view layout, int64_t heads) {
  if (layout != "BSH" && layout != "SBH") return at::cat({t, rope}, -1);
  return at::cat({t.unflatten(-1, {heads, -1}), rope.unflatten(-1, {heads, -1})}, -1).flatten(-2);
}

// Value widened with `extra` zero columns per head, and attention_out's extra columns dropped.
at::Tensor widen(const at::Tensor& v, int64_t extra, c10::string_view layout, int64_t heads) {
  if (layout != "BSH" && layout != "SBH") return at::constant_pad_nd(v, {0, extra});
  return at::constant_pad_nd(v.unflatten(-1, {heads, -1}), {0, extra}).flatten(-2);
}

at::Tensor narrow_out(const at::Tensor& out, int64_t dv, c10::string_view layout, int64_t heads) {
  if (layout != "BSH" && layout != "SBH") return out.narrow(-1, 0, dv);
  return out.unflatten(-1, {heads, -1}).narrow(-1, 0, dv).flatten(-2);
}

Public attention_v2(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t head_num,
                    c10::string_view input_layout, const Opt& pse, const Opt& padding_mask, const Opt& atten_mask,
                    const Opt& query_rope, const Opt& key_rope, double scale, double keep_prob, int64_t pre_tokens,
                    int64_t next_tokens, int64_t inner_precise, c10::OptionalIntArrayRef prefix,
                    c10::OptionalIntArrayRef actual_seq_qlen, c10::OptionalIntArrayRef actual_seq_kvlen,
                    int64_t sparse_mode, bool gen_mask_parallel, bool sync, int64_t pse_type,
                    c10::OptionalIntArrayRef q_start_idx, c10::OptionalIntArrayRef kv_start_idx,
                    c10::string_view softmax_layout, const Opt& sink, const Opt& dropout_mask, int64_t seed,
                    int64_t offset) {
  TORCH_CHECK(pse_type == 0 || pse_type == 1, kOp, ": pse_type ", pse_type,
              " (ALiBi generated from slopes) is not supported here; pse_type 0 and 1 are");
  TORCH_CHECK(!q_start_idx.has_value() && !kv_start_idx.has_value(), kOp,
              ": q_start_idx / kv_start_idx (for pse_type 2 and 3) are not supported here");
  TORCH_CHECK(softmax_layout.empty(), kOp, ": softmax_layout '", softmax_layout, "' is not supported here");
  TORCH_CHECK(!given(sink), kOp, ": sink is not supported here");
  TORCH_CHECK(!given(dropout_mask), kOp, ": dropout_mask is not supported here (the dropout mask is generated)");
  TORCH_CHECK(given(query_rope) == given(key_rope), kOp, ": query_rope and key_rope go together");
  Opt p = pse;
  if (given(pse) && pse_type == 0) {
    TORCH_CHECK(scale != 0., kOp, ": pse_type 0 needs a non-zero scale");
    p = (pse->to(at::kFloat) / scale).to(pse->scalar_type());  // scale * (qk + pse / scale) = scale * qk + pse
  }
  at::Tensor q = query, k = key, v = value;
  int64_t dv = 0;
  const int64_t heads_kv =
      (input_layout == "BSH" || input_layout == "SBH") && query.dim() == 3 && key.dim() == 3 && query.size(2) > 0
          ? key.size(2) / (query.size(2) / head_num)
          : 0;
  if (given(query_rope)) {
    const bool hidden = input_layout == "BSH" || input_layout == "SBH";
    q = join(query, *query_rope, input_layout, head_num);
    k = join(key, *key_rope, input_layout, heads_kv);
    const int64_t dk = hidden ? k.size(-1) / heads_kv : k.size(-1);
    dv = hidden ? value.size(-1) / heads_kv : value.size(-1);
    TORCH_CHECK(dv <= dk, kOp, ": value's head size ", dv, " must not exceed key's with its rope part, ", dk);
    v = widen(value, dk - dv, input_layout, heads_kv);
  }
  static const auto op = npu_op<PublicSig>("npu::npu_fusion_attention");
  auto [out, max, sum, softmax_out, s, o, numels] =
      op.call(q, k, v, head_num, input_layout, p, padding_mask, atten_mask, scale, keep_prob, pre_tokens,
              next_tokens, inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen, sparse_mode, gen_mask_parallel,
              sync);
  if (given(query_rope)) out = narrow_out(out, dv, input_layout, head_num);
  return {out, max, sum, softmax_out, s, o, numels};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) { m.impl("npu_fusion_attention_v2", attention_v2); }

}  // namespace softnpu::fused
