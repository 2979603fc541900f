// npu_quant_matmul(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype, x1_dtype, x2_dtype,
// pertoken_scale_dtype, scale_dtype, group_sizes, y_scale) and npu_trans_quant_param: torch_npu's quantized matmul,
// computing what the chip computes. Integer operands (int8, or int4 carried 8 per int32) accumulate exactly in int32
// (ATen's int8 GEMM); float8 / float4 operands (every product exact in float32) accumulate in float32. Then, in
// float32, as torch_npu documents per quantization mode:
//   per tensor / per channel (scale (1,) or (n,)), with pertoken_scale (m,) per token:
//     int32 bias:            out = (x1 @ x2 + bias) * scale [* pertoken_scale] + offset
//     no bias:               out =  x1 @ x2 * scale [* pertoken_scale] + offset
//     float bias:            out =  x1 @ x2 * scale [* pertoken_scale] + bias
//   per group along k ("G-B" / "B-B": scale (kb, nb), pertoken_scale (mb, kb), group_sizes [gm, gn, gk]):
//     out[m, n] = sum_j (x1 @ x2 over k-block j)[m, n] * pertoken_scale[m / gm, j] * scale[j, n / gn] + bias
//   int4 per group, asymmetric ("K-G": scale and float16 offset (kb, n), pertoken_scale (m,) or (m, 1)):
//     out = pertoken_scale * sum_j scale[j] * (x1_j @ x2_j - x1_j @ offset[j])
//   mx (float8 / float4 operands, float8_e8m0 scales per 32 values of k, two blocks per trailing pair):
//     out = sum_j (x1_j @ x2_j) * 2^(pertoken_scale[m, j] - 127) * 2^(scale[j, n] - 127) + bias
//   A8W4 (int8 x1 (m, k), int4 x2 (k, n/8), int64 scale (k / gk, n), pertoken_scale (m, 1), float32 offset (n,)):
//     out = (sum_j^fp16 fp16((x1_j @ x2_j) * scale[j]) + offset) * pertoken_scale, x1 split into int4 halves (below)
//   T-CG (y_scale: float8 x1, float4 x2 dequantized per group of k by a bfloat16 / float32 scale (k / gk, n)):
//     out = x1 @ fp8(bf16(x2 * scale)) * fp19(y_scale) + bias
// rounded to output_dtype: int8 (the default; half to even, saturated), float16, bfloat16, int32 (x1 @ x2 + bias,
// unscaled) or, for float8 / float4 operands, float32. A float32 scale without pertoken_scale goes through
// npu_trans_quant_param first where torch_npu's kernel does (int8 / float16 outputs of integer operands, every output
// of float operands), so it is truncated to the chip's FP19 and the offset rounded to an integer in [-256, 255]; an
// int64 scale is npu_trans_quant_param's packing already.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <functional>
#include <limits>

#include "fused/common.h"
#include "fused/quantization/hifloat8.h"
#include "fused/quantization/int4.h"
#include "fused/quantization/quant_param.h"

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

// torch_npu's numbers for the dtypes torch has none of (torch_npu.hifloat8, ...): ACL's aclDataType + 256.
constexpr int64_t kHiFloat8 = 290, kNpuFloat8E5M2 = 291, kNpuFloat8E4M3 = 292, kFloat8E8M0 = 293,
                  kFloat4E2M1 = 296, kFloat4E1M2 = 297;

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

at::Tensor trans_quant_param_cpu(const at::Tensor& scale, const std::optional<at::Tensor>& offset,
                                 std::optional<int64_t> round_mode) {
  check_trans(scale, offset, round_mode);
  return pack_quant_param(scale, given(offset) ? *offset : at::Tensor(), round_mode.value_or(0))
      .expand(trans_shape(scale, offset))
      .contiguous();
}

// ------------------------------------------------------------------------------------------------ operands

// What an operand holds: int8, int4 (8 per int32), float8 (e4m3fn / e5m2), float4 e2m1 (2 per byte) or HiFloat8.
enum class Kind { Int8, Int4, Float8, Float4, HiFloat8 };

bool is_float(Kind k) { return k == Kind::Float8 || k == Kind::Float4 || k == Kind::HiFloat8; }

