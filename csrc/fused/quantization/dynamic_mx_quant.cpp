// npu_dynamic_mx_quant(x, *, axis=-1, round_mode="rint", dst_type=296, block_size=32, scale_alg=0, dst_type_max=0.0,
// max_low_bound=0.0) -> (y, mxscale): OCP microscaling (MX) quantization, as torch_npu documents it. Along `axis`,
// each block of block_size values V shares the scale
//   shared_exp = floor(log2(max|V|)) - emax,   mxscale = 2^shared_exp  (stored as float8_e8m0: shared_exp + 127),
//   y = cast(V / mxscale) to dst_type, rounded by round_mode ("rint": half to even, "round": half away from zero,
//       "floor") and saturated to the type's largest value,
// with emax the exponent of the type's largest normal: float4_e2m1 2, float4_e1m2 0, float8_e4m3fn 8,
// float8_e5m2 15. dst_type: 296 (torch_npu.float4_e2m1fn_x2) or 297 (float4_e1m2fn_x2), two values per uint8, the
// first in the low nibble; torch.float8_e4m3fn (or 292) and torch.float8_e5m2 (or 291). mxscale is uint8 of x's
// shape with the axis holding ceil(ceil(size / block_size) / 2) pairs and a trailing dim of 2 (consecutive blocks'
// scales side by side, a missing last one 0).
// scale_alg picks how the block's exponent is found, as CANN's aclnnDynamicMxQuantV3 documents (and its kernel's bit
// operations make exact):
//   0: the OCP scale above;
//   1 (float8 only, cuBLAS's): S = max(max|V|, max_low_bound) / type max in float32, its exponent raised by one when
//      S has a nonzero mantissa (a normal S below 2^127) or a mantissa above one half (a subnormal S);
//   2 (float4_e2m1, block_size 32): with dst_type_max 0 / 6 (7), the OCP exponent raised by one when max|V|'s
//      mantissa exceeds 0.5 (0.75), so the block's largest value does not saturate; with dst_type_max in (6, 12]
//      other than 7, scale_alg 1's rule (normal S only) with S = max|V| / dst_type_max.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include <cmath>

#include "fused/common.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_dynamic_mx_quant(Tensor input, *, int axis=-1, str round_mode=\"rint\", int dst_type=296, "
        "int block_size=32, int? scale_alg=0, float dst_type_max=0.0, float max_low_bound=0.0) -> (Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_dynamic_mx_quant";

// A low-precision float format: `mantissa` stored bits, normal exponents down to `emin`, largest value `max`.
struct Format {
  int64_t emax, emin, mantissa;
  double max;
  bool fp4, e1m2;
  c10::ScalarType out;  // y's dtype
};

Format format_of(int64_t dst_type) {
  switch (dst_type) {
    case 296: return {2, 0, 1, 6., true, false, at::kByte};
    case 297: return {0, 0, 2, 1.75, true, true, at::kByte};
    case 24:
    case 292: return {8, -6, 3, 448., false, false, at::kFloat8_e4m3fn};
    case 23:
    case 291: return {15, -14, 2, 57344., false, false, at::kFloat8_e5m2};
    default:
      TORCH_CHECK(false, kOp, ": dst_type must be torch_npu.float4_e2m1fn_x2 (296), float4_e1m2fn_x2 (297), "
                  "torch.float8_e4m3fn or torch.float8_e5m2, got ", dst_type);
  }
}

struct Plan {
  Format f;
  int64_t axis, alg;
};

