// npu_moe_init_routing_v2(x, expert_idx, *, scale, offset, active_num, expert_capacity, expert_num, drop_pad_mode,
// expert_tokens_num_type, expert_tokens_num_flag, quant_mode, active_expert_range, row_idx_type, x_dtype)
//   -> (expanded_x, expanded_row_idx, expert_token_cumsum_or_count, expanded_scale)
// The MoE dispatch of torch_npu's documentation (aclnnMoeInitRoutingV3 and its Python equivalent): the (token, k)
// pairs of expert_idx [N, K] whose expert lies in active_expert_range [start, end) are sorted by expert, stably (a
// counting sort: pairs of one expert keep their order), and sorted row p holds x[token of pair p], quantized to int8
// with quant_mode 0 (static) or 1 (dynamic, per row), or by the MXFP8 / MXFP4 / int4 modes of init_routing_quant.h.
// Unquantized, rows are copied as bytes: x_dtype (hifloat8, float4_e2m1fn_x2 in uint8) and float8 x are routed
// untouched, with their MX scales ([N, ceil(H / 64), 2] float8_e8m0) when given.
//   dropless (drop_pad_mode 0): expanded_x [R, H], R = N*K (active_num <= 0) or min(active_num, N*K); the first
//     min(R, available) rows are routed, the rest zero. row_idx_type 0 (gather): expanded_row_idx[pair] = its row,
//     -1 for pairs out of the range; 1 (scatter): expanded_row_idx[row] = its pair (the pairs out of the range follow
//     in order, where torch_npu leaves them undefined).
//   drop/pad (drop_pad_mode 1): expanded_x [expert_num, expert_capacity, H]: each expert's first expert_capacity
//     pairs, zero padded; expanded_row_idx[pair] = expert * capacity + slot, -1 for a dropped pair.
// expert_token_cumsum_or_count (int64): per expert of the range, its pair count (type 1), their cumulative sum (0),
// or [expert_num, 2] (expert, count) pairs of the experts with a count, first, then zeros (2); drop/pad counts before
// the capacity. expanded_scale (float32, one per row): quant_mode 1 the dynamic scale, -1 scale[token] when scale is
// given, zeros otherwise (the other modes: init_routing_quant.h).
// The arguments that select a kernel template on the chip (the hardware strategies) change nothing here; the counts
// are always computed (torch_npu leaves them undefined with expert_tokens_num_flag False). An inference op: no
// backward.
#include <ATen/ATen.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <cstring>

#include "fused/common.h"
#include "fused/moe/init_routing_quant.h"
#include "fused/moe/row_copy.h"

// torch_npu's schema (op_plugin_functions.yaml: argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_moe_init_routing_v2(Tensor x, Tensor expert_idx, *, Tensor? scale=None, Tensor? offset=None, "
        "int active_num=-1, int expert_capacity=-1, int expert_num=-1, int drop_pad_mode=0, "
        "int expert_tokens_num_type=0, bool expert_tokens_num_flag=False, int quant_mode=-1, "
        "int[2] active_expert_range=[], int row_idx_type=0, int? x_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)");
  // The out= form lets the op path write the results straight into the device outputs (no copy).
  m.def("npu_moe_init_routing_v2.out(Tensor x, Tensor expert_idx, *, Tensor? scale=None, Tensor? offset=None, "
        "int active_num=-1, int expert_capacity=-1, int expert_num=-1, int drop_pad_mode=0, "
        "int expert_tokens_num_type=0, bool expert_tokens_num_flag=False, int quant_mode=-1, "
        "int[2] active_expert_range=[], int row_idx_type=0, int? x_dtype=None, Tensor(a!) out0, Tensor(b!) out1, "
        "Tensor(c!) out2, Tensor(d!) out3) -> (Tensor(a!), Tensor(b!), Tensor(c!), Tensor(d!))");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_moe_init_routing_v2";
constexpr int64_t kUnquantized = -1, kStatic = 0, kDynamic = 1, kInt4Dynamic = 13;
// torch_npu's DType numbers of x_dtype: the types torch has no dtype for, carried in uint8.
constexpr int64_t kDTypeInt4 = 285, kDTypeHiFloat8 = 290, kDTypeFloat4E2M1 = 296;

