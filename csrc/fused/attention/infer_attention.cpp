// torch_npu's inference attention: npu_prompt_flash_attention (prefill), npu_incre_flash_attention (decode) and
// npu_fused_infer_attention_score (both, the one vLLM-Ascend and sglang call), computing, as torch_npu documents,
//   attention_out = softmax(scale * query @ key^T + pse_shift, masked) @ value
// with grouped key/value heads, per-batch actual lengths of query and key/value, torch_npu's sparse modes, paged
// key/value caches (block_table), MLA's rope parts (query_rope / key_rope), int8 key/value caches dequantized per
// channel or per tensor (antiquant), an int8 output (quant_scale2 / quant_offset2), and softmax_lse.
//
// No attention of its own: each op brings its inputs to one form (BNSD in float32, every mask of the call and pse_shift
// made one additive mask, the query heads sharing a key/value head stacked as rows of one head) and runs ATen's CPU
// flash attention (the kernel behind torch's scaled_dot_product_attention: blocked, float32 accumulation, the
// softmax's log-sum-exp returned), several times faster than the unfused composite npu_fusion_attention's kernel is
// built of. The whole op is the CPU kernel, so on npu it is one launch on the stream through the generic op path,
// inputs checked at the call by the Meta kernel.
//
// Precision modes (inner_precise; torch_npu's prompt op has no such argument and passes the high-performance mode,
// sparse_mode 10 to 14 selecting the high-precision one with sparse_mode - 10): on float16 without pse_shift, the
// high-performance mode (bit 0) is the chip's kernel whose first matmul outputs float16, so the scores q k^T are
// rounded to float16, scaled in float16, then softmaxed (attend_fp16_scores); the high-precision mode, and bfloat16
// and float32 always, carry the scores in float32 (the flash kernel). Bit 1 (row-invalid correction) is always on
// here: a fully masked row gives zeros.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <torch/library.h>

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

#include "fused/common.h"
#include "fused/gemm.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_prompt_flash_attention(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, Tensor? pse_shift=None, int[]? actual_seq_lengths=None, Tensor? deq_scale1=None, "
        "Tensor? quant_scale1=None, Tensor? deq_scale2=None, Tensor? quant_scale2=None, Tensor? quant_offset2=None, "
        "int num_heads=1, float scale_value=1.0, int pre_tokens=2147483647, int next_tokens=0, "
        "str input_layout=\"BSH\", int num_key_value_heads=0, int[]? actual_seq_lengths_kv=None, "
        "int sparse_mode=0) -> Tensor");
  m.def("npu_incre_flash_attention(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, Tensor? pse_shift=None, SymInt[]? actual_seq_lengths=None, "
        "Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? kv_padding_size=None, int num_heads=1, "
        "float scale_value=1.0, str input_layout=\"BSH\", int num_key_value_heads=0, int block_size=0, "
        "int inner_precise=1) -> Tensor");
  m.def("npu_fused_infer_attention_score(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, "
        "Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
        "Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
        "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, Tensor? key_shared_prefix=None, "
        "Tensor? value_shared_prefix=None, SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, "
        "Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
        "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
        "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
        "bool softmax_lse_flag=False) -> (Tensor, Tensor)");
  // vLLM-Ascend's graph capture: the outputs written into tensors allocated beforehand (out=[attention_out,
  // softmax_lse]), with a workspace. The schema torch_npu registers for several outputs (its torchnpugen turns them
  // into one `Tensor[] out`); a composite over _npu_fused_infer_attention_score_out_, which returns nothing (so
  // torch.compile can functionalize it).
  m.def("npu_fused_infer_attention_score.out(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, "
        "Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
        "Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
        "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, Tensor? key_shared_prefix=None, "
        "Tensor? value_shared_prefix=None, SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, "
        "Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
        "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
        "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
        "bool softmax_lse_flag=False, Tensor? workspace=None, Tensor[] out) -> (Tensor, Tensor)");
  m.def("_npu_fused_infer_attention_score_out_(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, "
        "Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
        "Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
        "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, Tensor? key_shared_prefix=None, "
        "Tensor? value_shared_prefix=None, SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, "
        "Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
        "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
        "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
        "bool softmax_lse_flag=False, Tensor? workspace=None, Tensor(a!) attention_out, Tensor(b!) softmax_lse) "
        "-> ()");
  m.def("_npu_fused_infer_attention_score_get_max_workspace(Tensor query, Tensor key, Tensor value, *, "
        "Tensor? pse_shift=None, Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, "
        "SymInt[]? actual_seq_lengths_kv=None, Tensor? dequant_scale1=None, Tensor? quant_scale1=None, "
        "Tensor? dequant_scale2=None, Tensor? quant_scale2=None, Tensor? quant_offset2=None, "
        "Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, "
        "Tensor? key_antiquant_offset=None, Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, "
        "Tensor? block_table=None, Tensor? query_padding_size=None, Tensor? kv_padding_size=None, "
        "Tensor? key_shared_prefix=None, Tensor? value_shared_prefix=None, SymInt[]? actual_shared_prefix_len=None, "
        "Tensor? query_rope=None, Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, "
        "float scale=1.0, int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
        "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
        "bool softmax_lse_flag=False) -> Tensor");
  // npu_fused_infer_attention_score_v2: the same computation with torch_npu's renamed and reordered arguments
  // (actual_seq_qlen, num_query_heads, softmax_scale, return_softmax_lse, dequant_*/quant_*_out for antiquant and
  // the int8 output); its .out overload, in-place kernel and workspace query as v1's.
#define SOFTNPU_FIA_V2_ARGS                                                                                       \
  "Tensor query, Tensor key, Tensor value, *, Tensor? query_rope=None, Tensor? key_rope=None, "                   \
  "Tensor? pse_shift=None, Tensor? atten_mask=None, SymInt[]? actual_seq_qlen=None, "                            \
  "SymInt[]? actual_seq_kvlen=None, Tensor? block_table=None, Tensor? dequant_scale_query=None, "                \
  "Tensor? dequant_scale_key=None, Tensor? dequant_offset_key=None, Tensor? dequant_scale_value=None, "          \
  "Tensor? dequant_offset_value=None, Tensor? dequant_scale_key_rope=None, Tensor? quant_scale_out=None, "       \
  "Tensor? quant_offset_out=None, Tensor? quant_scale_p=None, Tensor? learnable_sink=None, "                     \
  "int num_query_heads=1, int num_key_value_heads=0, float softmax_scale=1.0, int pre_tokens=2147483647, "       \
  "int next_tokens=2147483647, str input_layout=\"BSH\", int sparse_mode=0, int block_size=0, "                  \
  "int query_quant_mode=0, int key_quant_mode=0, int value_quant_mode=0, int inner_precise=0, "                  \
  "bool return_softmax_lse=False, int? query_dtype=None, int? key_dtype=None, int? value_dtype=None, "           \
  "int? query_rope_dtype=None, int? key_rope_dtype=None, int? key_shared_prefix_dtype=None, "                    \
  "int? value_shared_prefix_dtype=None, int? dequant_scale_query_dtype=None, int? dequant_scale_key_dtype=None, " \
  "int? dequant_scale_value_dtype=None, int? dequant_scale_key_rope_dtype=None, int? out_dtype=None"
  m.def("npu_fused_infer_attention_score_v2(" SOFTNPU_FIA_V2_ARGS ") -> (Tensor, Tensor)");
  m.def("npu_fused_infer_attention_score_v2.out(" SOFTNPU_FIA_V2_ARGS
        ", Tensor? workspace=None, Tensor[] out) -> (Tensor, Tensor)");
  m.def("_npu_fused_infer_attention_score_v2_out_(" SOFTNPU_FIA_V2_ARGS
        ", Tensor? workspace=None, Tensor(a!) attention_out, Tensor(b!) softmax_lse) -> ()");
  m.def("_npu_fused_infer_attention_score_v2_get_max_workspace(" SOFTNPU_FIA_V2_ARGS ") -> Tensor");
#undef SOFTNPU_FIA_V2_ARGS
}

namespace softnpu::fused {

namespace {

using Opt = std::optional<at::Tensor>;
using Lengths = std::optional<std::vector<int64_t>>;
constexpr int64_t kBig = std::numeric_limits<int32_t>::max();

// One call, whichever op made it.
struct Call {
  const char* op;
  at::Tensor q, k, v;
  Opt pse, mask, block_table, quant_scale2, quant_offset2, key_scale, key_offset, value_scale, value_offset,
      query_rope, key_rope;
  Lengths qlens, kvlens;
  int64_t num_heads = 1, num_kv_heads = 0, pre = kBig, next = kBig, sparse_mode = 0, block_size = 0;
  double scale = 1.;
  std::string layout;
  bool lse = false;
  // torch_npu's antiquant modes of key and value: 0 per channel / tensor, 1 per token, 2 per tensor and head,
  // 3 per token and head, 4 per token in pages (block_table's), 5 per token and head in pages.
  int64_t key_mode = 0, value_mode = 0;
  Opt query_padding, kv_padding;                         // left padding: int64, one value or one per batch
  bool fp16_scores = false;  // inner_precise's high-performance mode on float16: q k^T carried in float16
};

// What the inputs describe. Varlen layouts (TND, NTD) are padded to b sequences of sq / skv.
struct Problem {
  std::string in, out;  // the layouts of the inputs and of attention_out
  bool varlen = false, paged = false;
  int64_t b = 0, n = 0, n2 = 0, sq = 0, skv = 0, dq = 0, dv = 0, t = 0;
  std::vector<int64_t> qlen, kvlen;  // per batch
  std::vector<int64_t> q_cum;        // varlen: cumulative query lengths from 0
};

Lengths copy(c10::OptionalIntArrayRef v) { return v ? Lengths(v->vec()) : std::nullopt; }
// Lengths traced as symbols (torch.compile makes an int it saw change dynamic) are specialized, guarded on their
// values: the checks read them, so a compiled graph holds them as constants (recompiled for new lengths).
Lengths copy(at::OptionalSymIntArrayRef v) {
  if (!v) return std::nullopt;
  std::vector<int64_t> lengths;
  for (const c10::SymInt& length : *v) lengths.push_back(length.guard_int(__FILE__, __LINE__));
  return lengths;
}

// Per-batch lengths: one value for every batch, or the first b values (torch_npu's rule); absent, the full length.
std::vector<int64_t> per_batch(const Lengths& given_lengths, int64_t b, int64_t full, const char* name,
                               const char* op) {
  if (!given_lengths || given_lengths->empty()) return std::vector<int64_t>(b, full);
  const auto& v = *given_lengths;
  TORCH_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) >= b, op, ": ", name, " must hold 1 or at least B = ",
              b, " lengths, got ", v.size());
  std::vector<int64_t> out(b);
  for (int64_t i = 0; i < b; ++i) {
    out[i] = v.size() == 1 ? v[0] : v[i];
    TORCH_CHECK(out[i] >= 0 && out[i] <= full, op, ": ", name, "[", i, "] = ", out[i], " must be in [0, ", full, "]");
  }
  return out;
}