// x's kind, from x1_dtype / x2_dtype when given (which reinterpret a 1-byte container), else from x's dtype.
Kind kind_of(const at::Tensor& x, std::optional<int64_t> dtype_arg, const char* name) {
  const auto t = x.scalar_type();
  if (dtype_arg.has_value()) {
    const int64_t d = *dtype_arg;
    if (d == kHiFloat8) {
      TORCH_CHECK(x.element_size() == 1, kOp, ": with ", name, "_dtype hifloat8, ", name,
                  " must be a 1-byte container (uint8 / int8), got ", t);
      return Kind::HiFloat8;
    }
    TORCH_CHECK(d != kFloat4E1M2, kOp, ": ", name, "_dtype torch_npu.float4_e1m2fn_x2 is not supported by "
                "npu_quant_matmul (torch_npu takes float4_e2m1fn_x2 only)");
    if (d == kFloat4E2M1) {
      TORCH_CHECK(x.element_size() == 1, kOp, ": with ", name, "_dtype float4_e2m1fn_x2, ", name,
                  " must be a 1-byte container (int8 / uint8), got ", t);
      return Kind::Float4;
    }
    const bool fp8 = ((d == kNpuFloat8E4M3 || d == static_cast<int64_t>(at::kFloat8_e4m3fn)) &&
                      t == at::kFloat8_e4m3fn) ||
                     ((d == kNpuFloat8E5M2 || d == static_cast<int64_t>(at::kFloat8_e5m2)) && t == at::kFloat8_e5m2);
    TORCH_CHECK(fp8 || d == static_cast<int64_t>(t), kOp, ": ", name, "_dtype ", d, " does not name ", name, "'s ",
                t, ", torch_npu.float4_e2m1fn_x2 or torch_npu.hifloat8");
  }
  switch (t) {
    case at::kChar: return Kind::Int8;
    case at::kInt: return Kind::Int4;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2: return Kind::Float8;
    case at::kFloat4_e2m1fn_x2: return Kind::Float4;
    default:
      TORCH_CHECK(false, kOp, ": x1 and x2 must both be int8, or both int32 (int4 packed 8 per int32), or float8 "
                  "(float8_e4m3fn / float8_e5m2) or float4_e2m1fn_x2, got ", name, " ", t);
  }
}

// Whether scale (or pertoken_scale) holds float8_e8m0 exponents: its dtype, or *_dtype on a 1-byte container.
bool is_e8m0(const at::Tensor& s, std::optional<int64_t> dtype_arg) {
  if (dtype_arg.has_value()) {
    TORCH_CHECK(*dtype_arg == kFloat8E8M0 || *dtype_arg == static_cast<int64_t>(s.scalar_type()), kOp,
                ": scale_dtype / pertoken_scale_dtype must be torch_npu.float8_e8m0fnu (or the tensor's own dtype), "
                "got ", *dtype_arg);
    if (*dtype_arg == kFloat8E8M0) {
      TORCH_CHECK(s.element_size() == 1, kOp, ": a float8_e8m0fnu scale must be a 1-byte container, got ",
                  s.scalar_type());
      return true;
    }
  }
  return s.scalar_type() == at::kFloat8_e8m0fnu;
}

bool is_transposed(const at::Tensor& t) {
  return t.dim() >= 2 && !t.is_contiguous() && t.transpose(-1, -2).is_contiguous();
}

