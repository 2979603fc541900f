// npu_fusion_attention and npu_fusion_attention_grad: torch_npu's fused attention (FlashAttentionScore),
//   attention_out = Dropout(Softmax(Mask(scale * (query @ key^T + pse), atten_mask)), keep_prob) @ value,
// over the layouts BSH, SBH, BSND, BNSD and TND (sequences of varying lengths packed along T, delimited by the
// cumulative lengths actual_seq_qlen / actual_seq_kvlen), with grouped key/value heads (N2 dividing N1).
//
// The computation is composed of ATen ops in float32 (float64 for float64 inputs) and registered as the CPU kernel
// of _npu_fusion_attention (and of npu_fusion_attention_grad), so on npu both take the generic op path: Meta shape
// inference, allocation, a launch on the current stream. npu_fusion_attention itself returns ints (seed, offset,
// numels), which an op on the generic path could only produce by waiting for the device: it draws the dropout seed
// and offset on the host from the device's generator and launches _npu_fusion_attention. The dropout mask is a
// function of (seed, offset), so the backward regenerates it instead of storing it. See README.md for what each
// argument does here.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cstring>
#include <limits>
#include <mutex>

#include "backend/generator.h"
#include "backend/graph.h"
#include "fused/common.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
        "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., float keep_prob=1., "
        "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, int[]? prefix=None, "
        "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
        "bool sync=False) -> (Tensor, Tensor, Tensor, Tensor, int, int, int)");
  // The kernel of npu_fusion_attention: tensors only, so it launches on the stream like any op (an op returning
  // ints would have to wait for the device). npu_fusion_attention draws the dropout seed and offset on the host.
  m.def("_npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
        "Tensor? pse, Tensor? padding_mask, Tensor? atten_mask, float scale, float keep_prob, int pre_tockens, "
        "int next_tockens, int inner_precise, int[]? prefix, int[]? actual_seq_qlen, int[]? actual_seq_kvlen, "
        "int sparse_mode, int seed, int offset, Tensor? replay_rng=None) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
        "str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
        "Tensor? softmax_max=None, Tensor? softmax_sum=None, Tensor? softmax_in=None, Tensor? attention_in=None, "
        "float scale_value=1., float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
        "int inner_precise=0, int seed=0, int offset=0, int numels=0, int[]? prefix=None, "
        "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
        "bool sync=False) -> (Tensor, Tensor, Tensor, Tensor)");
  // npu_fusion_attention_grad with the replay_rng of a captured forward (see below), for the autograd backward.
  m.def("_npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
        "str input_layout, Tensor? pse, Tensor? padding_mask, Tensor? atten_mask, Tensor? softmax_max, "
        "Tensor? softmax_sum, Tensor? softmax_in, Tensor? attention_in, float scale_value, float keep_prob, "
        "int pre_tockens, int next_tockens, int inner_precise, int seed, int offset, int numels, int[]? prefix, "
        "int[]? actual_seq_qlen, int[]? actual_seq_kvlen, int sparse_mode, bool gen_mask_parallel, bool sync, "
        "Tensor? replay_rng) -> (Tensor, Tensor, Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_fusion_attention";

enum class Layout { BSH, SBH, BSND, BNSD, TND };

// What the inputs describe. For TND, b is the number of sequences and sq/skv their largest lengths.
struct Problem {
  Layout layout;
  int64_t b, n1, n2, sq, skv, d;
  std::vector<int64_t> q_cum, kv_cum;  // TND: cumulative lengths, starting at 0
  int64_t numels = 0;                   // elements of the dropout mask (torch_npu's numels)
};

Layout parse_layout(c10::string_view s, const char* op) {
  if (s == "BSH") return Layout::BSH;
  if (s == "SBH") return Layout::SBH;
  if (s == "BSND") return Layout::BSND;
  if (s == "BNSD") return Layout::BNSD;
  if (s == "TND") return Layout::TND;
  TORCH_CHECK(false, op, ": input_layout must be one of BSH, SBH, BSND, BNSD, TND, got '", s, "'");
}

std::vector<int64_t> cumulative(const c10::OptionalIntArrayRef& lens, const char* name, int64_t total,
                                const char* op) {
  TORCH_CHECK(lens.has_value() && !lens->empty(), op, ": input_layout TND needs ", name,
              " (the cumulative sequence lengths)");
  std::vector<int64_t> cum{0};
  for (int64_t v : *lens) {
    TORCH_CHECK(v >= cum.back(), op, ": ", name, " must be non-decreasing cumulative lengths, got ", *lens);
    cum.push_back(v);
  }
  TORCH_CHECK(cum.back() == total, op, ": the last of ", name, " (", cum.back(),
              ") must equal the number of tokens T = ", total);
  return cum;
}

Problem describe(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_num,
                 c10::string_view input_layout, const std::optional<at::Tensor>& pse,
                 const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                 double keep_prob, c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef actual_seq_qlen,
                 c10::OptionalIntArrayRef actual_seq_kvlen, int64_t sparse_mode, const char* op) {
  Problem p;
  p.layout = parse_layout(input_layout, op);
  const int64_t rank = (p.layout == Layout::BSND || p.layout == Layout::BNSD) ? 4 : 3;
  TORCH_CHECK(q.dim() == rank && k.dim() == rank && v.dim() == rank, op, ": input_layout ", input_layout,
              " takes ", rank, "-D query, key and value, got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), op,
              ": query, key and value must have one dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ",
              v.scalar_type());
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), op, ": query must be floating point, got ", q.scalar_type());
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": key and value must have one shape, got ", k.sizes(), " and ",
              v.sizes());
  TORCH_CHECK(head_num > 0, op, ": head_num must be positive, got ", head_num);
  TORCH_CHECK(keep_prob > 0. && keep_prob <= 1., op, ": keep_prob must be in (0, 1], got ", keep_prob);
  TORCH_CHECK(sparse_mode >= 0 && sparse_mode <= 4, op, ": sparse_mode ", sparse_mode,
              " is not supported here (0 default, 1 all, 2 left-up causal, 3 right-down causal, 4 band)");
  TORCH_CHECK(!given(padding_mask), op, ": padding_mask is not supported (nor is it by torch_npu)");
  TORCH_CHECK(!prefix.has_value() || prefix->empty(), op, ": prefix (sparse_mode 5 and 6) is not supported here");

  switch (p.layout) {
    case Layout::BSH:
    case Layout::SBH: {
      const bool bsh = p.layout == Layout::BSH;
      p.b = q.size(bsh ? 0 : 1);
      p.sq = q.size(bsh ? 1 : 0);
      p.skv = k.size(bsh ? 1 : 0);
      TORCH_CHECK(k.size(bsh ? 0 : 1) == p.b, op, ": query and key have different batch sizes: ", q.sizes(),
                  " and ", k.sizes());
      TORCH_CHECK(q.size(2) % head_num == 0, op, ": the hidden size H = ", q.size(2),
                  " of query must be a multiple of head_num = ", head_num);
      p.n1 = head_num;
      p.d = q.size(2) / head_num;
      TORCH_CHECK(k.size(2) % p.d == 0, op, ": the hidden size of key (", k.size(2),
                  ") must be a multiple of the head size D = ", p.d);
      p.n2 = k.size(2) / p.d;
      break;
    }
    case Layout::BSND:
    case Layout::BNSD: {
      const bool bsnd = p.layout == Layout::BSND;
      p.b = q.size(0);
      p.sq = q.size(bsnd ? 1 : 2);
      p.n1 = q.size(bsnd ? 2 : 1);
      p.d = q.size(3);
      p.skv = k.size(bsnd ? 1 : 2);
      p.n2 = k.size(bsnd ? 2 : 1);
      TORCH_CHECK(k.size(0) == p.b, op, ": query and key have different batch sizes: ", q.sizes(), " and ",
                  k.sizes());
      TORCH_CHECK(k.size(3) == p.d, op, ": query and key have different head sizes: ", q.sizes(), " and ",
                  k.sizes());
      break;
    }
    case Layout::TND: {
      p.n1 = q.size(1);
      p.d = q.size(2);
      p.n2 = k.size(1);
      TORCH_CHECK(k.size(2) == p.d, op, ": query and key have different head sizes: ", q.sizes(), " and ",
                  k.sizes());
      p.q_cum = cumulative(actual_seq_qlen, "actual_seq_qlen", q.size(0), op);
      p.kv_cum = cumulative(actual_seq_kvlen, "actual_seq_kvlen", k.size(0), op);
      TORCH_CHECK(p.q_cum.size() == p.kv_cum.size(), op,
                  ": actual_seq_qlen and actual_seq_kvlen must give as many sequences, got ", p.q_cum.size() - 1,
                  " and ", p.kv_cum.size() - 1);
      p.b = static_cast<int64_t>(p.q_cum.size()) - 1;
      p.sq = p.skv = 0;
      for (int64_t i = 0; i < p.b; ++i) {
        const int64_t lq = p.q_cum[i + 1] - p.q_cum[i], lkv = p.kv_cum[i + 1] - p.kv_cum[i];
        p.sq = std::max(p.sq, lq);
        p.skv = std::max(p.skv, lkv);
        p.numels += p.n1 * lq * lkv;
      }
      TORCH_CHECK(!given(pse), op, ": pse with input_layout TND is not supported here");
      break;
    }
  }
  TORCH_CHECK(p.n1 == head_num, op, ": head_num (", head_num, ") must equal the number of query heads, ", p.n1);
  TORCH_CHECK(p.n2 > 0 && p.n1 % p.n2 == 0, op, ": the number of key/value heads (", p.n2,
              ") must divide the number of query heads (", p.n1, ")");
  if (p.layout != Layout::TND) p.numels = p.b * p.n1 * p.sq * p.skv;

  const std::vector<int64_t> scores{p.b, p.n1, p.sq, p.skv};
  if (given(pse)) {
    TORCH_CHECK(pse->scalar_type() == q.scalar_type(), op, ": pse must have query's dtype ", q.scalar_type(),
                ", got ", pse->scalar_type());
    TORCH_CHECK(pse->dim() == 4 && broadcasts_to(pse->sizes(), scores), op, ": pse of shape ",
                pse->sizes(), " must broadcast to [B, N, Sq, Skv] = ", c10::IntArrayRef(scores),
                " (BNSS, BN1Skv or 1NSS)");
  }
  if (given(atten_mask)) {
    TORCH_CHECK(atten_mask->scalar_type() == at::kBool || atten_mask->scalar_type() == at::kByte, op,
                ": atten_mask must be bool or uint8, got ", atten_mask->scalar_type());
    // Modes 2 to 4 take torch_npu's compressed mask: the 2048 x 2048 upper triangle (the kernel checks its
    // content), from which the mode's structure is derived.
    if (sparse_mode >= 2) {
      TORCH_CHECK(atten_mask->sizes() == c10::IntArrayRef({2048, 2048}), op, ": sparse_mode ", sparse_mode,
                  " takes the compressed atten_mask of shape [2048, 2048] (torch.triu(torch.ones(2048, 2048), 1)), "
                  "got ", atten_mask->sizes());
    } else {
      const std::vector<int64_t> target =
          p.layout == Layout::TND ? std::vector<int64_t>{p.sq, p.skv} : scores;
      TORCH_CHECK((atten_mask->dim() == 2 || (atten_mask->dim() == 4 && p.layout != Layout::TND)) &&
                      broadcasts_to(atten_mask->sizes(), target),
                  op, ": atten_mask of shape ", atten_mask->sizes(), " must broadcast to ",
                  p.layout == Layout::TND ? "[maxSq, maxSkv] = " : "[B, N, Sq, Skv] = ", c10::IntArrayRef(target),
                  " (BNSS, B1SS, 11SS or SS)");
    }
  }
  if (sparse_mode == 1) TORCH_CHECK(given(atten_mask), op, ": sparse_mode 1 (allMask) needs atten_mask");
  return p;
}

