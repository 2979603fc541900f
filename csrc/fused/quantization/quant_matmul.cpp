// npu_quant_matmul(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype, ...) and npu_trans_quant_param:
// torch_npu's quantized matmul, computing what the chip computes. The int8 (or int4: 8 values per int32) products
// accumulate exactly in int32 (ATen's int8 GEMM), then, as torch_npu documents,
//   int32 bias:            out = (x1 @ x2 + bias) * scale [* pertoken_scale] + offset
//   no bias:               out =  x1 @ x2 * scale [* pertoken_scale] + offset
//   bfloat16/float32 bias: out =  x1 @ x2 * scale [* pertoken_scale] + bias
// in float32, rounded to output_dtype: int8 (the default) rounded half to even and saturated, float16, bfloat16, or
// int32 (x1 @ x2 + bias, unscaled). A float32 scale without pertoken_scale for an int8 or float16 output goes through
// npu_trans_quant_param first, as torch_npu's kernel does, so it is truncated to the chip's FP19 (10 mantissa bits)
// and offset rounded to an integer in [-256, 255]; an int64 scale is npu_trans_quant_param's packing already.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/quantization/int4.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, Tensor? pertoken_scale=None, "
        "Tensor? bias=None, int? output_dtype=None, int? x1_dtype=None, int? x2_dtype=None, "
        "int? pertoken_scale_dtype=None, int? scale_dtype=None, int[]? group_sizes=None, Tensor? y_scale=None) "
        "-> Tensor");
  m.def("npu_trans_quant_param(Tensor scale, Tensor? offset=None, int? round_mode=0) -> Tensor");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_quant_matmul";
constexpr int64_t kFp19Mask = 0xFFFFE000;
constexpr int64_t kScaleFlag = int64_t{1} << 46;

// ------------------------------------------------------------------------------------------------ trans_quant_param

void check_trans(const at::Tensor& scale, const std::optional<at::Tensor>& offset, std::optional<int64_t> round_mode) {
  constexpr const char* op = "npu_trans_quant_param";
  TORCH_CHECK(scale.scalar_type() == at::kFloat, op, ": scale must be float32, got ", scale.scalar_type());
  TORCH_CHECK(scale.dim() == 1 || scale.dim() == 2, op, ": scale must be 1-D or 2-D, got shape ", scale.sizes());
  TORCH_CHECK(scale.numel() > 0, op, ": scale must not be empty");
  const int64_t mode = round_mode.value_or(0);
  TORCH_CHECK(mode == 0 || mode == 1, op, ": round_mode must be 0 or 1. but now is ", mode);
  if (given(offset)) {
    TORCH_CHECK(offset->scalar_type() == at::kFloat, op, ": offset must be float32, got ", offset->scalar_type());
    TORCH_CHECK(at::is_expandable_to(offset->sizes(), at::infer_size(scale.sizes(), offset->sizes())), op,
                ": offset of shape ", offset->sizes(), " does not broadcast with scale of shape ", scale.sizes());
  }
}

std::vector<int64_t> trans_shape(const at::Tensor& scale, const std::optional<at::Tensor>& offset) {
  if (given(offset)) return at::infer_size(scale.sizes(), offset->sizes());
  return scale.sizes().vec();
}

at::Tensor trans_quant_param_meta(const at::Tensor& scale, const std::optional<at::Tensor>& offset,
                                  std::optional<int64_t> round_mode) {
  check_trans(scale, offset, round_mode);
  return at::empty(trans_shape(scale, offset), scale.options().dtype(at::kLong));
}

// float32 -> its FP19 bits (sign, 8 exponent bits, 10 mantissa bits) in the low 32 bits of an int64.
at::Tensor fp19_bits(const at::Tensor& scale, int64_t round_mode) {
  at::Tensor bits = scale.contiguous().view(at::kInt).to(at::kLong).bitwise_and(0xFFFFFFFF);
  if (round_mode == 1)  // R_INT: round the 13 dropped bits half to even before truncating
    bits = (bits + 0xFFF + bits.bitwise_right_shift(13).bitwise_and(1)).bitwise_and(0xFFFFFFFF);
  return bits.bitwise_and(kFp19Mask);
}