// Varlen: cumulative lengths -> per-sequence lengths.
std::vector<int64_t> from_cumulative(const Lengths& cum, int64_t total, const char* name, const char* op) {
  TORCH_CHECK(cum && !cum->empty(), op, ": input_layout TND needs ", name, " (the cumulative sequence lengths)");
  std::vector<int64_t> out;
  int64_t prev = 0;
  for (int64_t c : *cum) {
    TORCH_CHECK(c >= prev, op, ": ", name, " must be non-decreasing cumulative lengths, got ", *cum);
    out.push_back(c - prev);
    prev = c;
  }
  TORCH_CHECK(prev == total, op, ": the last of ", name, " (", prev, ") must equal the number of tokens T = ", total);
  return out;
}

Problem describe(const Call& c, const std::vector<std::string>& layouts) {
  const char* op = c.op;
  Problem p;
  TORCH_CHECK(std::find(layouts.begin(), layouts.end(), c.layout) != layouts.end(), op, ": input_layout '", c.layout,
              "' is not supported; supported: ", c10::Join(", ", layouts));
  const auto split = c.layout.find('_');
  p.in = c.layout.substr(0, split);
  p.out = split == std::string::npos ? p.in : c.layout.substr(split + 1);
  p.varlen = p.in == "TND" || p.in == "NTD";
  p.paged = given(c.block_table);
  const auto qt = c.q.scalar_type();
  TORCH_CHECK(qt == at::kHalf || qt == at::kBFloat16 || qt == at::kFloat, op,
              ": query must be float16, bfloat16 or float32, got ", qt, " (int8 queries are not supported here)");
  const bool int8_kv = c.k.scalar_type() == at::kChar;
  TORCH_CHECK((c.k.scalar_type() == qt || int8_kv) && c.v.scalar_type() == c.k.scalar_type(), op,
              ": key and value must have query's dtype ", qt, ", or be int8 with antiquant scales; got ",
              c.k.scalar_type(), " and ", c.v.scalar_type());
  TORCH_CHECK(!int8_kv || given(c.key_scale), op, ": int8 key and value need antiquant_scale "
              "(or key_antiquant_scale and value_antiquant_scale)");
  TORCH_CHECK(c.num_heads > 0, op, ": num_heads must be positive, got ", c.num_heads);
  TORCH_CHECK(c.num_kv_heads >= 0, op, ": num_key_value_heads must not be negative, got ", c.num_kv_heads);
  TORCH_CHECK(c.sparse_mode >= 0 && c.sparse_mode <= 4, op, ": sparse_mode ", c.sparse_mode,
              " is not supported (0 default, 1 all, 2 left-up causal, 3 right-down causal, 4 band)");
  p.n = c.num_heads;
  const int64_t rank = (p.in == "BSH" || p.varlen) ? 3 : 4;
  TORCH_CHECK(c.q.dim() == rank, op, ": input_layout ", c.layout, " takes a ", rank, "-D query, got ", c.q.sizes());
  if (p.in == "BSH") {
    TORCH_CHECK(c.q.size(2) % p.n == 0, op, ": the hidden size H = ", c.q.size(2),
                " of query must be a multiple of num_heads = ", p.n);
    p.b = c.q.size(0);
    p.sq = c.q.size(1);
    p.dq = c.q.size(2) / p.n;
  } else if (p.varlen) {
    const bool tnd = p.in == "TND";
    TORCH_CHECK(c.q.size(tnd ? 1 : 0) == p.n, op, ": query's head count ", c.q.size(tnd ? 1 : 0),
                " must equal num_heads = ", p.n);
    p.t = c.q.size(tnd ? 0 : 1);
    p.dq = c.q.size(2);
  } else {
    const bool bnsd = p.in == "BNSD";
    p.b = c.q.size(0);
    p.sq = c.q.size(bnsd ? 2 : 1);
    TORCH_CHECK(c.q.size(bnsd ? 1 : 2) == p.n, op, ": query's head count ", c.q.size(bnsd ? 1 : 2),
                " must equal num_heads = ", p.n);
    p.dq = c.q.size(3);
  }
  p.n2 = c.num_kv_heads == 0 ? p.n : c.num_kv_heads;
  TORCH_CHECK(p.n % p.n2 == 0, op, ": num_key_value_heads (", p.n2, ") must divide num_heads (", p.n, ")");

  // key/value: their sequence length and value's head size.
  TORCH_CHECK(c.k.dim() == c.v.dim(), op, ": key and value must have the same rank, got ", c.k.sizes(), " and ",
              c.v.sizes());
  if (p.paged) {
    TORCH_CHECK(c.block_table->scalar_type() == at::kInt && c.block_table->dim() == 2, op,
                ": block_table must be a 2-D int32 tensor [B, maxBlockNumPerSeq], got ",
                c.block_table->scalar_type(), " ", c.block_table->sizes());
    TORCH_CHECK(c.block_size > 0, op, ": block_table needs block_size, got ", c.block_size);
    TORCH_CHECK(c.kvlens.has_value(), op, ": a paged key/value (block_table) needs actual_seq_lengths_kv");
    // BnBsH: [blocks, block_size, N2 * D]; BnNBsD: [blocks, N2, block_size, D].
    if (c.k.dim() == 3) {
      TORCH_CHECK(c.k.size(1) == c.block_size && c.k.size(2) % p.n2 == 0 && c.v.size(2) % p.n2 == 0, op,
                  ": a paged key/value [blocks, block_size, H] must have block_size = ", c.block_size,
                  " and H a multiple of the ", p.n2, " key/value heads, got ", c.k.sizes());
      TORCH_CHECK(c.k.size(2) / p.n2 == p.dq, op, ": key's head size ", c.k.size(2) / p.n2,
                  " differs from query's ", p.dq);
      p.dv = c.v.size(2) / p.n2;
    } else {
      TORCH_CHECK(c.k.dim() == 4 && c.k.size(1) == p.n2 && c.k.size(2) == c.block_size && c.k.size(3) == p.dq, op,
                  ": a paged key [blocks, N2, block_size, D] must be [*, ", p.n2, ", ", c.block_size, ", ", p.dq,
                  "], got ", c.k.sizes());
      p.dv = c.v.size(3);
    }
    p.skv = c.block_table->size(1) * c.block_size;
    if (!p.varlen)
      TORCH_CHECK(c.block_table->size(0) == p.b, op, ": block_table has ", c.block_table->size(0),
                  " rows for B = ", p.b);
  } else if (p.in == "BSH") {
    TORCH_CHECK(c.k.dim() == 3 && c.k.size(0) == p.b && c.v.size(0) == p.b && c.k.size(1) == c.v.size(1), op,
                ": key and value must be [B, S, H] with query's B = ", p.b, ", got ", c.k.sizes(), " and ",
                c.v.sizes());
    TORCH_CHECK(c.k.size(2) == p.n2 * p.dq, op, ": key's hidden size ", c.k.size(2),
                " must be num_key_value_heads * D = ", p.n2, " * ", p.dq);
    TORCH_CHECK(c.v.size(2) % p.n2 == 0, op, ": value's hidden size ", c.v.size(2),
                " must be a multiple of the key/value heads ", p.n2);
    p.skv = c.k.size(1);
    p.dv = c.v.size(2) / p.n2;
  } else if (p.varlen) {
    const bool tnd = p.in == "TND";
    TORCH_CHECK(c.k.dim() == 3 && c.k.size(tnd ? 1 : 0) == p.n2 && c.k.size(2) == p.dq &&
                    c.v.size(tnd ? 1 : 0) == p.n2 && c.v.size(tnd ? 0 : 1) == c.k.size(tnd ? 0 : 1), op,
                ": key and value must be ", p.in, " with ", p.n2, " heads of query's head size ", p.dq, ", got ",
                c.k.sizes(), " and ", c.v.sizes());
    p.dv = c.v.size(2);
  } else {
    const bool bnsd = p.in == "BNSD";
    TORCH_CHECK(c.k.dim() == 4 && c.k.size(0) == p.b && c.k.size(bnsd ? 1 : 2) == p.n2 && c.k.size(3) == p.dq &&
                    c.v.size(0) == p.b && c.v.size(bnsd ? 1 : 2) == p.n2 &&
                    c.v.size(bnsd ? 2 : 1) == c.k.size(bnsd ? 2 : 1), op,
                ": key and value must be ", p.in, " with B = ", p.b, ", ", p.n2,
                " heads (num_key_value_heads) and query's head size ", p.dq, ", got ", c.k.sizes(), " and ",
                c.v.sizes());
    p.skv = c.k.size(bnsd ? 2 : 1);
    p.dv = c.v.size(3);
  }
  if (p.varlen) {
    p.qlen = from_cumulative(c.qlens, p.t, "actual_seq_lengths", op);
    p.b = static_cast<int64_t>(p.qlen.size());
    p.q_cum = {0};
    for (int64_t l : p.qlen) p.q_cum.push_back(p.q_cum.back() + l);
    if (p.paged) {
      p.kvlen = per_batch(c.kvlens, p.b, p.skv, "actual_seq_lengths_kv", op);
    } else {
      p.kvlen = from_cumulative(c.kvlens, c.k.size(p.in == "TND" ? 0 : 1), "actual_seq_lengths_kv", op);
      TORCH_CHECK(static_cast<int64_t>(p.kvlen.size()) == p.b, op,
                  ": actual_seq_lengths and actual_seq_lengths_kv must give as many sequences, got ", p.b, " and ",
                  p.kvlen.size());
      p.skv = *std::max_element(p.kvlen.begin(), p.kvlen.end());
    }
    p.sq = *std::max_element(p.qlen.begin(), p.qlen.end());
  } else {
    // torch_npu documents actual_seq_lengths as having no effect in decode (Q_S = 1) outside TND: NPU graphs
    // capture such calls with lengths their update replaces.
    p.qlen = p.sq == 1 ? std::vector<int64_t>(p.b, 1) : per_batch(c.qlens, p.b, p.sq, "actual_seq_lengths", op);
    p.kvlen = per_batch(c.kvlens, p.b, p.skv, "actual_seq_lengths_kv", op);
  }

  TORCH_CHECK(given(c.query_rope) == given(c.key_rope), op, ": query_rope and key_rope go together");
  if (given(c.query_rope)) {
    TORCH_CHECK(c.query_rope->dim() == c.q.dim() && c.query_rope->sizes().slice(0, c.q.dim() - 1) ==
                                                         c.q.sizes().slice(0, c.q.dim() - 1) &&
                    c.query_rope->scalar_type() == qt, op,
                ": query_rope must be query's dtype and shape but the last dim, got ", c.query_rope->sizes());
    TORCH_CHECK(c.key_rope->dim() == c.k.dim() && c.key_rope->sizes().slice(0, c.k.dim() - 1) ==
                                                       c.k.sizes().slice(0, c.k.dim() - 1), op,
                ": key_rope must have key's shape but the last dim, got ", c.key_rope->sizes());
    TORCH_CHECK(p.in != "BSH" && !(p.paged && c.k.dim() == 3), op,
                ": query_rope/key_rope are supported here with the BSND, BNSD and TND layouts");
  }

  if (given(c.mask))
    TORCH_CHECK(c.mask->scalar_type() == at::kBool || c.mask->scalar_type() == at::kChar ||
                    c.mask->scalar_type() == at::kByte, op,
                ": atten_mask must be bool, int8 or uint8, got ", c.mask->scalar_type());
  const bool decode = p.sq == 1 && !given(c.query_rope);
  if (c.sparse_mode >= 2 && !decode) {
    TORCH_CHECK(given(c.mask) && c.mask->numel() == 2048 * 2048 && c.mask->size(-1) == 2048 && c.mask->size(-2) == 2048,
                op, ": sparse_mode ", c.sparse_mode, " takes the compressed atten_mask of shape (2048, 2048), "
                "(1, 2048, 2048) or (1, 1, 2048, 2048): torch.triu(torch.ones(2048, 2048), 1)");
  }
  if (c.sparse_mode == 1 && !decode) TORCH_CHECK(given(c.mask), op, ": sparse_mode 1 (allMask) needs atten_mask");
  if (given(c.mask) && (c.sparse_mode <= 1 || decode)) {
    const auto& m = *c.mask;
    const bool ok = m.dim() >= 2 && m.dim() <= 4 && m.size(-1) >= p.skv &&
                    (m.dim() == 2 && decode ? m.size(0) == p.b || m.size(0) == 1 : m.size(-2) >= p.sq) &&
                    (m.dim() < 3 || m.size(0) == 1 || m.size(0) == p.b) &&
                    (m.dim() < 4 || m.size(1) == 1 || m.size(1) == p.n);
    TORCH_CHECK(ok && !p.varlen, op, ": atten_mask of shape ", m.sizes(), " must be (Q_S, KV_S), (B, Q_S, KV_S), ",
                "(1, Q_S, KV_S), (B, 1, Q_S, KV_S) or (1, 1, Q_S, KV_S) (for Q_S = 1 also (B, KV_S)) with Q_S >= ",
                p.sq, ", KV_S >= ", p.skv,
                p.varlen ? "; a TND call takes the compressed mask with sparse_mode 2 to 4" : "");
  }
  if (given(c.pse)) {
    const auto& s = *c.pse;
    TORCH_CHECK(s.dim() == 4 && (s.size(0) == 1 || s.size(0) == p.b) && s.size(1) == p.n && s.size(2) >= p.sq &&
                    s.size(3) >= p.skv && !p.varlen, op,
                ": pse_shift of shape ", s.sizes(), " must be (B, N, Q_S, KV_S) or (1, N, Q_S, KV_S), B = ", p.b,
                ", N = ", p.n, ", Q_S = ", p.sq, ", KV_S = ", p.skv);
  }
  if (given(c.quant_scale2))
    TORCH_CHECK(c.quant_scale2->numel() == 1 || c.quant_scale2->numel() == p.n * p.dv, op,
                ": quant_scale2 must be per tensor (1 value) or per channel (N * D = ", p.n * p.dv, " values), got ",
                c.quant_scale2->sizes());
  if (given(c.quant_offset2))
    TORCH_CHECK(given(c.quant_scale2) && c.quant_offset2->sizes() == c.quant_scale2->sizes(), op,
                ": quant_offset2 needs quant_scale2 of the same shape");
  for (const Opt* s : {&c.key_scale, &c.value_scale, &c.key_offset, &c.value_offset}) {
    if (!given(*s)) continue;
    const bool value = s == &c.value_scale || s == &c.value_offset;
    const int64_t mode = value ? c.value_mode : c.key_mode;
    TORCH_CHECK(mode < 2 || (p.sq == 1 && !p.varlen), op, ": antiquant mode ", mode,
                " is supported with Q_S = 1 only (torch_npu's incremental path), got Q_S = ", p.sq);
    TORCH_CHECK(mode < 3 || (*s)->scalar_type() == at::kFloat, op, ": an antiquant mode ", mode,
                " scale or offset must be float32, got ", (*s)->scalar_type());
    if (mode == 1) {
      TORCH_CHECK(!p.varlen && (*s)->dim() >= 2 && (*s)->size(-2) == p.b && (*s)->size(-1) >= p.skv &&
                      (*s)->numel() == p.b * (*s)->size(-1), op,
                  ": a per-token (antiquant mode 1) scale or offset must be (B, KV_S) or (1, B, KV_S) with B = ", p.b,
                  " and KV_S >= ", p.skv, " (not with TND), got shape ", (*s)->sizes());
    } else if (mode == 2) {
      TORCH_CHECK((*s)->dim() == 1 && (*s)->size(0) == p.n2 && (*s)->scalar_type() == c.q.scalar_type(), op,
                  ": a per-tensor-and-head (antiquant mode 2) scale or offset must be (KV_N,) = (", p.n2,
                  ",) of query's dtype ", c.q.scalar_type(), ", got ", (*s)->scalar_type(), " ", (*s)->sizes());
    } else if (mode == 3) {
      TORCH_CHECK((*s)->dim() == 3 && (*s)->size(0) == p.b && (*s)->size(1) == p.n2 && (*s)->size(2) >= p.skv, op,
                  ": a per-token-and-head (antiquant mode 3) scale or offset must be (B, KV_N, KV_S) = (", p.b, ", ",
                  p.n2, ", >= ", p.skv, "), got shape ", (*s)->sizes());
    } else if (mode >= 4) {
      const bool head = mode == 5;
      TORCH_CHECK(p.paged, op, ": antiquant mode ", mode, " (scales in pages) needs block_table");
      TORCH_CHECK((*s)->dim() == (head ? 3 : 2) && (*s)->size(0) == c.k.size(0) &&
                      (!head || (*s)->size(1) == p.n2) && (*s)->size(-1) == c.block_size, op,
                  ": a paged per-token (antiquant mode ", mode, ") scale or offset must be (blocknum, ",
                  head ? "KV_N, " : "", "block_size) = (", c.k.size(0), ", ", head ? std::to_string(p.n2) + ", " : "",
                  c.block_size, "), got shape ", (*s)->sizes());
    } else {
      TORCH_CHECK((*s)->numel() == 1 || (*s)->numel() == p.n2 * (value ? p.dv : p.dq), op,
                  ": an antiquant scale or offset must be per tensor or per channel (num_key_value_heads * D "
                  "values), got shape ", (*s)->sizes());
    }
  }
  for (const auto& [pad, lengths, name] : {std::tuple{&c.query_padding, &c.qlens, "query_padding_size"},
                                           std::tuple{&c.kv_padding, &c.kvlens, "kv_padding_size"}}) {
    if (!given(*pad)) continue;
    TORCH_CHECK(pad->value().scalar_type() == at::kLong && (pad->value().numel() == 1 || pad->value().numel() == p.b),
                op, ": ", name, " must be int64 with 1 or B = ", p.b, " values, got ", pad->value().scalar_type(), " ",
                pad->value().sizes());
    TORCH_CHECK(lengths->has_value(), op, ": ", name, " (left padding) needs ",
                name[0] == 'q' ? "actual_seq_lengths" : "actual_seq_lengths_kv");
    TORCH_CHECK(!p.paged && !p.varlen && !given(c.mask) && !given(c.pse), op, ": left padding (", name,
                ") is supported here without block_table, TND, atten_mask and pse_shift");
  }
  return p;
}

