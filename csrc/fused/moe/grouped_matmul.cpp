// npu_grouped_matmul(x, weight, *, bias, ..., group_list, split_item, group_type, group_list_type, act_type,
// output_dtype) -> Tensor[]: y_i = act(x_i @ weight_i + bias_i) for groups i, as torch_npu documents it.
//
// The groups are either x's tensors (no group_list) or row ranges of one x (group_type 0, "m-axis": group_list is the
// cumulative row counts (group_list_type 0 or the List overload), the row counts (1), or [E, 2] (expert, count) pairs
// (2)), or column ranges of one x [M, K] against row ranges of one weight [K, N] (group_type 2, "k-axis": y_i =
// x[:, K_i] @ weight[K_i, :], the weight gradient of an MoE layer). weight is one [G, K, N] tensor or G [K, N]
// tensors. split_item 0 returns one y per x, 1 one per group, 2 and 3 one tensor (the rows of all groups, or [G, M,
// N] for group_type 2). Rows past the last group are zero.
//
// The CPU kernel writes each group's product straight into its rows of the output (one matmul per group, no split or
// concatenation of the operands), so on npu the whole MoE expert layer is one launch. torch_npu's op has no backward
// (MindSpeed, verl and torchtitan wrap it in their own autograd.Function that calls it again with the transposed
// operands); here it is differentiable too, the backward being the same op: dx = grouped_matmul(dy, weight^T),
// dweight = the k-axis grouped_matmul(x^T, dy), dbias = the k-axis grouped_matmul(ones, dy), all without host
// synchronization.
//
// Quantized forms, as torch_npu documents them: int8 x and weight, the products accumulated exactly in int32 (ATen's
// int8 GEMM), then y = (acc + int32 bias) * scale [* per_token_scale] (or acc * scale [* per_token_scale] + a float
// bias) in float32, rounded to output_dtype (int8 half to even and saturated, float16, bfloat16; int32: acc + bias);
// an int64 scale is npu_trans_quant_param's packing (FP19 scale and offset). Antiquant (weight-only) forms: float16 /
// bfloat16 x, int8 or int4-in-int32 weight, y = x @ ((weight + antiquant_offset) * antiquant_scale) + bias, the weight
// dequantized in x's dtype per channel or per group of K rows, accumulated in float32.
//
// Each group is cut into tiles of rows run in parallel, one GEMM per tile on one thread: a single fork-join per op
// where per-group GEMMs would each fork and join (and groups of a few hundred rows divide badly among threads).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/gemm.h"
#include "fused/quantization/antiquant.h"
#include "fused/quantization/int4.h"
#include "fused/quantization/quant_param.h"

// torch_npu's schemas (argument names, order, defaults, returns). output_dtype is a ScalarType here (torch_npu's
// newest schema takes an int code through its own Python wrapper; callers pass a torch.dtype either way).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_grouped_matmul(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
        "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
        "Tensor[]? per_token_scale=None, Tensor? group_list=None, Tensor[]? activation_input=None, "
        "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
        "int? group_type=None, int? group_list_type=0, int? act_type=0, int[]? tuning_config=None, "
        "ScalarType? output_dtype=None, int? x_dtype=None, int? weight_dtype=None, int? scale_dtype=None, "
        "int? per_token_scale_dtype=None) -> Tensor[]");
  m.def("npu_grouped_matmul.List(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
        "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
        "Tensor[]? per_token_scale=None, int[]? group_list=None, Tensor[]? activation_input=None, "
        "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
        "int? group_type=None, int? group_list_type=0, int? act_type=0, ScalarType? output_dtype=None) -> Tensor[]");
  // The out= forms let the op path write every group's product straight into the device outputs (no host-allocated
  // result copied after the kernel).
  m.def("npu_grouped_matmul.out(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
        "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
        "Tensor[]? per_token_scale=None, Tensor? group_list=None, Tensor[]? activation_input=None, "
        "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
        "int? group_type=None, int? group_list_type=0, int? act_type=0, int[]? tuning_config=None, "
        "ScalarType? output_dtype=None, int? x_dtype=None, int? weight_dtype=None, int? scale_dtype=None, "
        "int? per_token_scale_dtype=None, Tensor(a!)[] out) -> ()");
  m.def("npu_grouped_matmul.List_out(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
        "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
        "Tensor[]? per_token_scale=None, int[]? group_list=None, Tensor[]? activation_input=None, "
        "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
        "int? group_type=None, int? group_list_type=0, int? act_type=0, ScalarType? output_dtype=None, "
        "Tensor(a!)[] out) -> ()");
}

namespace softnpu::fused {

namespace {

using OptList = std::optional<at::TensorList>;
constexpr const char* OP = "npu_grouped_matmul";

// The arguments that decide the computation (the quantization ones are refused at the call).
// float: float x and weight; quant: int8 x and weight (scale, per_token_scale); antiquant: float x, int8 or int4
// weight.
enum class Form { kFloat, kQuant, kAntiquant };

struct Gmm {
  at::TensorList x, weight, bias, scale, per_token_scale, antiquant_scale, antiquant_offset;
  Form form = Form::kFloat;
  std::optional<at::Tensor> group_tensor;         // default overload
  std::optional<std::vector<int64_t>> group_ints;  // List overload
  int64_t split_item = 0, group_type = -1, group_list_type = 0, act_type = 0;
  c10::ScalarType out_dtype = c10::ScalarType::Float;

