// npu_multi_head_latent_attention: torch_npu's ATB MultiLatentAttention (MLA's paged decode attention, DeepSeek's
// absorbed form), in torch_npu's `atb` op namespace (torch_npu.atb.npu_multi_head_latent_attention). Each token i of
// q_nope [T, N, Dn] / q_rope [T, N, Dr] attends over the first context_lens[i] tokens of its sequence: token p's key is
// ctkv ++ k_rope at block block_tables[i][p / block_size], slot p % block_size (caches [blocks, block_size, KV_N,
// Dn|Dr], the "krope_ctkv" cache mode), its value ctkv itself; so the scores are q_nope ctkv^T + q_rope k_rope^T,
// scaled by qk_scale and softmaxed in float32, and the probabilities are rounded to the query's dtype before they
// weight ctkv (as ATB's kernel, whose second matmul takes them in the input dtype). N / KV_N query heads share a
// key/value head. context_lens is a host int list, launched with the kernel: a graph update that replaces it
// re-launches with the new values (the built-in handler in simple_handler.py).
//
// Overloads, torch_npu's schemas: the functional form, .out (written into `output`), .lse (return_lse: also each
// row's log-sum-exp, which ATB yields for ring attention) and .lse_out, and the workspace query that graph capture
// calls (_npu_multi_head_latent_attention_get_workspace.lse: no workspace is needed here).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <string>

#include "../common.h"
#include "../gemm.h"

TORCH_LIBRARY_FRAGMENT(atb, m) {
#define MLA_ARGS                                                                                                  \
  "Tensor q_nope, Tensor q_rope, Tensor ctkv, Tensor k_rope, Tensor block_tables, SymInt[] context_lens, "        \
  "int q_headnum, float qk_scale, int kv_headnum"
#define MLA_KWARGS                                                                                                \
  "Tensor? mask=None, SymInt[]? qseqlen=None, Tensor? qk_descale=None, Tensor? pv_descale=None, "                 \
  "str? mask_type=None, str? calc_type=None, str? cache_mode=None"
  m.def("npu_multi_head_latent_attention(" MLA_ARGS ", *, " MLA_KWARGS ") -> Tensor");
  m.def("npu_multi_head_latent_attention.out(" MLA_ARGS ", *, " MLA_KWARGS ", Tensor(a!) output) -> Tensor(a!)");
  m.def("npu_multi_head_latent_attention.lse(" MLA_ARGS ", bool return_lse, *, " MLA_KWARGS
        ", Tensor? workspace=None) -> (Tensor, Tensor)");
  m.def("_npu_multi_head_latent_attention_get_workspace.lse(" MLA_ARGS ", bool return_lse, *, " MLA_KWARGS
        ") -> Tensor");
  m.def("npu_multi_head_latent_attention.lse_out(" MLA_ARGS ", bool return_lse, *, " MLA_KWARGS
        ", Tensor? workspace=None, Tensor(a!) output, Tensor(b!) lse) -> (Tensor(a!), Tensor(b!))");
#undef MLA_ARGS
#undef MLA_KWARGS
}

