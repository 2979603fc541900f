// Transformer ONNX ops: Attention (multi-head, grouped-query and multi-query, with masks, causal masking, KV cache,
// softcap), RotaryEmbedding, RMSNormalization, LinearAttention (the recurrent linear/gated/delta rules),
// CausalConvWithState, and ai.onnx.preview's FlexAttention with its modifier subgraphs. All are ATen math, so they run
// on meta tensors for inference as on data.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "model/ops/op.h"
#include "model/tensor.h"

namespace softnpu::offline {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// (B, S, H*D) -> (B, H, S, D)
at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// (B, H, S, D) -> (B, H*rep, S, D), each head repeated rep times in place (h0, h0, h1, h1, ...).
at::Tensor repeat_heads(const at::Tensor& x, int64_t rep) {
  if (rep == 1) return x;
  auto s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], rep, s[2], s[3]}).reshape({s[0], s[1] * rep, s[2], s[3]});
}

// An additive bias of 0 where `allowed` holds and -inf elsewhere.
at::Tensor additive(const at::Tensor& allowed, at::ScalarType type) {
  return at::zeros(allowed.sizes(), allowed.options().dtype(type)).masked_fill(allowed.logical_not(), -kInf);
}

Kernel attention(const OpContext& ctx) {
  bool causal = ctx.attrs.i("is_causal", 0);
  int64_t q_heads = ctx.attrs.i("q_num_heads", 0), kv_heads = ctx.attrs.i("kv_num_heads", 0);
  bool has_scale = ctx.attrs.has("scale");
  double scale_attr = ctx.attrs.f("scale", 1.0f);
  double softcap = ctx.attrs.f("softcap", 0.0f);
  int64_t mode = ctx.attrs.i("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) throw Unsupported("qk_matmul_output_mode " + std::to_string(mode) + " (0 to 3)");
  at::ScalarType softmax_type = at::ScalarType::Undefined;
  if (ctx.attrs.has("softmax_precision"))
    softmax_type = scalar_type(static_cast<int32_t>(ctx.attrs.i("softmax_precision", 1)));
  bool want_qk = ctx.has_output(3);
  return [=](const Tensors& in, Tensors& out) {
    auto at_input = [&](size_t i) { return i < in.size() ? in[i] : at::Tensor(); };
    const auto& Q = in[0];
    bool packed = Q.dim() == 3;
    at::Tensor q = Q, k = in[1], v = in[2];
    if (packed) {
      if (q_heads <= 0 || kv_heads <= 0) throw Unsupported("3-D inputs without q_num_heads and kv_num_heads");
      q = split_heads(q, q_heads);
      k = split_heads(k, kv_heads);
      v = split_heads(v, kv_heads);
    } else if (Q.dim() != 4) {
      throw Unsupported("Q of rank " + std::to_string(Q.dim()) + " (3 or 4)");
    }
    auto past_key = at_input(4), past_value = at_input(5), nonpad = at_input(6);
    int64_t past = past_key.defined() ? past_key.size(2) : 0;
    if (past_key.defined()) k = at::cat({past_key, k}, 2);
    if (past_value.defined()) v = at::cat({past_value, v}, 2);
    if (out.size() > 1) out[1] = k;
    if (out.size() > 2) out[2] = v;
    auto type = Q.scalar_type();
    int64_t sq = q.size(2), total = k.size(2);

    at::Tensor bias;
    auto mask = at_input(3);
    if (mask.defined()) {
      // A mask shorter than the keys leaves the rest out.
      if (mask.size(-1) < total) {
        std::vector<int64_t> pad(2 * mask.dim(), 0);
        pad[1] = total - mask.size(-1);
        mask = mask.scalar_type() == at::kBool ? at::constant_pad_nd(mask, pad, 0) : at::constant_pad_nd(mask, pad, -kInf);
      }
      bias = mask.scalar_type() == at::kBool ? additive(mask, type) : mask.to(type);
    }
    if (causal) {
      // Query i sees keys up to past + i (upper-left alignment on the new keys).
      auto allowed = at::ones({sq, total}, Q.options().dtype(at::kBool)).tril(past);
      auto c = additive(allowed, type);
      bias = bias.defined() ? bias + c : c;
    }
    if (nonpad.defined()) {
      auto keep = at::arange(total, nonpad.options().dtype(at::kLong)).lt(nonpad.to(at::kLong).unsqueeze(1));
      auto p = additive(keep, type).view({q.size(0), 1, 1, total});
      bias = bias.defined() ? bias + p : p;
    }

    int64_t heads = q.size(1);
    k = repeat_heads(k, heads / k.size(1));
    v = repeat_heads(v, heads / v.size(1));
    // Q and K are each scaled by sqrt(scale) before the product, against overflow in low precision.
    double s = std::sqrt(has_scale ? scale_attr : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
    auto qk = at::matmul(q * s, (k * s).transpose(-1, -2));
    if (softcap > 0) qk = at::tanh(qk / softcap) * softcap;
    at::Tensor qk_out = qk;
    auto scores = bias.defined() ? qk + bias : qk;
    if (mode == 2) qk_out = scores;
    if (softmax_type != at::ScalarType::Undefined) scores = scores.to(softmax_type);
    auto probs = at::softmax(scores, -1);
    if (mode == 3) qk_out = probs;
    auto y = at::matmul(probs, v.to(probs.scalar_type())).to(type);
    if (packed) y = y.transpose(1, 2).reshape({y.size(0), sq, -1});
    out[0] = y;
    if (want_qk) out[3] = qk_out.to(type);
  };
}

Kernel rotary_embedding(const OpContext& ctx) {
  bool interleaved = ctx.attrs.i("interleaved", 0);
  int64_t rotary_dim = ctx.attrs.i("rotary_embedding_dim", 0);
  int64_t num_heads = ctx.attrs.i("num_heads", 0);
  return [=](const Tensors& in, Tensors& out) {
    const auto& input = in[0];
    // Work in (B, S, H, D).
    at::Tensor x;
    if (input.dim() == 4) {
      x = input.transpose(1, 2);
    } else if (input.dim() == 3) {
      if (num_heads <= 0) throw Unsupported("a 3-D input without num_heads");
      x = input.view({input.size(0), input.size(1), num_heads, input.size(2) / num_heads});
    } else {
      throw Unsupported("input of rank " + std::to_string(input.dim()) + " (3 or 4)");
    }
    int64_t b = x.size(0), seq = x.size(1), d = x.size(3);
    int64_t rd = rotary_dim ? rotary_dim : d;
    auto cos = in[1], sin = in[2];
    if (in.size() > 3 && in[3].defined()) {
      auto pos = in[3].to(at::kLong).reshape({-1});
      cos = cos.index_select(0, pos).view({b, seq, -1});
      sin = sin.index_select(0, pos).view({b, seq, -1});
    }
    if (cos.size(-1) != rd / 2) throw Unsupported("cos_cache's last dim is not rotary_embedding_dim / 2");
    cos = cos.unsqueeze(2);
    sin = sin.unsqueeze(2);
    auto rot = x.slice(3, 0, rd), rest = x.slice(3, rd);
    auto x1 = interleaved ? rot.slice(3, 0, rd, 2) : rot.slice(3, 0, rd / 2);
    auto x2 = interleaved ? rot.slice(3, 1, rd, 2) : rot.slice(3, rd / 2, rd);
    auto real = cos * x1 - sin * x2, imag = sin * x1 + cos * x2;
    auto rotated = interleaved ? at::stack({real, imag}, -1).reshape(rot.sizes()) : at::cat({real, imag}, -1);
    auto y = at::cat({rotated, rest}, -1).to(input.scalar_type());
    out[0] = input.dim() == 4 ? y.transpose(1, 2).contiguous() : y.reshape(input.sizes());
  };
}

Kernel rms_normalization(const OpContext& ctx) {
  int64_t axis = ctx.attrs.i("axis", -1);
  double eps = ctx.attrs.f("epsilon", 1e-5f);
  int64_t stash = ctx.attrs.i("stash_type", 1);
  if (stash != 1) throw Unsupported("stash_type " + std::to_string(stash) + " (only 1, float)");
  return [axis, eps](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t a = normalize_axis(axis, x.dim());
    std::vector<int64_t> dims;
    for (int64_t d = a; d < x.dim(); ++d) dims.push_back(d);
    // stash_type 1: the statistics in float32 (double stays double).
    auto xf = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
    auto y = xf * at::rsqrt(xf.square().mean(dims, true) + eps) * in[1].to(xf.scalar_type());
    out[0] = y.to(x.scalar_type());
  };
}

Kernel linear_attention(const OpContext& ctx) {
  int64_t q_heads = ctx.attrs.required_i("q_num_heads"), kv_heads = ctx.attrs.required_i("kv_num_heads");
  double scale_attr = ctx.attrs.f("scale", 0.0f);
  auto rule = ctx.attrs.s("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    throw Unsupported("update_rule " + rule + " (linear, gated, delta or gated_delta)");
  if (q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads) throw Unsupported("q_num_heads is not a multiple of kv_num_heads");
  bool gated = rule == "gated" || rule == "gated_delta";
  bool delta = rule == "delta" || rule == "gated_delta";
  if (gated != ctx.has_input(4)) throw Unsupported("update_rule " + rule + (gated ? " needs" : " takes no") + " decay");
  if (delta != ctx.has_input(5)) throw Unsupported("update_rule " + rule + (delta ? " needs" : " takes no") + " beta");
  return [=](const Tensors& in, Tensors& out) {
    auto at_input = [&](size_t i) { return i < in.size() ? in[i] : at::Tensor(); };
    const auto& query = in[0];
    int64_t b = query.size(0), t = query.size(1);
    // The recurrence runs in float32 whatever the inputs' type.
    auto q = split_heads(query, q_heads).to(at::kFloat);
    auto k = split_heads(in[1], kv_heads).to(at::kFloat);
    auto v = split_heads(in[2], kv_heads).to(at::kFloat);
    int64_t dk = q.size(3), dv = v.size(3);
    auto past = at_input(3), decay = at_input(4), beta = at_input(5);
    at::Tensor g, bt;
    if (gated) {
      int64_t last = decay.size(-1);
      g = last == kv_heads ? decay.view({b, t, kv_heads, 1}).transpose(1, 2) : split_heads(decay, kv_heads);
      g = g.to(at::kFloat).exp();
    }
    if (delta) bt = beta.view({b, t, beta.size(-1), 1}).transpose(1, 2).to(at::kFloat);
    auto state = past.defined() ? past.to(at::kFloat) : at::zeros({b, kv_heads, dk, dv}, q.options());
    double scale = scale_attr != 0.0 ? scale_attr : 1.0 / std::sqrt(static_cast<double>(dk));
    std::vector<at::Tensor> steps;
    for (int64_t i = 0; i < t; ++i) {
      auto kt = k.select(2, i), vt = v.select(2, i);
      if (gated) state = state * g.select(2, i).unsqueeze(-1);
      if (delta) vt = bt.select(2, i) * (vt - at::matmul(kt.unsqueeze(-2), state).squeeze(-2));
      state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2);
      auto read = repeat_heads(state, q_heads / kv_heads);
      steps.push_back(at::matmul(q.select(2, i).unsqueeze(-2), read).squeeze(-2) * scale);
    }
    auto o = at::stack(steps, 2);  // (B, Hq, T, dv)
    out[0] = o.transpose(1, 2).reshape({b, t, q_heads * dv}).to(query.scalar_type());
    if (out.size() > 1) out[1] = state.to(past.defined() ? past.scalar_type() : query.scalar_type());
  };
}

Kernel causal_conv_with_state(const OpContext& ctx) {
  auto act = ctx.attrs.s("activation", "none");
  if (act != "none" && act != "silu" && act != "swish") throw Unsupported("activation " + act + " (none, silu or swish)");
  bool silu = act != "none";
  return [silu](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    const auto& w = in[1];
    int64_t channels = x.size(1), k = w.size(2);
    auto past = in.size() > 3 && in[3].defined() ? in[3] : at::zeros({x.size(0), channels, k - 1}, x.options());
    auto padded = at::cat({past, x}, 2);
    // Half convolution has no CPU kernel: float32, as the reference computes.
    auto type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor bias = in.size() > 2 && in[2].defined() ? in[2].to(type) : at::Tensor();
    auto y = at::conv1d(padded.to(type), w.to(type), bias, at::IntArrayRef{1}, at::IntArrayRef{0}, at::IntArrayRef{1}, channels);
    if (silu) y = at::silu(y);
    out[0] = y.to(x.scalar_type());
    if (out.size() > 1) out[1] = padded.slice(2, padded.size(2) - (k - 1)).contiguous();
  };
}

// A FlexAttention modifier (one tensor in, one out): its nodes' kernels built once from the op table, run in order.
class Subgraph {
 public:
  Subgraph(const onnx::GraphProto& g, int opset) : graph_(std::make_shared<onnx::GraphProto>(g)) {
    if (g.input_size() != 1 || g.output_size() != 1) throw Unsupported("a modifier subgraph with other than one input and one output");
    std::set<std::string> known{g.input(0).name()};
    for (const auto& init : g.initializer()) constants_[init.name()] = from_proto(init), known.insert(init.name());
    for (const auto& n : graph_->node()) {
      const OpDef* def = find_op(n);
      if (!def) throw Unsupported("the subgraph's " + n.op_type() + " has no softnpu kernel");
      for (const auto& i : n.input())
        if (!i.empty() && !known.count(i)) throw Unsupported("the subgraph reads '" + i + "' from the enclosing graph");
      known.insert(n.output().begin(), n.output().end());
      OpContext ctx{n, Attrs(n), opset, n.input_size(), n.output_size()};
      steps_.push_back({def, def->build(ctx)});
    }
    if (!known.count(g.output(0).name())) throw Unsupported("the subgraph's output is not produced");
  }

  at::Tensor operator()(const at::Tensor& x) const {
    std::map<std::string, at::Tensor> values = constants_;
    values[graph_->input(0).name()] = x;
    for (size_t s = 0; s < steps_.size(); ++s) {
      const auto& n = graph_->node(static_cast<int>(s));
      Tensors in(n.input_size()), out(n.output_size());
      for (int k = 0; k < n.input_size(); ++k) {
        if (n.input(k).empty()) continue;
        in[k] = values.at(n.input(k));
        // As conversion's inference: on meta tensors, only the inputs whose values a kernel reads stay real.
        if (x.is_meta() && !in[k].is_meta() && !is_value_input(*steps_[s].first, k)) in[k] = in[k].to(at::kMeta);
      }
      steps_[s].second(in, out);
      for (int k = 0; k < n.output_size(); ++k)
        if (!n.output(k).empty()) values[n.output(k)] = out[k];
    }
    return values.at(graph_->output(0).name());
  }

 private:
  std::shared_ptr<onnx::GraphProto> graph_;
  std::map<std::string, at::Tensor> constants_;
  std::vector<std::pair<const OpDef*, Kernel>> steps_;
};

Kernel flex_attention(const OpContext& ctx) {
  std::shared_ptr<Subgraph> score_mod, prob_mod;
  if (const auto* a = ctx.attrs.find("score_mod")) score_mod = std::make_shared<Subgraph>(a->g(), ctx.opset);
  if (const auto* a = ctx.attrs.find("prob_mod")) prob_mod = std::make_shared<Subgraph>(a->g(), ctx.opset);
  bool has_scale = ctx.attrs.has("scale");
  double scale_attr = ctx.attrs.f("scale", 1.0f);
  at::ScalarType softmax_type = at::ScalarType::Undefined;
  if (ctx.attrs.has("softmax_precision"))
    softmax_type = scalar_type(static_cast<int32_t>(ctx.attrs.i("softmax_precision", 1)));
  return [=](const Tensors& in, Tensors& out) {
    const auto& q = in[0];
    if (q.dim() != 4 || in[1].dim() != 4 || in[2].dim() != 4) throw Unsupported("Q, K and V must be rank 4");
    auto type = q.scalar_type();
    // Scores and probabilities in softmax_precision: float32, or double for double inputs.
    auto st = softmax_type != at::ScalarType::Undefined ? softmax_type : type == at::kDouble ? at::kDouble : at::kFloat;
    int64_t heads = q.size(1);
    auto k = repeat_heads(in[1], heads / in[1].size(1)), v = repeat_heads(in[2], heads / in[2].size(1));
    double s = std::sqrt(has_scale ? scale_attr : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
    auto scores = at::matmul(q * s, (k * s).transpose(-1, -2)).to(st);
    if (score_mod) scores = (*score_mod)(scores);
    auto probs = at::softmax(scores, -1);
    if (prob_mod) probs = (*prob_mod)(probs);
    out[0] = at::matmul(probs, v.to(probs.scalar_type())).to(type);
  };
}

const bool registered = register_ops({
    {"Attention", attention},
    {"RotaryEmbedding", rotary_embedding},
    {"RMSNormalization", rms_normalization},
    {"LinearAttention", linear_attention},
    {"CausalConvWithState", causal_conv_with_state},
    {"ai.onnx.preview:FlexAttention", flex_attention},
});

}  // namespace

}  // namespace softnpu::offline