// float4_e2m1 codes, two per byte along the last dim (the first in the low nibble) -> float32 values.
at::Tensor decode_fp4(const at::Tensor& packed) {
  static const std::vector<float> kValues{0.f,  .5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                          -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  const at::Tensor table = at::tensor(kValues, packed.options().dtype(at::kFloat));
  const at::Tensor bytes = packed.view(at::kByte).to(at::kLong);
  const at::Tensor codes = at::stack({bytes.bitwise_and(0xF), bytes.bitwise_right_shift(4)}, -1).flatten(-2);
  return table.index_select(0, codes.flatten()).view(codes.sizes());
}

// A packed operand (int4, float4) unpacked along its k (x1) or its contiguous dim (x2: (k, n/8) as stored, or
// (k/8, n) transposed from a contiguous (n, k/8)).
at::Tensor unpack_along(const at::Tensor& x, bool along_rows, const std::function<at::Tensor(const at::Tensor&)>& f) {
  return along_rows ? f(x.transpose(-1, -2)).transpose(-1, -2) : f(x);
}

// The operand's values as the product takes them: int8 for the integer kinds, float32 for the float ones.
at::Tensor operand(const at::Tensor& x, Kind kind, bool is_x2) {
  const bool rows = is_x2 && is_transposed(x);
  switch (kind) {
    case Kind::Int8: return x;
    case Kind::Int4: return unpack_along(x, rows, [](const at::Tensor& t) { return unpack_int4(t); });
    case Kind::Float8: return x.to(at::kFloat);
    case Kind::HiFloat8: return decode_hifloat8(x);
    default: return unpack_along(x, rows, decode_fp4);
  }
}

// ------------------------------------------------------------------------------------------------ checks

// per tensor / channel / token; per group of the k axis (G-B, B-B, int4 K-G); mx (float8_e8m0 scales per 32 of k);
// A8W4 (int8 x1, int4 x2 per group of k); T-CG (float4 x2 dequantized per group of k, y_scale per channel).
enum class Mode { PerChannel, Group, Mx, A8W4, TCG };

struct Plan {
  Kind kind;
  Mode mode;
  c10::ScalarType out;
  std::vector<int64_t> shape;
  int64_t m = 0, k = 0, n = 0;
  int64_t gm = 1, gn = 1, gk = 0;  // group sizes along m, n, k (Group, Mx)
  bool pertoken_blocks = false;    // pertoken_scale per (m-block, k-block), not per token
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A group size along a dim of `size` split in `blocks`: group_sizes' value, or (0) inferred from the scale's shape.
int64_t group_along(int64_t given_size, int64_t size, int64_t blocks, const char* axis) {
  TORCH_CHECK(blocks > 0, kOp, ": a per-group scale has no block along ", axis);
  const int64_t g = given_size > 0 ? given_size : ceil_div(size, blocks);
  TORCH_CHECK(ceil_div(size, g) == blocks, kOp, ": group size ", g, " along ", axis, " (of size ", size,
              ") gives ", ceil_div(size, g), " blocks, but the scales hold ", blocks);
  return g;
}

void check_group_sizes(c10::OptionalIntArrayRef group_sizes) {
  if (!group_sizes.has_value() || group_sizes->empty()) return;
  TORCH_CHECK(group_sizes->size() == 3, kOp, ": group_sizes only support input with three elements, but got ",
              group_sizes->size());
  for (int64_t g : *group_sizes)
    TORCH_CHECK(g >= 0 && g <= 65535, kOp, ": group param value must conform to range [0, 65535], got ",
                *group_sizes);
}

int64_t group_size(c10::OptionalIntArrayRef group_sizes, size_t i) {
  return group_sizes.has_value() && group_sizes->size() == 3 ? (*group_sizes)[i] : 0;
}

void check_per_channel(Plan& p, const at::Tensor& scale, const std::optional<at::Tensor>& offset,
                       const std::optional<at::Tensor>& pertoken, const std::optional<at::Tensor>& bias,
                       c10::OptionalIntArrayRef group_sizes) {
  for (size_t i = 0; i < 3; ++i)
    TORCH_CHECK(group_size(group_sizes, i) == 0, kOp, ": group_sizes ", *group_sizes, " needs a per-group scale "
                "(2-D or more); scale has shape ", scale.sizes());
  const bool fl = is_float(p.kind);
  const auto st = scale.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kLong || (st == at::kBFloat16 && !fl), kOp,
              fl ? ": scale of float8 / float4 operands must be float32 or int64 (npu_trans_quant_param), got "
                 : ": scale must be float32, int64 (npu_trans_quant_param) or bfloat16, got ", st);
  TORCH_CHECK(scale.dim() == 1 && (scale.size(0) == 1 || scale.size(0) == p.n), kOp,
              ": scale must be 1-D of size 1 or n = ", p.n, ", got shape ", scale.sizes());
  if (given(offset)) {
    TORCH_CHECK(offset->scalar_type() == at::kFloat && offset->dim() == 1 &&
                    (offset->size(0) == 1 || offset->size(0) == p.n), kOp,
                ": offset must be float32 1-D of size 1 or n = ", p.n, ", got ", offset->scalar_type(), " ",
                offset->sizes());
    TORCH_CHECK(p.out == at::kChar, kOp, ": offset is supported with an int8 output only");
  }
  if (given(pertoken)) {
    TORCH_CHECK(pertoken->scalar_type() == at::kFloat && pertoken->dim() == 1 &&
                    (pertoken->size(0) == p.m || (fl && pertoken->size(0) == 1)), kOp,
                ": pertoken_scale must be float32 1-D of size m = ", p.m, ", got ", pertoken->scalar_type(), " ",
                pertoken->sizes());
    TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16 || (fl && p.out == at::kFloat), kOp,
                ": pertoken_scale needs output_dtype torch.float16 or torch.bfloat16");
  }
  if (st == at::kBFloat16)
    TORCH_CHECK(p.out == at::kBFloat16 || p.out == at::kInt, kOp,
                ": a bfloat16 scale needs output_dtype torch.bfloat16");
  if (given(bias)) {
    const auto bt = bias->scalar_type();
    if (fl) {
      TORCH_CHECK(bt == at::kFloat, kOp, ": bias of float8 / float4 operands must be float32, got ", bt);
    } else {
      TORCH_CHECK(bt == at::kInt || bt == at::kBFloat16 || bt == at::kHalf || bt == at::kFloat, kOp,
                  ": bias must be int32, bfloat16, float16 or float32, got ", bt);
      TORCH_CHECK(bt == at::kInt || p.out == at::kBFloat16 || p.out == at::kHalf, kOp,
                  ": a floating-point bias needs output_dtype torch.bfloat16 or torch.float16");
    }
    const bool one_d = bias->dim() == 1 && bias->size(0) == p.n;
    const bool three_d = bias->dim() == 3 && p.shape.size() == 3 && bias->size(0) == p.shape[0] &&
                         bias->size(1) == 1 && bias->size(2) == p.n;
    TORCH_CHECK(one_d || three_d, kOp, ": bias must have shape (n,) or, for a 3-D output, (batch, 1, n); n = ", p.n,
                ", got ", bias->sizes());
  }
}