// ------------------------------------------------------------------------------------------------ the kernel

// [B, N, S, D] from a query-like tensor of layout `in` (not varlen).
at::Tensor to_bnsd(const at::Tensor& t, const std::string& in, int64_t heads) {
  if (in == "BSH") return t.unflatten(2, {heads, -1}).permute({0, 2, 1, 3});
  if (in == "BSND") return t.permute({0, 2, 1, 3});
  return t;
}

// Varlen [T, N, D] (or [N, T, D]) -> [B, N, maxS, D], sequence i from cum[i], zero-padded.
at::Tensor pad_varlen(const at::Tensor& t, const std::string& in, const std::vector<int64_t>& lens, int64_t max_len) {
  const at::Tensor tnd = in == "NTD" ? t.transpose(0, 1) : t;
  std::vector<at::Tensor> seqs;
  int64_t start = 0;
  for (int64_t l : lens) {
    seqs.push_back(at::constant_pad_nd(tnd.narrow(0, start, l).permute({1, 0, 2}), {0, 0, 0, max_len - l}));
    start += l;
  }
  return at::stack(seqs);
}

// The paged cache of one of key/value as [B, N2, blocks * block_size, D].
at::Tensor gather_pages(const at::Tensor& cache, const at::Tensor& table, int64_t n2) {
  const at::Tensor ids = table.to(at::kLong).clamp(0, cache.size(0) - 1);  // unused entries: any block, masked out
  const at::Tensor pages = cache.index_select(0, ids.flatten()).unflatten(0, {table.size(0), table.size(1)});
  if (cache.dim() == 3)  // [B, blocks, block_size, N2 * D]
    return pages.flatten(1, 2).unflatten(2, {n2, -1}).permute({0, 2, 1, 3});
  return pages.permute({0, 2, 1, 3, 4}).flatten(2, 3);  // [B, blocks, N2, block_size, D] -> [B, N2, S, D]
}