  bool single_weight() const { return weight.size() == 1 && weight[0].dim() == 3; }
  int64_t num_weights() const { return single_weight() ? weight[0].size(0) : static_cast<int64_t>(weight.size()); }
  at::Tensor weight_of(int64_t g) const { return single_weight() ? weight[0][g] : weight[g]; }
  bool has_groups() const { return group_tensor.has_value() || group_ints.has_value(); }
  bool int4() const { return weight[0].scalar_type() == at::kInt; }
  // N of weight g (int4 weights hold 8 columns per int32).
  int64_t n_of(int64_t g) const { return weight_of(g).size(1) * (int4() ? kInt4PerInt32 : 1); }
  int64_t n() const { return n_of(0); }
  // The number of groups group_list describes (m-axis: one per weight, unless [E, 2] pairs; k-axis: its length).
  int64_t list_len() const {
    return group_tensor ? group_tensor->size(0) : static_cast<int64_t>(group_ints->size());
  }
  // Per-weight tensors of a list (bias, scale, antiquant_*): one per weight, or one stacked [G, ...] tensor when the
  // weight is one [G, K, N] tensor.
  at::Tensor of(at::TensorList l, int64_t g) const {
    if (l.empty()) return at::Tensor();
    return single_weight() ? l[0][g] : l[g];
  }
  at::Tensor bias_of(int64_t g) const {
    if (bias.empty()) return at::Tensor();
    return bias.size() == 1 && bias[0].dim() == 2 ? bias[0][g] : bias[g];
  }
};

bool given_list(const OptList& l) { return l.has_value() && !l->empty(); }

Gmm parse(at::TensorList x, at::TensorList weight, const OptList& bias, const OptList& scale, const OptList& offset,
          const OptList& antiquant_scale, const OptList& antiquant_offset, const OptList& per_token_scale,
          const OptList& activation_input, const OptList& activation_quant_scale,
          const OptList& activation_quant_offset, std::optional<int64_t> split_item, std::optional<int64_t> group_type,
          std::optional<int64_t> group_list_type, std::optional<int64_t> act_type,
          std::optional<c10::ScalarType> output_dtype, bool list_overload) {
  Gmm p;
  p.x = x;
  p.weight = weight;
  if (bias) p.bias = *bias;
  TORCH_CHECK(!x.empty() && !weight.empty(), OP, ": the number of x and weight should be greater than 0, but they are ",
              x.size(), " and ", weight.size());
  TORCH_CHECK(x.size() <= 128 && weight.size() <= 128, OP, ": x and weight hold at most 128 tensors, got ", x.size(),
              " and ", weight.size());
  TORCH_CHECK(!given_list(offset), OP, ": offset only takes None (as on torch_npu)");
  TORCH_CHECK(!given_list(activation_input) && !given_list(activation_quant_scale) &&
                  !given_list(activation_quant_offset),
              OP, ": activation_input, activation_quant_scale and activation_quant_offset only take None");
  const auto dt = x[0].scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(dt) || dt == at::kChar, OP, ": x of dtype ", dt,
                              " is not supported by softnpu; float16, bfloat16, float32 and int8 are (int4 x is not)");
  for (const auto& t : x)
    TORCH_CHECK(t.scalar_type() == dt, OP, ": all x must have one dtype, got ", dt, " and ", t.scalar_type());
  const auto wt = weight[0].scalar_type();
  for (const auto& t : weight)
    TORCH_CHECK(t.scalar_type() == wt, OP, ": all weight must have one dtype, got ", wt, " and ", t.scalar_type());
  if (scale) p.scale = *scale;
  if (per_token_scale) p.per_token_scale = *per_token_scale;
  if (antiquant_scale) p.antiquant_scale = *antiquant_scale;
  if (antiquant_offset) p.antiquant_offset = *antiquant_offset;
  if (dt == at::kChar) {
    p.form = Form::kQuant;
    TORCH_CHECK(wt == at::kChar, OP, ": an int8 x takes an int8 weight, got ", wt);
    TORCH_CHECK(p.antiquant_scale.empty() && p.antiquant_offset.empty(), OP,
                ": antiquant_scale and antiquant_offset go with a float16/bfloat16 x (weight-only quantization)");
  } else if (wt == at::kChar || wt == at::kInt) {
    p.form = Form::kAntiquant;
    TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, OP, ": an int8 or int4 weight (antiquant) takes a float16 "
                "or bfloat16 x, got ", dt);
    TORCH_CHECK(!p.antiquant_scale.empty(), OP, ": an int8 or int4 weight with a float x needs antiquant_scale");
    TORCH_CHECK(p.scale.empty() && p.per_token_scale.empty(), OP,
                ": scale and per_token_scale go with an int8 x (full quantization)");
  } else {
    TORCH_CHECK(wt == dt, OP, ": weight's dtype ", wt, " must be x's, ", dt);
    TORCH_CHECK(p.scale.empty() && p.per_token_scale.empty() && p.antiquant_scale.empty() &&
                    p.antiquant_offset.empty(),
                OP, ": scale, per_token_scale, antiquant_scale and antiquant_offset need a quantized x or weight");
  }
  p.split_item = split_item.value_or(0);
  TORCH_CHECK(p.split_item >= 0 && p.split_item <= 3, OP, ": split_item must be 0, 1, 2 or 3, got ", p.split_item);
  p.act_type = act_type.value_or(0);
  TORCH_CHECK(p.act_type >= 0 && p.act_type <= 5 && p.act_type != 3, OP,
              ": act_type must be 0 (none), 1 (relu), 2 (gelu_tanh), 4 (fast_gelu) or 5 (silu), got ", p.act_type);
  p.out_dtype = output_dtype.value_or(dt);
  if (p.form == Form::kQuant) {
    const auto o = p.out_dtype;
    TORCH_CHECK(o == at::kChar || o == at::kHalf || o == at::kBFloat16 || o == at::kInt, OP,
                ": output_dtype for an int8 x must be torch.int8, torch.float16, torch.bfloat16 or torch.int32, got ",
                o);
    TORCH_CHECK(o == at::kInt || !p.scale.empty(), OP, ": an int8 x needs scale for an output of dtype ", o);
    TORCH_CHECK(p.per_token_scale.empty() || o == at::kHalf || o == at::kBFloat16, OP,
                ": per_token_scale needs output_dtype torch.float16 or torch.bfloat16");
    TORCH_CHECK(p.act_type == 0 || o == at::kHalf || o == at::kBFloat16, OP,
                ": an activation needs a float16 or bfloat16 output");
  } else {
    TORCH_CHECK(p.out_dtype == (p.form == Form::kAntiquant ? dt : p.out_dtype) && at::isFloatingType(p.out_dtype),
                OP, ": output_dtype must be ", p.form == Form::kAntiquant ? "x's dtype" : "a floating dtype",
                " for a floating x, got ", p.out_dtype);
  }
  if (list_overload) {
    TORCH_CHECK(!group_type.has_value() || *group_type == -1 || *group_type == 0, OP,
                ": with group_list as a list of ints group_type only takes None, got ", *group_type);
    p.group_type = 0;
    p.group_list_type = 0;
  } else {
    p.group_type = group_type.value_or(-1);
    p.group_list_type = group_list_type.value_or(0);
    TORCH_CHECK(p.group_type == -1 || p.group_type == 0 || p.group_type == 2, OP,
                ": group_type only supports -1, 0 and 2, but got ", p.group_type);
    TORCH_CHECK(p.group_list_type >= 0 && p.group_list_type <= 2, OP,
                ": group_list_type must be 0 (cumulative), 1 (counts) or 2 ([E, 2] pairs), got ", p.group_list_type);
  }
  return p;
}

