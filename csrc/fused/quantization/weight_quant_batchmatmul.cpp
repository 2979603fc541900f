// npu_weight_quant_batchmatmul (torch_npu's weight-only quantized matmul, A16W8 / A16W4) and
// npu_convert_weight_to_int4pack (int32 values in [-8, 7] -> 8 per int32, the first in the lowest nibble).
//
// As torch_npu documents: y = x @ ANTIQUANT(weight) + bias, ANTIQUANT(weight) = (weight + antiquant_offset) *
// antiquant_scale, per tensor, per output channel, or per group of antiquant_group_size rows along K. As the chip
// computes it, the weight is dequantized in x's dtype (float16 or bfloat16: the sum and the product each rounded to
// it), the matmul accumulates in float32 and the bias is added before the one rounding to x's dtype. With quant_scale
// the output is quantized: int8(round((x @ ANTIQUANT(weight) + bias) * quant_scale + quant_offset)); an int64
// antiquant_scale (per channel, float16 x, int8 weight, int32 antiquant_offset) or int64 quant_scale is
// npu_trans_quant_param's packing (FP19 scale; quant_scale's offset packed with it).
// The weight is int8 [K, N], or int4 packed in int32: [K, N/8] contiguous, or [K/8, N] as the transpose of a
// contiguous [N, K/8] (torchao's call form).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/quantization/antiquant.h"
#include "fused/quantization/int4.h"
#include "fused/quantization/quant_param.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_weight_quant_batchmatmul(Tensor x, Tensor weight, Tensor antiquant_scale, "
        "Tensor? antiquant_offset=None, Tensor? quant_scale=None, Tensor? quant_offset=None, Tensor? bias=None, "
        "int antiquant_group_size=0, int inner_precise=0, int? weight_dtype=None) -> Tensor");
  m.def("npu_convert_weight_to_int4pack(Tensor weight, int inner_k_tiles=0) -> Tensor");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_weight_quant_batchmatmul";

// ------------------------------------------------------------------------------------------------ int4 pack

void check_pack(const at::Tensor& weight) {
  constexpr const char* op = "npu_convert_weight_to_int4pack";
  TORCH_CHECK(weight.scalar_type() == at::kInt, op, ": weight dtype only support int32, but it is ",
              weight.scalar_type());
  TORCH_CHECK(weight.dim() == 2 || weight.dim() == 3, op, ": weight shape only support dim num 2/3, but it is ",
              weight.dim());
  TORCH_CHECK(weight.is_contiguous(), op, ": weight should be contiguous");
  for (int64_t d : weight.sizes()) TORCH_CHECK(d > 0, op, ": weight dim should be greater than 0");
  TORCH_CHECK(weight.size(-1) % kInt4PerInt32 == 0, op, ": weight last dim should be the multiple of 8, but it is ",
              weight.size(-1));
}

std::vector<int64_t> packed_shape(const at::Tensor& weight) {
  auto shape = weight.sizes().vec();
  shape.back() /= kInt4PerInt32;
  return shape;
}

at::Tensor int4pack_meta(const at::Tensor& weight, int64_t inner_k_tiles) {
  check_pack(weight);
  return at::empty(packed_shape(weight), weight.options());
}

at::Tensor int4pack_cpu(const at::Tensor& weight, int64_t inner_k_tiles) {
  check_pack(weight);
  // The values must be int4's; out-of-range bits would be silently dropped (a data check, made by the kernel).
  TORCH_CHECK(weight.ge(-8).logical_and(weight.le(7)).all().item<bool>(), "npu_convert_weight_to_int4pack: ",
              "the weight's values must be in int4's range [-8, 7]");
  return pack_int4(weight).contiguous();
}

// ------------------------------------------------------------------------------------------------ matmul

bool is_transposed(const at::Tensor& t) {
  return t.dim() == 2 && !t.is_contiguous() && t.transpose(0, 1).is_contiguous();
}

struct Plan {
  bool int4;
  int64_t k, n, group;  // group: rows of K sharing a scale row (K for per tensor / per channel)
  std::vector<int64_t> shape;
  c10::ScalarType out;
};