struct Routing {
  int64_t n, k, h, start, end, expert_num, capacity, rows, quant, row_idx_type, count_type;
  bool drop_pad;
  c10::ScalarType x_type;
  // Unquantized x of float8 / float4 values carries its MX scales ([N, ceil(H / 64), 2] e8m0 bytes) row by row.
  bool mx_scales = false;
  int64_t values = 0;  // H in values (twice x's columns for float4 pairs)

  bool tensor_quant() const { return routing_quant::quantized(quant); }
  int64_t scale_rows() const { return drop_pad ? expert_num * capacity : rows; }
  std::vector<int64_t> x_shape() const {
    const int64_t cols = tensor_quant() ? routing_quant::x_cols(routing_quant::mode_of(quant), h) : h;
    return drop_pad ? std::vector<int64_t>{expert_num, capacity, cols} : std::vector<int64_t>{rows, cols};
  }
  std::vector<int64_t> count_shape() const {
    return count_type == 2 ? std::vector<int64_t>{expert_num, 2} : std::vector<int64_t>{end - start};
  }
  c10::ScalarType out_type() const {
    if (tensor_quant()) return routing_quant::x_type(routing_quant::mode_of(quant));
    return quant == kUnquantized ? x_type : at::kChar;
  }
  std::vector<int64_t> scale_shape() const {
    if (tensor_quant()) return routing_quant::scale_shape(routing_quant::mode_of(quant), scale_rows(), h);
    if (mx_scales) return {scale_rows(), routing_quant::ceil_div(values, 64), 2};
    return {scale_rows()};
  }
  c10::ScalarType scale_type() const {
    if (tensor_quant()) return routing_quant::scale_type(routing_quant::mode_of(quant));
    return mx_scales ? at::kByte : at::kFloat;
  }
};