// ------------------------------------------------------------------------------------------------ layouts

// Query-like tensors of a layout as [B, N, S, D] views, and back.
at::Tensor to_bnsd(const at::Tensor& t, Layout layout, int64_t heads) {
  switch (layout) {
    case Layout::BSH:
      return t.unflatten(2, {heads, -1}).permute({0, 2, 1, 3});
    case Layout::SBH:
      return t.unflatten(2, {heads, -1}).permute({1, 2, 0, 3});
    case Layout::BSND:
      return t.permute({0, 2, 1, 3});
    default:
      return t;
  }
}

at::Tensor from_bnsd(const at::Tensor& t, Layout layout) {
  switch (layout) {
    case Layout::BSH:
      return t.permute({0, 2, 1, 3}).flatten(2).contiguous();
    case Layout::SBH:
      return t.permute({2, 0, 1, 3}).flatten(2).contiguous();
    case Layout::BSND:
      return t.permute({0, 2, 1, 3}).contiguous();
    default:
      return t.contiguous();
  }
}

// TND: sequence i as [1, N, s, D], and back.
at::Tensor sequence(const at::Tensor& t, const std::vector<int64_t>& cum, int64_t i) {
  return t.slice(0, cum[i], cum[i + 1]).permute({1, 0, 2}).unsqueeze(0);
}