void check_group(Plan& p, const at::Tensor& scale, const std::optional<at::Tensor>& offset,
                 const std::optional<at::Tensor>& pertoken, const std::optional<at::Tensor>& bias,
                 c10::OptionalIntArrayRef group_sizes) {
  TORCH_CHECK(p.kind != Kind::HiFloat8, kOp, ": hifloat8 operands take a per-tensor / per-channel scale here, got "
              "a per-group scale of shape ", scale.sizes());
  TORCH_CHECK(p.kind != Kind::Float4, kOp, ": float4 operands take float8_e8m0fnu (mx) scales, got a ",
              scale.scalar_type(), " scale of shape ", scale.sizes());
  TORCH_CHECK(scale.scalar_type() == at::kFloat, kOp, ": a per-group scale must be float32, got ",
              scale.scalar_type());
  TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16 || (p.kind == Kind::Float8 && p.out == at::kFloat), kOp,
              ": per-group quantization outputs torch.float16 or torch.bfloat16, got ", p.out);
  TORCH_CHECK(given(pertoken) && pertoken->scalar_type() == at::kFloat, kOp,
              ": per-group quantization needs a float32 pertoken_scale");
  const int64_t kb = scale.size(-2), nb = scale.size(-1);
  p.gk = group_along(group_size(group_sizes, 2), p.k, kb, "k");
  if (p.kind == Kind::Int4) {
    // K-G, asymmetric per group of k and per channel: scale and offset (ceil(k / gk), n), pertoken (m,) or (m, 1).
    TORCH_CHECK(scale.dim() == 2 && nb == p.n, kOp, ": an int4 per-group scale must be (ceil(k / group), n) = (", kb,
                ", ", p.n, "), got ", scale.sizes());
    TORCH_CHECK(given(offset) && offset->scalar_type() == at::kHalf && offset->sizes() == scale.sizes(), kOp,
                ": an int4 per-group scale needs a float16 offset of scale's shape ", scale.sizes());
    TORCH_CHECK((pertoken->dim() == 1 || (pertoken->dim() == 2 && pertoken->size(1) == 1)) &&
                    pertoken->size(0) == p.m, kOp,
                ": with an int4 per-group scale, pertoken_scale must be (m,) or (m, 1), m = ", p.m, ", got ",
                pertoken->sizes());
    TORCH_CHECK(!given(bias), kOp, ": int4 per-group quantization takes no bias");
    return;
  }
  // G-B / B-B: scale (.., ceil(k / gk), ceil(n / gn)), pertoken_scale (.., ceil(m / gm), ceil(k / gk)).
  TORCH_CHECK(!given(offset), kOp, ": per-group quantization of int8 / float8 operands takes no offset");
  TORCH_CHECK(pertoken->dim() == scale.dim() && pertoken->size(-1) == kb, kOp,
              ": with a per-group scale of shape ", scale.sizes(), ", pertoken_scale must be (.., ceil(m / group_m), ",
              kb, "), got ", pertoken->sizes());
  p.gn = group_along(group_size(group_sizes, 1), p.n, nb, "n");
  p.gm = group_along(group_size(group_sizes, 0), p.m, pertoken->size(-2), "m");
  p.pertoken_blocks = true;
  if (given(bias)) {
    TORCH_CHECK(p.kind == Kind::Int8 && bias->scalar_type() == at::kFloat && bias->numel() == p.n, kOp,
                ": per-group quantization takes a float32 bias of n = ", p.n, " values with int8 operands only, got ",
                bias->scalar_type(), " ", bias->sizes());
  }
}