Routing check(const at::Tensor& x, const at::Tensor& expert_idx, const std::optional<at::Tensor>& scale,
              const std::optional<at::Tensor>& offset, int64_t active_num, int64_t expert_capacity, int64_t expert_num,
              int64_t drop_pad_mode, int64_t expert_tokens_num_type, int64_t quant_mode,
              at::IntArrayRef active_expert_range, int64_t row_idx_type, std::optional<int64_t> x_dtype) {
  TORCH_CHECK(x.dim() == 2, OP, ": The x should be 2-Dimension, current is ", x.dim(), "-Dimension.");
  TORCH_CHECK(expert_idx.dim() == 2, OP, ": The expert_idx should be 2-Dimension, current is ", expert_idx.dim(),
              "-Dimension.");
  TORCH_CHECK(x.size(0) == expert_idx.size(0), OP, ": the first dim of expert_idx and x should be the same, got ",
              expert_idx.size(0), " and ", x.size(0));
  TORCH_CHECK(expert_idx.scalar_type() == at::kInt, OP, ": expert_idx must be int32, got ", expert_idx.scalar_type());
  const auto xt = x.scalar_type();
  const bool fp8_x = xt == at::kFloat8_e4m3fn || xt == at::kFloat8_e5m2;
  if (x_dtype.has_value()) {
    // x_dtype names what a uint8 x holds (routed as bytes), or mode 13's int4 output.
    TORCH_CHECK(quant_mode != kDynamic || *x_dtype != kDTypeInt4, OP,
                ": INT4 dynamic quantization uses quant_mode=13. quant_mode=1 only supports INT8 dynamic "
                "quantization.");
    if (quant_mode == kInt4Dynamic) {
      TORCH_CHECK(*x_dtype == kDTypeInt4, OP,
                  ": The optional parameter x_dtype must be torch_npu.int4 or None when quant_mode=13.");
    } else {
      TORCH_CHECK(quant_mode == kUnquantized, OP, ": x_dtype is only taken without quantization (quant_mode -1) "
                  "or with quant_mode 13 (torch_npu.int4), got quant_mode ", quant_mode);
      TORCH_CHECK(*x_dtype == kDTypeHiFloat8 || *x_dtype == kDTypeFloat4E2M1, OP,
                  ": x_dtype must be torch_npu.hifloat8 (290) or torch_npu.float4_e2m1fn_x2 (296), got ", *x_dtype);
      TORCH_CHECK(xt == at::kByte || xt == at::kChar || (*x_dtype == kDTypeFloat4E2M1 && xt == at::kFloat4_e2m1fn_x2),
                  OP, ": an x of x_dtype ", *x_dtype, " is carried in uint8, got ", xt);
    }
  }
  const bool byte_x = x_dtype.has_value() && quant_mode == kUnquantized;
  TORCH_CHECK(byte_x || fp8_x || xt == at::kHalf || xt == at::kBFloat16 || xt == at::kFloat || xt == at::kChar, OP,
              ": x must be float16, bfloat16, float32, int8, float8_e4m3fn or float8_e5m2 (or uint8 with x_dtype), "
              "got ", xt);
  TORCH_CHECK(drop_pad_mode == 0 || drop_pad_mode == 1, OP, ": drop_pad_mode must be in [0, 1], got ", drop_pad_mode);
  TORCH_CHECK(expert_tokens_num_type >= 0 && expert_tokens_num_type <= 2, OP,
              ": expert_tokens_num_type must be in [0, 1, 2], got ", expert_tokens_num_type);
  TORCH_CHECK(row_idx_type == 0 || row_idx_type == 1, OP, ": row_idx_type must be in [0, 1], got ", row_idx_type);
  TORCH_CHECK((quant_mode >= -1 && quant_mode <= 9) || (quant_mode >= 11 && quant_mode <= 17), OP,
              ": quant_mode must be in [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17], got ",
              quant_mode);
  TORCH_CHECK_NOT_IMPLEMENTED(quant_mode != 11 && quant_mode != 12, OP, ": quant_mode ", quant_mode,
                              " (FP8 PerBlock) is not supported by softnpu: torch_npu documents only its name, and "
                              "op-plugin's reference for it does not run");
  const int64_t max_experts = expert_tokens_num_type == 2 ? 5120 : 10240;
  TORCH_CHECK(expert_num >= 0 && expert_num <= max_experts, OP, ": expert_num must be in [0, ", max_experts,
              "], got ", expert_num);
  Routing r{};
  r.n = x.size(0);
  r.k = expert_idx.size(1);
  r.h = x.size(1);
  r.x_type = xt;
  r.expert_num = expert_num;
  r.quant = quant_mode;
  r.row_idx_type = row_idx_type;
  r.count_type = expert_tokens_num_type;
  r.drop_pad = drop_pad_mode == 1;
  if (active_expert_range.empty()) {
    r.start = 0;
    r.end = expert_num;
  } else {
    TORCH_CHECK(active_expert_range.size() == 2, OP,
                ": The length of list active_expert_range should be 2, current is ", active_expert_range.size(), ".");
    r.start = active_expert_range[0];
    r.end = active_expert_range[1];
    TORCH_CHECK(r.start >= 0 && r.start < r.end && r.end <= expert_num, OP,
                ": active_expert_range must be [expert_start, expert_end) with 0 <= expert_start < expert_end <= "
                "expert_num (", expert_num, "), got ", active_expert_range);
  }
  if (r.drop_pad) {
    TORCH_CHECK(r.start == 0 && r.end == expert_num, OP, ": drop_pad_mode 1 takes the whole expert range [0, ",
                expert_num, "), got [", r.start, ", ", r.end, ")");
    TORCH_CHECK(expert_capacity > 0 && expert_capacity <= r.n, OP,
                ": expert_capacity must be in [1, NUM_ROWS] with drop_pad_mode 1, got ", expert_capacity);
    TORCH_CHECK(row_idx_type == 0 && expert_tokens_num_type == 1, OP,
                ": drop_pad_mode 1 takes row_idx_type 0 and expert_tokens_num_type 1 (count)");
    r.capacity = expert_capacity;
  }
  r.rows = active_num <= 0 ? r.n * r.k : std::min(active_num, r.n * r.k);
  r.values = byte_x && *x_dtype == kDTypeFloat4E2M1 ? 2 * r.h : r.h;
  TORCH_CHECK((xt != at::kChar && !fp8_x && !byte_x) || quant_mode == kUnquantized, OP,
              ": an int8 or float8 x is only routed (quant_mode -1): quantizing it gives meaningless values on "
              "torch_npu too");
  if (routing_quant::quantized(quant_mode)) {
    TORCH_CHECK(!r.drop_pad, OP, ": quant_mode ", quant_mode, " only supports drop_pad_mode=0.");
    TORCH_CHECK(!given(offset), OP, ": quant_mode ", quant_mode, " takes no offset");
    if (quant_mode == kInt4Dynamic) {
      TORCH_CHECK(xt == at::kFloat || xt == at::kBFloat16, OP,
                  ": INT4 dynamic quantization only supports float32 or bfloat16 x.");
      TORCH_CHECK(r.h % 2 == 0, OP, ": INT4 dynamic quantization requires the hidden size of x to be even.");
      if (given(scale))
        TORCH_CHECK(scale->scalar_type() == at::kFloat && scale->dim() == 2 && scale->size(0) == 1 &&
                        scale->size(1) == r.h,
                    OP, ": INT4 dynamic quantization takes a float32 scale of shape (1, H) = (1, ", r.h, "), got ",
                    scale->scalar_type(), " ", scale->sizes());
    } else if (quant_mode == 7) {
      TORCH_CHECK(given(scale) && scale->scalar_type() == at::kFloat && scale->dim() == 1 && scale->size(0) == 1, OP,
                  ": HiFloat8 per-tensor quantization (quant_mode 7) needs a float32 scale of shape (1,)");
    } else {
      TORCH_CHECK(!given(scale), OP, ": quant_mode ", quant_mode, " computes its scales and takes no scale");
    }
    TORCH_CHECK(xt == at::kHalf || xt == at::kBFloat16 || xt == at::kFloat, OP, ": quant_mode ", quant_mode,
                " takes float16, bfloat16 or float32 x, got ", xt);
    if (quant_mode == 9) {
      TORCH_CHECK(xt == at::kHalf || xt == at::kBFloat16, OP, ": MXFP4 quantization (quant_mode 9) takes float16 or "
                  "bfloat16 x here (npu_dynamic_mx_quant's), got ", xt);
      TORCH_CHECK(r.h % 2 == 0, OP, ": MXFP4 quantization requires the hidden size of x to be even.");
    }
  } else if (quant_mode == kUnquantized) {
    TORCH_CHECK(!given(offset), OP, ": offset is not taken without quantization (quant_mode -1)");
    r.mx_scales = fp8_x || (byte_x && *x_dtype == kDTypeFloat4E2M1);
    if (given(scale) && r.mx_scales) {
      const std::vector<int64_t> want{r.n, routing_quant::ceil_div(r.values, 64), 2};
      TORCH_CHECK((scale->scalar_type() == at::kByte || scale->scalar_type() == at::kFloat8_e8m0fnu) &&
                      scale->sizes() == at::IntArrayRef(want),
                  OP, ": the MX scales of a float8 / float4 x are float8_e8m0 (or uint8) of shape ", want, ", got ",
                  scale->scalar_type(), " ", scale->sizes());
    } else if (given(scale)) {
      TORCH_CHECK(scale->scalar_type() == at::kFloat && scale->dim() == 1 && scale->size(0) == r.n, OP,
                  ": without quantization scale must be float32 (NUM_ROWS,) = (", r.n, ",), got ",
                  scale->scalar_type(), " ", scale->sizes());
    }
  } else if (quant_mode == kStatic) {
    TORCH_CHECK(given(scale) && given(offset), OP, ": static quantization (quant_mode 0) needs scale and offset");
    for (const auto* t : {&*scale, &*offset})
      TORCH_CHECK(t->scalar_type() == at::kFloat && t->dim() == 1 && t->size(0) == 1, OP,
                  ": static quantization takes a float32 scale and offset of shape (1,), got ", t->scalar_type(), " ",
                  t->sizes());
  } else {
    TORCH_CHECK(!given(offset), OP, ": dynamic quantization (quant_mode 1) takes no offset");
    if (given(scale))
      TORCH_CHECK(scale->scalar_type() == at::kFloat && scale->dim() == 2 && scale->size(1) == r.h &&
                      (scale->size(0) == 1 || scale->size(0) == r.end - r.start),
                  OP, ": dynamic quantization takes a float32 scale of shape (1, H) or (expert_end - expert_start, H) "
                  "= (", r.end - r.start, ", ", r.h, "), got ", scale->scalar_type(), " ", scale->sizes());
  }
  return r;
}