// Scale-like tensors (antiquant_scale/offset, quant_scale/offset) as a [rows, N] or [1, 1] matrix.
bool scale_shape_ok(const at::Tensor& t, int64_t rows, int64_t n) {
  if (t.numel() == 1 && t.dim() <= 2) return true;
  if (rows == 1 && ((t.dim() == 1 && t.size(0) == n) || (t.dim() == 2 && t.size(0) == 1 && t.size(1) == n)))
    return true;
  return t.dim() == 2 && t.size(0) == rows && t.size(1) == n;
}

Plan check(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale, const std::optional<at::Tensor>& offset,
           const std::optional<at::Tensor>& quant_scale, const std::optional<at::Tensor>& quant_offset,
           const std::optional<at::Tensor>& bias, int64_t group_size, int64_t inner_precise,
           std::optional<int64_t> weight_dtype) {
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, kOp,
              ": x must be float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 2, kOp, ": x must have at least 2 dims (M, K), got shape ", x.sizes());
  TORCH_CHECK(w.scalar_type() == at::kChar || w.scalar_type() == at::kInt, kOp,
              ": weight must be int8, or int32 carrying int4 (npu_convert_weight_to_int4pack), got ",
              w.scalar_type());
  TORCH_CHECK(w.dim() == 2, kOp, ": weight must be 2-D (K, N), got shape ", w.sizes());
  TORCH_CHECK(!weight_dtype.has_value(), kOp,
              ": weight_dtype names torch_npu's own low-bit weight dtypes, not supported here: leave it None");
  TORCH_CHECK(inner_precise == 0 || inner_precise == 1, kOp, ": inner_precise must be 0 or 1, got ", inner_precise);
  Plan p{};
  p.int4 = w.scalar_type() == at::kInt;
  p.k = w.size(0);
  p.n = w.size(1);
  if (p.int4) (is_transposed(w) ? p.k : p.n) *= kInt4PerInt32;
  TORCH_CHECK(x.size(-1) == p.k, kOp, ": x's K (", x.size(-1), ") and weight's K (", p.k,
              ") differ; shapes ", x.sizes(), " and ", w.sizes());
  const bool packed_scale = scale.scalar_type() == at::kLong;
  TORCH_CHECK(scale.scalar_type() == x.scalar_type() || packed_scale, kOp, ": antiquant_scale must have x's dtype ",
              x.scalar_type(), " or be int64 (npu_trans_quant_param), got ", scale.scalar_type());
  if (packed_scale)
    TORCH_CHECK(x.scalar_type() == at::kHalf && w.scalar_type() == at::kChar && group_size == 0 &&
                    !given(quant_scale), kOp,
                ": an int64 antiquant_scale needs a float16 x, an int8 weight, per-channel quantization "
                "(antiquant_group_size 0) and no quant_scale");
  int64_t rows = 1;
  if (group_size != 0) {
    TORCH_CHECK(group_size >= 32 && group_size % 32 == 0 && group_size < p.k, kOp,
                ": antiquant_group_size must be a multiple of 32 in [32, K - 1], got ", group_size, " (K = ", p.k,
                ")");
    rows = (p.k + group_size - 1) / group_size;
    p.group = group_size;
  } else {
    p.group = p.k;
  }
  TORCH_CHECK(scale_shape_ok(scale, rows, p.n), kOp, ": antiquant_scale of shape ", scale.sizes(),
              " must be (1,), (N,), (1, N) or, per group, (ceil(K / antiquant_group_size), N); N = ", p.n,
              ", groups = ", rows);
  if (given(offset))
    TORCH_CHECK(offset->sizes() == scale.sizes() &&
                    offset->scalar_type() == (packed_scale ? at::kInt : scale.scalar_type()), kOp,
                ": antiquant_offset must have antiquant_scale's shape and dtype (int32 with an int64 scale), got ",
                offset->sizes(), " ", offset->scalar_type());
  TORCH_CHECK(!given(quant_offset) || given(quant_scale), kOp, ": quant_offset needs quant_scale");
  if (given(quant_scale)) {
    const auto qt = quant_scale->scalar_type();
    TORCH_CHECK((qt == at::kFloat || qt == at::kLong) && scale_shape_ok(*quant_scale, 1, p.n), kOp,
                ": quant_scale must be float32 or int64 (npu_trans_quant_param) of shape (1,), (N,) or (1, N), got ",
                qt, " ", quant_scale->sizes());
    TORCH_CHECK(qt == at::kFloat || !given(quant_offset), kOp,
                ": an int64 quant_scale carries its offset (npu_trans_quant_param(quant_scale, quant_offset)): "
                "quant_offset must be None");
    if (given(quant_offset))
      TORCH_CHECK(quant_offset->sizes() == quant_scale->sizes() && quant_offset->scalar_type() == at::kFloat, kOp,
                  ": quant_offset must have quant_scale's shape and dtype float32");
  }
  if (given(bias)) {
    const auto want = x.scalar_type() == at::kBFloat16 ? at::kFloat : at::kHalf;
    TORCH_CHECK(bias->scalar_type() == want, kOp, ": bias must be ", want,
                " for a ", x.scalar_type(), " x, got ", bias->scalar_type());
    TORCH_CHECK(scale_shape_ok(*bias, 1, p.n) && bias->numel() == p.n, kOp,
                ": bias must have shape (N,) or (1, N), N = ", p.n, ", got ", bias->sizes());
  }
  p.shape = x.sizes().vec();
  p.shape.back() = p.n;
  p.out = given(quant_scale) ? at::kChar : x.scalar_type();
  return p;
}