void check_mx(Plan& p, const at::Tensor& scale, const std::optional<at::Tensor>& pertoken,
              std::optional<int64_t> pertoken_dtype, const std::optional<at::Tensor>& offset,
              const std::optional<at::Tensor>& bias, c10::OptionalIntArrayRef group_sizes) {
  TORCH_CHECK(is_float(p.kind) && p.kind != Kind::HiFloat8, kOp,
              ": float8_e8m0fnu (mx) scales go with float8 / float4 operands");
  TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16 || p.out == at::kFloat, kOp,
              ": mx quantization outputs torch.float16, torch.bfloat16 or torch.float32, got ", p.out);
  TORCH_CHECK(group_size(group_sizes, 0) <= 1 && group_size(group_sizes, 1) <= 1 &&
                  (group_size(group_sizes, 2) == 0 || group_size(group_sizes, 2) == 32), kOp,
              ": mx quantization has group_sizes [1, 1, 32] (or 0 for inferred), got ", *group_sizes);
  p.gk = 32;
  const int64_t pairs = ceil_div(p.k, 64);
  TORCH_CHECK(scale.dim() >= 3 && scale.size(-1) == 2 && scale.size(-2) == p.n && scale.size(-3) == pairs, kOp,
              ": an mx scale must be (.., ceil(k / 64), n, 2) = (.., ", pairs, ", ", p.n, ", 2), got ", scale.sizes());
  TORCH_CHECK(given(pertoken) && is_e8m0(*pertoken, pertoken_dtype) && pertoken->dim() >= 3 &&
                  pertoken->size(-1) == 2 && pertoken->size(-2) == pairs && pertoken->size(-3) == p.m, kOp,
              ": mx quantization needs a float8_e8m0fnu pertoken_scale of shape (.., m, ceil(k / 64), 2) = (.., ", p.m,
              ", ", pairs, ", 2)");
  p.pertoken_blocks = true;
  TORCH_CHECK(!given(offset), kOp, ": mx quantization takes no offset");
  if (given(bias)) {
    TORCH_CHECK(bias->numel() == p.n && (bias->scalar_type() == at::kFloat || bias->scalar_type() == p.out), kOp,
                ": an mx bias must hold n = ", p.n, " float32 values (or the output's dtype), got ",
                bias->scalar_type(), " ", bias->sizes());
  }
}

// A8W4, torch_npu's messages: int64 scale (k / gk, n) (npu_trans_quant_param's packing, or vllm-ascend's float32
// bits in the low word), float32 pertoken_scale (m, 1), optional float32 offset (n,) added before pertoken_scale.
void check_a8w4(Plan& p, const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& scale,
                const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& pertoken,
                const std::optional<at::Tensor>& bias, c10::OptionalIntArrayRef group_sizes) {
  TORCH_CHECK(x1.dim() == 2 && x2.dim() == 2 && !is_transposed(x2), kOp,
              ": A8W4 takes a 2-D x1 (m, k) and a contiguous 2-D x2 (k, n / 8), got shapes ", x1.sizes(), " and ",
              x2.sizes());
  TORCH_CHECK(scale.scalar_type() == at::kLong, kOp,
              ": scale's type should be torch.int64 in A8W4, but scale.dtype is ", scale.scalar_type());
  TORCH_CHECK(scale.dim() == 2, kOp, ": the scale dim num must be 2, please check scale dim num");
  TORCH_CHECK(group_size(group_sizes, 0) == 0 && group_size(group_sizes, 1) == 0, kOp,
              ": A8W4 groups k only: group_sizes must be [0, 0, group_k], got ", *group_sizes);
  p.gk = group_along(group_size(group_sizes, 2), p.k, scale.size(0), "k");
  TORCH_CHECK(p.k % p.gk == 0, kOp, ": the scale 1st dim value must equal to x1 k dim divide ", p.gk,
              ", please check scale 1st dim value");
  TORCH_CHECK(scale.size(1) == p.n, kOp,
              ": the scale last dim value must equal to x2 n dim value, please check scale last dim value");
  TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16, kOp,
              ": output_dtype's type should be torch.float16 or torch.bfloat16 in A8W4, but output_dtype is ", p.out);
  TORCH_CHECK(given(pertoken), kOp,
              ": A8W4 needs pertoken_scale (float32 (m, 1)): the chip's formula multiplies by it");
  TORCH_CHECK(pertoken->scalar_type() == at::kFloat, kOp,
              ": pertoken_scale's type should be torch.float32 in A8W4, but pertoken_scale.dtype is ",
              pertoken->scalar_type());
  TORCH_CHECK(pertoken->dim() == 2 && pertoken->size(0) == p.m && pertoken->size(1) == 1, kOp,
              ": the pertoken_scale dim num must be 2, please check scale dim num (A8W4 takes (m, 1) = (", p.m,
              ", 1), got ", pertoken->sizes(), ")");
  if (given(offset)) {
    TORCH_CHECK(offset->scalar_type() == at::kFloat, kOp,
                ": offset's type should be torch.float32 in A8W4, but offset.dtype is ", offset->scalar_type());
    TORCH_CHECK(offset->dim() == 1 && (offset->size(0) == 1 || offset->size(0) == p.n), kOp,
                ": the offset 1st dim value must be 1 or x2 n dim value, please check offset 1st dim value");
  }
  TORCH_CHECK(!given(bias), kOp, ": bias with A8W4 is not supported here: torch_npu documents no formula for it "
              "(vllm-ascend passes its correction as offset)");
}

