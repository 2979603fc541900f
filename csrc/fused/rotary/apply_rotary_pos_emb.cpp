// npu_apply_rotary_pos_emb(query, key, cos, sin, layout='BSND', rotary_mode='half') -> (query, key): the rotary
// embedding of query and key in one op, written in place as torch_npu documents ("updates the results in place"), so
// the schema marks both as mutated and returns them (torch.compile then functionalizes it correctly). Layouts BSND,
// SBND, BNSD (4-D) and TND (3-D): cos and sin have N = 1 and broadcast to query and key, which may have different
// head counts. rotary_mode 'half', 'interleave' or 'quarter' (rope_kernel.h). An inference op: torch_npu has no
// backward for it. The public op is a composite over _npu_apply_rotary_pos_emb_, which returns nothing: a custom op
// returning its mutated inputs cannot be functionalized, one that only mutates them can (torch.compile).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/rotary/rope_kernel.h"

// torch_npu's schema (argument names, order, defaults), with query and key marked as the tensors it writes.
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_apply_rotary_pos_emb(Tensor(a!) query, Tensor(b!) key, Tensor cos, Tensor sin, str layout='BSND', "
        "str rotary_mode='half') -> (Tensor(a!), Tensor(b!))");
  m.def("_npu_apply_rotary_pos_emb_(Tensor(a!) query, Tensor(b!) key, Tensor cos, Tensor sin, str layout, "
        "str rotary_mode) -> ()");
}

namespace softnpu::fused {

namespace {

constexpr const char* OP = "npu_apply_rotary_pos_emb";

int64_t check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
              c10::string_view layout, c10::string_view mode) {
  TORCH_CHECK(layout == "BSND" || layout == "SBND" || layout == "BNSD" || layout == "TND", OP,
              ": layout must be BSND, SBND, BNSD or TND, got ", layout);
  TORCH_CHECK(mode == "half" || mode == "interleave" || mode == "quarter", OP,
              ": rotary_mode must be half, interleave or quarter, got ", mode);
  const int64_t dims = layout == "TND" ? 3 : 4;
  for (const auto* t : {&q, &k, &cos, &sin}) {
    TORCH_CHECK(t->dim() == dims, OP, ": query, key, cos and sin must be ", dims, "-D for layout ", layout,
                ", got shape ", t->sizes());
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), OP, ": query, key, cos and sin must have one dtype, got ",
                q.scalar_type(), " and ", t->scalar_type());
  }
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), OP, ": query must be floating point, got ", q.scalar_type());
  TORCH_CHECK(q.size(-1) == k.size(-1), OP, ": query's and key's last dims must be equal, got ", q.size(-1), " and ",
              k.size(-1));
  TORCH_CHECK(cos.sizes() == sin.sizes(), OP, ": cos ", cos.sizes(), " and sin ", sin.sizes(), " must have one shape");
  const int64_t n_dim = layout == "BNSD" ? 1 : dims - 2;
  TORCH_CHECK(cos.size(n_dim) == 1, OP, ": cos and sin must have N = 1 (dim ", n_dim, " for layout ", layout,
              "), got shape ", cos.sizes());
  TORCH_CHECK(broadcasts_to(cos.sizes(), q.sizes()) && broadcasts_to(cos.sizes(), k.sizes()), OP, ": cos ",
              cos.sizes(), " must broadcast to query ", q.sizes(), " and key ", k.sizes());
  const int64_t D = q.size(-1), parts = mode == "quarter" ? 4 : 2;
  TORCH_CHECK(D % parts == 0, OP, ": the last dim ", D, " must be a multiple of ", parts, " for rotary_mode ", mode);
  return mode == "interleave" ? 2 : mode == "quarter" ? D / 2 : D;
}

void apply_meta(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin, c10::string_view layout,
                c10::string_view mode) {
  check(q, k, cos, sin, layout, mode);
}

void apply_cpu(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin, c10::string_view layout,
               c10::string_view mode) {
  const int64_t block = check(q, k, cos, sin, layout, mode);
  rope_forward(q, cos, sin, block, q);
  rope_forward(k, cos, sin, block, k);
}

using ApplySig = void(at::Tensor&, at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
                      c10::string_view);

std::tuple<at::Tensor&, at::Tensor&> apply(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                                           const at::Tensor& sin, c10::string_view layout, c10::string_view mode) {
  static const auto op = npu_op<ApplySig>("npu::_npu_apply_rotary_pos_emb_");
  op.call(q, k, cos, sin, layout, mode);
  return {q, k};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("_npu_apply_rotary_pos_emb_", apply_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("_npu_apply_rotary_pos_emb_", apply_cpu); }

TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) { m.impl("npu_apply_rotary_pos_emb", apply); }

}  // namespace softnpu::fused