// The shapes and dtypes of scale, per_token_scale and antiquant_scale / antiquant_offset (G weights of K rows).
void check_quantization(const Gmm& p, int64_t G, int64_t K) {
  const auto count_ok = [&](at::TensorList l) {
    return p.single_weight() ? l.size() == 1 && l[0].dim() >= 1 && l[0].size(0) == G
                             : static_cast<int64_t>(l.size()) == G;
  };
  if (!p.scale.empty()) {
    TORCH_CHECK(count_ok(p.scale), OP, ": scale must hold one tensor per weight (one [G, N] tensor for a [G, K, N] "
                "weight), got ", p.scale.size(), " tensors");
    for (int64_t g = 0; g < G; ++g) {
      const at::Tensor s = p.of(p.scale, g);
      const auto st = s.scalar_type();
      TORCH_CHECK(st == at::kFloat || st == at::kBFloat16 || st == at::kLong, OP,
                  ": scale must be float32, bfloat16 or int64 (npu_trans_quant_param), got ", st);
      TORCH_CHECK(s.dim() == 1 && (s.size(0) == p.n_of(g) || s.size(0) == 1), OP, ": scale ", g,
                  " must be 1-D of N = ", p.n_of(g), " (per channel) or 1 (per tensor), got shape ", s.sizes());
    }
  }
  if (!p.per_token_scale.empty()) {
    TORCH_CHECK(p.per_token_scale.size() == p.x.size(), OP, ": per_token_scale must hold one tensor per x, got ",
                p.per_token_scale.size());
    for (size_t i = 0; i < p.x.size(); ++i) {
      const at::Tensor& t = p.per_token_scale[i];
      const int64_t rows = p.x[i].numel() / p.x[i].size(-1);
      TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == rows, OP,
                  ": per_token_scale must be float32 1-D of x's ", rows, " rows, got ", t.scalar_type(), " ",
                  t.sizes());
    }
  }
  if (p.form != Form::kAntiquant) return;
  TORCH_CHECK(count_ok(p.antiquant_scale), OP, ": antiquant_scale must hold one tensor per weight (one [G, N] or "
              "[G, groups, N] tensor for a [G, K, N] weight), got ", p.antiquant_scale.size(), " tensors");
  if (!p.antiquant_offset.empty())
    TORCH_CHECK(count_ok(p.antiquant_offset), OP, ": antiquant_offset must have antiquant_scale's form");
  for (int64_t g = 0; g < G; ++g) {
    const at::Tensor s = p.of(p.antiquant_scale, g);
    TORCH_CHECK(s.scalar_type() == p.x[0].scalar_type(), OP, ": antiquant_scale must have x's dtype ",
                p.x[0].scalar_type(), ", got ", s.scalar_type());
    TORCH_CHECK((s.dim() == 1 || (s.dim() == 2 && s.size(0) > 0 && K % s.size(0) == 0)) && s.size(-1) == p.n_of(g),
                OP, ": antiquant_scale ", g, " must be [N] (per channel) or [groups, N] with groups dividing K = ", K,
                " (per group), N = ", p.n_of(g), ", got shape ", s.sizes());
    if (!p.antiquant_offset.empty()) {
      const at::Tensor o = p.of(p.antiquant_offset, g);
      TORCH_CHECK(o.sizes() == s.sizes() && o.scalar_type() == s.scalar_type(), OP,
                  ": antiquant_offset must have antiquant_scale's shape and dtype, got ", o.sizes(), " ",
                  o.scalar_type());
    }
  }
  if (p.int4())
    for (const auto& w : p.weight)
      TORCH_CHECK(w.is_contiguous(), OP, ": an int4 weight (8 per int32 along N) must be contiguous");
}