Plan check(const at::Tensor& x, int64_t axis, c10::string_view round_mode, int64_t dst_type, int64_t block_size,
           std::optional<int64_t> scale_alg, double dst_type_max, double max_low_bound) {
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, kOp,
              ": input must be float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1 && x.dim() <= 7, kOp, ": input must have 1 to 7 dims, got ", x.dim());
  TORCH_CHECK(axis >= -x.dim() && axis < x.dim(), kOp, ": Parameter axis is out of input dimension range [",
              -x.dim(), ", ", x.dim() - 1, "]");
  TORCH_CHECK(block_size > 0 && block_size % 32 == 0 && block_size <= 1024, kOp,
              ": Parameter block_size must be divisible by 32 and no greater than 1024, greater than 0, got ",
              block_size);
  TORCH_CHECK(round_mode == "rint" || round_mode == "round" || round_mode == "floor", kOp,
              ": round_mode must be rint, round or floor, got '", round_mode, "'");
  const int64_t alg = scale_alg.value_or(0);
  Plan p{format_of(dst_type), c10::maybe_wrap_dim(axis, x.dim()), alg};
  TORCH_CHECK(alg >= 0 && alg <= 2, kOp, ": scale_alg must be 0, 1 or 2, got ", alg);
  TORCH_CHECK(alg != 1 || !p.f.fp4, kOp, ": scale_alg 1 is supported with float8 dst_type only");
  TORCH_CHECK(alg != 2 || dst_type == 296, kOp, ": scale_alg 2 is supported with dst_type float4_e2m1 (296) only");
  TORCH_CHECK(alg != 2 || block_size == 32, kOp, ": scale_alg 2 needs block_size 32, got ", block_size);
  TORCH_CHECK(max_low_bound >= 0. && (alg == 1 || max_low_bound == 0.), kOp,
              ": max_low_bound must be non-negative and is used by scale_alg 1 only (0.0 otherwise), got ",
              max_low_bound);
  TORCH_CHECK(dst_type_max == 0. || (alg == 2 && dst_type_max >= 6. && dst_type_max <= 12.), kOp,
              ": dst_type_max must be 0.0, or in [6.0, 12.0] with scale_alg 2, got ", dst_type_max);
  if (p.f.fp4)
    TORCH_CHECK(x.size(-1) % 2 == 0, kOp,
                ": If output dtype is float4_e2m1 or float4_e1m2, the last dim of input must be divisible by 2, got "
                "shape ", x.sizes());
  return p;
}

std::vector<int64_t> scale_shape(const at::Tensor& x, const Plan& p, int64_t block_size) {
  auto shape = x.sizes().vec();
  const int64_t blocks = (shape[p.axis] + block_size - 1) / block_size;
  shape[p.axis] = (blocks + 1) / 2;
  shape.push_back(2);
  return shape;
}

std::vector<int64_t> y_shape(const at::Tensor& x, const Plan& p) {
  auto shape = x.sizes().vec();
  if (p.f.fp4) shape.back() /= 2;
  return shape;
}

std::tuple<at::Tensor, at::Tensor> mx_quant_meta(const at::Tensor& x, int64_t axis, c10::string_view round_mode,
                                                 int64_t dst_type, int64_t block_size,
                                                 std::optional<int64_t> scale_alg, double dst_type_max,
                                                 double max_low_bound) {
  const Plan p = check(x, axis, round_mode, dst_type, block_size, scale_alg, dst_type_max, max_low_bound);
  return {at::empty(y_shape(x, p), x.options().dtype(p.f.out)),
          at::empty(scale_shape(x, p, block_size), x.options().dtype(at::kByte))};
}

// v (float32) rounded onto the format's grid by round_mode, saturated to its largest value.
at::Tensor to_grid(const at::Tensor& v, const Format& f, c10::string_view round_mode) {
  const at::Tensor mag = v.abs().clamp_max(f.max);
  // The spacing of the grid around mag: 2^(e - mantissa) with e = floor(log2 mag), at least emin (subnormals).
  const at::Tensor e = at::floor(at::log2(mag.clamp_min(std::ldexp(1., static_cast<int>(f.emin))))).clamp_min(f.emin);
  const at::Tensor step = at::exp2(e - f.mantissa);
  at::Tensor units = mag / step;
  if (round_mode == "rint") units = units.round();
  else if (round_mode == "round") units = (units + 0.5).floor();
  else units = v.lt(0).logical_and(units.frac().ne(0)).to(units.scalar_type()) + units.floor();  // floor of v
  return (units * step).clamp_max(f.max) * at::where(v.lt(0), -1., 1.).to(v.scalar_type());
}

// float32 bits of s: (biased exponent, 23-bit mantissa).
std::pair<at::Tensor, at::Tensor> fields(const at::Tensor& s) {
  const at::Tensor bits = s.contiguous().view(at::kInt);
  return {bits.bitwise_right_shift(23).bitwise_and(0xFF), bits.bitwise_and(0x7FFFFF)};
}