at::Tensor kv_bnsd(const at::Tensor& t, const Call& c, const Problem& p) {
  if (p.paged) return gather_pages(t, *c.block_table, p.n2);
  if (p.varlen) return pad_varlen(t, p.in, p.kvlen, p.skv);
  return to_bnsd(t, p.in, p.n2);
}

// An antiquant scale/offset as [1, N2, 1, D] (per channel) or [1, 1, 1, 1] (per tensor).
at::Tensor per_channel(const at::Tensor& s, int64_t n2, int64_t d) {
  return s.numel() == 1 ? s.reshape({1, 1, 1, 1}) : s.reshape({1, n2, 1, d});
}

// float32 and contiguous in one pass.
at::Tensor dense_float(const at::Tensor& t) {
  return t.to(t.options().dtype(at::kFloat), false, false, c10::MemoryFormat::Contiguous);
}

// A per-token antiquant scale/offset ((B, S) or (1, B, S), S >= KV_S) as [B, 1, KV_S, 1].
at::Tensor per_token(const at::Tensor& s, const Problem& p) {
  return s.reshape({p.b, 1, -1, 1}).narrow(2, 0, p.skv);
}

// An antiquant scale/offset of `mode` (Call::key_mode) as a tensor broadcasting over the cache's [B, N2, KV_S, D].
at::Tensor antiquant_shaped(const at::Tensor& s, int64_t mode, const Call& c, const Problem& p, int64_t d) {
  const at::Tensor f = s.to(at::kFloat);
  switch (mode) {
    case 1: return per_token(f, p);
    case 2: return f.reshape({1, p.n2, 1, 1});
    case 3: return f.narrow(2, 0, p.skv).unsqueeze(-1);
    case 4:
    case 5:  // the scales' pages gathered as the cache's are: (blocknum, [N2,] block_size) -> [B, N2 or 1, KV_S, 1]
      return gather_pages(f.unsqueeze(-1), *c.block_table, mode == 5 ? p.n2 : 1);
    default: return per_channel(f, p.n2, d);
  }
}

at::Tensor dequantize(const at::Tensor& kv, const Opt& scale, const Opt& offset, const Call& c, const Problem& p,
                      int64_t d, int64_t mode, c10::ScalarType dtype) {
  if (kv.scalar_type() != at::kChar) return dense_float(kv);
  const auto shaped = [&](const at::Tensor& t) { return antiquant_shaped(t, mode, c, p, d); };
  at::Tensor x = kv.to(at::kFloat);
  if (given(offset)) x = x + shaped(*offset);
  // Rounded to the query's dtype, which the dequantized cache is in on the chip.
  return (x * shaped(*scale)).to(dtype).to(at::kFloat);
}

// True where a score is masked out: [B, 1 or N, Sq, Skv].
at::Tensor masked_positions(const Call& c, const Problem& p, const at::TensorOptions& cpu) {
  const auto lopt = cpu.dtype(at::kLong);
  const at::Tensor i = at::arange(p.sq, lopt).view({1, 1, -1, 1});
  const at::Tensor j = at::arange(p.skv, lopt).view({1, 1, 1, -1});
  const at::Tensor qlen = at::tensor(p.qlen, lopt).view({-1, 1, 1, 1});
  const at::Tensor kvlen = at::tensor(p.kvlen, lopt).view({-1, 1, 1, 1});
  // Past each sequence's actual lengths (rows past the query's length are all masked: zeros out).
  at::Tensor m = j.ge(kvlen).logical_or(i.ge(qlen));
  const bool decode = p.sq == 1 && !given(c.query_rope);
  if (decode) {
    if (given(c.mask)) {
      const at::Tensor& u = *c.mask;
      // (B, KV_S), (B, 1, KV_S) or (B, 1, 1, KV_S): the first row of each batch's mask.
      const at::Tensor user = u.dim() == 2 ? u.view({u.size(0), 1, 1, u.size(1)}) : u.dim() == 3 ? u.unsqueeze(1) : u;
      m = m.logical_or(user.narrow(-1, 0, p.skv).narrow(-2, 0, 1).to(at::kBool));
    }
    return m;
  }
  const at::Tensor diff = j - i;
  const at::Tensor shift = kvlen - qlen;  // the bottom-right corner of each sequence
  switch (c.sparse_mode) {
    case 0:
      if (given(c.mask)) {
        const at::Tensor& u = *c.mask;
        const at::Tensor user = u.dim() == 2 ? u.view({1, 1, u.size(0), u.size(1)})
                                : u.dim() == 3 ? u.unsqueeze(1) : u;
        m = m.logical_or(user.narrow(-2, 0, p.sq).narrow(-1, 0, p.skv).to(at::kBool));
        // The band -pre_tokens <= j - i <= next_tokens, from the top-left corner (ignored without a mask).
        m = m.logical_or(diff.gt(c.next)).logical_or(diff.lt(-c.pre));
      }
      return m;
    case 1: {
      const at::Tensor& u = *c.mask;
      const at::Tensor user = u.dim() == 2 ? u.view({1, 1, u.size(0), u.size(1)}) : u.dim() == 3 ? u.unsqueeze(1) : u;
      return m.logical_or(user.narrow(-2, 0, p.sq).narrow(-1, 0, p.skv).to(at::kBool));
    }
    case 2:
      return m.logical_or(diff.gt(0));
    case 3:
      return m.logical_or(diff.gt(shift));
    default:
      return m.logical_or((diff - shift).gt(c.next)).logical_or((diff - shift).lt(-c.pre));
  }
}

void check_compressed_mask(const Call& c) {
  // Leaked: compute threads may still compare against it while the process exits.
  static const at::Tensor& expected = *new at::Tensor(at::ones({2048, 2048}, at::kBool).triu_(1));
  // Bytes compared directly: bool, int8 and uint8 masks hold 0 and 1 alike, and memcmp is many times faster than
  // at::equal.
  const at::Tensor m = c.mask->contiguous();
  TORCH_CHECK(std::memcmp(m.const_data_ptr(), expected.const_data_ptr(), expected.numel()) == 0, c.op,
              ": sparse_mode ", c.sparse_mode, " takes the compressed atten_mask torch.triu(torch.ones(2048, 2048), "
              "diagonal=1) (True above the diagonal); the atten_mask given differs");
}

// Left padding: where each batch's actual tokens start, S - padding - length (torch_npu's "搬运起点"); 0 without.
std::vector<int64_t> left_starts(const Opt& padding, const std::vector<int64_t>& lengths, int64_t s, const char* op) {
  std::vector<int64_t> starts(lengths.size(), 0);
  if (!given(padding)) return starts;
  const at::Tensor pad = padding->to(at::kCPU).clamp_min(0).contiguous();  // negative paddings count as 0
  for (size_t b = 0; b < starts.size(); ++b) {
    starts[b] = s - pad.data_ptr<int64_t>()[pad.numel() == 1 ? 0 : b] - lengths[b];
    TORCH_CHECK(starts[b] >= 0, op, ": left padding puts batch ", b, "'s ", lengths[b], " tokens before the start "
                "of its ", s, " positions");
  }
  return starts;
}

// [B, N, S, D] with each batch's rows rotated by `starts` (rows start_b.. first), or back with `back`.
at::Tensor rotate_rows(const at::Tensor& t, const std::vector<int64_t>& starts, bool back) {
  if (std::all_of(starts.begin(), starts.end(), [](int64_t s) { return s == 0; })) return t;
  const int64_t s = t.size(2);
  const at::Tensor shift = at::tensor(starts, t.options().dtype(at::kLong)).view({-1, 1});
  at::Tensor idx = at::arange(s, t.options().dtype(at::kLong)).view({1, -1});
  idx = (back ? idx - shift + s : idx + shift).remainder(s);
  return t.gather(2, idx.view({t.size(0), 1, s, 1}).expand(t.sizes()));
}