// Checks the shapes and returns the outputs' shapes.
std::vector<std::vector<int64_t>> plan(Gmm& p) {
  const int64_t G = p.num_weights();
  for (const auto& w : p.weight)
    TORCH_CHECK(w.dim() == (p.single_weight() ? 3 : 2), OP, ": weight must be one [G, K, N] tensor or 2-D [K, N] "
                "tensors, got a tensor of shape ", w.sizes());
  std::vector<std::vector<int64_t>> shapes;
  if (p.group_type == 2) {
    TORCH_CHECK(p.has_groups(), OP, ": group_type 2 (k-axis) needs group_list");
    TORCH_CHECK(p.x.size() == 1 && p.x[0].dim() == 2 && p.weight.size() == 1 && p.weight[0].dim() == 2, OP,
                ": group_type 2 (k-axis) takes one 2-D x [M, K] and one 2-D weight [K, N], got ", p.x.size(),
                " x and ", p.weight.size(), " weight of shape ", p.weight[0].sizes());
    TORCH_CHECK(p.x[0].size(1) == p.weight[0].size(0), OP, ": x's K ", p.x[0].size(1), " must equal weight's K ",
                p.weight[0].size(0));
    TORCH_CHECK(p.group_list_type != 2, OP, ": group_list_type 2 only goes with group_type 0");
    TORCH_CHECK(p.bias.empty() && p.act_type == 0, OP, ": group_type 2 takes no bias and no activation");
    TORCH_CHECK(p.form == Form::kFloat, OP, ": group_type 2 (k-axis) takes float x and weight");
    const int64_t groups = p.list_len();
    const std::vector<int64_t> y{p.x[0].size(0), p.weight[0].size(1)};
    if (p.split_item >= 2) return {{groups, y[0], y[1]}};
    return std::vector<std::vector<int64_t>>(groups, y);
  }
  const int64_t K = p.single_weight() ? p.weight[0].size(1) : p.weight[0].size(0);
  for (int64_t g = 0; g < G; ++g)
    TORCH_CHECK(p.weight_of(g).size(0) == K, OP, ": every weight must have K = ", K, " rows, weight ", g, " has ",
                p.weight_of(g).size(0));
  for (const auto& t : p.x) {
    TORCH_CHECK(t.dim() >= 2 && t.dim() <= 6 && (p.split_item == 0 || t.dim() == 2), OP,
                ": x must be 2-D (2 to 6-D with split_item 0), got shape ", t.sizes());
    TORCH_CHECK(t.size(-1) == K, OP, ": x's last dim ", t.size(-1), " must equal weight's K ", K);
  }
  if (!p.bias.empty()) {
    const bool single = p.bias.size() == 1 && p.bias[0].dim() == 2;
    TORCH_CHECK(single ? p.bias[0].size(0) == G : static_cast<int64_t>(p.bias.size()) == G, OP,
                ": bias must hold one tensor per weight (", G, "), got ", single ? p.bias[0].size(0) : p.bias.size());
    for (int64_t g = 0; g < G; ++g)
      TORCH_CHECK(p.bias_of(g).dim() == 1 && p.bias_of(g).size(0) == p.n_of(g), OP, ": bias ", g,
                  " must be 1-D of weight's N = ", p.n_of(g), ", got shape ", p.bias_of(g).sizes());
    const auto bt = p.bias[0].scalar_type();
    TORCH_CHECK(p.form == Form::kQuant ? (bt == at::kInt || at::isFloatingType(bt)) : at::isFloatingType(bt), OP,
                ": bias must be ", p.form == Form::kQuant ? "int32 or floating" : "floating", ", got ", bt);
    TORCH_CHECK(bt == at::kInt || p.out_dtype != at::kChar, OP, ": a floating bias needs a float16 or bfloat16 output");
  }
  if (p.has_groups()) {
    TORCH_CHECK(p.x.size() == 1, OP, ": with group_list x must be one tensor, got ", p.x.size());
    if (p.group_tensor) {
      const auto& gl = *p.group_tensor;
      TORCH_CHECK(gl.scalar_type() == at::kLong, OP, ": group_list must be int64, got ", gl.scalar_type());
      if (p.group_list_type == 2) {
        TORCH_CHECK(gl.dim() == 2 && gl.size(1) == 2, OP, ": group_list of group_list_type 2 must be [E, 2], got ",
                    gl.sizes());
      } else {
        TORCH_CHECK(gl.dim() == 1 && gl.size(0) == G, OP, ": group_list must be 1-D with one entry per weight (", G,
                    "), got shape ", gl.sizes());
      }
    } else {
      TORCH_CHECK(static_cast<int64_t>(p.group_ints->size()) == G, OP, ": group_list must have one entry per weight (",
                  G, "), got ", p.group_ints->size());
      int64_t prev = 0;
      for (const int64_t v : *p.group_ints) {
        TORCH_CHECK(v >= prev, OP, ": group_list must be a non-negative, non-decreasing sequence, got ",
                    c10::IntArrayRef(*p.group_ints));
        prev = v;
      }
      TORCH_CHECK(prev <= p.x[0].size(0), OP, ": group_list's last entry ", prev, " exceeds x's ", p.x[0].size(0),
                  " rows");
    }
  } else {
    TORCH_CHECK(static_cast<int64_t>(p.x.size()) == G, OP, ": without group_list, x and weight must hold as many "
                "groups, got ", p.x.size(), " and ", G);
  }
  bool same_n = true;
  for (int64_t g = 0; g < G; ++g) same_n = same_n && p.n_of(g) == p.n();
  check_quantization(p, G, K);
  const int64_t rows = p.has_groups() ? p.x[0].size(0) : [&] {
    int64_t r = 0;
    for (const auto& t : p.x) r += t.numel() / t.size(-1);
    return r;
  }();
  if (p.split_item >= 2) {
    TORCH_CHECK(same_n, OP, ": split_item ", p.split_item, " (one output) needs every weight to have the same N");
    return {{rows, p.n()}};
  }
  if (p.split_item == 0) {
    for (size_t i = 0; i < p.x.size(); ++i) {
      auto s = p.x[i].sizes().vec();
      s.back() = p.has_groups() ? p.n() : p.n_of(i);
      if (p.has_groups()) TORCH_CHECK(same_n, OP, ": one x split in groups needs every weight to have the same N");
      shapes.push_back(s);
    }
    return shapes;
  }
  // split_item 1: one output per group, whose row counts only a list of ints gives at the call.
  if (!p.has_groups()) {
    for (size_t i = 0; i < p.x.size(); ++i) shapes.push_back({p.x[i].size(0), p.n_of(i)});
    return shapes;
  }
  TORCH_CHECK(p.group_ints.has_value(), OP, ": split_item 1 with one x needs group_list as a list of ints (the "
              "output sizes); with a Tensor group_list use split_item 2 or 3");
  int64_t prev = 0;
  for (int64_t g = 0; g < G; ++g) {
    shapes.push_back({(*p.group_ints)[g] - prev, p.n_of(g)});
    prev = (*p.group_ints)[g];
  }
  return shapes;
}

// (weight index, row count) of each group of the m-axis (or k-axis) split, read from group_list.
std::vector<std::pair<int64_t, int64_t>> group_entries(const Gmm& p, int64_t total) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (p.group_ints) {
    int64_t prev = 0;
    for (size_t g = 0; g < p.group_ints->size(); ++g) {
      out.emplace_back(g, (*p.group_ints)[g] - prev);
      prev = (*p.group_ints)[g];
    }
    return out;
  }
  const at::Tensor gl = p.group_tensor->contiguous();
  const int64_t* v = gl.data_ptr<int64_t>();
  int64_t sum = 0;
  if (p.group_list_type == 2) {
    for (int64_t e = 0; e < gl.size(0); ++e) {
      TORCH_CHECK(v[2 * e] >= 0 && v[2 * e] < p.num_weights() && v[2 * e + 1] >= 0, OP,
                  ": group_list pair ", e, " (", v[2 * e], ", ", v[2 * e + 1], ") is not (expert, count >= 0)");
      out.emplace_back(v[2 * e], v[2 * e + 1]);
      sum += v[2 * e + 1];
    }
  } else {
    int64_t prev = 0;
    for (int64_t g = 0; g < gl.size(0); ++g) {
      const int64_t count = p.group_list_type == 0 ? v[g] - prev : v[g];
      TORCH_CHECK(count >= 0, OP, ": group_list must be ",
                  p.group_list_type == 0 ? "non-negative and non-decreasing (cumulative sizes)" : "non-negative counts",
                  ", entry ", g, " is ", v[g]);
      out.emplace_back(g, count);
      prev = v[g];
      sum += count;
    }
  }
  TORCH_CHECK(sum <= total, OP, ": group_list covers ", sum, " rows but x has ", total);
  return out;
}

void activate(at::Tensor& y, int64_t act_type) {
  switch (act_type) {
    case 1: y.relu_(); break;
    case 2: y.copy_(at::gelu(y, "tanh")); break;
    case 4: y.mul_(at::sigmoid(y * 1.702)); break;  // fast_gelu: x * sigmoid(1.702 x)
    case 5: y.copy_(at::silu(y)); break;
    default: break;
  }
}

// One GEMM of the op: y [rows, N] (a view of an output) from x [rows, K] and w [K, N] (the weight, or the dequantized
// one), with the group's bias and, for an int8 x, its scale and the rows' per_token_scale.
struct Tile {
  at::Tensor y, x, w, b, scale, per_token;
};

