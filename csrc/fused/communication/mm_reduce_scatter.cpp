// npu_mm_reduce_scatter_base(x1, x2, hcom, world_size, *, reduce_op='sum', bias, x1_scale, x2_scale, comm_turn=0,
// output_dtype, comm_mode): torch_npu's MatmulReduceScatter,
//   output = reducescatter(x1 @ x2 + bias)   (summed across ranks, rank r keeping rows r * m / world_size ...)
// over the process group hcom names. Each rank's product accumulates in float32 and is rounded once to x1's dtype
// before the reduction, as on the chip. comm_turn and comm_mode select the chip's pipelining and communication
// engine: accepted, nothing to choose here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/communication/hcom.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_mm_reduce_scatter_base(Tensor self, Tensor x2, str hcom, int world_size, *, str reduce_op='sum', "
        "Tensor? bias=None, Tensor? x1_scale=None, Tensor? x2_scale=None, int comm_turn=0, "
        "ScalarType? output_dtype=None, str? comm_mode=None) -> Tensor");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_mm_reduce_scatter_base";
using Opt = std::optional<at::Tensor>;

void check(const at::Tensor& x1, const at::Tensor& x2, int64_t world_size, c10::string_view reduce_op,
           const Opt& bias, const Opt& x1_scale, const Opt& x2_scale, std::optional<c10::ScalarType> output_dtype,
           const std::optional<c10::string_view>& comm_mode) {
  check_reduce_op(reduce_op, kOp);
  check_comm_mode(comm_mode, kOp);
  check_half(x1, "x1", kOp);
  TORCH_CHECK(!given(x1_scale) && !given(x2_scale), kOp,
              ": x1_scale / x2_scale (the quantized MatmulReduceScatter) are not supported here");
  TORCH_CHECK(!output_dtype || *output_dtype == x1.scalar_type(), kOp, ": output_dtype must be x1's dtype");
  TORCH_CHECK(world_size > 0, kOp, ": world_size must be positive, got ", world_size);
  TORCH_CHECK(x1.dim() == 2 && x2.dim() == 2, kOp, ": x1 and x2 must be 2-D, got ", x1.sizes(), " and ", x2.sizes());
  TORCH_CHECK(x2.scalar_type() == x1.scalar_type(), kOp, ": x2 must have x1's dtype ", x1.scalar_type(), ", got ",
              x2.scalar_type());
  TORCH_CHECK(x1.size(1) == x2.size(0), kOp, ": x1's k (", x1.size(1), ") and x2's k (", x2.size(0), ") differ");
  TORCH_CHECK(x1.size(0) % world_size == 0, kOp, ": x1's m (", x1.size(0), ") must be a multiple of world_size (",
              world_size, ")");
  if (given(bias))
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == x2.size(1), kOp, ": bias must have shape (n,) = (", x2.size(1),
                ",), got ", bias->sizes());
}

#define MM_REDUCE_SCATTER_PARAMS                                                                                  \
  const at::Tensor &x1, const at::Tensor &x2, c10::string_view hcom, int64_t world_size, c10::string_view reduce_op, \
      const Opt &bias, const Opt &x1_scale, const Opt &x2_scale, int64_t comm_turn,                               \
      std::optional<c10::ScalarType> output_dtype, std::optional<c10::string_view> comm_mode

at::Tensor mm_reduce_scatter_meta(MM_REDUCE_SCATTER_PARAMS) {
  check(x1, x2, world_size, reduce_op, bias, x1_scale, x2_scale, output_dtype, comm_mode);
  return at::empty({x1.size(0) / world_size, x2.size(1)}, x1.options());
}

at::Tensor mm_reduce_scatter(MM_REDUCE_SCATTER_PARAMS) {
  check(x1, x2, world_size, reduce_op, bias, x1_scale, x2_scale, output_dtype, comm_mode);
  const auto group = group_of(hcom, kOp);
  TORCH_CHECK(group->getSize() == world_size, kOp, ": world_size (", world_size, ") differs from the group's size (",
              group->getSize(), ")");
  at::Tensor local = at::matmul(x1.to(at::kFloat), x2.to(at::kFloat));
  if (given(bias)) local = local + bias->to(at::kFloat);
  local = local.to(x1.scalar_type()).contiguous();
  at::Tensor out = at::empty({x1.size(0) / world_size, x2.size(1)}, x1.options());
  group->reduce_scatter_single(out, local)->wait();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_mm_reduce_scatter_base", mm_reduce_scatter_meta); }

TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) { m.impl("npu_mm_reduce_scatter_base", mm_reduce_scatter); }

}  // namespace softnpu::fused
