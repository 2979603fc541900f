// _npu_paged_attention(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table,
// context_lens, out, *, workspace=None) -> (): torch_npu's ATB PagedAttention (vLLM-Ascend's decode attention), in
// torch_npu's `atb` op namespace. Each row i of query ([num_tokens, num_heads, head_size]) attends over the first
// context_lens[i] tokens of its sequence, token p read from key_cache / value_cache ([num_blocks, block_size,
// num_kv_heads, head_size(_v)]) at block block_table[i][p / block_size], slot p % block_size; heads are grouped over
// the key/value heads (num_heads / num_kv_heads each). Scores scaled by scale_value and softmaxed in float32, the
// probabilities rounded to the query's dtype before they weight the values (as ATB's kernel), written into out
// ([num_tokens, num_heads, head_size_v]). context_lens is a host (CPU) int32 tensor, as ATB reads it on the host: on
// npu its values are read at the call and launched with the kernel (_npu_paged_attention_host_lens), so a graph
// update that replaces context_lens re-launches with the new values.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(atb, m) {
  m.def("_npu_paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, int num_kv_heads, int num_heads, "
        "float scale_value, Tensor block_table, Tensor context_lens, Tensor(a!) out, *, Tensor? workspace=None) "
        "-> ()");
  m.def("_npu_paged_attention_host_lens(Tensor query, Tensor key_cache, Tensor value_cache, int num_kv_heads, "
        "int num_heads, float scale_value, Tensor block_table, int[] context_lens, Tensor(a!) out) -> ()");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "_npu_paged_attention";

void check(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, int64_t kv_heads, int64_t heads,
           const at::Tensor& block_table, const at::Tensor& out) {
  TORCH_CHECK(q.dim() == 3 && q.size(1) == heads, OP, ": query must be [num_tokens, num_heads = ", heads,
              ", head_size], got ", q.sizes());
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, OP, ": num_heads ", heads, " must be a multiple of num_kv_heads ",
              kv_heads);
  TORCH_CHECK(kc.dim() == 4 && kc.size(2) == kv_heads && kc.size(3) == q.size(2), OP,
              ": key_cache must be [num_blocks, block_size, num_kv_heads = ", kv_heads, ", head_size = ", q.size(2),
              "], got ", kc.sizes());
  TORCH_CHECK(vc.dim() == 4 && vc.sizes().slice(0, 3) == kc.sizes().slice(0, 3), OP,
              ": value_cache must be [num_blocks, block_size, num_kv_heads, head_size_v] like key_cache ",
              kc.sizes(), ", got ", vc.sizes());
  TORCH_CHECK(kc.scalar_type() == q.scalar_type() && vc.scalar_type() == q.scalar_type(), OP,
              ": key_cache and value_cache must have query's dtype ", q.scalar_type());
  TORCH_CHECK(block_table.dim() == 2 && block_table.size(0) == q.size(0) && !at::isFloatingType(block_table.scalar_type()),
              OP, ": block_table must be integer [num_tokens = ", q.size(0), ", max_blocks], got ",
              block_table.scalar_type(), " ", block_table.sizes());
  TORCH_CHECK(out.dim() == 3 && out.size(0) == q.size(0) && out.size(1) == heads && out.size(2) == vc.size(3) &&
                  out.scalar_type() == q.scalar_type(), OP, ": out must be ", q.scalar_type(), " [", q.size(0), ", ",
              heads, ", ", vc.size(3), "], got ", out.scalar_type(), " ", out.sizes());
}

std::vector<int64_t> host_lens(const at::Tensor& q, const at::Tensor& context_lens) {
  TORCH_CHECK(context_lens.dim() == 1 && context_lens.size(0) == q.size(0) &&
                  !at::isFloatingType(context_lens.scalar_type()), OP,
              ": context_lens must be integer [num_tokens = ", q.size(0), "], got ", context_lens.scalar_type(), " ",
              context_lens.sizes());
  const at::Tensor lens = context_lens.to(at::kCPU, at::kLong).contiguous();
  return {lens.const_data_ptr<int64_t>(), lens.const_data_ptr<int64_t>() + lens.numel()};
}