// y = act(x @ w + b), computed in x's dtype then converted if they differ.
void float_product(const Tile& t, int64_t act_type) {
  at::Tensor y = t.y;
  const at::Tensor &x = t.x, &w = t.w, &b = t.b;
  if (x.size(1) == 0) {
    if (b.defined()) y.copy_(b.expand_as(y)); else y.zero_();
  } else if (y.scalar_type() == x.scalar_type() && y.is_contiguous()) {
    if (b.defined()) at::addmm_out(y, b.to(x.scalar_type()), x, w); else matmul_into(y, x, w);
  } else {
    y.copy_(b.defined() ? at::addmm(b.to(x.scalar_type()), x, w) : at::mm(x, w));
  }
  activate(y, act_type);
}

// Weight-only quantization: x @ w with w dequantized in x's dtype; a bias joins in float32 before the one rounding.
void antiquant_product(const Tile& t, int64_t act_type) {
  at::Tensor y = t.y;
  if (!t.b.defined()) at::mm_out(y, t.x, t.w);  // ATen's half GEMM: float32 accumulation, one rounding
  else y.copy_(at::addmm(t.b.to(at::kFloat), t.x.to(at::kFloat), t.w));  // t.w is float32 here
  activate(y, act_type);
}

// int8 x @ int8 w accumulated exactly in int32, then the documented dequantization in float32.
void quant_product(const Tile& t, int64_t act_type) {
  at::Tensor y = t.y;
  at::Tensor acc = at::_int_mm(t.x.contiguous(), t.w);
  const bool int_bias = t.b.defined() && t.b.scalar_type() == at::kInt;
  if (int_bias) acc.add_(t.b);
  if (y.scalar_type() == at::kInt) {
    y.copy_(acc);
    return;
  }
  at::Tensor f = acc.to(at::kFloat), offset;
  if (t.scale.scalar_type() == at::kLong) {
    auto [scale, off] = unpack_quant_param(t.scale);
    f.mul_(scale);
    offset = off;
  } else {
    f.mul_(t.scale.to(at::kFloat));
  }
  if (t.per_token.defined()) f.mul_(t.per_token.unsqueeze(1));
  if (t.b.defined() && !int_bias) f.add_(t.b.to(at::kFloat));
  if (y.scalar_type() == at::kChar) {
    if (offset.defined()) f.add_(offset);
    y.copy_(f.round_().clamp_(-128, 127));
    return;
  }
  y.copy_(f);
  activate(y, act_type);
}

// Weight e dequantized in x's dtype (antiquant.h), per channel ([N]) or per group of K / groups rows ([groups, N]).
at::Tensor antiquantize_weight(const Gmm& p, int64_t e) {
  const at::Tensor w = p.weight_of(e);
  const at::Tensor values = p.int4() ? unpack_int4(w) : w;
  const at::Tensor s = p.of(p.antiquant_scale, e);
  const int64_t groups = s.dim() == 2 ? s.size(0) : 1;
  const at::Tensor v = antiquantize(values, s, p.of(p.antiquant_offset, e), values.size(0) / groups,
                                    p.x[0].scalar_type());
  // With a bias the product is taken in float32 (the bias joins before the one rounding).
  return p.bias.empty() ? v : v.to(at::kFloat);
}

// The tiles' rows: about four tiles per compute thread over the op's rows (each tile's GEMM packs the group's
// weight again, so not many more), handed out largest first to whichever thread is free.
int64_t tile_rows(int64_t total_rows) {
  const int64_t per = total_rows / (4 * std::max(1, at::get_num_threads()));
  return std::clamp<int64_t>(per, 128, 1024);
}

void add_tiles(std::vector<Tile>& tiles, const Tile& group, int64_t rows_per_tile) {
  const int64_t rows = group.y.size(0);
  if (rows == 0 || group.y.size(1) == 0) return;
  for (int64_t r = 0; r < rows; r += rows_per_tile) {
    const int64_t n = std::min(rows_per_tile, rows - r);
    Tile t = group;
    t.y = group.y.narrow(0, r, n);
    t.x = group.x.narrow(0, r, n);
    if (group.per_token.defined()) t.per_token = group.per_token.narrow(0, r, n);
    tiles.push_back(std::move(t));
  }
}

std::vector<at::Tensor> compute(Gmm& p, std::vector<at::Tensor> ys) {
  // Each weight as its GEMMs take it.
  std::vector<at::Tensor> weights(p.num_weights());
  for (int64_t e = 0; e < p.num_weights(); ++e)
    weights[e] = p.form == Form::kAntiquant ? antiquantize_weight(p, e)
                 : p.form == Form::kQuant   ? p.weight_of(e).contiguous()
                                            : p.weight_of(e);
  const auto group = [&](at::Tensor y, at::Tensor x, int64_t e, at::Tensor per_token) {
    return Tile{std::move(y), std::move(x), weights[e], p.bias_of(e), p.of(p.scale, e), std::move(per_token)};
  };
  std::vector<Tile> groups;
  at::Tensor all;  // the one output holding every group's rows, whose rows past the last group are zero
  int64_t covered = 0;
  if (p.group_type == 2) {
    const at::Tensor& x = p.x[0];
    const at::Tensor& w = p.weight[0];
    const auto entries = group_entries(p, x.size(1));
    int64_t k0 = 0;
    for (size_t g = 0; g < entries.size(); ++g) {
      const int64_t kg = entries[g].second;
      groups.push_back(Tile{p.split_item >= 2 ? ys[0][g] : ys[g], x.narrow(1, k0, kg), w.narrow(0, k0, kg)});
      k0 += kg;
    }
  } else if (!p.has_groups()) {
    int64_t row = 0;
    for (size_t i = 0; i < p.x.size(); ++i) {
      const at::Tensor x = p.x[i].reshape({-1, p.x[i].size(-1)});
      at::Tensor y = p.split_item >= 2 ? ys[0].narrow(0, row, x.size(0)) : ys[i].view({-1, ys[i].size(-1)});
      groups.push_back(group(y, x, i, p.per_token_scale.empty() ? at::Tensor() : p.per_token_scale[i]));
      row += x.size(0);
    }
  } else {
    const at::Tensor x = p.x[0].reshape({-1, p.x[0].size(-1)});
    const at::Tensor per_token = p.per_token_scale.empty() ? at::Tensor() : p.per_token_scale[0];
    // One output holding every group's rows (split_item 0, 2, 3) or one per group (1).
    all = p.split_item == 1 ? at::Tensor() : ys[0].view({-1, ys[0].size(-1)});
    for (const auto& [e, count] : group_entries(p, x.size(0))) {
      at::Tensor y = all.defined() ? all.narrow(0, covered, count) : ys[groups.size()];
      groups.push_back(group(y, x.narrow(0, covered, count), e,
                             per_token.defined() ? per_token.narrow(0, covered, count) : at::Tensor()));
      covered += count;
    }
  }
  int64_t total = 0;
  for (const auto& g : groups) total += g.y.size(0);
  std::vector<Tile> tiles;
  const int64_t per_tile = tile_rows(total);
  for (const auto& g : groups) {
    if (g.x.size(1) == 0 && g.y.numel() > 0) {  // an empty k-axis group (or K = 0): zeros, or the bias
      float_product(g, p.act_type);
      continue;
    }
    add_tiles(tiles, g, per_tile);
  }
  // One GEMM per tile on one thread (ATen's GEMMs run single-threaded inside a parallel region), the largest tiles
  // first, each thread taking the next tile when it is done (groups of unequal sizes balance).
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.y.size(0) > b.y.size(0); });
  std::atomic<size_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), static_cast<int64_t>(tiles.size()));
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (size_t i = next++; i < tiles.size(); i = next++) {
      switch (p.form) {
        case Form::kFloat: float_product(tiles[i], p.act_type); break;
        case Form::kAntiquant: antiquant_product(tiles[i], p.act_type); break;
        case Form::kQuant: quant_product(tiles[i], p.act_type); break;
      }
    }
  });
  if (all.defined() && covered < all.size(0)) all.narrow(0, covered, all.size(0) - covered).zero_();
  return ys;
}