// T-CG, as CANN's QuantBatchMatmulV4 golden computes it: x2 (float4 e2m1) times its group's scale (bfloat16 or float32
// (ceil(k / gk), n), gk = group_sizes[2] or 32), the product rounded to bfloat16 and then to x1's float8 dtype (the
// chip's conversion before the cube), x1 @ that accumulated in float32, times y_scale (int64 (1, n) or (n,), FP19 in
// its low word) and plus a float32 bias.
void check_tcg(Plan& p, Kind k1, Kind k2, const at::Tensor& scale, const at::Tensor& y_scale,
               const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& pertoken,
               const std::optional<at::Tensor>& bias, c10::OptionalIntArrayRef group_sizes) {
  TORCH_CHECK(k1 == Kind::Float8 && k2 == Kind::Float4, kOp,
              ": y_scale (T-CG) goes with a float8 x1 and a float4_e2m1 x2");
  TORCH_CHECK(y_scale.scalar_type() == at::kLong, kOp, ": y_scale's type supported for int64, but y_scale.dtype is ",
              y_scale.scalar_type());
  TORCH_CHECK(y_scale.numel() == p.n && (y_scale.dim() == 1 || (y_scale.dim() == 2 && y_scale.size(0) == 1)), kOp,
              ": y_scale must be (1, n) or (n,), n = ", p.n, ", got ", y_scale.sizes());
  TORCH_CHECK(scale.scalar_type() == at::kBFloat16 || scale.scalar_type() == at::kFloat, kOp,
              ": a T-CG scale (x2's per-group scale) must be bfloat16 or float32, got ", scale.scalar_type());
  TORCH_CHECK(scale.dim() == 2 && scale.size(1) == p.n, kOp, ": a T-CG scale must be (ceil(k / group_k), n), n = ",
              p.n, ", got ", scale.sizes());
  TORCH_CHECK(group_size(group_sizes, 0) <= 1 && group_size(group_sizes, 1) <= 1, kOp,
              ": T-CG groups k only: group_sizes must be [0, 0, group_k], got ", *group_sizes);
  p.gk = group_along(group_size(group_sizes, 2), p.k, scale.size(0), "k");
  TORCH_CHECK(!given(pertoken) && !given(offset), kOp, ": y_scale (T-CG) takes no pertoken_scale and no offset");
  TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16 || p.out == at::kFloat, kOp,
              ": T-CG outputs torch.float16, torch.bfloat16 or torch.float32, got ", p.out);
  if (given(bias))
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == p.n, kOp,
                ": a T-CG bias must hold n = ", p.n, " float32 values, got ", bias->scalar_type(), " ", bias->sizes());
}

Plan check(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& scale, const std::optional<at::Tensor>& offset,
           const std::optional<at::Tensor>& pertoken, const std::optional<at::Tensor>& bias,
           std::optional<int64_t> output_dtype, std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,
           std::optional<int64_t> pertoken_dtype, std::optional<int64_t> scale_dtype,
           c10::OptionalIntArrayRef group_sizes, const std::optional<at::Tensor>& y_scale) {
  check_group_sizes(group_sizes);
  Plan p{};
  const Kind k1 = kind_of(x1, x1_dtype, "x1"), k2 = kind_of(x2, x2_dtype, "x2");
  const bool a8w4 = k1 == Kind::Int8 && k2 == Kind::Int4;
  TORCH_CHECK((k1 == Kind::HiFloat8) == (k2 == Kind::HiFloat8), kOp,
              ": x1_dtype and x2_dtype must both be torch_npu.hifloat8 when either is");
  TORCH_CHECK(k1 == k2 || a8w4 || (is_float(k1) && is_float(k2)), kOp,
              ": x1 and x2 must both be int8, or both int32 (int4 packed 8 per int32), or float8 / float4, got ",
              x1.scalar_type(), " and ", x2.scalar_type());
  p.kind = k1 == Kind::Float4 ? k2 : k1;  // float8 x float4 (mx): the float path like any float pair
  TORCH_CHECK(x1.dim() >= 2 && x1.dim() <= 6 && x2.dim() >= 2 && x2.dim() <= 6, kOp,
              ": x1 and x2 must have 2 to 6 dims, got shapes ", x1.sizes(), " and ", x2.sizes());
  const int64_t pack1 = k1 == Kind::Int4 ? kInt4PerInt32 : k1 == Kind::Float4 ? 2 : 1;
  const int64_t pack2 = k2 == Kind::Int4 ? kInt4PerInt32 : k2 == Kind::Float4 ? 2 : 1;
  int64_t k1_size = x1.size(-1) * pack1, k2_size = x2.size(-2), n = x2.size(-1);
  if (pack2 > 1) {
    TORCH_CHECK(k2 != Kind::Int4 || x2.dim() == 2, kOp, ": int4 x2 must be 2-D, got shape ", x2.sizes());
    (is_transposed(x2) ? k2_size : n) *= pack2;
  }
  TORCH_CHECK(k1_size == k2_size, kOp, ": x1's k (", k1_size, ") and x2's k (", k2_size, ") differ, shapes ",
              x1.sizes(), " and ", x2.sizes());
  p.m = x1.size(-2);
  p.k = k1_size;
  p.n = n;
  p.shape = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  p.shape.push_back(p.m);
  p.shape.push_back(n);

  const bool fl = is_float(p.kind);
  p.out = output_dtype.has_value() ? static_cast<c10::ScalarType>(*output_dtype) : at::kChar;
  if (fl) {
    TORCH_CHECK(p.out == at::kHalf || p.out == at::kBFloat16 || p.out == at::kFloat, kOp,
                ": output_dtype of float8 / float4 operands must be torch.float16, torch.bfloat16 or torch.float32, "
                "got ", p.out);
  } else {
    TORCH_CHECK(p.out == at::kChar || p.out == at::kHalf || p.out == at::kBFloat16 || p.out == at::kInt, kOp,
                ": output_dtype must be torch.int8, torch.float16, torch.bfloat16 or torch.int32, got ", p.out);
  }

  if (given(y_scale)) {
    p.mode = Mode::TCG;
    check_tcg(p, k1, k2, scale, *y_scale, offset, pertoken, bias, group_sizes);
  } else if (a8w4) {
    p.mode = Mode::A8W4;
    check_a8w4(p, x1, x2, scale, offset, pertoken, bias, group_sizes);
  } else if (is_e8m0(scale, scale_dtype)) {
    p.mode = Mode::Mx;
    check_mx(p, scale, pertoken, pertoken_dtype, offset, bias, group_sizes);
  } else if (scale.dim() >= 2) {
    TORCH_CHECK(!pertoken_dtype.has_value() || *pertoken_dtype == static_cast<int64_t>(at::kFloat), kOp,
                ": pertoken_scale_dtype float8_e8m0fnu goes with a float8_e8m0fnu scale (mx)");
    p.mode = Mode::Group;
    check_group(p, scale, offset, pertoken, bias, group_sizes);
  } else {
    TORCH_CHECK(!pertoken_dtype.has_value() || *pertoken_dtype == static_cast<int64_t>(at::kFloat), kOp,
                ": pertoken_scale_dtype float8_e8m0fnu goes with a float8_e8m0fnu scale (mx)");
    p.mode = Mode::PerChannel;
    check_per_channel(p, scale, offset, pertoken, bias, group_sizes);
  }
  return p;
}