// The pairs sorted by expert (stably), those out of the range after them in order; how many are in the range; and
// each expert's pair count.
struct Sorted {
  std::vector<int32_t> pairs;
  std::vector<int32_t> experts;  // the expert of each sorted pair in the range
  std::vector<int64_t> counts;
  int64_t available = 0;
};

Sorted sort_pairs(const at::Tensor& expert_idx, const Routing& r) {
  const at::Tensor e = expert_idx.contiguous();
  const int32_t* id = e.data_ptr<int32_t>();
  const int64_t total = r.n * r.k, experts = r.end - r.start;
  Sorted s;
  s.counts.assign(experts, 0);
  for (int64_t i = 0; i < total; ++i)
    if (id[i] >= r.start && id[i] < r.end) ++s.counts[id[i] - r.start];
  std::vector<int64_t> next(experts);
  for (int64_t j = 0; j < experts; ++j) {
    next[j] = s.available;
    s.available += s.counts[j];
  }
  s.pairs.resize(total);
  s.experts.resize(s.available);
  int64_t rest = s.available;
  for (int64_t i = 0; i < total; ++i) {
    if (id[i] >= r.start && id[i] < r.end) {
      const int64_t p = next[id[i] - r.start]++;
      s.pairs[p] = static_cast<int32_t>(i);
      s.experts[p] = id[i];
    } else {
      s.pairs[rest++] = static_cast<int32_t>(i);
    }
  }
  return s;
}

