// npu_mm_all_reduce_base(x1, x2, hcom, *, reduce_op='sum', bias, antiquant_scale, antiquant_offset, x3,
// dequant_scale, pertoken_scale, ...): torch_npu's MatmulAllReduce,
//   output = allreduce(x1 @ x2 + bias + x3)
// over the process group hcom names (the hccl backend for npu tensors). Each rank's part is computed as the chip
// does (float32 accumulation, bias and x3 added before the one rounding to x1's dtype), then summed across ranks
// in that dtype. With antiquant_scale (int8/int4 x2) the matmul is npu_weight_quant_batchmatmul's; with
// dequant_scale (int8 x1 and x2), npu_quant_matmul's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/communication/hcom.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_mm_all_reduce_base(Tensor x1, Tensor x2, str hcom, *, str reduce_op='sum', Tensor? bias=None, "
        "Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, Tensor? x3=None, Tensor? dequant_scale=None, "
        "Tensor? pertoken_scale=None, Tensor? comm_quant_scale_1=None, Tensor? comm_quant_scale_2=None, "
        "int antiquant_group_size=0, int comm_turn=0, int[]? group_sizes=None, int? y_dtype=None, "
        "int? x1_dtype=None, int? x2_dtype=None, int? dequant_scale_dtype=None, int? pertoken_scale_dtype=None, "
        "int comm_quant_mode=0, str? comm_mode=None) -> Tensor");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_mm_all_reduce_base";
using Opt = std::optional<at::Tensor>;

struct Plan {
  std::vector<int64_t> shape;
  c10::ScalarType out;
};

Plan check(const at::Tensor& x1, const at::Tensor& x2, c10::string_view reduce_op, const Opt& bias,
           const Opt& antiquant_scale, const Opt& x3, const Opt& dequant_scale, const Opt& comm_quant_scale_1,
           const Opt& comm_quant_scale_2, c10::OptionalIntArrayRef group_sizes, std::optional<int64_t> y_dtype,
           std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,
           std::optional<int64_t> dequant_scale_dtype, std::optional<int64_t> pertoken_scale_dtype,
           int64_t comm_quant_mode, const std::optional<c10::string_view>& comm_mode) {
  check_reduce_op(reduce_op, kOp);
  check_comm_mode(comm_mode, kOp);
  TORCH_CHECK(!given(comm_quant_scale_1) && !given(comm_quant_scale_2) && comm_quant_mode == 0, kOp,
              ": quantized communication (comm_quant_scale_1/2, comm_quant_mode) is not supported here");
  TORCH_CHECK(!group_sizes.has_value() && !x1_dtype && !x2_dtype && !dequant_scale_dtype && !pertoken_scale_dtype,
              kOp, ": group_sizes and the *_dtype arguments (torch_npu's own low-bit dtypes) are not supported here");
  TORCH_CHECK(x1.dim() == 2 || x1.dim() == 3, kOp, ": x1 must be 2-D or 3-D, got shape ", x1.sizes());
  TORCH_CHECK(x2.dim() == 2, kOp, ": x2 must be 2-D, got shape ", x2.sizes());
  TORCH_CHECK(!(given(antiquant_scale) && given(dequant_scale)), kOp,
              ": antiquant_scale (weight-only quantization) and dequant_scale (int8 x1 and x2) exclude each other");
  Plan p;
  int64_t n = x2.size(1);
  if (given(dequant_scale)) {
    TORCH_CHECK(x1.scalar_type() == at::kChar && x2.scalar_type() == at::kChar, kOp,
                ": dequant_scale needs int8 x1 and x2, got ", x1.scalar_type(), " and ", x2.scalar_type());
    p.out = y_dtype ? static_cast<c10::ScalarType>(*y_dtype)
                    : dequant_scale->scalar_type() == at::kBFloat16 ? at::kBFloat16 : at::kHalf;
  } else {
    check_half(x1, "x1", kOp);
    if (given(antiquant_scale)) {
      TORCH_CHECK(x2.scalar_type() == at::kChar || x2.scalar_type() == at::kInt, kOp,
                  ": antiquant_scale needs an int8 (or int4 in int32) x2, got ", x2.scalar_type());
      if (x2.scalar_type() == at::kInt && x2.is_contiguous()) n *= 8;
    } else {
      TORCH_CHECK(x2.scalar_type() == x1.scalar_type(), kOp, ": x2 must have x1's dtype ", x1.scalar_type(),
                  ", got ", x2.scalar_type());
      TORCH_CHECK(x1.size(-1) == x2.size(0), kOp, ": x1's k (", x1.size(-1), ") and x2's k (", x2.size(0),
                  ") differ");
    }
    TORCH_CHECK(!y_dtype || *y_dtype == static_cast<int64_t>(x1.scalar_type()), kOp,
                ": y_dtype must be x1's dtype for a float x1");
    p.out = x1.scalar_type();
  }
  p.shape = x1.sizes().vec();
  p.shape.back() = n;
  if (given(bias)) TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n, kOp, ": bias must have shape (n,) = (", n,
                               ",), got ", bias->sizes());
  if (given(x3)) TORCH_CHECK(x3->sizes() == c10::IntArrayRef(p.shape), kOp, ": x3 must have the output's shape ",
                             c10::IntArrayRef(p.shape), ", got ", x3->sizes());
  return p;
}

