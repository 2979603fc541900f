// npu_all_gather_base_mm(x1, x2, hcom, world_size, *, bias, x1_scale, x2_scale, gather_index=0, gather_output=True,
// comm_turn=0, output_dtype, comm_mode) -> (output, gather_out): torch_npu's AllGatherMatmul,
//   gather_out = allgather(x1)   (the ranks' x1 stacked along dim 0: [world_size * m, k])
//   output     = gather_out @ x2 + bias   (float32 accumulation, one rounding to x1's dtype)
// over the process group hcom names. gather_output=False returns an empty gather_out. comm_turn and comm_mode
// select the chip's pipelining and communication engine: accepted, nothing to choose here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"
#include "fused/communication/hcom.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_all_gather_base_mm(Tensor self, Tensor x2, str hcom, int world_size, *, Tensor? bias=None, "
        "Tensor? x1_scale=None, Tensor? x2_scale=None, int gather_index=0, bool gather_output=True, "
        "int comm_turn=0, ScalarType? output_dtype=None, str? comm_mode=None) -> (Tensor, Tensor)");
}

namespace softnpu::fused {

namespace {

constexpr const char* kOp = "npu_all_gather_base_mm";
using Opt = std::optional<at::Tensor>;

void check(const at::Tensor& x1, const at::Tensor& x2, int64_t world_size, const Opt& bias, const Opt& x1_scale,
           const Opt& x2_scale, int64_t gather_index, std::optional<c10::ScalarType> output_dtype,
           const std::optional<c10::string_view>& comm_mode) {
  check_comm_mode(comm_mode, kOp);
  check_half(x1, "x1", kOp);
  TORCH_CHECK(!given(x1_scale) && !given(x2_scale), kOp,
              ": x1_scale / x2_scale (the quantized AllGatherMatmul) are not supported here");
  TORCH_CHECK(!output_dtype || *output_dtype == x1.scalar_type(), kOp, ": output_dtype must be x1's dtype");
  TORCH_CHECK(gather_index == 0, kOp, ": gather_index must be 0 (x1 is gathered), got ", gather_index);
  TORCH_CHECK(world_size > 0, kOp, ": world_size must be positive, got ", world_size);
  TORCH_CHECK(x1.dim() == 2 && x2.dim() == 2, kOp, ": x1 and x2 must be 2-D, got ", x1.sizes(), " and ", x2.sizes());
  TORCH_CHECK(x2.scalar_type() == x1.scalar_type(), kOp, ": x2 must have x1's dtype ", x1.scalar_type(), ", got ",
              x2.scalar_type());
  TORCH_CHECK(x1.size(1) == x2.size(0), kOp, ": x1's k (", x1.size(1), ") and x2's k (", x2.size(0), ") differ");
  if (given(bias))
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == x2.size(1), kOp, ": bias must have shape (n,) = (", x2.size(1),
                ",), got ", bias->sizes());
}

#define ALL_GATHER_MM_PARAMS                                                                                     \
  const at::Tensor &x1, const at::Tensor &x2, c10::string_view hcom, int64_t world_size, const Opt &bias,       \
      const Opt &x1_scale, const Opt &x2_scale, int64_t gather_index, bool gather_output, int64_t comm_turn,     \
      std::optional<c10::ScalarType> output_dtype, std::optional<c10::string_view> comm_mode

std::tuple<at::Tensor, at::Tensor> all_gather_mm_meta(ALL_GATHER_MM_PARAMS) {
  check(x1, x2, world_size, bias, x1_scale, x2_scale, gather_index, output_dtype, comm_mode);
  const int64_t rows = world_size * x1.size(0);
  return {at::empty({rows, x2.size(1)}, x1.options()),
          gather_output ? at::empty({rows, x1.size(1)}, x1.options()) : at::empty({0}, x1.options())};
}

std::tuple<at::Tensor, at::Tensor> all_gather_mm(ALL_GATHER_MM_PARAMS) {
  check(x1, x2, world_size, bias, x1_scale, x2_scale, gather_index, output_dtype, comm_mode);
  const auto group = group_of(hcom, kOp);
  TORCH_CHECK(group->getSize() == world_size, kOp, ": world_size (", world_size, ") differs from the group's size (",
              group->getSize(), ")");
  at::Tensor gathered = at::empty({world_size * x1.size(0), x1.size(1)}, x1.options());
  at::Tensor input = x1.contiguous();
  group->all_gather_single(gathered, input)->wait();
  at::Tensor out = at::matmul(gathered.to(at::kFloat), x2.to(at::kFloat));
  if (given(bias)) out = out + bias->to(at::kFloat);
  return {out.to(x1.scalar_type()), gather_output ? gathered : at::empty({0}, x1.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) { m.impl("npu_all_gather_base_mm", all_gather_mm_meta); }

TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) { m.impl("npu_all_gather_base_mm", all_gather_mm); }

}  // namespace softnpu::fused