// The high-performance mode's attention of float16 inputs: per key/value head, the scores q k^T rounded to float16
// and scaled in float16 (the chip's matmul and vector unit in that mode), then the additive mask, a float32 softmax
// and its log-sum-exp, and the probabilities times v. q [B, N2, R, D], k [B, N2, Skv, D], v [B, N2, Skv, Dv]
// (float32 holding float16 values), additive broadcastable to [B, N2, R, Skv]. Returns out [B, N2, R, Dv] and the
// log-sum-exp [B, N2, R].
std::tuple<at::Tensor, at::Tensor> attend_fp16_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      const at::Tensor& additive, double scale) {
  const int64_t b = q.size(0), n2 = q.size(1), rows = q.size(2), skv = k.size(2);
  const at::Tensor mask = additive.expand({b, n2, rows, skv});
  at::Tensor out = at::empty({b, n2, rows, v.size(3)}, q.options()), lse = at::empty({b, n2, rows}, q.options());
  // Tasks of kRows score rows of one head, on the compute threads; each thread's scores stay in its cache through
  // the passes and live in buffers it allocates once (fresh host memory per block would page-fault on every pass).
  constexpr int64_t kRows = 64;
  const int64_t blocks = (rows + kRows - 1) / kRows;
  at::parallel_for(0, b * n2 * blocks, 1, [&](int64_t begin, int64_t end) {
    at::Tensor s = at::empty({kRows, skv}, q.options()), rounded = at::empty({kRows, skv}, q.options().dtype(at::kHalf));
    at::Tensor max = at::empty({kRows, 1}, q.options()), sum = at::empty({kRows, 1}, q.options());
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / (n2 * blocks), h = task / blocks % n2, r = task % blocks * kRows;
      const int64_t n = std::min(kRows, rows - r);
      at::Tensor sc = s.narrow(0, 0, n), rc = rounded.narrow(0, 0, n), mx = max.narrow(0, 0, n),
                 sm = sum.narrow(0, 0, n);
      matmul_into(sc, q[i][h].narrow(0, r, n), k[i][h].t());
      rc.copy_(sc).mul_(scale);  // float16 scores, scaled in float16
      sc.copy_(rc).add_(mask[i][h].narrow(0, r, n));
      at::amax_out(mx, sc, -1, /*keepdim=*/true);
      mx.masked_fill_(mx.isneginf(), 0.);  // a fully masked row: exp(-inf) = 0 below, not NaN
      sc.sub_(mx).exp_();
      at::sum_out(sm, sc, -1, /*keepdim=*/true);
      lse[i][h].narrow(0, r, n).copy_(sm.log().add_(mx).squeeze(-1));  // -inf for a fully masked row
      sc.div_(sm.masked_fill_(sm.eq(0), 1.));                            // its probabilities stay zeros
      matmul_into(out[i][h].narrow(0, r, n), sc, v[i][h]);
    }
  });
  return {out, lse};
}

// attention_out [B, N, Sq, Dv] and softmax_lse [B, N, Sq, 1], float32.
std::pair<at::Tensor, at::Tensor> attend(const Call& c, const Problem& p) {
  const auto dtype = c.q.scalar_type();
  // Left padding is brought to the right-padded form (actual tokens first), computed, and the output rotated back.
  const auto q_starts = left_starts(p.sq > 1 ? c.query_padding : Opt(), p.qlen, p.sq, c.op);  // Q_S > 1 only
  const auto kv_starts = left_starts(c.kv_padding, p.kvlen, p.skv, c.op);
  at::Tensor q = rotate_rows(p.varlen ? pad_varlen(c.q, p.in, p.qlen, p.sq) : to_bnsd(c.q, p.in, p.n), q_starts,
                             false);
  // Dequantized before the rotation: a per-token scale belongs to its cache row.
  at::Tensor k = rotate_rows(dequantize(kv_bnsd(c.k, c, p), c.key_scale, c.key_offset, c, p, p.dq, c.key_mode, dtype),
                             kv_starts, false);
  at::Tensor v = rotate_rows(
      dequantize(kv_bnsd(c.v, c, p), c.value_scale, c.value_offset, c, p, p.dv, c.value_mode, dtype), kv_starts, false);
  q = dense_float(q);
  if (given(c.query_rope)) {  // MLA: the rope parts join the scores, q k^T + q_rope k_rope^T
    const at::Tensor qr = p.varlen ? pad_varlen(*c.query_rope, p.in, p.qlen, p.sq) : to_bnsd(*c.query_rope, p.in, p.n);
    const at::Tensor kr = kv_bnsd(*c.key_rope, c, p);
    q = at::cat({q, qr.to(at::kFloat)}, -1);
    k = at::cat({k, kr.to(at::kFloat)}, -1);
  }
  // The kernel takes key and value of one head size: value padded with zero columns, dropped after.
  const int64_t dk = k.size(-1);
  if (v.size(-1) < dk) {
    v = at::constant_pad_nd(v, {0, dk - v.size(-1)});
  } else if (v.size(-1) > dk) {
    k = at::constant_pad_nd(k, {0, v.size(-1) - dk});
    q = at::constant_pad_nd(q, {0, v.size(-1) - dk});
  }
  at::Tensor pse;
  if (given(c.pse)) pse = c.pse->narrow(2, 0, p.sq).narrow(3, 0, p.skv).to(at::kFloat);
  if (given(c.mask) && c.sparse_mode >= 2 && !(p.sq == 1 && !given(c.query_rope))) check_compressed_mask(c);
  at::Tensor masked = masked_positions(c, p, q.options());
  // Grouped heads without copying key and value per query head: the G = N / N2 query heads of a key/value head
  // become G blocks of rows of one query ([B, N2, G * Sq, D], head n2 * G + g's row i at g * Sq + i), and the masks
  // and pse follow.
  const int64_t g = p.n / p.n2;
  if (g > 1) {
    const auto fold = [&](const at::Tensor& t) { return t.reshape({t.size(0), p.n2, g * p.sq, t.size(3)}); };
    q = fold(q);
    if (pse.defined()) pse = fold(pse.expand({pse.size(0), p.n, p.sq, p.skv}));
    masked = masked.size(1) == 1 ? masked.repeat({1, 1, g, 1}) : fold(masked.expand({-1, p.n, -1, -1}));
  }
  // softmax(scale * q k^T + pse_shift, masked): pse_shift and the mask as one additive mask.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  at::Tensor additive = at::zeros(masked.sizes(), q.options()).masked_fill_(masked, -kInf);
  if (pse.defined()) additive = additive + pse;
  auto [out, lse] = c.fp16_scores ? attend_fp16_scores(q, k, v, additive, c.scale)
                                   : at::_scaled_dot_product_flash_attention_for_cpu(
                                         q.contiguous(), k.contiguous(), v.contiguous(), 0., false, additive, c.scale);
  // A row with every key masked: zeros (the kernel gives them) and a log-sum-exp of -inf (no weight when ring
  // attention merges it).
  lse = lse.unsqueeze(-1).masked_fill_(masked.all(-1, /*keepdim=*/true), -kInf);
  const auto unfold = [&](const at::Tensor& t) {
    return rotate_rows(t.reshape({p.b, p.n, p.sq, t.size(3)}), q_starts, true);
  };
  return {unfold(out).narrow(-1, 0, p.dv), unfold(lse)};
}

// [B, N, Sq, D] -> the output layout (varlen: unpadded).
at::Tensor from_bnsd(const at::Tensor& t, const Problem& p) {
  if (p.varlen) {
    std::vector<at::Tensor> seqs;
    for (int64_t i = 0; i < p.b; ++i) seqs.push_back(t[i].narrow(1, 0, p.qlen[i]).permute({1, 0, 2}));
    const at::Tensor tnd = at::cat(seqs);  // [T, N, D]
    return p.out == "NTD" ? tnd.transpose(0, 1).contiguous() : tnd.contiguous();
  }
  if (p.out == "BSH") return t.permute({0, 2, 1, 3}).flatten(2).contiguous();
  if (p.out == "BSND") return t.permute({0, 2, 1, 3}).contiguous();
  if (p.out == "NBSD") return t.permute({1, 0, 2, 3}).contiguous();
  return t.contiguous();
}

std::vector<int64_t> out_shape(const Problem& p) {
  if (p.varlen) return p.out == "NTD" ? std::vector<int64_t>{p.n, p.t, p.dv} : std::vector<int64_t>{p.t, p.n, p.dv};
  if (p.out == "BSH") return {p.b, p.sq, p.n * p.dv};
  if (p.out == "BSND") return {p.b, p.sq, p.n, p.dv};
  if (p.out == "NBSD") return {p.n, p.b, p.sq, p.dv};
  return {p.b, p.n, p.sq, p.dv};
}

c10::ScalarType out_dtype(const Call& c) { return given(c.quant_scale2) ? at::kChar : c.q.scalar_type(); }

// The output quantized (quant_scale2), rounded to its dtype.
at::Tensor finish(const Call& c, const Problem& p, at::Tensor out) {
  if (given(c.quant_scale2)) {
    const auto shape = c.quant_scale2->numel() == 1 ? std::vector<int64_t>{1, 1, 1, 1}
                                                    : std::vector<int64_t>{1, p.n, 1, p.dv};
    out = out * c.quant_scale2->to(at::kFloat).reshape(shape);
    if (given(c.quant_offset2)) out = out + c.quant_offset2->to(at::kFloat).reshape(shape);
    out = out.round().clamp(-128, 127);
  }
  return from_bnsd(out.to(out_dtype(c)), p);
}