at::Tensor unsequence(const at::Tensor& t) { return t.squeeze(0).permute({1, 0, 2}); }

// Key/value heads repeated for their group of query heads ([b, N2, s, D] -> [b, N1, s, D]), and the gradient back.
at::Tensor expand_heads(const at::Tensor& t, int64_t n1) {
  const int64_t n2 = t.size(1);
  if (n1 == n2) return t;
  return t.unsqueeze(2).expand({t.size(0), n2, n1 / n2, t.size(2), t.size(3)}).flatten(1, 2);
}

at::Tensor reduce_heads(const at::Tensor& g, int64_t n2) {
  if (g.size(1) == n2) return g;
  return g.unflatten(1, {n2, -1}).sum(2);
}

// ------------------------------------------------------------------------------------------------ masks

struct Settings {
  double scale, keep_prob;
  int64_t pre_tockens, next_tockens, sparse_mode, seed, offset;
};

// True where a score is masked out, for one [sq, skv] block: atten_mask (True = masked, torch_npu's convention),
// then the mode's structure. Undefined when nothing is masked.
at::Tensor masked_positions(int64_t sq, int64_t skv, const at::Tensor& mask, const Settings& s,
                            const at::TensorOptions& cpu) {
  auto band = [&](int64_t shift) {
    // Position (i, j) is kept when -pre_tockens <= j - i - shift <= next_tockens.
    const at::Tensor i = at::arange(sq, cpu.dtype(at::kLong)).unsqueeze(1);
    const at::Tensor j = at::arange(skv, cpu.dtype(at::kLong)).unsqueeze(0);
    const at::Tensor diff = j - i - shift;
    return diff.gt(s.next_tockens).logical_or_(diff.lt(-s.pre_tockens));
  };
  auto causal = [&](int64_t shift) {
    const at::Tensor i = at::arange(sq, cpu.dtype(at::kLong)).unsqueeze(1);
    const at::Tensor j = at::arange(skv, cpu.dtype(at::kLong)).unsqueeze(0);
    return (j - i).gt(shift);
  };
  switch (s.sparse_mode) {
    case 0: {
      at::Tensor m = mask.defined() ? mask.to(at::kBool) : at::Tensor();
      if (s.pre_tockens < sq || s.next_tockens < skv) m = m.defined() ? m.logical_or(band(0)) : band(0);
      return m;
    }
    case 1:
      return mask.to(at::kBool);
    case 2:
      return causal(0);
    case 3:
      return causal(skv - sq);
    default:
      return band(skv - sq);
  }
}

// The dropout keep mask of one block, scaled by 1 / keep_prob: a function of (seed, offset, block).
at::Tensor keep_mask(c10::IntArrayRef shape, const Settings& s, int64_t block, const at::TensorOptions& opts) {
  uint64_t z = static_cast<uint64_t>(s.seed) ^ (0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(s.offset) + 1)) ^
               (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(block + 1));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(z ^ (z >> 31));
  return at::empty(shape, opts).bernoulli_(s.keep_prob, gen).div_(s.keep_prob);
}

// The compressed mask of modes 2 to 4 must be the upper triangle: a data check, so the kernel makes it (its error
// is raised at the next synchronizing call, naming the op).
void check_compressed_mask(const at::Tensor& mask, int64_t sparse_mode) {
  // Leaked: compute threads may still compare against it while the process exits.
  static const at::Tensor& expected = *new at::Tensor(at::ones({2048, 2048}, at::kBool).triu_(1));
  // Bytes compared directly: bool and uint8 masks hold 0 and 1 alike, and memcmp is many times faster than at::equal.
  const at::Tensor m = mask.contiguous();
  TORCH_CHECK(std::memcmp(m.const_data_ptr(), expected.const_data_ptr(), expected.numel()) == 0,
              "_npu_fusion_attention: sparse_mode ", sparse_mode,
              " takes the compressed atten_mask torch.triu(torch.ones(2048, 2048), diagonal=1) (True above the "
              "diagonal); the atten_mask given differs");
}

// ------------------------------------------------------------------------------------------------ blocks