at::Tensor trans_quant_param_cpu(const at::Tensor& scale, const std::optional<at::Tensor>& offset,
                                 std::optional<int64_t> round_mode) {
  check_trans(scale, offset, round_mode);
  const auto shape = trans_shape(scale, offset);
  at::Tensor out = fp19_bits(scale, round_mode.value_or(0)).bitwise_or(kScaleFlag).expand(shape).contiguous();
  if (given(offset)) {
    const at::Tensor off = offset->round().clamp(-256, 255).to(at::kLong).bitwise_and(0x1FF).bitwise_left_shift(37);
    out = out.bitwise_or(off.expand(shape));
  }
  return out.contiguous();
}

// int64 scale (npu_trans_quant_param's packing) -> (float32 scale, float32 offset).
std::pair<at::Tensor, at::Tensor> unpack_scale(const at::Tensor& packed) {
  const at::Tensor scale = packed.bitwise_and(kFp19Mask).to(at::kInt).contiguous().view(at::kFloat);
  at::Tensor off = packed.bitwise_right_shift(37).bitwise_and(0x1FF);
  off = off - off.ge(256).to(at::kLong) * 512;  // 9-bit two's complement
  return {scale, off.to(at::kFloat)};
}

// ------------------------------------------------------------------------------------------------ quant_matmul

struct Plan {
  bool int4;
  c10::ScalarType out;
  std::vector<int64_t> shape;
};

bool is_transposed(const at::Tensor& t) {
  return t.dim() >= 2 && !t.is_contiguous() && t.transpose(-1, -2).is_contiguous();
}

// x2's int4 values as [.., k, n]: (k, n/8) contiguous, or (k/8, n) transposed from a contiguous (n, k/8).
at::Tensor unpack_x2(const at::Tensor& x2) {
  if (is_transposed(x2)) return unpack_int4(x2.transpose(-1, -2)).transpose(-1, -2);
  return unpack_int4(x2);
}