at::Tensor lse_output(const Call& c, const Problem& p, const at::Tensor& lse) {
  if (!c.lse) return at::zeros({1}, c.q.options().dtype(at::kFloat));
  if (!p.varlen) return lse.contiguous();
  std::vector<at::Tensor> seqs;
  for (int64_t i = 0; i < p.b; ++i) seqs.push_back(lse[i].narrow(1, 0, p.qlen[i]).permute({1, 0, 2}));
  return at::cat(seqs).contiguous();  // [T, N, 1]
}

std::vector<int64_t> lse_shape(const Call& c, const Problem& p) {
  if (!c.lse) return {1};
  if (p.varlen) return {p.t, p.n, 1};
  return {p.b, p.n, p.sq, 1};
}


void refuse(const Opt& t, const char* name, const char* op) {
  TORCH_CHECK(!given(t), op, ": ", name, " is not supported here");
}

// ------------------------------------------------------------------------------------------------ the three ops

// The fields the three entry points fill alike (each sets the rest: lengths, band, sparse mode, antiquant, rope).
Call common_call(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& pse_shift,
                 const Opt& atten_mask, const Opt& block_table, const Opt& quant_scale2, const Opt& quant_offset2,
                 int64_t num_heads, int64_t num_key_value_heads, double scale, c10::string_view input_layout,
                 int64_t block_size) {
  Call c{op, q, k, v};
  c.pse = pse_shift;
  c.mask = atten_mask;
  c.block_table = block_table;
  c.quant_scale2 = quant_scale2;
  c.quant_offset2 = quant_offset2;
  c.num_heads = num_heads;
  c.num_kv_heads = num_key_value_heads;
  c.scale = scale;
  c.layout = std::string(input_layout);
  c.block_size = block_size;
  return c;
}

// antiquant_scale / antiquant_offset: [2, ...], row 0 for the key, row 1 for the value.
void split_antiquant(Call& c, const Opt& antiquant_scale, const Opt& antiquant_offset) {
  if (given(antiquant_scale)) {
    c.key_scale = (*antiquant_scale)[0];
    c.value_scale = (*antiquant_scale)[1];
  }
  if (given(antiquant_offset)) {
    c.key_offset = (*antiquant_offset)[0];
    c.value_offset = (*antiquant_offset)[1];
  }
}

// inner_precise: bit 0 the high-performance mode (1) or the high-precision one (0), bit 1 the row-invalid correction.
// The mode matters only to float16 queries, and float16 with pse_shift runs in high precision, as torch_npu documents.
void set_precision(Call& c, int64_t inner_precise) {
  TORCH_CHECK(inner_precise >= 0 && inner_precise <= 3, c.op, ": inner_precise must be 0 (high precision), 1 (high "
              "performance), 2 or 3 (the same with row-invalid correction), got ", inner_precise);
  c.fp16_scores = (inner_precise & 1) && c.q.scalar_type() == at::kHalf && !given(c.pse);
}

const std::vector<std::string> kPromptLayouts{"BSH", "BSND", "BNSD", "BNSD_BSND", "TND"};
const std::vector<std::string> kIncreLayouts{"BSH", "BSND", "BNSD"};
const std::vector<std::string> kFusedLayouts{"BSH",       "BSND",      "BNSD",    "BNSD_BSND", "BSH_NBSD",
                                             "BSND_NBSD", "BNSD_NBSD", "TND",     "TND_NTD",   "NTD_TND"};

Call prompt_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& padding_mask,
                 const Opt& atten_mask, const Opt& pse_shift, c10::OptionalIntArrayRef actual_seq_lengths,
                 const Opt& deq_scale1, const Opt& quant_scale1, const Opt& deq_scale2, const Opt& quant_scale2,
                 const Opt& quant_offset2, int64_t num_heads, double scale_value, int64_t pre_tokens,
                 int64_t next_tokens, c10::string_view input_layout, int64_t num_key_value_heads,
                 c10::OptionalIntArrayRef actual_seq_lengths_kv, int64_t sparse_mode) {
  constexpr const char* op = "npu_prompt_flash_attention";
  refuse(padding_mask, "padding_mask (reserved by torch_npu)", op);
  refuse(deq_scale1, "deq_scale1 (int8 query/key/value)", op);
  refuse(quant_scale1, "quant_scale1 (int8 query/key/value)", op);
  refuse(deq_scale2, "deq_scale2 (int8 query/key/value)", op);
  Call c = common_call(op, q, k, v, pse_shift, atten_mask, std::nullopt, quant_scale2, quant_offset2, num_heads,
                       num_key_value_heads, scale_value, input_layout, 0);
  c.qlens = copy(actual_seq_lengths);
  c.kvlens = copy(actual_seq_lengths_kv);
  c.pre = pre_tokens;
  c.next = next_tokens;
  // torch_npu runs this op in the high-performance mode; sparse_mode 10 to 14 are modes 0 to 4 in high precision.
  const bool high_precision = sparse_mode >= 10 && sparse_mode <= 14;
  c.sparse_mode = high_precision ? sparse_mode - 10 : sparse_mode;
  set_precision(c, high_precision ? 0 : 1);
  return c;
}

at::Tensor prompt_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& padding_mask,
                       const Opt& atten_mask, const Opt& pse_shift, c10::OptionalIntArrayRef actual_seq_lengths,
                       const Opt& deq_scale1, const Opt& quant_scale1, const Opt& deq_scale2, const Opt& quant_scale2,
                       const Opt& quant_offset2, int64_t num_heads, double scale_value, int64_t pre_tokens,
                       int64_t next_tokens, c10::string_view input_layout, int64_t num_key_value_heads,
                       c10::OptionalIntArrayRef actual_seq_lengths_kv, int64_t sparse_mode) {
  const Call c = prompt_call(q, k, v, padding_mask, atten_mask, pse_shift, actual_seq_lengths, deq_scale1,
                             quant_scale1, deq_scale2, quant_scale2, quant_offset2, num_heads, scale_value,
                             pre_tokens, next_tokens, input_layout, num_key_value_heads, actual_seq_lengths_kv,
                             sparse_mode);
  const Problem p = describe(c, kPromptLayouts);
  return at::empty(out_shape(p), q.options().dtype(out_dtype(c)));
}

at::Tensor prompt_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& padding_mask,
                      const Opt& atten_mask, const Opt& pse_shift, c10::OptionalIntArrayRef actual_seq_lengths,
                      const Opt& deq_scale1, const Opt& quant_scale1, const Opt& deq_scale2, const Opt& quant_scale2,
                      const Opt& quant_offset2, int64_t num_heads, double scale_value, int64_t pre_tokens,
                      int64_t next_tokens, c10::string_view input_layout, int64_t num_key_value_heads,
                      c10::OptionalIntArrayRef actual_seq_lengths_kv, int64_t sparse_mode) {
  const Call c = prompt_call(q, k, v, padding_mask, atten_mask, pse_shift, actual_seq_lengths, deq_scale1,
                             quant_scale1, deq_scale2, quant_scale2, quant_offset2, num_heads, scale_value,
                             pre_tokens, next_tokens, input_layout, num_key_value_heads, actual_seq_lengths_kv,
                             sparse_mode);
  const Problem p = describe(c, kPromptLayouts);
  return finish(c, p, attend(c, p).first);
}

Call incre_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& padding_mask,
                const Opt& atten_mask, const Opt& pse_shift, at::OptionalSymIntArrayRef actual_seq_lengths,
                const Opt& antiquant_scale, const Opt& antiquant_offset, const Opt& block_table,
                const Opt& dequant_scale1, const Opt& quant_scale1, const Opt& dequant_scale2,
                const Opt& quant_scale2, const Opt& quant_offset2, const Opt& kv_padding_size, int64_t num_heads,
                double scale_value, c10::string_view input_layout, int64_t num_key_value_heads, int64_t block_size,
                int64_t inner_precise) {
  constexpr const char* op = "npu_incre_flash_attention";
  refuse(padding_mask, "padding_mask (reserved by torch_npu)", op);
  refuse(dequant_scale1, "dequant_scale1 (int8 query/key/value)", op);
  refuse(quant_scale1, "quant_scale1 (int8 query/key/value)", op);
  refuse(dequant_scale2, "dequant_scale2 (int8 query/key/value)", op);
  Call c = common_call(op, q, k, v, pse_shift, atten_mask, block_table, quant_scale2, quant_offset2, num_heads,
                       num_key_value_heads, scale_value, input_layout, block_size);
  split_antiquant(c, antiquant_scale, antiquant_offset);
  c.kvlens = copy(actual_seq_lengths);  // the key/value lengths: the query has one token
  c.kv_padding = kv_padding_size;
  set_precision(c, inner_precise);
  return c;
}

void check_incre(const Call& c, const Problem& p) {
  TORCH_CHECK(p.sq == 1, c.op, ": the query must have one token per batch (S = 1), got ", p.sq);
  if (given(c.key_scale)) TORCH_CHECK(c.k.scalar_type() == at::kChar, c.op, ": antiquant_scale needs int8 key/value");
}

