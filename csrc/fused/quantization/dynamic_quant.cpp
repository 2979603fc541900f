// npu_dynamic_quant(x, *, smooth_scales, group_index, dst_type, quant_mode, dst_type_max) -> (y, scale): torch_npu's
// symmetric dynamic quantization. With smooth_scales the input is x * smooth_scales first (in MoE, row groups of x
// take the rows of smooth_scales that group_index delimits); then
//   scale = max(|input|) / DTYPE_MAX   over each row ("pertoken"), each column of the last two dims ("perchannel"),
//                                      or the whole tensor ("pertensor"),
//   y = round(input / scale)           rounded half to even and saturated (int8, int4), cast (float8), or rounded
//                                      ties away to HiFloat8 codes in uint8 (torch_npu.hifloat8),
// in float32 as the chip computes. DTYPE_MAX is 127 (int8), 7 (int4: torch.quint4x2, 8 values per int32), 448
// (float8_e4m3fn), 57344 (float8_e5m2), 32768 (hifloat8), or dst_type_max when given.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/quantization/hifloat8.h"
#include "fused/quantization/int4.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_dynamic_quant(Tensor input, *, Tensor? smooth_scales=None, Tensor? group_index=None, "
        "int? dst_type=None, str quant_mode=\"pertoken\", float dst_type_max=0.0) -> (Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_dynamic_quant";
constexpr int64_t kHiFloat8 = 290;  // torch_npu.hifloat8 (ACL's aclDataType + 256)

enum class Mode { PerToken, PerChannel, PerTensor };

struct Plan {
  c10::ScalarType dst;  // int8, quint4x2 (int4 in int32), float8_e4m3fn, float8_e5m2 or uint8 (hifloat8 codes)
  Mode mode;
  double dtype_max;
};

Plan check(const at::Tensor& x, const std::optional<at::Tensor>& smooth, const std::optional<at::Tensor>& group_index,
           std::optional<int64_t> dst_type, c10::string_view quant_mode, double dst_type_max) {
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, kOp,
              ": input must be float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() > 1, kOp, ": input must have more than one dim, got shape ", x.sizes());
  Plan p{};
  const bool hif8 = dst_type.value_or(0) == kHiFloat8;
  p.dst = hif8 ? at::kByte : dst_type.has_value() ? static_cast<c10::ScalarType>(*dst_type) : at::kChar;
  // uint8 stands for hifloat8's codes only: torch.uint8 itself is not a dst_type.
  switch (hif8 ? at::kByte : p.dst == at::kByte ? c10::ScalarType::Undefined : p.dst) {
    case at::kByte: p.dtype_max = 32768.; break;
    case at::kChar: p.dtype_max = 127.; break;
    case at::kQUInt4x2: p.dtype_max = 7.; break;
    case at::kFloat8_e4m3fn: p.dtype_max = 448.; break;
    case at::kFloat8_e5m2: p.dtype_max = 57344.; break;
    default:
      TORCH_CHECK(false, kOp, ": dst_type must be torch.int8, torch.quint4x2, torch.float8_e4m3fn, "
                  "torch.float8_e5m2 or torch_npu.hifloat8, got ", *dst_type);
  }
  TORCH_CHECK(dst_type_max >= 0., kOp, ": dst_type_max must not be negative, got ", dst_type_max);
  if (dst_type_max != 0.) p.dtype_max = dst_type_max;
  if (p.dst == at::kQUInt4x2)
    TORCH_CHECK(x.size(-1) % kInt4PerInt32 == 0, kOp,
                ": If dst_type is quint4x2, the last dim of input must be divisible by 8, got shape ", x.sizes());
  if (quant_mode == "pertoken") p.mode = Mode::PerToken;
  else if (quant_mode == "perchannel") p.mode = Mode::PerChannel;
  else if (quant_mode == "pertensor") p.mode = Mode::PerTensor;
  else TORCH_CHECK(false, kOp, ": quant_mode must be pertoken, perchannel or pertensor, got '", quant_mode, "'");
  TORCH_CHECK(!given(group_index) || given(smooth), kOp, ": group_index needs smooth_scales");
  if (given(smooth)) {
    TORCH_CHECK(smooth->scalar_type() == x.scalar_type(), kOp, ": smooth_scales must have input's dtype ",
                x.scalar_type(), ", got ", smooth->scalar_type());
    if (given(group_index)) {
      TORCH_CHECK(group_index->scalar_type() == at::kInt && group_index->dim() == 1, kOp,
                  ": group_index must be a 1-D int32 tensor, got ", group_index->scalar_type(), " of shape ",
                  group_index->sizes());
      TORCH_CHECK(smooth->dim() == 2 && smooth->size(1) == x.size(-1) && smooth->size(0) == group_index->size(0),
                  kOp, ": with group_index, smooth_scales must have shape [group_index's size, ", x.size(-1),
                  "], got ", smooth->sizes());
      TORCH_CHECK(p.mode == Mode::PerToken, kOp, ": group_index is supported with quant_mode pertoken only");
    } else {
      TORCH_CHECK(smooth->dim() == 1 && smooth->size(0) == x.size(-1), kOp,
                  ": smooth_scales must be 1-D of input's last dim ", x.size(-1), ", got shape ", smooth->sizes());
    }
  }
  return p;
}