Plan check(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& scale, const std::optional<at::Tensor>& offset,
           const std::optional<at::Tensor>& pertoken, const std::optional<at::Tensor>& bias,
           std::optional<int64_t> output_dtype, std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,
           std::optional<int64_t> pertoken_dtype, std::optional<int64_t> scale_dtype,
           c10::OptionalIntArrayRef group_sizes, const std::optional<at::Tensor>& y_scale) {
  TORCH_CHECK(!x1_dtype && !x2_dtype && !pertoken_dtype && !scale_dtype, kOp,
              ": x1_dtype, x2_dtype, pertoken_scale_dtype and scale_dtype name torch_npu's own low-bit dtypes "
              "(float4, hifloat8, float8_e8m0), which are not supported here: leave them None");
  TORCH_CHECK(!given(y_scale), kOp, ": y_scale is not supported here");
  if (group_sizes.has_value())
    for (int64_t g : *group_sizes)
      TORCH_CHECK(g == 0, kOp, ": group_sizes (pergroup / perblock quantization) is not supported here, got ",
                  *group_sizes);
  TORCH_CHECK(x1.scalar_type() == x2.scalar_type() && (x1.scalar_type() == at::kChar || x1.scalar_type() == at::kInt),
              kOp, ": x1 and x2 must both be int8, or both int32 (int4 packed 8 per int32), got ", x1.scalar_type(),
              " and ", x2.scalar_type());
  TORCH_CHECK(x1.dim() >= 2 && x1.dim() <= 6 && x2.dim() >= 2 && x2.dim() <= 6, kOp,
              ": x1 and x2 must have 2 to 6 dims, got shapes ", x1.sizes(), " and ", x2.sizes());
  Plan p{};
  p.int4 = x1.scalar_type() == at::kInt;
  int64_t k1 = x1.size(-1), k2 = x2.size(-2), n = x2.size(-1);
  if (p.int4) {
    TORCH_CHECK(x2.dim() == 2, kOp, ": int4 x2 must be 2-D, got shape ", x2.sizes());
    k1 *= kInt4PerInt32;
    if (is_transposed(x2)) k2 *= kInt4PerInt32;
    else n *= kInt4PerInt32;
  }
  TORCH_CHECK(k1 == k2, kOp, ": x1's k (", k1, ") and x2's k (", k2, ") differ, shapes ", x1.sizes(), " and ",
              x2.sizes());
  const auto batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  p.shape = batch;
  p.shape.push_back(x1.size(-2));
  p.shape.push_back(n);

  p.out = output_dtype.has_value() ? static_cast<c10::ScalarType>(*output_dtype) : at::kChar;
  TORCH_CHECK(p.out == at::kChar || p.out == at::kHalf || p.out == at::kBFloat16 || p.out == at::kInt, kOp,
              ": output_dtype must be torch.int8, torch.float16, torch.bfloat16 or torch.int32, got ", p.out);
  TORCH_CHECK(scale.scalar_type() == at::kFloat || scale.scalar_type() == at::kLong ||
                  scale.scalar_type() == at::kBFloat16, kOp,
              ": scale must be float32, int64 (npu_trans_quant_param) or bfloat16, got ", scale.scalar_type());
  TORCH_CHECK(scale.dim() == 1 && (scale.size(0) == 1 || scale.size(0) == n), kOp,
              ": scale must be 1-D of size 1 or n = ", n, ", got shape ", scale.sizes());
  if (given(offset)) {
    TORCH_CHECK(offset->scalar_type() == at::kFloat && offset->dim() == 1 &&
                    (offset->size(0) == 1 || offset->size(0) == n), kOp,
                ": offset must be float32 1-D of size 1 or n = ", n, ", got ", offset->scalar_type(), " ",
                offset->sizes());
    TORCH_CHECK(p.out == at::kChar, kOp, ": offset is supported with an int8 output only");
  }
  if (given(pertoken)) {
    TORCH_CHECK(pertoken->scalar_type() == at::kFloat && pertoken->dim() == 1 && pertoken->size(0) == x1.size(-2),
                kOp, ": pertoken_scale must be float32 1-D of size m = ", x1.size(-2), ", got ",
                pertoken->scalar_type(), " ", pertoken->sizes());
    TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16, kOp,
                ": pertoken_scale needs output_dtype torch.float16 or torch.bfloat16");
  }
  if (scale.scalar_type() == at::kBFloat16)
    TORCH_CHECK(p.out == at::kBFloat16 || p.out == at::kInt, kOp,
                ": a bfloat16 scale needs output_dtype torch.bfloat16");
  if (given(bias)) {
    const auto bt = bias->scalar_type();
    TORCH_CHECK(bt == at::kInt || bt == at::kBFloat16 || bt == at::kHalf || bt == at::kFloat, kOp,
                ": bias must be int32, bfloat16, float16 or float32, got ", bt);
    TORCH_CHECK(bt == at::kInt || p.out == at::kBFloat16 || p.out == at::kHalf, kOp,
                ": a floating-point bias needs output_dtype torch.bfloat16 or torch.float16");
    const bool one_d = bias->dim() == 1 && bias->size(0) == n;
    const bool three_d = bias->dim() == 3 && p.shape.size() == 3 && bias->size(0) == p.shape[0] &&
                         bias->size(1) == 1 && bias->size(2) == n;
    TORCH_CHECK(one_d || three_d, kOp, ": bias must have shape (n,) or, for a 3-D output, (batch, 1, n); n = ", n,
                ", got ", bias->sizes());
  }
  return p;
}