at::Tensor incre_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& padding_mask,
                      const Opt& atten_mask, const Opt& pse_shift, at::OptionalSymIntArrayRef actual_seq_lengths,
                      const Opt& antiquant_scale, const Opt& antiquant_offset, const Opt& block_table,
                      const Opt& dequant_scale1, const Opt& quant_scale1, const Opt& dequant_scale2,
                      const Opt& quant_scale2, const Opt& quant_offset2, const Opt& kv_padding_size,
                      int64_t num_heads, double scale_value, c10::string_view input_layout,
                      int64_t num_key_value_heads, int64_t block_size, int64_t inner_precise) {
  const Call c = incre_call(q, k, v, padding_mask, atten_mask, pse_shift, actual_seq_lengths, antiquant_scale,
                            antiquant_offset, block_table, dequant_scale1, quant_scale1, dequant_scale2, quant_scale2,
                            quant_offset2, kv_padding_size, num_heads, scale_value, input_layout,
                            num_key_value_heads, block_size, inner_precise);
  const Problem p = describe(c, kIncreLayouts);
  check_incre(c, p);
  return at::empty(out_shape(p), q.options().dtype(out_dtype(c)));
}

at::Tensor incre_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Opt& padding_mask,
                     const Opt& atten_mask, const Opt& pse_shift, at::OptionalSymIntArrayRef actual_seq_lengths,
                     const Opt& antiquant_scale, const Opt& antiquant_offset, const Opt& block_table,
                     const Opt& dequant_scale1, const Opt& quant_scale1, const Opt& dequant_scale2,
                     const Opt& quant_scale2, const Opt& quant_offset2, const Opt& kv_padding_size,
                     int64_t num_heads, double scale_value, c10::string_view input_layout,
                     int64_t num_key_value_heads, int64_t block_size, int64_t inner_precise) {
  const Call c = incre_call(q, k, v, padding_mask, atten_mask, pse_shift, actual_seq_lengths, antiquant_scale,
                            antiquant_offset, block_table, dequant_scale1, quant_scale1, dequant_scale2, quant_scale2,
                            quant_offset2, kv_padding_size, num_heads, scale_value, input_layout,
                            num_key_value_heads, block_size, inner_precise);
  const Problem p = describe(c, kIncreLayouts);
  check_incre(c, p);
  return finish(c, p, attend(c, p).first);
}

#define FUSED_INFER_PARAMS                                                                                        \
  const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const Opt &pse_shift, const Opt &atten_mask,     \
      at::OptionalSymIntArrayRef actual_seq_lengths, at::OptionalSymIntArrayRef actual_seq_lengths_kv,            \
      const Opt &dequant_scale1, const Opt &quant_scale1, const Opt &dequant_scale2, const Opt &quant_scale2,     \
      const Opt &quant_offset2, const Opt &antiquant_scale, const Opt &antiquant_offset,                          \
      const Opt &key_antiquant_scale, const Opt &key_antiquant_offset, const Opt &value_antiquant_scale,          \
      const Opt &value_antiquant_offset, const Opt &block_table, const Opt &query_padding_size,                   \
      const Opt &kv_padding_size, const Opt &key_shared_prefix, const Opt &value_shared_prefix,                   \
      at::OptionalSymIntArrayRef actual_shared_prefix_len, const Opt &query_rope, const Opt &key_rope,            \
      const Opt &key_rope_antiquant_scale, int64_t num_heads, double scale, int64_t pre_tokens,                   \
      int64_t next_tokens, c10::string_view input_layout, int64_t num_key_value_heads, int64_t sparse_mode,       \
      int64_t inner_precise, int64_t block_size, int64_t antiquant_mode, int64_t key_antiquant_mode,             \
      int64_t value_antiquant_mode, bool softmax_lse_flag

#define FUSED_INFER_ARGS                                                                                          \
  q, k, v, pse_shift, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, dequant_scale1, quant_scale1,        \
      dequant_scale2, quant_scale2, quant_offset2, antiquant_scale, antiquant_offset, key_antiquant_scale,        \
      key_antiquant_offset, value_antiquant_scale, value_antiquant_offset, block_table, query_padding_size,       \
      kv_padding_size, key_shared_prefix, value_shared_prefix, actual_shared_prefix_len, query_rope, key_rope,    \
      key_rope_antiquant_scale, num_heads, scale, pre_tokens, next_tokens, input_layout, num_key_value_heads,     \
      sparse_mode, inner_precise, block_size, antiquant_mode, key_antiquant_mode, value_antiquant_mode,           \
      softmax_lse_flag

Call fused_call_of(const char* op, FUSED_INFER_PARAMS) {
  refuse(dequant_scale1, "dequant_scale1 (int8 query/key/value)", op);
  refuse(quant_scale1, "quant_scale1 (int8 query/key/value)", op);
  refuse(dequant_scale2, "dequant_scale2 (int8 query/key/value)", op);
  refuse(key_shared_prefix, "key_shared_prefix", op);
  refuse(value_shared_prefix, "value_shared_prefix", op);
  refuse(key_rope_antiquant_scale, "key_rope_antiquant_scale (reserved by torch_npu)", op);
  TORCH_CHECK(antiquant_mode == 0 || antiquant_mode == 1, op,
              ": antiquant_mode must be 0 (per channel / per tensor) or 1 (per token), got ", antiquant_mode);
  TORCH_CHECK(key_antiquant_mode >= 0 && key_antiquant_mode <= 5 && value_antiquant_mode >= 0 &&
                  value_antiquant_mode <= 5, op,
              ": key_antiquant_mode and value_antiquant_mode must be in [0, 5], got ", key_antiquant_mode, " and ",
              value_antiquant_mode);
  TORCH_CHECK(key_antiquant_mode == value_antiquant_mode || key_antiquant_mode == 0, op,
              ": key_antiquant_mode and value_antiquant_mode must be equal, except key 0 with value 1; got ",
              key_antiquant_mode, " and ", value_antiquant_mode);
  TORCH_CHECK(given(key_antiquant_scale) == given(value_antiquant_scale), op,
              ": key_antiquant_scale and value_antiquant_scale go together");
  TORCH_CHECK(!(given(antiquant_scale) && given(key_antiquant_scale)), op,
              ": give antiquant_scale or key_antiquant_scale/value_antiquant_scale, not both");
  Call c = common_call(op, q, k, v, pse_shift, atten_mask, block_table, quant_scale2, quant_offset2, num_heads,
                       num_key_value_heads, scale, input_layout, block_size);
  if (given(antiquant_scale)) {
    split_antiquant(c, antiquant_scale, antiquant_offset);
    c.key_mode = c.value_mode = antiquant_mode;
  } else {
    c.key_mode = key_antiquant_mode;
    c.value_mode = value_antiquant_mode;
    c.key_scale = key_antiquant_scale;
    c.value_scale = value_antiquant_scale;
    c.key_offset = key_antiquant_offset;
    c.value_offset = value_antiquant_offset;
  }
  c.query_rope = query_rope;
  c.key_rope = key_rope;
  c.qlens = copy(actual_seq_lengths);
  c.kvlens = copy(actual_seq_lengths_kv);
  c.pre = pre_tokens;
  c.next = next_tokens;
  c.sparse_mode = sparse_mode;
  c.lse = softmax_lse_flag;
  c.query_padding = query_padding_size;
  c.kv_padding = kv_padding_size;
  set_precision(c, inner_precise);
  return c;
}

Call fused_call(FUSED_INFER_PARAMS) { return fused_call_of("npu_fused_infer_attention_score", FUSED_INFER_ARGS); }