at::Tensor wqbmm_meta(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale,
                      const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& quant_scale,
                      const std::optional<at::Tensor>& quant_offset, const std::optional<at::Tensor>& bias,
                      int64_t group_size, int64_t inner_precise, std::optional<int64_t> weight_dtype) {
  const Plan p = check(x, w, scale, offset, quant_scale, quant_offset, bias, group_size, inner_precise, weight_dtype);
  return at::empty(p.shape, x.options().dtype(p.out));
}

at::Tensor wqbmm_cpu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale,
                     const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& quant_scale,
                     const std::optional<at::Tensor>& quant_offset, const std::optional<at::Tensor>& bias,
                     int64_t group_size, int64_t inner_precise, std::optional<int64_t> weight_dtype) {
  const Plan p = check(x, w, scale, offset, quant_scale, quant_offset, bias, group_size, inner_precise, weight_dtype);
  const auto dt = x.scalar_type();
  at::Tensor values = w;
  if (p.int4) values = is_transposed(w) ? unpack_int4(w.transpose(0, 1), dt).transpose(0, 1) : unpack_int4(w, dt);
  at::Tensor deq;
  if (scale.scalar_type() == at::kLong) {
    // npu_trans_quant_param's packing: the FP19 scale times the weight plus its int32 offset (exact in float32),
    // rounded once to float16.
    at::Tensor w32 = values.to(at::kFloat);
    if (given(offset)) w32 = w32 + offset->to(at::kFloat).reshape({1, -1});
    deq = (w32 * unpack_quant_param(scale).first.reshape({1, -1})).to(dt);
  } else {
    deq = antiquantize(values, scale, given(offset) ? *offset : at::Tensor(), p.group, dt);
  }
  if (!given(bias) && !given(quant_scale))
    return at::matmul(x, deq).contiguous();  // ATen's half GEMM: float32 accumulation, one rounding to x's dtype
  // The bias (and the output quantization) join before the one rounding.
  at::Tensor y = at::matmul(x.to(at::kFloat), deq.to(at::kFloat));
  if (given(bias)) y.add_(bias->to(at::kFloat).reshape({-1}));
  if (!given(quant_scale)) return y.to(dt).contiguous();
  if (quant_scale->scalar_type() == at::kLong) {
    const auto [qs, qo] = unpack_quant_param(*quant_scale);
    y.mul_(qs.reshape({-1})).add_(qo.reshape({-1}));
  } else {
    y.mul_(quant_scale->reshape({-1}));
    if (given(quant_offset)) y.add_(quant_offset->reshape({-1}));
  }
  return y.round_().clamp_(-128, 127).to(at::kChar).contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_weight_quant_batchmatmul", wqbmm_meta);
  m.impl("npu_convert_weight_to_int4pack", int4pack_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_weight_quant_batchmatmul", wqbmm_cpu);
  m.impl("npu_convert_weight_to_int4pack", int4pack_cpu);
}

}  // namespace softnpu::fused