// ------------------------------------------------------------------------------------------------ compute

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

// The product's accumulator: int32 for integer operands, float32 for float ones.
at::Tensor product(const at::Tensor& a, const at::Tensor& b, const Plan& p) {
  return is_float(p.kind) ? at::matmul(a, b) : int_matmul(a, b);
}

// float8_e8m0 exponents (uint8 bits) -> 2^(e - 127) in float32 (255 is NaN).
at::Tensor e8m0_values(const at::Tensor& s) {
  const at::Tensor e = s.view(at::kByte).to(at::kFloat);
  return at::where(e.eq(255), std::numeric_limits<float>::quiet_NaN(), at::exp2(e - 127));
}

// Per-group quantization: the k-blocks' products, each scaled by its x2 scales s2 [.., kb, n] and (per block)
// x1 scales s1 [.., m, kb], summed in float32; an int4 offset [kb, n] subtracts x1_j's row sums times it.
at::Tensor grouped(const at::Tensor& a, const at::Tensor& b, const Plan& p, const at::Tensor& s2, const at::Tensor& s1,
                   const at::Tensor& offset) {
  at::Tensor out;
  for (int64_t j = 0, start = 0; start < p.k; ++j, start += p.gk) {
    const int64_t len = std::min(p.gk, p.k - start);
    const at::Tensor a_j = a.narrow(-1, start, len);
    at::Tensor acc = product(a_j, b.narrow(-2, start, len), p).to(at::kFloat);
    if (offset.defined()) acc = acc - a_j.sum(-1, /*keepdim=*/true).to(at::kFloat) * offset.select(-2, j);
    acc = acc * s2.select(-2, j).unsqueeze(-2);
    if (s1.defined()) acc = acc * s1.select(-1, j).unsqueeze(-1);
    out = out.defined() ? out.add_(acc) : acc;
  }
  return out;
}