// Scaled, masked scores of one block of [b, N1, sq, D] queries and [b, N2, skv, D] keys, in the compute dtype.
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& pse, const at::Tensor& masked,
                  const Settings& s) {
  at::Tensor x = at::matmul(q, expand_heads(k, q.size(1)).transpose(-2, -1));
  if (pse.defined()) x = x + pse.to(x.scalar_type());
  x = x * s.scale;
  // As an additive bias of the mask's own (broadcast) shape: masked_fill with a broadcast mask is many times slower.
  if (masked.defined())
    x = x + at::zeros(masked.sizes(), x.options()).masked_fill_(masked, -std::numeric_limits<double>::infinity());
  return x;
}

// Softmax from the row statistics. Fully masked rows (max -inf) have max 0 and sum 0, and give zeros rather than
// NaN (what inner_precise=2's invalid-row handling gives on the NPU).
at::Tensor probabilities(const at::Tensor& x, const at::Tensor& max, const at::Tensor& sum) {
  return (x - max).exp_().div_(sum.masked_fill(sum.eq(0), 1));
}

struct Forward {
  at::Tensor out, max, sum;  // out: [b, N1, sq, D]; max, sum: [b, N1, sq, 1]
};

Forward forward_block(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& pse,
                      const at::Tensor& masked, const Settings& s, int64_t block) {
  const at::Tensor x = scores(q, k, pse, masked, s);
  at::Tensor max = x.amax(-1, /*keepdim=*/true);
  max.masked_fill_(max.isneginf(), 0);
  at::Tensor p = (x - max).exp_();
  at::Tensor sum = p.sum(-1, /*keepdim=*/true);
  p.div_(sum.masked_fill(sum.eq(0), 1));
  if (s.keep_prob < 1.) p = p * keep_mask(p.sizes(), s, block, p.options());
  return {at::matmul(p, expand_heads(v, q.size(1))), max, sum};
}

struct Backward {
  at::Tensor dq, dk, dv, dpse;
};

// max and sum: the forward's row statistics ([b, N1, sq, 1]), or undefined to recompute them.
Backward backward_block(const at::Tensor& dy, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& pse, const at::Tensor& masked, at::Tensor max, at::Tensor sum,
                        const Settings& s, int64_t block) {
  const int64_t n1 = q.size(1), n2 = k.size(1);
  const at::Tensor x = scores(q, k, pse, masked, s);
  if (!max.defined() || !sum.defined()) {
    max = x.amax(-1, /*keepdim=*/true);
    max.masked_fill_(max.isneginf(), 0);
    sum = (x - max).exp().sum(-1, /*keepdim=*/true);
  }
  const at::Tensor p = probabilities(x, max, sum);
  const at::Tensor keep = s.keep_prob < 1. ? keep_mask(p.sizes(), s, block, p.options()) : at::Tensor();
  const at::Tensor pd = keep.defined() ? p * keep : p;
  const at::Tensor ke = expand_heads(k, n1), ve = expand_heads(v, n1);
  Backward g;
  g.dv = reduce_heads(at::matmul(pd.transpose(-2, -1), dy), n2);
  at::Tensor dp = at::matmul(dy, ve.transpose(-2, -1));
  if (keep.defined()) dp = dp * keep;
  // Softmax backward, then the scale: the gradient of query @ key^T + pse.
  const at::Tensor ds = p * (dp - (dp * p).sum(-1, /*keepdim=*/true)) * s.scale;
  g.dq = at::matmul(ds, ke);
  g.dk = reduce_heads(at::matmul(ds.transpose(-2, -1), q), n2);
  if (pse.defined()) g.dpse = at::sum_to(ds, pse.sizes());
  return g;
}

// The stored statistics: torch_npu's [B, N1, Sq, 8] (or [T, N1, 8]), the row value repeated 8 times.
at::Tensor repeat8(const at::Tensor& rows) { return rows.expand({-1, -1, -1, 8}); }

c10::ScalarType stats_type(c10::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

std::vector<int64_t> stats_shape(const Problem& p) {
  if (p.layout == Layout::TND) return {p.q_cum.back(), p.n1, 8};
  return {p.b, p.n1, p.sq, 8};
}

// ------------------------------------------------------------------------------------------------ kernels

// The masked positions of sequence i of a TND call: an explicit mask (modes 0 and 1) is cut to its lengths from the
// top-left corner; the compressed mask of modes 2 to 4 only selects the mode's structure.
at::Tensor sequence_masked(const Problem& p, int64_t i, const at::Tensor& mask, const Settings& s,
                           const at::TensorOptions& cpu) {
  const int64_t lq = p.q_cum[i + 1] - p.q_cum[i], lkv = p.kv_cum[i + 1] - p.kv_cum[i];
  const at::Tensor m = mask.defined() && s.sparse_mode <= 1 ? mask.slice(0, 0, lq).slice(1, 0, lkv) : mask;
  return masked_positions(lq, lkv, m, s, cpu);
}


using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// A captured launch's dropout (seed, offset): replay_rng is the graph's {seed, offset} slot that each replay
// rewrites in stream order, and `offset` the launch's offset within the graph; so a replay draws what eager draws
// at the generator's seed and offset then (as every random kernel, backend/generator.h).
Settings settings(double scale, double keep_prob, int64_t pre, int64_t next, int64_t sparse_mode, int64_t seed,
                  int64_t offset, const std::optional<at::Tensor>& replay_rng = std::nullopt) {
  if (given(replay_rng)) {
    constexpr uint64_t kMask = std::numeric_limits<int64_t>::max();
    const auto* slot = static_cast<const uint64_t*>(replay_rng->data_ptr());
    seed = static_cast<int64_t>(slot[0] & kMask);
    offset = static_cast<int64_t>((slot[1] + static_cast<uint64_t>(offset)) & kMask);
  }
  return {scale, keep_prob, pre, next, sparse_mode, seed, offset};
}

Outputs attention_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_num,
                       c10::string_view layout, const std::optional<at::Tensor>& pse,
                       const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                       double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise,
                       c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen,
                       c10::OptionalIntArrayRef kvlen, int64_t sparse_mode, int64_t seed, int64_t offset,
                       const std::optional<at::Tensor>& replay_rng) {
  const Problem p = describe(q, k, v, head_num, layout, pse, padding_mask, atten_mask, keep_prob, prefix, qlen, kvlen,
                             sparse_mode, "_npu_fusion_attention");
  const auto stats = q.options().dtype(stats_type(q.scalar_type()));
  return {at::empty(q.sizes(), q.options()), at::empty(stats_shape(p), stats),
          at::empty(stats_shape(p), stats), at::empty({0}, q.options())};
}

