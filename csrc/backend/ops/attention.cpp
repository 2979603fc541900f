// scaled_dot_product_attention's backend choice for npu tensors: the CPU's. ATen asks a PrivateUse1 device through
// _fused_sdp_choice_stub (and users through aten::_fused_sdp_choice), and without an answer every call takes the math
// composite (bmm, softmax, bmm: the scores
// materialized, several launches); the CPU picks its flash kernel where it applies, which the op path then runs on
// the stream (in half precision through the cube, ops/cube.h). The choice reads only metadata, so it is asked of CPU
// tensors that describe the arguments without memory.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace softnpu {

static at::Tensor describe_on_cpu(const at::Tensor& t) {
  auto d = at::empty({0}, t.options().device(c10::kCPU).requires_grad(false));
  d.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  if (t.requires_grad()) d.requires_grad_(true);
  return d;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> mask;
  if (attn_mask) mask = describe_on_cpu(*attn_mask);
  return at::_fused_sdp_choice(describe_on_cpu(query), describe_on_cpu(key), describe_on_cpu(value), mask, dropout_p,
                               is_causal, scale, enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", fused_sdp_choice); }

}  // namespace softnpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &softnpu::fused_sdp_choice)
}  // namespace at::native
