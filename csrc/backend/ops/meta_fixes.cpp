// Ops whose Meta kernel describes an output otherwise than ATen's CPU and CUDA kernels do (ops/meta_fixes.h):
// - dtypes and shapes corrected in the Meta kernel's result, before the outputs are allocated (meta_fix);
// - multilabel_margin_loss_forward: the generic path, then the output re-described as CPU and CUDA give it.
//   Metadata only: the data is already where the CPU kernel put it.
#include "backend/ops/meta_fixes.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include "backend/ops/executor.h"

namespace softnpu {

namespace {

// ---------------------------------------------------------------- dtypes (and shapes) the Meta kernel infers otherwise

void set_dtype(c10::IValue& ret, c10::ScalarType dtype) {
  const at::Tensor& m = ret.toTensor();
  if (m.scalar_type() != dtype) ret = at::empty_strided(m.sizes(), m.strides(), m.options().dtype(dtype));
}

// CPU and CUDA compute in the promoted type and write the input's; the Meta kernel returns the promoted type.
void huber_loss(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns) {
  set_dtype(returns[0], args[0].toTensor().scalar_type());
}

// CPU and CUDA expand self to the outer product's shape before promoting, so a 0-dim self takes part in the promotion
// as a dimensioned tensor; the Meta kernel promotes it as a 0-dim one.
void addr(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns) {
  c10::ScalarType dtype = args[0].toTensor().scalar_type();
  for (int i : {1, 2}) dtype = c10::promoteTypes(dtype, args[i].toTensor().scalar_type());
  set_dtype(returns[0], dtype);
}

// Half or bfloat16 input with float32 weight and bias: CPU and CUDA give the saved mean and rstd in float32 (ATen's
// mixed-type rule, as in layer_norm); the Meta kernel gives the input's dtype. And the output has the input's shape,
// where the Meta kernel broadcasts the input against weight and bias of another size than its channels.
void native_group_norm(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns) {
  const at::Tensor& x = args[0].toTensor();
  const at::Tensor& out = returns[0].toTensor();
  if (out.sizes() != x.sizes()) returns[0] = at::empty(x.sizes(), out.options(), x.suggest_memory_format());
  const c10::ScalarType input = x.scalar_type();
  if (input != c10::kHalf && input != c10::kBFloat16) return;
  for (int i : {1, 2}) {
    if (args[i].isNone() || !args[i].toTensor().defined() || args[i].toTensor().scalar_type() != c10::kFloat) return;
  }
  set_dtype(returns[1], c10::kFloat);
  set_dtype(returns[2], c10::kFloat);
}

// Input and grid of different dtypes, which only the composite grid_sampler rejects: CPU and CUDA allocate the output
// in the input's dtype (and an empty input gives it, where the kernel would reject the pair); the Meta kernel uses the
// grid's.
void grid_sampler(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns) {
  set_dtype(returns[0], args[0].toTensor().scalar_type());
}

// ---------------------------------------------------------------- shapes the Meta kernel infers otherwise

// dim=() reduces every dimension on CPU and CUDA (as sum's does); nansum's Meta kernel reduces none.
void nansum(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns) {
  if (!args[1].isIntList() || !args[1].toDimVector().empty()) return;
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& out = returns[0].toTensor();
  const std::vector<int64_t> shape(args[2].toBool() ? self.dim() : 0, 1);
  if (out.sizes() != c10::IntArrayRef(shape)) returns[0] = at::empty(shape, out.options());
}

// The CPU kernel's output has the input's shape in the input's suggested memory format; the Meta kernel keeps a
// transposed input's strides, and broadcasts the input against weight, bias or running statistics of another size
// than its channels (which only the composite batch_norm checks), where the CPU kernel normalizes the input's channels
// (statistics of its channel count).
void batch_norm(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns) {
  const at::Tensor& input = args[0].toTensor();
  if (input.dim() < 2) return;
  const at::Tensor& out = returns[0].toTensor();
  const at::Tensor cpu_like = at::empty(input.sizes(), out.options(), input.suggest_memory_format());
  if (out.sizes() != cpu_like.sizes() || out.strides() != cpu_like.strides()) returns[0] = cpu_like;
  for (size_t i : {1, 2}) {
    if (i >= returns.size() || !returns[i].isTensor()) continue;
    const at::Tensor& stat = returns[i].toTensor();
    if (stat.dim() == 1 && stat.numel() != 0 && stat.size(0) != input.size(1))
      returns[i] = at::empty({input.size(1)}, stat.options());
  }
}

// The decomposition serving as Meta kernel gives the loss of a single sample (input of at most one dimension) shape
// (1,) under reduction="none"; CPU and CUDA give a 0-dim loss for it under every reduction.
void multilabel_margin_loss_forward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const int64_t input_dim = (*stack)[stack->size() - 3].toTensor().dim();
  execute_op(op, stack);
  if (input_dim > 1) return;
  c10::IValue& loss = (*stack)[stack->size() - 2];
  loss = loss.toTensor().view(c10::IntArrayRef{});
}

}  // namespace

MetaFix meta_fix(const std::string& name) {
  static const std::pair<const char*, MetaFix> kFixes[] = {
      {"aten::huber_loss", &huber_loss},
      {"aten::addr", &addr},
      {"aten::native_group_norm", &native_group_norm},
      {"aten::nansum", &nansum},
      {"aten::grid_sampler_2d", &grid_sampler},
      {"aten::grid_sampler_3d", &grid_sampler},
      {"aten::native_batch_norm", &batch_norm},
      {"aten::_native_batch_norm_legit", &batch_norm},
      {"aten::_native_batch_norm_legit.no_stats", &batch_norm},
      {"aten::_batch_norm_with_update", &batch_norm},
      {"aten::_batch_norm_no_update", &batch_norm},
  };
  for (const auto& [fixed, fix] : kFixes)
    if (name == fixed) return fix;
  return nullptr;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("multilabel_margin_loss_forward",
         torch::CppFunction::makeFromBoxedFunction<&multilabel_margin_loss_forward>());
}

}  // namespace softnpu