Outputs attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_num,
                      c10::string_view layout, const std::optional<at::Tensor>& pse,
                      const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                      double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise,
                      c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen, c10::OptionalIntArrayRef kvlen,
                      int64_t sparse_mode, int64_t seed, int64_t offset, const std::optional<at::Tensor>& replay_rng) {
  const Problem p = describe(q, k, v, head_num, layout, pse, padding_mask, atten_mask, keep_prob, prefix, qlen, kvlen,
                             sparse_mode, "_npu_fusion_attention");
  const Settings s = settings(scale, keep_prob, pre, next, sparse_mode, seed, offset, replay_rng);
  const auto acc = compute_type(q.scalar_type());
  const auto st = stats_type(q.scalar_type());
  const at::Tensor mask = given(atten_mask) ? *atten_mask : at::Tensor();
  if (mask.defined() && sparse_mode >= 2) check_compressed_mask(mask, sparse_mode);
  const at::TensorOptions cpu = q.options();
  if (p.layout != Layout::TND) {
    const at::Tensor pse_t = given(pse) ? *pse : at::Tensor();
    const Forward f = forward_block(to_bnsd(q, p.layout, p.n1).to(acc), to_bnsd(k, p.layout, p.n2).to(acc),
                                    to_bnsd(v, p.layout, p.n2).to(acc), pse_t,
                                    masked_positions(p.sq, p.skv, mask, s, cpu), s, 0);
    return {from_bnsd(f.out.to(q.scalar_type()), p.layout), repeat8(f.max.to(st)).contiguous(),
            repeat8(f.sum.to(st)).contiguous(), at::empty({0}, q.options())};
  }
  std::vector<at::Tensor> outs, maxes, sums;
  for (int64_t i = 0; i < p.b; ++i) {
    const Forward f = forward_block(sequence(q, p.q_cum, i).to(acc), sequence(k, p.kv_cum, i).to(acc),
                                    sequence(v, p.kv_cum, i).to(acc), at::Tensor(),
                                    sequence_masked(p, i, mask, s, cpu), s, i);
    outs.push_back(unsequence(f.out));
    maxes.push_back(unsequence(repeat8(f.max)));
    sums.push_back(unsequence(repeat8(f.sum)));
  }
  return {at::cat(outs).to(q.scalar_type()), at::cat(maxes).to(st), at::cat(sums).to(st),
          at::empty({0}, q.options())};
}

Problem check_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dy,
                   int64_t head_num, c10::string_view layout, const std::optional<at::Tensor>& pse,
                   const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                   const std::optional<at::Tensor>& softmax_max, const std::optional<at::Tensor>& softmax_sum,
                   double keep_prob, c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen,
                   c10::OptionalIntArrayRef kvlen, int64_t sparse_mode) {
  constexpr const char* op = "npu_fusion_attention_grad";
  Problem p = describe(q, k, v, head_num, layout, pse, padding_mask, atten_mask, keep_prob, prefix, qlen, kvlen,
                       sparse_mode, op);
  TORCH_CHECK(dy.sizes() == q.sizes() && dy.scalar_type() == q.scalar_type(), op,
              ": dy must have query's shape and dtype, got ", dy.sizes(), " ", dy.scalar_type(), " for ", q.sizes(),
              " ", q.scalar_type());
  TORCH_CHECK(given(softmax_max) == given(softmax_sum), op, ": give both softmax_max and softmax_sum, or neither");
  if (given(softmax_max)) {
    const std::vector<int64_t> expected = stats_shape(p);
    TORCH_CHECK(softmax_max->sizes() == expected && softmax_sum->sizes() == expected, op,
                ": softmax_max and softmax_sum must have shape ", c10::IntArrayRef(expected), ", got ",
                softmax_max->sizes(), " and ", softmax_sum->sizes());
  }
  return p;
}

Outputs grad_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dy,
                  int64_t head_num, c10::string_view layout, const std::optional<at::Tensor>& pse,
                  const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                  const std::optional<at::Tensor>& softmax_max, const std::optional<at::Tensor>& softmax_sum,
                  const std::optional<at::Tensor>& softmax_in, const std::optional<at::Tensor>& attention_in,
                  double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise, int64_t seed,
                  int64_t offset, int64_t numels, c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen,
                  c10::OptionalIntArrayRef kvlen, int64_t sparse_mode, bool gen_mask_parallel, bool sync) {
  check_grad(q, k, v, dy, head_num, layout, pse, padding_mask, atten_mask, softmax_max, softmax_sum, keep_prob, prefix,
             qlen, kvlen, sparse_mode);
  return {at::empty(q.sizes(), q.options()), at::empty(k.sizes(), k.options()),
          at::empty(v.sizes(), v.options()),
          given(pse) ? at::empty(pse->sizes(), pse->options()) : at::empty({0}, q.options())};
}