// The float8_e8m0 scale of each block (its biased exponent, float32) from the blocks' max|V| (amax), by scale_alg.
at::Tensor block_exponent(const at::Tensor& amax, const Plan& p, double dst_type_max, double max_low_bound) {
  const auto fl = [](const at::Tensor& t) { return t.to(at::kFloat); };
  at::Tensor biased;
  if (p.alg == 1 || (p.alg == 2 && dst_type_max != 0. && dst_type_max != 6. && dst_type_max != 7.)) {
    const double type_max = p.alg == 1 ? p.f.max : dst_type_max;
    const at::Tensor s = (p.alg == 1 ? amax.clamp_min(max_low_bound) : amax) / static_cast<float>(type_max);
    const auto [e, m] = fields(s);
    at::Tensor up = e.gt(0).logical_and(e.lt(254)).logical_and(m.gt(0));
    if (p.alg == 1) up = up.logical_or(e.eq(0).logical_and(m.gt(0x400000)));
    biased = fl(e) + fl(up);
  } else {
    at::Tensor shared = at::floor(at::log2(amax));
    if (p.alg == 2) {  // raised when the largest value would round past the type's largest (6: 1.5 * 2^emax)
      const int64_t threshold = dst_type_max == 7. ? 0x600000 : 0x400000;
      shared = shared + fl(fields(amax).second.gt(threshold));
    }
    // float8_e8m0 holds exponents -127..127 (255 is NaN); an all-zero block gets the smallest scale.
    shared = (shared - p.f.emax).clamp(-127, 127).nan_to_num(-127., 127., -127.);
    biased = shared + 127.;
  }
  return biased;
}

// float4 values on the grid -> their 4-bit codes (sign in bit 3), two per byte, the first in the low nibble.
at::Tensor pack_fp4(const at::Tensor& q, const Format& f) {
  const at::Tensor mag = q.abs();
  at::Tensor code;
  if (f.e1m2) {
    code = (mag * 4).round();  // 0, 0.25, ..., 1.75 -> 0..7
  } else {
    // e2m1: 0, 0.5, 1, 1.5 -> 0..3 (steps of 0.5); 2, 3 -> 4, 5; 4, 6 -> 6, 7.
    code = at::where(mag.lt(2), mag * 2, at::where(mag.lt(4), mag + 2, mag / 2 + 4)).round();
  }
  code = code.to(at::kByte).bitwise_or(q.signbit().to(at::kByte).bitwise_left_shift(3));
  const at::Tensor pairs = code.unflatten(-1, {-1, 2});
  return pairs.select(-1, 0).bitwise_or(pairs.select(-1, 1).bitwise_left_shift(4));
}

std::tuple<at::Tensor, at::Tensor> mx_quant_cpu(const at::Tensor& x, int64_t axis, c10::string_view round_mode,
                                                int64_t dst_type, int64_t block_size, std::optional<int64_t> scale_alg,
                                                double dst_type_max, double max_low_bound) {
  const Plan p = check(x, axis, round_mode, dst_type, block_size, scale_alg, dst_type_max, max_low_bound);
  // Blocks along the axis, moved last: [..., blocks, block_size], the tail padded with zeros.
  at::Tensor v = x.to(at::kFloat).movedim(p.axis, -1);
  const int64_t size = v.size(-1), blocks = (size + block_size - 1) / block_size;
  const int64_t padded_blocks = blocks + blocks % 2;
  v = at::constant_pad_nd(v, {0, padded_blocks * block_size - size}).unflatten(-1, {padded_blocks, block_size});
  const at::Tensor amax = v.abs().amax(-1, /*keepdim=*/true);
  const at::Tensor exponent = block_exponent(amax, p, dst_type_max, max_low_bound);
  // A block holding a NaN stores the NaN scale 255 and is divided by the smallest one.
  const at::Tensor biased = at::where(amax.isnan(), 255., exponent);
  const at::Tensor q = to_grid(v / at::exp2(at::where(amax.isnan(), 0., exponent) - 127.), p.f, round_mode);
  at::Tensor y = q.flatten(-2).narrow(-1, 0, size).movedim(-1, p.axis).contiguous();
  y = p.f.fp4 ? pack_fp4(y, p.f) : y.to(p.f.out);
  // The scales of blocks 2i and 2i + 1 side by side; a block past the data (odd count) has scale 0.
  at::Tensor scale = biased.squeeze(-1);
  if (blocks % 2) scale.select(-1, blocks).zero_();
  scale = scale.unflatten(-1, {padded_blocks / 2, 2}).movedim(-2, p.axis).to(at::kByte);
  return {y.contiguous(), scale.contiguous()};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_dynamic_mx_quant", mx_quant_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("npu_dynamic_mx_quant", mx_quant_cpu); }

}  // namespace softnpu::fused