std::vector<int64_t> scale_shape(const at::Tensor& x, Mode mode) {
  if (mode == Mode::PerTensor) return {1};
  std::vector<int64_t> shape = x.sizes().vec();
  shape.erase(shape.end() - (mode == Mode::PerChannel ? 2 : 1));
  return shape;
}

std::vector<int64_t> y_shape(const at::Tensor& x, c10::ScalarType dst) {
  std::vector<int64_t> shape = x.sizes().vec();
  if (dst == at::kQUInt4x2) shape.back() /= kInt4PerInt32;
  return shape;
}

c10::ScalarType y_dtype(c10::ScalarType dst) { return dst == at::kQUInt4x2 ? at::kInt : dst; }

std::tuple<at::Tensor, at::Tensor> dynamic_quant_meta(const at::Tensor& x, const std::optional<at::Tensor>& smooth,
                                                      const std::optional<at::Tensor>& group_index,
                                                      std::optional<int64_t> dst_type, c10::string_view quant_mode,
                                                      double dst_type_max) {
  const Plan p = check(x, smooth, group_index, dst_type, quant_mode, dst_type_max);
  return {at::empty(y_shape(x, p.dst), x.options().dtype(y_dtype(p.dst))),
          at::empty(scale_shape(x, p.mode), x.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> dynamic_quant_cpu(const at::Tensor& x, const std::optional<at::Tensor>& smooth,
                                                     const std::optional<at::Tensor>& group_index,
                                                     std::optional<int64_t> dst_type, c10::string_view quant_mode,
                                                     double dst_type_max) {
  const Plan p = check(x, smooth, group_index, dst_type, quant_mode, dst_type_max);
  at::Tensor input = x.to(at::kFloat);
  if (given(group_index)) {
    // Row r of the flattened input takes smooth_scales[g] for group_index[g - 1] <= r < group_index[g]; rows past
    // the last end keep no smoothing, as the op leaves them.
    const at::Tensor rows = at::arange(input.numel() / input.size(-1), group_index->options().dtype(at::kLong));
    const at::Tensor group = at::searchsorted(group_index->to(at::kLong), rows, /*out_int32=*/false, /*right=*/true);
    const int64_t groups = smooth->size(0);
    const at::Tensor table = at::cat({smooth->to(at::kFloat), at::ones({1, x.size(-1)}, input.options())});
    input = (input.reshape({-1, x.size(-1)}) * table.index_select(0, group.clamp_max(groups))).reshape(x.sizes());
  } else if (given(smooth)) {
    input = input * smooth->to(at::kFloat);
  }
  at::Tensor amax;
  switch (p.mode) {
    case Mode::PerToken: amax = input.abs().amax(-1, /*keepdim=*/true); break;
    case Mode::PerChannel: amax = input.abs().amax(-2, /*keepdim=*/true); break;
    case Mode::PerTensor: amax = input.abs().amax().reshape({1}); break;
  }
  const at::Tensor scale = amax / p.dtype_max;
  at::Tensor q = input / scale;
  at::Tensor y;
  if (p.dst == at::kChar || p.dst == at::kQUInt4x2) {
    q = q.round().clamp(-p.dtype_max - 1, p.dtype_max).nan_to_num(0.);
    y = p.dst == at::kChar ? q.to(at::kChar) : pack_int4(q.to(at::kInt));
  } else if (p.dst == at::kByte) {
    y = encode_hifloat8(q.clamp(-p.dtype_max, p.dtype_max));
  } else {
    y = q.clamp(-p.dtype_max, p.dtype_max).to(p.dst);
  }
  return {y, (p.mode == Mode::PerTensor ? scale : scale.squeeze(p.mode == Mode::PerChannel ? -2 : -1)).contiguous()};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_dynamic_quant", dynamic_quant_meta); }

TORCH_LIBRARY_IMPL(npu, CPU, m) { m.impl("npu_dynamic_quant", dynamic_quant_cpu); }

}  // namespace softnpu::fused