std::vector<at::Tensor> allocate(const Gmm& p, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<at::Tensor> ys;
  for (const auto& s : shapes) ys.push_back(at::empty(s, p.x[0].options().dtype(p.out_dtype)));
  return ys;
}

// The out= overloads' outputs, which must be exactly what the functional op returns (contiguous: the products are
// written into row ranges of them).
std::vector<at::Tensor> outputs_given(const Gmm& p, const std::vector<std::vector<int64_t>>& shapes,
                                      at::TensorList out) {
  TORCH_CHECK(out.size() == shapes.size(), OP, ".out: expected ", shapes.size(), " outputs, got ", out.size());
  for (size_t i = 0; i < shapes.size(); ++i)
    TORCH_CHECK(out[i].sizes() == c10::IntArrayRef(shapes[i]) && out[i].scalar_type() == p.out_dtype &&
                    out[i].is_contiguous(),
                OP, ".out: output ", i, " must be contiguous ", c10::IntArrayRef(shapes[i]), " of ", p.out_dtype,
                ", got ", out[i].sizes(), " of ", out[i].scalar_type());
  return out.vec();
}

#define GMM_ARGS                                                                                                   \
  at::TensorList x, at::TensorList weight, const OptList &bias, const OptList &scale, const OptList &offset,      \
      const OptList &antiquant_scale, const OptList &antiquant_offset, const OptList &per_token_scale
#define GMM_TAIL                                                                                                   \
  const OptList &activation_input, const OptList &activation_quant_scale, const OptList &activation_quant_offset, \
      std::optional<int64_t> split_item, std::optional<int64_t> group_type, std::optional<int64_t> group_list_type, \
      std::optional<int64_t> act_type
#define GMM_PARSE(list_overload)                                                                                   \
  parse(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, activation_input,      \
        activation_quant_scale, activation_quant_offset, split_item, group_type, group_list_type, act_type,         \
        output_dtype, list_overload)

std::vector<at::Tensor> gmm_impl(GMM_ARGS, const std::optional<at::Tensor>& group_list, GMM_TAIL,
                                 at::OptionalIntArrayRef tuning_config, std::optional<c10::ScalarType> output_dtype,
                                 std::optional<int64_t> x_dtype, std::optional<int64_t> weight_dtype,
                                 std::optional<int64_t> scale_dtype, std::optional<int64_t> per_token_scale_dtype,
                                 bool meta, const std::optional<at::TensorList>& out = std::nullopt) {
  TORCH_CHECK_NOT_IMPLEMENTED(!x_dtype && !weight_dtype && !scale_dtype && !per_token_scale_dtype, OP,
                              ": x_dtype, weight_dtype, scale_dtype and per_token_scale_dtype (hifloat8, mxfp4) are "
                              "not supported by softnpu");
  Gmm p = GMM_PARSE(false);
  if (given(group_list)) p.group_tensor = *group_list;
  TORCH_CHECK(group_type.has_value() || !p.group_tensor, OP, ": Requires manual passing group_type, current is None.");
  if (!p.group_tensor && p.group_type == 0 && p.x.size() == 1 && p.num_weights() > 1)
    TORCH_CHECK(false, OP, ": group_type 0 with one x and ", p.num_weights(), " weights needs group_list");
  const auto ys = out ? outputs_given(p, plan(p), *out) : allocate(p, plan(p));
  return meta ? ys : compute(p, ys);
}

std::vector<at::Tensor> gmm_list_impl(GMM_ARGS, at::OptionalIntArrayRef group_list, GMM_TAIL,
                                      std::optional<c10::ScalarType> output_dtype, bool meta,
                                      const std::optional<at::TensorList>& out = std::nullopt) {
  Gmm p = GMM_PARSE(true);
  if (group_list.has_value()) p.group_ints = group_list->vec();
  const auto ys = out ? outputs_given(p, plan(p), *out) : allocate(p, plan(p));
  return meta ? ys : compute(p, ys);
}

std::vector<at::Tensor> gmm_meta(GMM_ARGS, const std::optional<at::Tensor>& group_list, GMM_TAIL,
                                 at::OptionalIntArrayRef tuning_config, std::optional<c10::ScalarType> output_dtype,
                                 std::optional<int64_t> x_dtype, std::optional<int64_t> weight_dtype,
                                 std::optional<int64_t> scale_dtype, std::optional<int64_t> per_token_scale_dtype) {
  return gmm_impl(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                  activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                  group_list_type, act_type, tuning_config, output_dtype, x_dtype, weight_dtype, scale_dtype,
                  per_token_scale_dtype, true);
}

std::vector<at::Tensor> gmm_cpu(GMM_ARGS, const std::optional<at::Tensor>& group_list, GMM_TAIL,
                                at::OptionalIntArrayRef tuning_config, std::optional<c10::ScalarType> output_dtype,
                                std::optional<int64_t> x_dtype, std::optional<int64_t> weight_dtype,
                                std::optional<int64_t> scale_dtype, std::optional<int64_t> per_token_scale_dtype) {
  return gmm_impl(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                  activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                  group_list_type, act_type, tuning_config, output_dtype, x_dtype, weight_dtype, scale_dtype,
                  per_token_scale_dtype, false);
}