// Rounds half to even (the chip's and numpy's rint), in the current (default) rounding mode.
inline int8_t to_int8(float v) { return static_cast<int8_t>(std::max(-128.f, std::min(127.f, std::nearbyint(v)))); }

// One int8 row of expanded_x (and its expanded_scale) from token row `src` of x, quant_mode 0 or 1. `smooth` is the
// dynamic quantization's scale row (null without one).
template <typename T>
void quantize_row(const Routing& r, const T* src, int8_t* q, float* scale_out, const float* smooth,
                  float static_scale, float static_offset) {
  if (r.quant == kStatic) {
    // The documented reference computes in float16: x, scale and offset converted to it, each step rounded to it.
    const c10::Half s(static_scale), o(static_offset);
    for (int64_t j = 0; j < r.h; ++j) {
      const c10::Half prod = c10::Half(static_cast<float>(src[j])) * s;
      q[j] = to_int8(static_cast<float>(c10::Half(prod + o)));
    }
    return;
  }
  // Dynamic: in float32, scale = max|row * smooth| / 127, q = round(row * smooth / scale).
  std::vector<float> v(r.h);
  float amax = 0.f;
  for (int64_t j = 0; j < r.h; ++j) {
    v[j] = static_cast<float>(src[j]) * (smooth ? smooth[j] : 1.f);
    amax = std::max(amax, std::abs(v[j]));
  }
  const float s = amax / 127.f;
  for (int64_t j = 0; j < r.h; ++j) q[j] = s == 0.f ? int8_t{0} : to_int8(v[j] / s);
  *scale_out = s;
}