// int8 [.., m, k] @ [.., k, n] (batch dims broadcast) accumulated exactly in int32, as the chip's cube unit does:
// ATen's int8 GEMM (_int_mm) on each 2-D product.
at::Tensor int_matmul(const at::Tensor& a, const at::Tensor& b) {
  if (b.dim() == 2) {
    const at::Tensor rows = a.reshape({-1, a.size(-1)}).contiguous();
    auto shape = a.sizes().vec();
    shape.back() = b.size(1);
    return at::_int_mm(rows, b.contiguous()).view(shape);
  }
  const auto batch = at::infer_size(a.sizes().slice(0, a.dim() - 2), b.sizes().slice(0, b.dim() - 2));
  std::vector<int64_t> a_shape(batch), b_shape(batch);
  a_shape.insert(a_shape.end(), {a.size(-2), a.size(-1)});
  b_shape.insert(b_shape.end(), {b.size(-2), b.size(-1)});
  const at::Tensor a3 = a.expand(a_shape).reshape({-1, a.size(-2), a.size(-1)});
  const at::Tensor b3 = b.expand(b_shape).reshape({-1, b.size(-2), b.size(-1)});
  std::vector<at::Tensor> outs;
  for (int64_t i = 0; i < a3.size(0); ++i) outs.push_back(at::_int_mm(a3[i].contiguous(), b3[i].contiguous()));
  std::vector<int64_t> shape(batch);
  shape.insert(shape.end(), {a.size(-2), b.size(-1)});
  return at::stack(outs).view(shape);
}

at::Tensor quant_matmul_meta(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& scale,
                             const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& pertoken,
                             const std::optional<at::Tensor>& bias, std::optional<int64_t> output_dtype,
                             std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,
                             std::optional<int64_t> pertoken_dtype, std::optional<int64_t> scale_dtype,
                             c10::OptionalIntArrayRef group_sizes, const std::optional<at::Tensor>& y_scale) {
  const Plan p = check(x1, x2, scale, offset, pertoken, bias, output_dtype, x1_dtype, x2_dtype, pertoken_dtype,
                       scale_dtype, group_sizes, y_scale);
  return at::empty(p.shape, x1.options().dtype(p.out));
}

at::Tensor quant_matmul_cpu(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& scale,
                            const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& pertoken,
                            const std::optional<at::Tensor>& bias, std::optional<int64_t> output_dtype,
                            std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,
                            std::optional<int64_t> pertoken_dtype, std::optional<int64_t> scale_dtype,
                            c10::OptionalIntArrayRef group_sizes, const std::optional<at::Tensor>& y_scale) {
  const Plan p = check(x1, x2, scale, offset, pertoken, bias, output_dtype, x1_dtype, x2_dtype, pertoken_dtype,
                       scale_dtype, group_sizes, y_scale);
  const at::Tensor a = p.int4 ? unpack_int4(x1) : x1;
  const at::Tensor b = p.int4 ? unpack_x2(x2) : x2;
  at::Tensor acc = int_matmul(a, b);
  const bool int_bias = given(bias) && bias->scalar_type() == at::kInt;
  if (int_bias) acc = acc + *bias;
  if (p.out == at::kInt) return acc.contiguous();

  at::Tensor s, off;
  if (scale.scalar_type() == at::kLong) {
    std::tie(s, off) = unpack_scale(scale);
  } else if (scale.scalar_type() == at::kFloat && !given(pertoken) && (p.out == at::kChar || p.out == at::kHalf)) {
    const at::Tensor packed = trans_quant_param_cpu(scale, offset, 0);
    std::tie(s, off) = unpack_scale(packed);
  } else {
    s = scale.to(at::kFloat);
  }
  at::Tensor out = acc.to(at::kFloat) * s;
  if (given(pertoken)) out = out * pertoken->unsqueeze(-1);
  if (p.out == at::kChar) {
    if (off.defined()) out = out + off;
    return out.round().clamp(-128, 127).to(at::kChar).contiguous();
  }
  if (given(bias) && !int_bias) out = out + bias->to(at::kFloat);
  return out.to(p.out).contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_quant_matmul", quant_matmul_meta);
  m.impl("npu_trans_quant_param", trans_quant_param_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_quant_matmul", quant_matmul_cpu);
  m.impl("npu_trans_quant_param", trans_quant_param_cpu);
}

}  // namespace softnpu::fused