std::vector<at::Tensor> gmm_list_meta(GMM_ARGS, at::OptionalIntArrayRef group_list, GMM_TAIL,
                                      std::optional<c10::ScalarType> output_dtype) {
  return gmm_list_impl(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                       activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                       group_list_type, act_type, output_dtype, true);
}

std::vector<at::Tensor> gmm_list_cpu(GMM_ARGS, at::OptionalIntArrayRef group_list, GMM_TAIL,
                                     std::optional<c10::ScalarType> output_dtype) {
  return gmm_list_impl(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                       activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                       group_list_type, act_type, output_dtype, false);
}

void gmm_out_cpu(GMM_ARGS, const std::optional<at::Tensor>& group_list, GMM_TAIL, at::OptionalIntArrayRef tuning_config,
                 std::optional<c10::ScalarType> output_dtype, std::optional<int64_t> x_dtype,
                 std::optional<int64_t> weight_dtype, std::optional<int64_t> scale_dtype,
                 std::optional<int64_t> per_token_scale_dtype, at::TensorList out) {
  gmm_impl(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
           activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type, group_list_type,
           act_type, tuning_config, output_dtype, x_dtype, weight_dtype, scale_dtype, per_token_scale_dtype, false,
           out);
}

void gmm_list_out_cpu(GMM_ARGS, at::OptionalIntArrayRef group_list, GMM_TAIL,
                      std::optional<c10::ScalarType> output_dtype, at::TensorList out) {
  gmm_list_impl(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                group_list_type, act_type, output_dtype, false, out);
}

// ------------------------------------------------------------------------------------------------------- autograd

using GmmSig = std::vector<at::Tensor>(at::TensorList, at::TensorList, const OptList&, const OptList&, const OptList&,
                                       const OptList&, const OptList&, const OptList&,
                                       const std::optional<at::Tensor>&, const OptList&, const OptList&,
                                       const OptList&, std::optional<int64_t>, std::optional<int64_t>,
                                       std::optional<int64_t>, std::optional<int64_t>, at::OptionalIntArrayRef,
                                       std::optional<c10::ScalarType>, std::optional<int64_t>,
                                       std::optional<int64_t>, std::optional<int64_t>, std::optional<int64_t>);
using GmmListSig = std::vector<at::Tensor>(at::TensorList, at::TensorList, const OptList&, const OptList&,
                                           const OptList&, const OptList&, const OptList&, const OptList&,
                                           at::OptionalIntArrayRef, const OptList&, const OptList&, const OptList&,
                                           std::optional<int64_t>, std::optional<int64_t>, std::optional<int64_t>,
                                           std::optional<int64_t>, std::optional<c10::ScalarType>);

// The float, unquantized call the backward makes: y = grouped_matmul(x, weight) with the forward's grouping.
std::vector<at::Tensor> call_gmm(at::TensorList x, at::TensorList weight, const at::Tensor& group_tensor,
                                 const std::optional<std::vector<int64_t>>& group_ints, int64_t group_type,
                                 int64_t group_list_type, c10::ScalarType out_dtype) {
  static const auto op = npu_op<GmmSig>("npu::npu_grouped_matmul");
  static const auto list_op = npu_op<GmmListSig>("npu::npu_grouped_matmul", "List");
  if (group_ints)
    return list_op.call(x, weight, {}, {}, {}, {}, {}, {}, at::IntArrayRef(*group_ints), {}, {}, {}, 3, std::nullopt,
                        0, 0, out_dtype);
  return op.call(x, weight, {}, {}, {}, {}, {}, {}, group_tensor, {}, {}, {}, 3, group_type, group_list_type, 0,
                 std::nullopt, out_dtype, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
}

struct GmmConfig {
  std::function<std::vector<at::Tensor>()> forward;  // the op below autograd (during apply only)
  std::optional<at::Tensor> group_tensor;
  std::optional<std::vector<int64_t>> group_ints;
  int64_t split_item, group_type, group_list_type, act_type;
  bool single_weight, single_bias;
};

class GmmFunction : public torch::autograd::Function<GmmFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList x,
                                                at::TensorList weight, at::TensorList bias,
                                                const std::shared_ptr<GmmConfig>& cfg) {
    std::vector<at::Tensor> ys;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      ys = cfg->forward();
    }
    std::vector<at::Tensor> saved(x.begin(), x.end());
    saved.insert(saved.end(), weight.begin(), weight.end());
    if (cfg->group_tensor) saved.push_back(*cfg->group_tensor);
    ctx->save_for_backward(saved);
    ctx->saved_data["nx"] = static_cast<int64_t>(x.size());
    ctx->saved_data["nw"] = static_cast<int64_t>(weight.size());
    ctx->saved_data["nbias"] = static_cast<int64_t>(bias.size());
    if (cfg->group_ints) ctx->saved_data["group_ints"] = *cfg->group_ints;
    ctx->saved_data["group_type"] = cfg->group_type;
    ctx->saved_data["group_list_type"] = cfg->group_list_type;
    ctx->saved_data["act_type"] = cfg->act_type;
    ctx->saved_data["single_weight"] = cfg->single_weight;
    ctx->saved_data["single_bias"] = cfg->single_bias;
    return ys;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto& data = ctx->saved_data;
    const auto saved = ctx->get_saved_variables();
    const int64_t nx = data["nx"].toInt(), nw = data["nw"].toInt(), nbias = data["nbias"].toInt();
    const std::vector<at::Tensor> xs(saved.begin(), saved.begin() + nx);
    const std::vector<at::Tensor> ws(saved.begin() + nx, saved.begin() + nx + nw);
    GmmConfig c;
    if (static_cast<int64_t>(saved.size()) > nx + nw) c.group_tensor = saved.back();
    if (data.count("group_ints")) c.group_ints = data["group_ints"].toIntVector();
    c.group_type = data["group_type"].toInt();
    c.group_list_type = data["group_list_type"].toInt();
    c.act_type = data["act_type"].toInt();
    c.single_weight = data["single_weight"].toBool();
    c.single_bias = data["single_bias"].toBool();
    const GmmConfig* cfg = &c;
    TORCH_CHECK(cfg->group_type != 2 && cfg->act_type == 0 && cfg->group_list_type != 2, OP,
                ": the backward covers group_type -1 and 0, without activation and group_list_type 2");
    TORCH_CHECK(at::isFloatingType(ws[0].scalar_type()), OP,
                ": the quantized forms (int8 / int4 weights) have no backward");
    const auto dt = xs[0].scalar_type();
    // The outputs' gradients as rows [M, N] aligned with x's rows.
    std::vector<at::Tensor> rows;
    for (const auto& g : grads) rows.push_back(g.reshape({-1, g.size(-1)}).to(dt));
    at::Tensor dy = rows.size() == 1 ? rows[0] : at::cat(rows, 0);
    std::vector<at::Tensor> x_rows;
    for (const auto& t : xs) x_rows.push_back(t.reshape({-1, t.size(-1)}));
    at::Tensor x = x_rows.size() == 1 ? x_rows[0] : at::cat(x_rows, 0);
    // split_item 1 returns only the grouped rows; the rows past the last group had no effect.
    if (dy.size(0) < x.size(0)) dy = at::cat({dy, dy.new_zeros({x.size(0) - dy.size(0), dy.size(1)})}, 0);
    // Without group_list the groups are x's tensors: their cumulative row counts are the list form's group_list.
    auto group_ints = cfg->group_ints;
    if (!cfg->group_tensor && !group_ints) {
      group_ints.emplace();
      int64_t r = 0;
      for (const auto& t : x_rows) group_ints->push_back(r += t.size(0));
    }
    const at::Tensor gt = cfg->group_tensor.value_or(at::Tensor());
    const int64_t gtype = cfg->group_list_type;
    std::vector<at::Tensor> wt;
    if (cfg->single_weight) wt.push_back(ws[0].transpose(1, 2));
    else for (const auto& w : ws) wt.push_back(w.t());
    const at::Tensor dx_rows = call_gmm({dy}, wt, gt, group_ints, 0, gtype, dt)[0];
    // k-axis products over each group's rows: dweight_g = x_g^T dy_g, dbias_g = 1^T dy_g.
    const auto k_split = [&](const at::Tensor& lhs) {
      if (group_ints) {
        const at::Tensor cumulative = at::tensor(*group_ints, at::kLong).to(lhs.device());
        return call_gmm({lhs}, {dy}, cumulative, std::nullopt, 2, 0, dt)[0];
      }
      return call_gmm({lhs}, {dy}, gt, std::nullopt, 2, gtype, dt)[0];
    };
    const at::Tensor dw = k_split(x.t());
    torch::autograd::variable_list out;
    int64_t r = 0;
    for (const auto& t : xs) {
      const int64_t n = t.numel() / t.size(-1);
      out.push_back(dx_rows.narrow(0, r, n).view(t.sizes()));
      r += n;
    }
    if (cfg->single_weight) out.push_back(dw);
    else for (int64_t g = 0; g < dw.size(0); ++g) out.push_back(dw[g]);
    if (nbias > 0) {
      const at::Tensor db = k_split(at::ones({1, x.size(0)}, x.options())).squeeze(1);
      if (cfg->single_bias) out.push_back(db);
      else for (int64_t g = 0; g < db.size(0); ++g) out.push_back(db[g]);
    }
    out.emplace_back();  // cfg
    return out;
  }

};