void route(const at::Tensor& x, const at::Tensor& expert_idx, const std::optional<at::Tensor>& scale,
           const std::optional<at::Tensor>& offset, const Routing& r, at::Tensor& expanded_x, at::Tensor& row_idx,
           at::Tensor& counts_out, at::Tensor& expanded_scale) {
  const Sorted s = sort_pairs(expert_idx, r);
  const int64_t experts = r.end - r.start;
  // Counts.
  counts_out.zero_();
  int64_t* c = counts_out.data_ptr<int64_t>();
  if (r.count_type == 2) {
    int64_t row = 0;
    for (int64_t j = 0; j < experts; ++j)
      if (s.counts[j] > 0) {
        c[2 * row] = r.start + j;
        c[2 * row + 1] = s.counts[j];
        ++row;
      }
  } else {
    int64_t sum = 0;
    for (int64_t j = 0; j < experts; ++j) c[j] = r.count_type == 0 ? (sum += s.counts[j]) : s.counts[j];
  }
  // Destination row of each sorted pair (-1: dropped) and the expanded_row_idx.
  const int64_t total = r.n * r.k;
  const int64_t routed = r.drop_pad ? 0 : std::min(s.available, r.rows);  // dropless: rows [0, routed) are routed
  std::vector<int64_t> dest(s.available, -1);
  if (r.drop_pad) {
    int64_t p = 0;
    for (int64_t j = 0; j < experts; ++j)
      for (int64_t i = 0; i < s.counts[j]; ++i, ++p)
        if (i < r.capacity) dest[p] = j * r.capacity + i;
  } else {
    for (int64_t p = 0; p < routed; ++p) dest[p] = p;
  }
  int32_t* ri = row_idx.data_ptr<int32_t>();
  if (r.row_idx_type == 1) {
    std::memcpy(ri, s.pairs.data(), total * sizeof(int32_t));
  } else {
    std::fill(ri, ri + total, -1);
    // Gather indices: every pair in the range gets its sorted position (drop/pad: its slot, or -1 when dropped).
    for (int64_t p = 0; p < s.available; ++p)
      ri[s.pairs[p]] = static_cast<int32_t>(r.drop_pad ? dest[p] : p);
  }
  // Rows: one copied or quantized row per routed pair, in parallel; zeros only where nothing is routed (the rows
  // past the routed ones, or each expert's unfilled slots), so every byte of expanded_x is written once.
  expanded_scale.zero_();
  const at::Tensor rows2d = expanded_x.view({-1, expanded_x.size(-1)});
  if (r.drop_pad) {
    for (int64_t j = 0; j < experts; ++j)
      if (s.counts[j] < r.capacity)
        rows2d.narrow(0, j * r.capacity + s.counts[j], r.capacity - s.counts[j]).zero_();
  } else if (s.available < r.rows) {
    rows2d.narrow(0, s.available, r.rows - s.available).zero_();
  }
  const at::Tensor xc = x.contiguous();
  if (r.tensor_quant()) {
    if (routed == 0) return;
    // Dropless only: the routed rows gathered in sorted order, quantized as a whole, written to rows [0, routed).
    std::vector<int64_t> tokens(routed);
    for (int64_t p = 0; p < routed; ++p) tokens[p] = s.pairs[p] / r.k;
    const at::Tensor rows = xc.index_select(0, at::tensor(tokens, at::kLong));
    const at::Tensor smooth = given(scale) ? *scale : at::Tensor();
    const auto [qx, qscale] = routing_quant::quantize_rows(routing_quant::mode_of(r.quant), rows, smooth);
    rows2d.narrow(0, 0, routed).copy_(qx);
    expanded_scale.view({r.scale_rows(), -1}).narrow(0, 0, routed).copy_(qscale.view({routed, -1}));
    return;
  }
  auto* out = static_cast<char*>(expanded_x.data_ptr());
  const int64_t row_bytes = rows2d.size(1) * rows2d.element_size();
  if (r.quant == kUnquantized) {
    // Rows copied as bytes (whatever x holds), each with its scale: a float per token, or its MX scale bytes.
    const auto* src = static_cast<const char*>(xc.data_ptr());
    const at::Tensor token_scale = given(scale) ? scale->contiguous() : at::Tensor();
    const auto* scale_src = token_scale.defined() ? static_cast<const char*>(token_scale.data_ptr()) : nullptr;
    auto* scale_dst = static_cast<char*>(expanded_scale.data_ptr());
    const int64_t scale_bytes = expanded_scale.numel() / r.scale_rows() * expanded_scale.element_size();
    const bool streaming = static_cast<size_t>(expanded_x.nbytes()) >= kStreamingOutputBytes;
    // The team takes chunks of rows from a shared counter rather than one fixed share each: on a host whose cores are
    // shared, a thread that is descheduled leaves its rows to the others instead of holding up the op's end.
    const int64_t chunk = std::max<int64_t>(16, (int64_t{64} << 10) / std::max<int64_t>(row_bytes, 1));
    std::atomic<int64_t> next{0};
    const auto copy_rows = [&](int64_t, int64_t) {
      for (int64_t begin; (begin = next.fetch_add(chunk, std::memory_order_relaxed)) < s.available;) {
        for (int64_t p = begin; p < std::min(begin + chunk, s.available); ++p) {
          if (dest[p] < 0) continue;
          const int64_t token = s.pairs[p] / r.k;
          if (streaming) {
            stream_row(out + dest[p] * row_bytes, src + token * row_bytes, row_bytes);
          } else {
            std::memcpy(out + dest[p] * row_bytes, src + token * row_bytes, row_bytes);
          }
          if (scale_src) std::memcpy(scale_dst + dest[p] * scale_bytes, scale_src + token * scale_bytes, scale_bytes);
        }
      }
      if (streaming) stream_fence();
    };
    // A streaming gather is bound by memory bandwidth, which half the cores reach; on 2 cores the compute thread alone
    // is fastest: 32K rows of 2 KiB in 2.1 ms on one thread, 6.7 ms on two (best of 30, AMD EPYC, 2 cores), and it
    // then never waits at the team's barrier for a thread the host has descheduled.
    const int team = streaming ? std::max(1, at::get_num_threads() / 2) : at::get_num_threads();
    if (team == 1) {
      copy_rows(0, 1);
    } else {
      at::parallel_for(0, team, 1, copy_rows);
    }
    return;
  }
  const at::Tensor smooth = r.quant == kDynamic && given(scale) ? scale->contiguous() : at::Tensor();
  const float static_scale = r.quant == kStatic ? scale->item<float>() : 0.f;
  const float static_offset = r.quant == kStatic ? offset->item<float>() : 0.f;
  float* out_scale = expanded_scale.data_ptr<float>();
  AT_DISPATCH_V2(r.x_type, OP, AT_WRAP([&] {
    const scalar_t* src = xc.data_ptr<scalar_t>();
    at::parallel_for(0, s.available, 16, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        if (dest[p] < 0) continue;
        const int64_t token = s.pairs[p] / r.k;
        const float* smooth_row = nullptr;
        if (smooth.defined())
          smooth_row = smooth.data_ptr<float>() + (smooth.size(0) == 1 ? 0 : (s.experts[p] - r.start)) * r.h;
        quantize_row<scalar_t>(r, src + token * r.h, reinterpret_cast<int8_t*>(out + dest[p] * row_bytes),
                               out_scale + dest[p], smooth_row, static_scale, static_offset);
      }
    });
  }), at::kHalf, at::kBFloat16, at::kFloat);
}