Outputs grad_replay_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dy,
                        int64_t head_num, c10::string_view layout, const std::optional<at::Tensor>& pse,
                        const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                        const std::optional<at::Tensor>& softmax_max, const std::optional<at::Tensor>& softmax_sum,
                        const std::optional<at::Tensor>& softmax_in, const std::optional<at::Tensor>& attention_in,
                        double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise,
                        int64_t seed, int64_t offset, int64_t numels, c10::OptionalIntArrayRef prefix,
                        c10::OptionalIntArrayRef qlen, c10::OptionalIntArrayRef kvlen, int64_t sparse_mode,
                        bool gen_mask_parallel, bool sync, const std::optional<at::Tensor>& replay_rng) {
  const Problem p = check_grad(q, k, v, dy, head_num, layout, pse, padding_mask, atten_mask, softmax_max,
                               softmax_sum, keep_prob, prefix, qlen, kvlen, sparse_mode);
  const Settings s = settings(scale, keep_prob, pre, next, sparse_mode, seed, offset, replay_rng);
  const auto acc = compute_type(q.scalar_type());
  const at::Tensor mask = given(atten_mask) ? *atten_mask : at::Tensor();
  const bool stats = given(softmax_max);
  const at::TensorOptions cpu = q.options();
  if (p.layout != Layout::TND) {
    const at::Tensor pse_t = given(pse) ? pse->to(acc) : at::Tensor();
    const Backward g = backward_block(
        to_bnsd(dy, p.layout, p.n1).to(acc), to_bnsd(q, p.layout, p.n1).to(acc), to_bnsd(k, p.layout, p.n2).to(acc),
        to_bnsd(v, p.layout, p.n2).to(acc), pse_t, masked_positions(p.sq, p.skv, mask, s, cpu),
        stats ? softmax_max->narrow(-1, 0, 1).to(acc) : at::Tensor(),
        stats ? softmax_sum->narrow(-1, 0, 1).to(acc) : at::Tensor(), s, 0);
    return {from_bnsd(g.dq.to(q.scalar_type()), p.layout), from_bnsd(g.dk.to(k.scalar_type()), p.layout),
            from_bnsd(g.dv.to(v.scalar_type()), p.layout),
            pse_t.defined() ? g.dpse.to(pse->scalar_type()).contiguous() : at::empty({0}, q.options())};
  }
  std::vector<at::Tensor> dqs, dks, dvs;
  for (int64_t i = 0; i < p.b; ++i) {
    const auto rows = [&](const std::optional<at::Tensor>& t) {
      return stats ? sequence(t->narrow(-1, 0, 1), p.q_cum, i).to(acc) : at::Tensor();
    };
    const Backward g = backward_block(sequence(dy, p.q_cum, i).to(acc), sequence(q, p.q_cum, i).to(acc),
                                      sequence(k, p.kv_cum, i).to(acc), sequence(v, p.kv_cum, i).to(acc),
                                      at::Tensor(), sequence_masked(p, i, mask, s, cpu), rows(softmax_max),
                                      rows(softmax_sum), s, i);
    dqs.push_back(unsequence(g.dq));
    dks.push_back(unsequence(g.dk));
    dvs.push_back(unsequence(g.dv));
  }
  return {at::cat(dqs).to(q.scalar_type()), at::cat(dks).to(k.scalar_type()), at::cat(dvs).to(v.scalar_type()),
          at::empty({0}, q.options())};
}

Outputs grad_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dy,
                 int64_t head_num, c10::string_view layout, const std::optional<at::Tensor>& pse,
                 const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                 const std::optional<at::Tensor>& softmax_max, const std::optional<at::Tensor>& softmax_sum,
                 const std::optional<at::Tensor>& softmax_in, const std::optional<at::Tensor>& attention_in,
                 double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise, int64_t seed,
                 int64_t offset, int64_t numels, c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen,
                 c10::OptionalIntArrayRef kvlen, int64_t sparse_mode, bool gen_mask_parallel, bool sync) {
  return grad_replay_cpu(q, k, v, dy, head_num, layout, pse, padding_mask, atten_mask, softmax_max, softmax_sum,
                         softmax_in, attention_in, scale, keep_prob, pre, next, inner_precise, seed, offset, numels,
                         prefix, qlen, kvlen, sparse_mode, gen_mask_parallel, sync, std::nullopt);
}

Outputs grad_replay_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dy,
                         int64_t head_num, c10::string_view layout, const std::optional<at::Tensor>& pse,
                         const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                         const std::optional<at::Tensor>& softmax_max, const std::optional<at::Tensor>& softmax_sum,
                         const std::optional<at::Tensor>& softmax_in, const std::optional<at::Tensor>& attention_in,
                         double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise,
                         int64_t seed, int64_t offset, int64_t numels, c10::OptionalIntArrayRef prefix,
                         c10::OptionalIntArrayRef qlen, c10::OptionalIntArrayRef kvlen, int64_t sparse_mode,
                         bool gen_mask_parallel, bool sync, const std::optional<at::Tensor>& replay_rng) {
  return grad_meta(q, k, v, dy, head_num, layout, pse, padding_mask, atten_mask, softmax_max, softmax_sum, softmax_in,
                   attention_in, scale, keep_prob, pre, next, inner_precise, seed, offset, numels, prefix, qlen, kvlen,
                   sparse_mode, gen_mask_parallel, sync);
}

// ------------------------------------------------------------------------------------------------ the public op

using Public = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, int64_t, int64_t, int64_t>;

// The dropout's (seed, offset), drawn on the host from the generator of the query's device, so they are ordered
// with the other random ops as the host issues them (and torch.npu.manual_seed makes them reproducible). While the
// current stream captures a graph, the draw is graph-safe (NPUGeneratorImpl::draw): seed 0 and the offset within the
// graph, plus replay_rng, the graph's {seed, offset} slot the kernel reads when it runs.
struct Dropout {
  int64_t seed = 0, offset = 0;
  std::optional<at::Tensor> replay_rng;
};