std::tuple<at::Tensor, at::Tensor> fused_meta(FUSED_INFER_PARAMS) {
  const Call c = fused_call(FUSED_INFER_ARGS);
  const Problem p = describe(c, kFusedLayouts);
  return {at::empty(out_shape(p), q.options().dtype(out_dtype(c))),
          at::empty(lse_shape(c, p), q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> fused_cpu(FUSED_INFER_PARAMS) {
  const Call c = fused_call(FUSED_INFER_ARGS);
  const Problem p = describe(c, kFusedLayouts);
  const auto [out, lse] = attend(c, p);
  return {finish(c, p, out), lse_output(c, p, lse)};
}

// The .out overload: the outputs must have the shapes and dtypes the functional op returns (allocated beforehand, as
// for a captured graph); the workspace is not needed here.
void check_outs(const at::Tensor& out, const at::Tensor& lse, const Call& c, const Problem& p) {
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(out_shape(p)) && out.scalar_type() == out_dtype(c), c.op,
              ": attention_out must be ", out_dtype(c), " of shape ", c10::IntArrayRef(out_shape(p)), ", got ",
              out.scalar_type(), " ", out.sizes());
  // Without softmax_lse_flag it is the [1] placeholder, of any floating dtype (torch_npu's callers pass query's).
  TORCH_CHECK(lse.sizes() == c10::IntArrayRef(lse_shape(c, p)) &&
                  (c.lse ? lse.scalar_type() == at::kFloat : at::isFloatingType(lse.scalar_type())),
              c.op, ": softmax_lse must be ", c.lse ? "float32" : "floating", " of shape ",
              c10::IntArrayRef(lse_shape(c, p)), ", got ", lse.scalar_type(), " ", lse.sizes());
}

void fused_out_meta(FUSED_INFER_PARAMS, const Opt& workspace, at::Tensor& out, at::Tensor& lse) {
  const Call c = fused_call(FUSED_INFER_ARGS);
  check_outs(out, lse, c, describe(c, kFusedLayouts));
}

void fused_out_cpu(FUSED_INFER_PARAMS, const Opt& workspace, at::Tensor& out, at::Tensor& lse) {
  const Call c = fused_call(FUSED_INFER_ARGS);
  const Problem p = describe(c, kFusedLayouts);
  check_outs(out, lse, c, p);
  const auto [o, l] = attend(c, p);
  out.copy_(finish(c, p, o));
  lse.copy_(lse_output(c, p, l));
}

std::tuple<at::Tensor, at::Tensor> fused_out(FUSED_INFER_PARAMS, const Opt& workspace, at::TensorList outs) {
  TORCH_CHECK(outs.size() == 2, "npu_fused_infer_attention_score: out must be [attention_out, softmax_lse], got ",
              outs.size(), " tensors");
  at::Tensor out = outs[0], lse = outs[1];
  static const auto op = npu_op<void(FUSED_INFER_PARAMS, const Opt&, at::Tensor&, at::Tensor&)>(
      "npu::_npu_fused_infer_attention_score_out_");
  op.call(FUSED_INFER_ARGS, workspace, out, lse);
  return {out, lse};
}

// torch_npu's workspace query for graph capture: this computation needs none, so an empty uint8 tensor.
at::Tensor max_workspace(FUSED_INFER_PARAMS) {
  const Call c = fused_call(FUSED_INFER_ARGS);
  describe(c, kFusedLayouts);
  return at::empty({0}, q.options().dtype(at::kByte));
}

// ------------------------------------------------------------------------------------------------ v2

#define FIA_V2_PARAMS                                                                                             \
  const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const Opt &query_rope, const Opt &key_rope,      \
      const Opt &pse_shift, const Opt &atten_mask, at::OptionalSymIntArrayRef actual_seq_qlen,                    \
      at::OptionalSymIntArrayRef actual_seq_kvlen, const Opt &block_table, const Opt &dequant_scale_query,        \
      const Opt &dequant_scale_key, const Opt &dequant_offset_key, const Opt &dequant_scale_value,                \
      const Opt &dequant_offset_value, const Opt &dequant_scale_key_rope, const Opt &quant_scale_out,             \
      const Opt &quant_offset_out, const Opt &quant_scale_p, const Opt &learnable_sink, int64_t num_query_heads,  \
      int64_t num_key_value_heads, double softmax_scale, int64_t pre_tokens, int64_t next_tokens,                 \
      c10::string_view input_layout, int64_t sparse_mode, int64_t block_size, int64_t query_quant_mode,           \
      int64_t key_quant_mode, int64_t value_quant_mode, int64_t inner_precise, bool return_softmax_lse,            \
      std::optional<int64_t> query_dtype, std::optional<int64_t> key_dtype, std::optional<int64_t> value_dtype,   \
      std::optional<int64_t> query_rope_dtype, std::optional<int64_t> key_rope_dtype,                             \
      std::optional<int64_t> key_shared_prefix_dtype, std::optional<int64_t> value_shared_prefix_dtype,           \
      std::optional<int64_t> dequant_scale_query_dtype, std::optional<int64_t> dequant_scale_key_dtype,           \
      std::optional<int64_t> dequant_scale_value_dtype, std::optional<int64_t> dequant_scale_key_rope_dtype,      \
      std::optional<int64_t> out_dtype_code

#define FIA_V2_ARGS                                                                                               \
  q, k, v, query_rope, key_rope, pse_shift, atten_mask, actual_seq_qlen, actual_seq_kvlen, block_table,           \
      dequant_scale_query, dequant_scale_key, dequant_offset_key, dequant_scale_value, dequant_offset_value,      \
      dequant_scale_key_rope, quant_scale_out, quant_offset_out, quant_scale_p, learnable_sink, num_query_heads,  \
      num_key_value_heads, softmax_scale, pre_tokens, next_tokens, input_layout, sparse_mode, block_size,         \
      query_quant_mode, key_quant_mode, value_quant_mode, inner_precise, return_softmax_lse, query_dtype,         \
      key_dtype, value_dtype, query_rope_dtype, key_rope_dtype, key_shared_prefix_dtype,                          \
      value_shared_prefix_dtype, dequant_scale_query_dtype, dequant_scale_key_dtype, dequant_scale_value_dtype,   \
      dequant_scale_key_rope_dtype, out_dtype_code

// v2's arguments as v1's call: dequant_scale_key/value (and offsets) are v1's key/value_antiquant_scale (offset) with
// key/value_quant_mode as their modes, quant_scale_out/quant_offset_out the int8 output's quant_scale2/offset2.
// What v1 has no counterpart for here (int8 or fp8 queries, a learnable sink, the *_dtype overrides of torch_npu's
// low-bit dtypes that torch has no type for) is refused by name.
Call fused_v2_call(FIA_V2_PARAMS) {
  constexpr const char* op = "npu_fused_infer_attention_score_v2";
  refuse(dequant_scale_query, "dequant_scale_query (quantized query)", op);
  refuse(quant_scale_p, "quant_scale_p (quantized query/key/value)", op);
  refuse(learnable_sink, "learnable_sink", op);
  TORCH_CHECK(query_quant_mode == 0, op, ": query_quant_mode must be 0 (a floating query), got ", query_quant_mode);
  const std::pair<const char*, std::optional<int64_t>> dtypes[] = {
      {"query_dtype", query_dtype},
      {"key_dtype", key_dtype},
      {"value_dtype", value_dtype},
      {"query_rope_dtype", query_rope_dtype},
      {"key_rope_dtype", key_rope_dtype},
      {"key_shared_prefix_dtype", key_shared_prefix_dtype},
      {"value_shared_prefix_dtype", value_shared_prefix_dtype},
      {"dequant_scale_query_dtype", dequant_scale_query_dtype},
      {"dequant_scale_key_dtype", dequant_scale_key_dtype},
      {"dequant_scale_value_dtype", dequant_scale_value_dtype},
      {"dequant_scale_key_rope_dtype", dequant_scale_key_rope_dtype},
      {"out_dtype", out_dtype_code}};
  for (const auto& [name, value] : dtypes)
    TORCH_CHECK(!value, op, ": ", name, " (a dtype torch has no type for) is not supported here");
  const Opt none;
  return fused_call_of(op, q, k, v, pse_shift, atten_mask, actual_seq_qlen, actual_seq_kvlen, none, none, none,
                       quant_scale_out, quant_offset_out, none, none, dequant_scale_key, dequant_offset_key,
                       dequant_scale_value, dequant_offset_value, block_table, none, none, none, none, std::nullopt,
                       query_rope, key_rope, dequant_scale_key_rope, num_query_heads, softmax_scale, pre_tokens,
                       next_tokens, input_layout, num_key_value_heads, sparse_mode, inner_precise, block_size, 0,
                       key_quant_mode, value_quant_mode, return_softmax_lse);
}

std::tuple<at::Tensor, at::Tensor> fused_v2_meta(FIA_V2_PARAMS) {
  const Call c = fused_v2_call(FIA_V2_ARGS);
  const Problem p = describe(c, kFusedLayouts);
  return {at::empty(out_shape(p), q.options().dtype(out_dtype(c))),
          at::empty(lse_shape(c, p), q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> fused_v2_cpu(FIA_V2_PARAMS) {
  const Call c = fused_v2_call(FIA_V2_ARGS);
  const Problem p = describe(c, kFusedLayouts);
  const auto [out, lse] = attend(c, p);
  return {finish(c, p, out), lse_output(c, p, lse)};
}

void fused_v2_out_meta(FIA_V2_PARAMS, const Opt& workspace, at::Tensor& out, at::Tensor& lse) {
  const Call c = fused_v2_call(FIA_V2_ARGS);
  check_outs(out, lse, c, describe(c, kFusedLayouts));
}

void fused_v2_out_cpu(FIA_V2_PARAMS, const Opt& workspace, at::Tensor& out, at::Tensor& lse) {
  const Call c = fused_v2_call(FIA_V2_ARGS);
  const Problem p = describe(c, kFusedLayouts);
  check_outs(out, lse, c, p);
  const auto [o, l] = attend(c, p);
  out.copy_(finish(c, p, o));
  lse.copy_(lse_output(c, p, l));
}

std::tuple<at::Tensor, at::Tensor> fused_v2_out(FIA_V2_PARAMS, const Opt& workspace, at::TensorList outs) {
  TORCH_CHECK(outs.size() == 2, "npu_fused_infer_attention_score_v2: out must be [attention_out, softmax_lse], got ",
              outs.size(), " tensors");
  at::Tensor out = outs[0], lse = outs[1];
  static const auto op = npu_op<void(FIA_V2_PARAMS, const Opt&, at::Tensor&, at::Tensor&)>(
      "npu::_npu_fused_infer_attention_score_v2_out_");
  op.call(FIA_V2_ARGS, workspace, out, lse);
  return {out, lse};
}

at::Tensor max_workspace_v2(FIA_V2_PARAMS) {
  const Call c = fused_v2_call(FIA_V2_ARGS);
  describe(c, kFusedLayouts);
  return at::empty({0}, q.options().dtype(at::kByte));
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_prompt_flash_attention", prompt_meta);
  m.impl("npu_incre_flash_attention", incre_meta);
  m.impl("npu_fused_infer_attention_score", fused_meta);
  m.impl("_npu_fused_infer_attention_score_out_", fused_out_meta);
  m.impl("npu_fused_infer_attention_score_v2", fused_v2_meta);
  m.impl("_npu_fused_infer_attention_score_v2_out_", fused_v2_out_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_prompt_flash_attention", prompt_cpu);
  m.impl("npu_incre_flash_attention", incre_cpu);
  m.impl("npu_fused_infer_attention_score", fused_cpu);
  m.impl("_npu_fused_infer_attention_score_out_", fused_out_cpu);
  m.impl("npu_fused_infer_attention_score_v2", fused_v2_cpu);
  m.impl("_npu_fused_infer_attention_score_v2_out_", fused_v2_out_cpu);
}

// No computation, any device: the (empty) workspace is allocated on the query's.
TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) {
  m.impl("_npu_fused_infer_attention_score_get_max_workspace", max_workspace);
  m.impl("_npu_fused_infer_attention_score_v2_get_max_workspace", max_workspace_v2);
}

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) {
  m.impl("npu_fused_infer_attention_score.out", fused_out);
  m.impl("npu_fused_infer_attention_score_v2.out", fused_v2_out);
}

}  // namespace softnpu::fused