#define MM_ALL_REDUCE_PARAMS                                                                                      \
  const at::Tensor &x1, const at::Tensor &x2, c10::string_view hcom, c10::string_view reduce_op, const Opt &bias, \
      const Opt &antiquant_scale, const Opt &antiquant_offset, const Opt &x3, const Opt &dequant_scale,           \
      const Opt &pertoken_scale, const Opt &comm_quant_scale_1, const Opt &comm_quant_scale_2,                    \
      int64_t antiquant_group_size, int64_t comm_turn, c10::OptionalIntArrayRef group_sizes,                      \
      std::optional<int64_t> y_dtype, std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,           \
      std::optional<int64_t> dequant_scale_dtype, std::optional<int64_t> pertoken_scale_dtype,                    \
      int64_t comm_quant_mode, std::optional<c10::string_view> comm_mode

#define MM_ALL_REDUCE_CHECK                                                                                     \
  check(x1, x2, reduce_op, bias, antiquant_scale, x3, dequant_scale, comm_quant_scale_1, comm_quant_scale_2,    \
        group_sizes, y_dtype, x1_dtype, x2_dtype, dequant_scale_dtype, pertoken_scale_dtype, comm_quant_mode,   \
        comm_mode)

at::Tensor mm_all_reduce_meta(MM_ALL_REDUCE_PARAMS) {
  const Plan p = MM_ALL_REDUCE_CHECK;
  return at::empty(p.shape, x1.options().dtype(p.out));
}

using WqbmmSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&, const Opt&,
                            const Opt&, const Opt&, int64_t, int64_t, std::optional<int64_t>);
using QmmSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&, const Opt&, const Opt&,
                          std::optional<int64_t>, std::optional<int64_t>, std::optional<int64_t>,
                          std::optional<int64_t>, std::optional<int64_t>, c10::OptionalIntArrayRef, const Opt&);

at::Tensor mm_all_reduce(MM_ALL_REDUCE_PARAMS) {
  const Plan p = MM_ALL_REDUCE_CHECK;
  const auto group = group_of(hcom, kOp);
  at::Tensor local;
  const at::Tensor rows = x1.reshape({-1, x1.size(-1)});
  if (given(antiquant_scale)) {
    static const auto op = npu_op<WqbmmSig>("npu::npu_weight_quant_batchmatmul");
    local = op.call(rows, x2, *antiquant_scale, antiquant_offset, std::nullopt, std::nullopt, std::nullopt,
                    antiquant_group_size, 0, std::nullopt);
    local = local.to(at::kFloat);
  } else if (given(dequant_scale)) {
    static const auto op = npu_op<QmmSig>("npu::npu_quant_matmul");
    local = op.call(rows, x2, *dequant_scale, std::nullopt, pertoken_scale, std::nullopt,
                    static_cast<int64_t>(p.out), std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                    std::nullopt, std::nullopt);
    local = local.to(at::kFloat);
  } else {
    local = at::matmul(rows.to(at::kFloat), x2.to(at::kFloat));
  }
  local = local.view(p.shape);
  if (given(bias)) local = local + bias->to(at::kFloat);
  if (given(x3)) local = local + x3->to(at::kFloat);
  std::vector<at::Tensor> tensors{local.to(p.out).contiguous()};
  group->allreduce(tensors, c10d::AllreduceOptions{})->wait();
  return tensors[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_mm_all_reduce_base", mm_all_reduce_meta); }

TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) { m.impl("npu_mm_all_reduce_base", mm_all_reduce); }

}  // namespace softnpu::fused