void with_lens_meta(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, int64_t kv_heads, int64_t heads,
                    double, const at::Tensor& block_table, at::IntArrayRef lens, at::Tensor& out) {
  check(q, kc, vc, kv_heads, heads, block_table, out);
  TORCH_CHECK(static_cast<int64_t>(lens.size()) == q.size(0), OP, ": context_lens must hold num_tokens = ", q.size(0),
              " lengths, got ", lens.size());
  const int64_t max_len = block_table.size(1) * kc.size(1);
  for (size_t i = 0; i < lens.size(); ++i)
    TORCH_CHECK(lens[i] >= 0 && lens[i] <= max_len, OP, ": context_lens[", i, "] = ", lens[i], " must be in [0, ",
                max_len, "] (block_table's blocks of ", kc.size(1), ")");
}

void with_lens_cpu(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, int64_t kv_heads, int64_t heads,
                   double scale, const at::Tensor& block_table, at::IntArrayRef lens, at::Tensor& out) {
  with_lens_meta(q, kc, vc, kv_heads, heads, scale, block_table, lens, out);
  const int64_t block_size = kc.size(1), group = heads / kv_heads;
  const at::Tensor table = block_table.to(at::kLong);
  for (int64_t i = 0; i < q.size(0); ++i) {
    const int64_t len = lens[i];
    if (len == 0) {
      out[i].zero_();
      continue;
    }
    const at::Tensor pos = at::arange(len, table.options());
    const at::Tensor blocks = table[i].index_select(0, at::div(pos, block_size, "floor"));
    const at::Tensor slots = at::remainder(pos, block_size);
    const at::Tensor k = kc.index({blocks, slots}).to(at::kFloat);  // [len, kv_heads, d]
    const at::Tensor v = vc.index({blocks, slots}).to(at::kFloat);  // [len, kv_heads, dv]
    const at::Tensor qi = q[i].to(at::kFloat).view({kv_heads, group, q.size(2)});
    const at::Tensor p = at::softmax(at::einsum("kgd,lkd->kgl", {qi, k}) * scale, -1).to(q.scalar_type());
    out[i].copy_(at::einsum("kgl,lkd->kgd", {p.to(at::kFloat), v}).reshape({heads, vc.size(3)}));
  }
}

using WithLensSig = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t, double,
                         const at::Tensor&, at::IntArrayRef, at::Tensor&);

// Any device: context_lens read on the host here, the attention launched with the values.
void paged_attention(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, int64_t kv_heads,
                     int64_t heads, double scale, const at::Tensor& block_table, const at::Tensor& context_lens,
                     at::Tensor& out, const std::optional<at::Tensor>&) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("atb::_npu_paged_attention_host_lens", "")
                             .typed<WithLensSig>();
  op.call(q, kc, vc, kv_heads, heads, scale, block_table, host_lens(q, context_lens), out);
}

}  // namespace

// Tracing (fake tensors) checks the shapes without reading context_lens.
void paged_attention_meta(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, int64_t kv_heads,
                          int64_t heads, double, const at::Tensor& block_table, const at::Tensor& context_lens,
                          at::Tensor& out, const std::optional<at::Tensor>&) {
  check(q, kc, vc, kv_heads, heads, block_table, out);
  TORCH_CHECK(context_lens.dim() == 1 && context_lens.size(0) == q.size(0), OP,
              ": context_lens must be [num_tokens = ", q.size(0), "], got ", context_lens.sizes());
}

TORCH_LIBRARY_IMPL(atb, Meta, m) {
  m.impl("_npu_paged_attention", paged_attention_meta);
  m.impl("_npu_paged_attention_host_lens", with_lens_meta);
}

TORCH_LIBRARY_IMPL(atb, CPU, m) { m.impl("_npu_paged_attention_host_lens", with_lens_cpu); }

TORCH_LIBRARY_IMPL(atb, CompositeExplicitAutograd, m) { m.impl("_npu_paged_attention", paged_attention); }

}  // namespace softnpu::fused