// A8W4 as the chip computes it (op-plugin's test_npu_quant_matmul A8W4 golden): each int8 activation is split into
// two int4 halves, hi = x1 >> 4 and lo = (x1 & 15) - 8 (so 16 hi + lo = x1 - 8; vllm-ascend's offset carries the
// 8 * sum(weight * scale) that restores x1), each half's product with the int4 weight accumulated exactly in int32 per
// group of gk values of k, scaled by the group's FP19 scale and rounded to float16, the groups summed in float16;
// then, in float32, 16 hi + lo + offset, times pertoken_scale.
at::Tensor a8w4(const at::Tensor& a, const at::Tensor& b, const Plan& p, const at::Tensor& scale,
                const std::optional<at::Tensor>& offset, const at::Tensor& pertoken) {
  const at::Tensor halves = at::cat({a.bitwise_right_shift(4), a.bitwise_and(15).sub_(8)}, 0);  // (2m, k) int8
  const at::Tensor s = unpack_quant_param(scale).first;
  at::Tensor acc;
  for (int64_t j = 0; j * p.gk < p.k; ++j) {
    const at::Tensor part = int_matmul(halves.narrow(1, j * p.gk, p.gk), b.narrow(0, j * p.gk, p.gk))
                                .to(at::kFloat)
                                .mul_(s[j])
                                .to(at::kHalf);
    acc = acc.defined() ? acc.add_(part) : part;
  }
  at::Tensor out = acc.narrow(0, 0, p.m).to(at::kFloat).mul_(16).add_(acc.narrow(0, p.m, p.m).to(at::kFloat));
  if (given(offset)) out.add_(*offset);
  return out.mul_(pertoken).to(p.out).contiguous();
}

at::Tensor tcg(const at::Tensor& x1, const at::Tensor& a, const at::Tensor& b, const Plan& p, const at::Tensor& scale,
               const at::Tensor& y_scale, const std::optional<at::Tensor>& bias) {
  const at::Tensor s = scale.to(at::kFloat).repeat_interleave(p.gk, 0).narrow(0, 0, p.k);
  const at::Tensor w = b.mul(s).to(at::kBFloat16).to(x1.scalar_type()).to(at::kFloat);
  at::Tensor out = at::matmul(a, w).mul_(unpack_quant_param(y_scale).first.reshape({-1}));
  if (given(bias)) out.add_(bias->reshape({-1}));
  return out.to(p.out).contiguous();
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
  const at::Tensor a = operand(x1, kind_of(x1, x1_dtype, "x1"), false);
  const at::Tensor b = operand(x2, kind_of(x2, x2_dtype, "x2"), true);
  const bool fl = is_float(p.kind);
  if (p.mode == Mode::A8W4) return a8w4(a, b, p, scale, offset, *pertoken);
  if (p.mode == Mode::TCG) return tcg(x1, a, b, p, scale, *y_scale, bias);

  if (p.mode != Mode::PerChannel) {
    at::Tensor s2, s1, off;
    if (p.mode == Mode::Mx) {
      // (.., kb/2, n, 2) -> (.., kb, n): block 2i and 2i + 1 side by side; (.., m, kb/2, 2) -> (.., m, kb).
      const int64_t kb = ceil_div(p.k, p.gk);
      s2 = e8m0_values(scale).movedim(-1, -2).flatten(-3, -2).narrow(-2, 0, kb);
      s1 = e8m0_values(*pertoken).flatten(-2).narrow(-1, 0, kb);
    } else {
      s2 = scale.repeat_interleave(p.gn, -1).narrow(-1, 0, p.n);  // each column block's scale over its gn columns
      if (p.pertoken_blocks) s1 = pertoken->repeat_interleave(p.gm, -2).narrow(-2, 0, p.m);
      if (p.kind == Kind::Int4) off = offset->to(at::kFloat);
    }
    at::Tensor out = grouped(a, b, p, s2, s1, off);
    if (!p.pertoken_blocks) out = out * pertoken->reshape({-1, 1});
    if (given(bias)) out = out + bias->to(at::kFloat).reshape({-1});
    return out.to(p.out).contiguous();
  }

  at::Tensor acc = product(a, b, p);
  const bool int_bias = given(bias) && bias->scalar_type() == at::kInt;
  if (int_bias) acc = acc + *bias;
  if (p.out == at::kInt) return acc.contiguous();

  // torch_npu's kernel packs a float32 scale without pertoken_scale through npu_trans_quant_param for int8 / float16
  // outputs of integer operands and for every output of float ones; float operands then add their bias first.
  const bool packed = scale.scalar_type() == at::kLong ||
                      (scale.scalar_type() == at::kFloat && !given(pertoken) &&
                       (fl || p.out == at::kChar || p.out == at::kHalf));
  at::Tensor s, off;
  if (scale.scalar_type() == at::kLong) {
    std::tie(s, off) = unpack_quant_param(scale);
  } else if (packed) {
    std::tie(s, off) = unpack_quant_param(pack_quant_param(scale, given(offset) ? *offset : at::Tensor(), 0));
  } else {
    s = scale.to(at::kFloat);
  }
  at::Tensor out = acc.to(at::kFloat);
  const bool bias_first = fl && packed && given(bias);
  if (bias_first) out = out + bias->to(at::kFloat);
  out = out * s;
  if (given(pertoken)) out = out * pertoken->unsqueeze(-1);
  if (p.out == at::kChar) {
    if (off.defined()) out = out + off;
    return out.round().clamp(-128, 127).to(at::kChar).contiguous();
  }
  if (given(bias) && !int_bias && !bias_first) out = out + bias->to(at::kFloat);
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