namespace softnpu::fused {

namespace {

using Opt = std::optional<at::Tensor>;
using Str = std::optional<c10::string_view>;
constexpr const char* OP = "npu_multi_head_latent_attention";

// The string arguments: torch_npu's names (an unknown one raises its "Unsupported ... value" error); the modes other
// than decode over the float krope_ctkv cache are refused by name.
void check_modes(const Opt& mask, at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale, const Opt& pv_descale,
                 Str mask_type, Str calc_type, Str cache_mode) {
  const std::string mask_t(mask_type.value_or("undefined")), calc_t(calc_type.value_or("calc_type_undefined")),
      cache_t(cache_mode.value_or("krope_ctkv"));
  TORCH_CHECK(mask_t == "undefined" || mask_t == "mask_type_spec" || mask_t == "mask_type_free",
              "Unsupported mask_type value: '", mask_t, "'");
  TORCH_CHECK(calc_t == "calc_type_undefined" || calc_t == "calc_type_spec" || calc_t == "calc_type_ring",
              "Unsupported calc_type value: '", calc_t, "'");
  TORCH_CHECK(cache_t == "krope_ctkv" || cache_t == "int8_nzcache" || cache_t == "nzcache",
              "Unsupported cache_mode value: '", cache_t, "'");
  TORCH_CHECK(cache_t == "krope_ctkv", OP, ": cache_mode '", cache_t,
              "' (ctkv and k_rope in the FRACTAL_NZ block layout, int8 per-head quantized for int8_nzcache) is not "
              "supported by softnpu; use cache_mode='krope_ctkv' (ND caches of q_nope's dtype)");
  TORCH_CHECK(mask_t == "undefined", OP, ": mask_type '", mask_t,
              "' (speculative decoding's masks) is not supported by softnpu; only 'undefined' (no mask)");
  TORCH_CHECK(calc_t != "calc_type_spec", OP,
              ": calc_type 'calc_type_spec' (several query tokens per sequence, qseqlen) is not supported by softnpu");
  TORCH_CHECK(!given(mask), OP, ": mask is read only with a mask_type other than 'undefined'");
  TORCH_CHECK(!qseqlen.has_value(), OP, ": qseqlen is read only with calc_type 'calc_type_spec'");
  TORCH_CHECK(!given(qk_descale) && !given(pv_descale), OP,
              ": qk_descale and pv_descale belong to cache_mode 'int8_nzcache'");
}

std::vector<int64_t> lengths(at::SymIntArrayRef context_lens) {
  return C10_AS_INTARRAYREF_SLOW(context_lens).vec();
}

// Shapes, dtypes and lengths (every kernel, Meta included, so an error is raised at the call).
void check(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
           const at::Tensor& table, const std::vector<int64_t>& lens, int64_t heads, int64_t kv_heads) {
  TORCH_CHECK(qn.scalar_type() == at::kHalf || qn.scalar_type() == at::kBFloat16, OP,
              ": q_nope must be float16 or bfloat16 (int8 belongs to cache_mode 'int8_nzcache'), got ",
              qn.scalar_type());
  TORCH_CHECK(qr.scalar_type() == qn.scalar_type() && ctkv.scalar_type() == qn.scalar_type() &&
                  kr.scalar_type() == qn.scalar_type(),
              OP, ": q_rope, ctkv and k_rope must have q_nope's dtype ", qn.scalar_type(), ", got ",
              qr.scalar_type(), ", ", ctkv.scalar_type(), ", ", kr.scalar_type());
  TORCH_CHECK(qn.dim() == 3 && qn.size(1) == heads, OP, ": q_nope must be [num_tokens, q_headnum = ", heads,
              ", head_size], got ", qn.sizes());
  TORCH_CHECK(qr.dim() == 3 && qr.size(0) == qn.size(0) && qr.size(1) == heads, OP,
              ": q_rope must be [num_tokens = ", qn.size(0), ", q_headnum = ", heads, ", rope_size], got ",
              qr.sizes());
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, OP, ": q_headnum ", heads, " must be a multiple of kv_headnum ",
              kv_heads);
  TORCH_CHECK(ctkv.dim() == 4 && ctkv.size(2) == kv_heads && ctkv.size(3) == qn.size(2), OP,
              ": ctkv must be [num_blocks, block_size, kv_headnum = ", kv_heads, ", ", qn.size(2), "], got ",
              ctkv.sizes());
  TORCH_CHECK(kr.dim() == 4 && kr.sizes().slice(0, 3) == ctkv.sizes().slice(0, 3) && kr.size(3) == qr.size(2), OP,
              ": k_rope must be [", ctkv.size(0), ", ", ctkv.size(1), ", ", kv_heads, ", ", qr.size(2), "], got ",
              kr.sizes());
  TORCH_CHECK(table.dim() == 2 && table.size(0) == qn.size(0) && !at::isFloatingType(table.scalar_type()), OP,
              ": block_tables must be integer [batch = num_tokens = ", qn.size(0), ", max_num_blocks], got ",
              table.scalar_type(), " ", table.sizes());
  TORCH_CHECK(static_cast<int64_t>(lens.size()) == qn.size(0), OP, ": context_lens must hold batch = ", qn.size(0),
              " lengths, got ", lens.size());
  const int64_t max_len = table.size(1) * ctkv.size(1);
  for (size_t i = 0; i < lens.size(); ++i)
    TORCH_CHECK(lens[i] >= 0 && lens[i] <= max_len, OP, ": context_lens[", i, "] = ", lens[i], " must be in [0, ",
                max_len, "] (block_tables' ", table.size(1), " blocks of ", ctkv.size(1), ")");
}

void check_output(const at::Tensor& output, const at::Tensor& qn, const at::Tensor& qr) {
  TORCH_CHECK(output.sizes() == qn.sizes() && output.scalar_type() == qr.scalar_type(), OP, ": output must be ",
              qr.scalar_type(), " ", qn.sizes(), ", got ", output.scalar_type(), " ", output.sizes());
}

void check_lse(const at::Tensor& lse, const at::Tensor& qn) {
  TORCH_CHECK(lse.dim() == 3 && lse.size(0) == qn.size(0) && lse.size(1) == qn.size(1) && lse.size(2) == 1 &&
                  at::isFloatingType(lse.scalar_type()),
              OP, ": lse must be floating [", qn.size(0), ", ", qn.size(1), ", 1], got ", lse.scalar_type(), " ",
              lse.sizes());
}

// The attention into output (and lse when defined): tokens in parallel on the compute threads, each thread copying
// a token's cache blocks into float32 buffers it allocates once ([KV_N, tokens, D] per head, so each head's keys
// are one matrix), then per key/value head the scores (two GEMMs), the softmax in place, the probabilities rounded
// to the query's dtype, and the product with ctkv.
void attend(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
            const at::Tensor& block_tables, const std::vector<int64_t>& lens, int64_t heads, double scale,
            int64_t kv_heads, at::Tensor& output, at::Tensor* lse) {
  const int64_t block_size = ctkv.size(1), group = heads / kv_heads, dn = qn.size(2), dr = qr.size(2);
  const at::Tensor table = block_tables.to(at::kLong).contiguous();
  const auto rows = table.accessor<int64_t, 2>();
  for (int64_t i = 0; i < qn.size(0); ++i)  // checked here: an error inside the parallel region would be late
    for (int64_t j = 0; j * block_size < lens[i]; ++j)
      TORCH_CHECK(rows[i][j] >= 0 && rows[i][j] < ctkv.size(0), OP, ": block_tables[", i, "][", j, "] = ",
                  rows[i][j], " is outside [0, ", ctkv.size(0), ")");
  const int64_t max_len = table.size(1) * block_size;
  const auto f32 = qn.options().dtype(at::kFloat);
  at::parallel_for(0, qn.size(0), 1, [&](int64_t begin, int64_t end) {
    at::Tensor c = at::empty({kv_heads, max_len, dn}, f32), k_rope = at::empty({kv_heads, max_len, dr}, f32);
    at::Tensor scores = at::empty({group * max_len}, f32), out = at::empty({group, dn}, f32);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t len = lens[i];
      if (len == 0) {  // nothing to attend: zeros, and a log-sum-exp of -inf (no weight in a ring merge)
        output[i].zero_();
        if (lse) (*lse)[i].fill_(-std::numeric_limits<double>::infinity());
        continue;
      }
      for (int64_t j = 0; j * block_size < len; ++j) {
        const int64_t n = std::min(block_size, len - j * block_size);
        c.narrow(1, j * block_size, n).copy_(ctkv[rows[i][j]].narrow(0, 0, n).transpose(0, 1));
        k_rope.narrow(1, j * block_size, n).copy_(kr[rows[i][j]].narrow(0, 0, n).transpose(0, 1));
      }
      const at::Tensor q_nope = qn[i].to(at::kFloat).view({kv_heads, group, dn});
      const at::Tensor q_rope = qr[i].to(at::kFloat).view({kv_heads, group, dr});
      const at::Tensor s = scores.narrow(0, 0, group * len).view({group, len});  // row-major, for the GEMMs
      for (int64_t h = 0; h < kv_heads; ++h) {
        const at::Tensor ch = c[h].narrow(0, 0, len);
        matmul_into(s, q_nope[h], ch.t());
        s.addmm_(q_rope[h], k_rope[h].narrow(0, 0, len).t()).mul_(scale);
        const at::Tensor max = s.amax(-1, /*keepdim=*/true);
        const at::Tensor sum = s.sub_(max).exp_().sum(-1, /*keepdim=*/true);
        if (lse) (*lse)[i].narrow(0, h * group, group).copy_(sum.log().add_(max));
        s.div_(sum).copy_(s.to(qn.scalar_type()));  // the probabilities in the query's dtype, as ATB's second GEMM
        matmul_into(out, s, ch);
        output[i].narrow(0, h * group, group).copy_(out);
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------ kernels

at::Tensor mla_meta(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
                    const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads, double,
                    int64_t kv_heads, const Opt& mask, at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale,
                    const Opt& pv_descale, Str mask_type, Str calc_type, Str cache_mode) {
  check_modes(mask, qseqlen, qk_descale, pv_descale, mask_type, calc_type, cache_mode);
  check(qn, qr, ctkv, kr, block_tables, lengths(context_lens), heads, kv_heads);
  return at::empty(qn.sizes(), qr.options());
}

at::Tensor& mla_out_meta(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
                         const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads,
                         double scale, int64_t kv_heads, const Opt& mask, at::OptionalSymIntArrayRef qseqlen,
                         const Opt& qk_descale, const Opt& pv_descale, Str mask_type, Str calc_type, Str cache_mode,
                         at::Tensor& output) {
  mla_meta(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, mask, qseqlen, qk_descale,
           pv_descale, mask_type, calc_type, cache_mode);
  check_output(output, qn, qr);
  return output;
}

at::Tensor& mla_out_cpu(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
                        const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads, double scale,
                        int64_t kv_heads, const Opt& mask, at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale,
                        const Opt& pv_descale, Str mask_type, Str calc_type, Str cache_mode, at::Tensor& output) {
  mla_out_meta(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, mask, qseqlen, qk_descale,
               pv_descale, mask_type, calc_type, cache_mode, output);
  attend(qn, qr, ctkv, kr, block_tables, lengths(context_lens), heads, scale, kv_heads, output, nullptr);
  return output;
}

at::Tensor mla_cpu(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
                   const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads, double scale,
                   int64_t kv_heads, const Opt& mask, at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale,
                   const Opt& pv_descale, Str mask_type, Str calc_type, Str cache_mode) {
  at::Tensor output = at::empty(qn.sizes(), qr.options());
  return mla_out_cpu(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, mask, qseqlen, qk_descale,
                     pv_descale, mask_type, calc_type, cache_mode, output);
}

std::tuple<at::Tensor&, at::Tensor&> mla_lse_out_meta(
    const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
    const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads, double scale, int64_t kv_heads,
    bool, const Opt& mask, at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale, const Opt& pv_descale,
    Str mask_type, Str calc_type, Str cache_mode, const Opt&, at::Tensor& output, at::Tensor& lse) {
  mla_out_meta(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, mask, qseqlen, qk_descale,
               pv_descale, mask_type, calc_type, cache_mode, output);
  check_lse(lse, qn);
  return {output, lse};
}

std::tuple<at::Tensor&, at::Tensor&> mla_lse_out_cpu(
    const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
    const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads, double scale, int64_t kv_heads,
    bool return_lse, const Opt& mask, at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale,
    const Opt& pv_descale, Str mask_type, Str calc_type, Str cache_mode, const Opt& workspace, at::Tensor& output,
    at::Tensor& lse) {
  mla_lse_out_meta(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, return_lse, mask, qseqlen,
                   qk_descale, pv_descale, mask_type, calc_type, cache_mode, workspace, output, lse);
  attend(qn, qr, ctkv, kr, block_tables, lengths(context_lens), heads, scale, kv_heads, output, &lse);
  return {output, lse};
}

// Any device: the outputs allocated here, then .lse_out (or .out without return_lse, whose lse torch_npu returns
// undefined: None in Python). lse has q_rope's dtype, as torch_npu allocates it.
std::tuple<at::Tensor, at::Tensor> mla_lse(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv,
                                           const at::Tensor& kr, const at::Tensor& block_tables,
                                           at::SymIntArrayRef context_lens, int64_t heads, double scale,
                                           int64_t kv_heads, bool return_lse, const Opt& mask,
                                           at::OptionalSymIntArrayRef qseqlen, const Opt& qk_descale,
                                           const Opt& pv_descale, Str mask_type, Str calc_type, Str cache_mode,
                                           const Opt& workspace) {
  at::Tensor output = at::empty(qn.sizes(), qr.options());
  if (!return_lse) {
    static const auto out_op =
        npu_op<at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, at::SymIntArrayRef, int64_t, double, int64_t, const Opt&,
                           at::OptionalSymIntArrayRef, const Opt&, const Opt&, Str, Str, Str, at::Tensor&)>(
            "atb::npu_multi_head_latent_attention", "out");
    out_op.call(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, mask, qseqlen, qk_descale,
                pv_descale, mask_type, calc_type, cache_mode, output);
    return {output, at::Tensor()};
  }
  at::Tensor lse = at::empty({qn.size(0), qn.size(1), 1}, qr.options());
  static const auto lse_out_op = npu_op<std::tuple<at::Tensor&, at::Tensor&>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      at::SymIntArrayRef, int64_t, double, int64_t, bool, const Opt&, at::OptionalSymIntArrayRef, const Opt&,
      const Opt&, Str, Str, Str, const Opt&, at::Tensor&, at::Tensor&)>("atb::npu_multi_head_latent_attention",
                                                                        "lse_out");
  lse_out_op.call(qn, qr, ctkv, kr, block_tables, context_lens, heads, scale, kv_heads, true, mask, qseqlen,
                  qk_descale, pv_descale, mask_type, calc_type, cache_mode, workspace, output, lse);
  return {output, lse};
}

// Graph capture asks for the workspace to pass to .lse: none is needed, an empty byte tensor on the query's device.
at::Tensor mla_get_workspace(const at::Tensor& qn, const at::Tensor& qr, const at::Tensor& ctkv, const at::Tensor& kr,
                             const at::Tensor& block_tables, at::SymIntArrayRef context_lens, int64_t heads, double,
                             int64_t kv_heads, bool, const Opt& mask, at::OptionalSymIntArrayRef qseqlen,
                             const Opt& qk_descale, const Opt& pv_descale, Str mask_type, Str calc_type,
                             Str cache_mode) {
  check_modes(mask, qseqlen, qk_descale, pv_descale, mask_type, calc_type, cache_mode);
  check(qn, qr, ctkv, kr, block_tables, lengths(context_lens), heads, kv_heads);
  return at::empty({0}, qn.options().dtype(at::kByte));
}

}  // namespace

TORCH_LIBRARY_IMPL(atb, Meta, m) {
  m.impl("npu_multi_head_latent_attention", mla_meta);
  m.impl("npu_multi_head_latent_attention.out", mla_out_meta);
  m.impl("npu_multi_head_latent_attention.lse_out", mla_lse_out_meta);
}

TORCH_LIBRARY_IMPL(atb, CPU, m) {
  m.impl("npu_multi_head_latent_attention", mla_cpu);
  m.impl("npu_multi_head_latent_attention.out", mla_out_cpu);
  m.impl("npu_multi_head_latent_attention.lse_out", mla_lse_out_cpu);
}

TORCH_LIBRARY_IMPL(atb, CompositeExplicitAutograd, m) {
  m.impl("npu_multi_head_latent_attention.lse", mla_lse);
  m.impl("_npu_multi_head_latent_attention_get_workspace.lse", mla_get_workspace);
}

}  // namespace softnpu::fused