#define ROUTING_ARGS                                                                                               \
  const at::Tensor &x, const at::Tensor &expert_idx, const std::optional<at::Tensor>&scale,                        \
      const std::optional<at::Tensor>&offset, int64_t active_num, int64_t expert_capacity, int64_t expert_num,     \
      int64_t drop_pad_mode, int64_t expert_tokens_num_type, bool expert_tokens_num_flag, int64_t quant_mode,      \
      at::IntArrayRef active_expert_range, int64_t row_idx_type, std::optional<int64_t> x_dtype
#define ROUTING_CHECK()                                                                                            \
  check(x, expert_idx, scale, offset, active_num, expert_capacity, expert_num, drop_pad_mode,                      \
        expert_tokens_num_type, quant_mode, active_expert_range, row_idx_type, x_dtype)

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Outputs allocate(const at::Tensor& x, const Routing& r) {
  return {at::empty(r.x_shape(), x.options().dtype(r.out_type())), at::empty({r.n * r.k}, x.options().dtype(at::kInt)),
          at::empty(r.count_shape(), x.options().dtype(at::kLong)),
          at::empty(r.scale_shape(), x.options().dtype(r.scale_type()))};
}

Outputs init_routing_v2_meta(ROUTING_ARGS) { return allocate(x, ROUTING_CHECK()); }

Outputs init_routing_v2_cpu(ROUTING_ARGS) {
  const Routing r = ROUTING_CHECK();
  auto [ex, ri, counts, es] = allocate(x, r);
  route(x, expert_idx, scale, offset, r, ex, ri, counts, es);
  return {ex, ri, counts, es};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> init_routing_v2_out(ROUTING_ARGS, at::Tensor& out0,
                                                                                   at::Tensor& out1, at::Tensor& out2,
                                                                                   at::Tensor& out3) {
  const Routing r = ROUTING_CHECK();
  const auto [ex, ri, counts, es] = allocate(x.to(at::kMeta), r);
  for (const auto& [got, want] : {std::pair<const at::Tensor*, const at::Tensor*>{&out0, &ex}, {&out1, &ri},
                                  {&out2, &counts}, {&out3, &es}})
    TORCH_CHECK(got->sizes() == want->sizes() && got->scalar_type() == want->scalar_type() && got->is_contiguous(),
                OP, ".out: outputs must be contiguous and shaped as the op returns them, expected ", want->sizes(),
                " of ", want->scalar_type(), ", got ", got->sizes(), " of ", got->scalar_type());
  route(x, expert_idx, scale, offset, r, out0, out1, out2, out3);
  return {out0, out1, out2, out3};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_moe_init_routing_v2", init_routing_v2_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_moe_init_routing_v2", init_routing_v2_cpu);
  m.impl("npu_moe_init_routing_v2.out", init_routing_v2_out);
}

}  // namespace softnpu::fused