// The capture's {seed, offset} slot as an int64 [2] tensor on the query's device (memory of the graph's pool).
at::Tensor replay_rng_tensor(const uint64_t* slot, const at::Tensor& q) {
  return at::from_blob(const_cast<uint64_t*>(slot), {2}, q.options().dtype(at::kLong));
}

Dropout draw_dropout(const at::Tensor& q) {
  constexpr uint64_t kMask = std::numeric_limits<int64_t>::max();
  if (q.device().type() == c10::DeviceType::PrivateUse1) {
    const at::Generator& gen = default_generator(q.device().index());
    auto* impl = gen.get<NPUGeneratorImpl>();
    std::lock_guard<std::mutex> lock(impl->mutex_);
    const RngDraw d = impl->draw();
    Dropout r{static_cast<int64_t>(d.seed & kMask), static_cast<int64_t>(d.offset & kMask), std::nullopt};
    if (d.replay_slot) r.replay_rng = replay_rng_tensor(d.replay_slot, q);
    return r;
  }
  auto* impl = at::get_generator_or_default<at::CPUGeneratorImpl>(std::nullopt, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return {static_cast<int64_t>(impl->current_seed() & kMask), static_cast<int64_t>(impl->random64() & kMask),
          std::nullopt};
}

// For the autograd backward of a forward captured on the current stream: that capture's {seed, offset} slot.
std::optional<at::Tensor> captured_replay_rng(const at::Tensor& q) {
  if (q.device().type() != c10::DeviceType::PrivateUse1 || !capture_underway()) return std::nullopt;
  const auto capture = current_capture_id();
  if (!capture) return std::nullopt;
  auto* impl = default_generator(q.device().index()).get<NPUGeneratorImpl>();
  GraphRngState* graph = impl->state()->capture_state(*capture, /*create=*/false);
  if (!graph) return std::nullopt;
  return replay_rng_tensor(static_cast<const uint64_t*>(graph->replay_slot.get()), q);
}

using KernelSig = Outputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, c10::string_view,
                          const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                          const std::optional<at::Tensor>&, double, double, int64_t, int64_t, int64_t,
                          c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, int64_t,
                          int64_t, int64_t, const std::optional<at::Tensor>&);

Public attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_num,
                 c10::string_view layout, const std::optional<at::Tensor>& pse,
                 const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                 double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise,
                 c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen, c10::OptionalIntArrayRef kvlen,
                 int64_t sparse_mode, bool gen_mask_parallel, bool sync) {
  // Checked here too, so a bad call raises at once (before any seed is drawn).
  const Problem p = describe(q, k, v, head_num, layout, pse, padding_mask, atten_mask, keep_prob, prefix, qlen, kvlen,
                             sparse_mode, kOp);
  const Dropout drop = keep_prob < 1. ? draw_dropout(q) : Dropout{};
  static const auto kernel = npu_op<KernelSig>("npu::_npu_fusion_attention");
  auto [out, max, sum, softmax_out] = kernel.call(q, k, v, head_num, layout, pse, padding_mask, atten_mask, scale,
                                                  keep_prob, pre, next, inner_precise, prefix, qlen, kvlen,
                                                  sparse_mode, drop.seed, drop.offset, drop.replay_rng);
  return {out, max, sum, softmax_out, drop.seed, drop.offset, p.numels};
}

Public attention_meta_public(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_num,
                             c10::string_view layout, const std::optional<at::Tensor>& pse,
                             const std::optional<at::Tensor>& padding_mask,
                             const std::optional<at::Tensor>& atten_mask, double scale, double keep_prob, int64_t pre,
                             int64_t next, int64_t inner_precise, c10::OptionalIntArrayRef prefix,
                             c10::OptionalIntArrayRef qlen, c10::OptionalIntArrayRef kvlen, int64_t sparse_mode,
                             bool gen_mask_parallel, bool sync) {
  const Problem p = describe(q, k, v, head_num, layout, pse, padding_mask, atten_mask, keep_prob, prefix, qlen, kvlen,
                             sparse_mode, kOp);
  auto [out, max, sum, softmax_out] = attention_meta(q, k, v, head_num, layout, pse, padding_mask, atten_mask, scale,
                                                     keep_prob, pre, next, inner_precise, prefix, qlen, kvlen,
                                                     sparse_mode, 0, 0, std::nullopt);
  return {out, max, sum, softmax_out, 0, 0, p.numels};
}

// ------------------------------------------------------------------------------------------------ autograd

using GradSig = Outputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                        c10::string_view, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                        const std::optional<at::Tensor>&, double, double, int64_t, int64_t, int64_t, int64_t, int64_t,
                        int64_t, c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, int64_t,
                        bool, bool, const std::optional<at::Tensor>&);
using PublicSig = Public(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, c10::string_view,
                         const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                         const std::optional<at::Tensor>&, double, double, int64_t, int64_t, int64_t,
                         c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, c10::OptionalIntArrayRef, int64_t, bool,
                         bool);

// The non-tensor arguments, kept for the backward.
struct Arguments {
  int64_t head_num;
  std::string layout;
  double scale, keep_prob;
  int64_t pre, next, inner_precise;
  std::optional<std::vector<int64_t>> prefix, qlen, kvlen;
  int64_t sparse_mode;
  bool gen_mask_parallel, sync;
};

std::optional<std::vector<int64_t>> copy(c10::OptionalIntArrayRef v) {
  return v.has_value() ? std::optional<std::vector<int64_t>>(v->vec()) : std::nullopt;
}

c10::IValue pack(const std::optional<std::vector<int64_t>>& v) { return v ? c10::IValue(*v) : c10::IValue(); }

c10::OptionalIntArrayRef ref(const std::optional<std::vector<int64_t>>& v) {
  return v ? c10::OptionalIntArrayRef(*v) : std::nullopt;
}