bool needs_grad(at::TensorList a, const OptList& b) {
  for (const auto& t : a) if (t.requires_grad()) return true;
  if (b) for (const auto& t : *b) if (t.requires_grad()) return true;
  return false;
}

std::vector<at::Tensor> gmm_autograd(GMM_ARGS, const std::optional<at::Tensor>& group_list, GMM_TAIL,
                                     at::OptionalIntArrayRef tuning_config,
                                     std::optional<c10::ScalarType> output_dtype, std::optional<int64_t> x_dtype,
                                     std::optional<int64_t> weight_dtype, std::optional<int64_t> scale_dtype,
                                     std::optional<int64_t> per_token_scale_dtype) {
  static const auto op = npu_op<GmmSig>("npu::npu_grouped_matmul");
  auto cfg = std::make_shared<GmmConfig>();
  cfg->forward = [&] {
    return op.call(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                   activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                   group_list_type, act_type, tuning_config, output_dtype, x_dtype, weight_dtype, scale_dtype,
                   per_token_scale_dtype);
  };
  if (!needs_grad(x, std::nullopt) && !needs_grad(weight, bias)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return cfg->forward();
  }
  if (given(group_list)) cfg->group_tensor = *group_list;
  cfg->split_item = split_item.value_or(0);
  cfg->group_type = group_type.value_or(-1);
  cfg->group_list_type = group_list_type.value_or(0);
  cfg->act_type = act_type.value_or(0);
  cfg->single_weight = weight.size() == 1 && weight[0].dim() == 3;
  cfg->single_bias = bias && bias->size() == 1 && (*bias)[0].dim() == 2;
  auto ys = GmmFunction::apply(x, weight, bias.value_or(at::TensorList()), cfg);
  cfg->forward = nullptr;
  return ys;
}

std::vector<at::Tensor> gmm_list_autograd(GMM_ARGS, at::OptionalIntArrayRef group_list, GMM_TAIL,
                                          std::optional<c10::ScalarType> output_dtype) {
  static const auto op = npu_op<GmmListSig>("npu::npu_grouped_matmul", "List");
  auto cfg = std::make_shared<GmmConfig>();
  cfg->forward = [&] {
    return op.call(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, group_list,
                   activation_input, activation_quant_scale, activation_quant_offset, split_item, group_type,
                   group_list_type, act_type, output_dtype);
  };
  if (!needs_grad(x, std::nullopt) && !needs_grad(weight, bias)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return cfg->forward();
  }
  if (group_list.has_value()) cfg->group_ints = group_list->vec();
  cfg->split_item = split_item.value_or(0);
  cfg->group_type = 0;
  cfg->group_list_type = 0;
  cfg->act_type = act_type.value_or(0);
  cfg->single_weight = weight.size() == 1 && weight[0].dim() == 3;
  cfg->single_bias = bias && bias->size() == 1 && (*bias)[0].dim() == 2;
  auto ys = GmmFunction::apply(x, weight, bias.value_or(at::TensorList()), cfg);
  cfg->forward = nullptr;
  return ys;
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_grouped_matmul", gmm_meta);
  m.impl("npu_grouped_matmul.List", gmm_list_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_grouped_matmul", gmm_cpu);
  m.impl("npu_grouped_matmul.List", gmm_list_cpu);
  m.impl("npu_grouped_matmul.out", gmm_out_cpu);
  m.impl("npu_grouped_matmul.List_out", gmm_list_out_cpu);
}

TORCH_LIBRARY_IMPL(npu, Autograd, m) {
  m.impl("npu_grouped_matmul", gmm_autograd);
  m.impl("npu_grouped_matmul.List", gmm_list_autograd);
}

}  // namespace softnpu::fused