std::optional<std::vector<int64_t>> unpack(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<std::vector<int64_t>>(v.toIntVector());
}

// Arguments kept in the autograd context's saved_data (IValues) for the backward, and read back.
void save(const Arguments& a, ska::flat_hash_map<std::string, c10::IValue>& d) {
  d["head_num"] = a.head_num;
  d["layout"] = a.layout;
  d["scale"] = a.scale;
  d["keep_prob"] = a.keep_prob;
  d["pre"] = a.pre;
  d["next"] = a.next;
  d["inner_precise"] = a.inner_precise;
  d["prefix"] = pack(a.prefix);
  d["qlen"] = pack(a.qlen);
  d["kvlen"] = pack(a.kvlen);
  d["sparse_mode"] = a.sparse_mode;
  d["gen_mask_parallel"] = a.gen_mask_parallel;
  d["sync"] = a.sync;
}

Arguments restore(ska::flat_hash_map<std::string, c10::IValue>& d) {
  return {d["head_num"].toInt(), d["layout"].toStringRef(), d["scale"].toDouble(), d["keep_prob"].toDouble(),
          d["pre"].toInt(), d["next"].toInt(), d["inner_precise"].toInt(), unpack(d["prefix"]), unpack(d["qlen"]),
          unpack(d["kvlen"]), d["sparse_mode"].toInt(), d["gen_mask_parallel"].toBool(), d["sync"].toBool()};
}

class FusionAttentionFunction : public torch::autograd::Function<FusionAttentionFunction> {
 public:
  // ints receives (seed, offset, numels), which an autograd function cannot return.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                const std::optional<at::Tensor>& pse,
                                                const std::optional<at::Tensor>& atten_mask, const Arguments& a,
                                                std::array<int64_t, 3>* ints) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = npu_op<PublicSig>("npu::npu_fusion_attention");
    auto [out, max, sum, softmax_out, seed, offset, numels] =
        op.call(q, k, v, a.head_num, a.layout, pse, std::nullopt, atten_mask, a.scale, a.keep_prob, a.pre, a.next,
                a.inner_precise, ref(a.prefix), ref(a.qlen), ref(a.kvlen), a.sparse_mode, a.gen_mask_parallel, a.sync);
    *ints = {seed, offset, numels};
    const at::Tensor replay_rng = a.keep_prob < 1. ? captured_replay_rng(q).value_or(at::Tensor()) : at::Tensor();
    ctx->save_for_backward(
        {q, k, v, pse.value_or(at::Tensor()), atten_mask.value_or(at::Tensor()), out, max, sum, replay_rng});
    auto& d = ctx->saved_data;
    save(a, d);
    d["seed"] = seed;
    d["offset"] = offset;
    d["numels"] = numels;
    ctx->mark_non_differentiable({max, sum, softmax_out});
    return {out, max, sum, softmax_out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = npu_op<GradSig>("npu::_npu_fusion_attention_grad");
    const auto saved = ctx->get_saved_variables();
    auto& d = ctx->saved_data;
    const auto opt = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
    const Arguments a = restore(d);
    const at::Tensor dy = grads[0].defined() ? grads[0] : at::zeros_like(saved[0]);
    auto [dq, dk, dv, dpse] =
        op.call(saved[0], saved[1], saved[2], dy, a.head_num, a.layout, opt(saved[3]), std::nullopt, opt(saved[4]),
                saved[6], saved[7], std::nullopt, saved[5], a.scale, a.keep_prob, a.pre, a.next, a.inner_precise,
                d["seed"].toInt(), d["offset"].toInt(), d["numels"].toInt(), ref(a.prefix), ref(a.qlen),
                ref(a.kvlen), a.sparse_mode, a.gen_mask_parallel, a.sync, opt(saved[8]));
    return {dq, dk, dv, saved[3].defined() ? dpse : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

Public attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_num,
                          c10::string_view layout, const std::optional<at::Tensor>& pse,
                          const std::optional<at::Tensor>& padding_mask, const std::optional<at::Tensor>& atten_mask,
                          double scale, double keep_prob, int64_t pre, int64_t next, int64_t inner_precise,
                          c10::OptionalIntArrayRef prefix, c10::OptionalIntArrayRef qlen,
                          c10::OptionalIntArrayRef kvlen, int64_t sparse_mode, bool gen_mask_parallel, bool sync) {
  // Checked before the autograd graph is built, with the public op's name.
  describe(q, k, v, head_num, layout, pse, padding_mask, atten_mask, keep_prob, prefix, qlen, kvlen, sparse_mode, kOp);
  const Arguments a{head_num, std::string(layout), scale, keep_prob, pre, next, inner_precise, copy(prefix),
                    copy(qlen), copy(kvlen), sparse_mode, gen_mask_parallel, sync};
  std::array<int64_t, 3> ints{};
  auto out = FusionAttentionFunction::apply(q, k, v, pse, atten_mask, a, &ints);
  return {out[0], out[1], out[2], out[3], ints[0], ints[1], ints[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_fusion_attention", attention_meta_public);
  m.impl("_npu_fusion_attention", attention_meta);
  m.impl("npu_fusion_attention_grad", grad_meta);
  m.impl("_npu_fusion_attention_grad", grad_replay_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_fusion_attention", attention);
  m.impl("_npu_fusion_attention", attention_cpu);
  m.impl("npu_fusion_attention_grad", grad_cpu);
  m.impl("_npu_fusion_attention_grad", grad_replay_cpu);
}

// On npu the public op draws the seed and launches the kernel op, which takes the generic path (the fallback).
TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) { m.impl("npu_fusion_attention", attention); }

TORCH_LIBRARY_IMPL(npu, Autograd, m) { m.impl("npu_fusion_attention", attention_autograd); }

}  // namespace softnpu::fused
