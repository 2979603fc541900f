// scaled_dot_product_attention's backend choice for npu tensors: the CPU's. ATen asks a PrivateUse1 device through
// _fused_sdp_choice_stub (and users through aten::_fused_sdp_choice), and without an answer every call takes the math
// composite (bmm, softmax, bmm: the scores
// materialized, several launches); the CPU picks its flash kernel where it applies, which the op path then runs on
// the stream (in half precision through the cube, ops/cube.h). The choice reads only metadata, so it is asked of CPU
// tensors that describe the arguments without memory. It is asked of the CPU kernel directly, bypassing the
// dispatcher's modes: AOTAutograd traces sdpa's composite on fake tensors, and a dispatched question was traced into
// the graph and answered by the fake mode's Meta kernel (math for any device but CUDA, HIP and HPU), so compiled
// attention on npu was bmm, softmax, bmm where the CPU's is its flash kernel (GPT-2 tiny's inference: 25 ms of those
// kernels against 11 ms of flash per 10 steps).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

namespace softnpu {

static at::Tensor describe_on_cpu(const at::Tensor& t) {
  at::Tensor d = at::detail::empty_cpu({0}, t.scalar_type());
  d.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  if (t.requires_grad()) d.unsafeGetTensorImpl()->set_requires_grad(true);
  return d;
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> mask;
  if (attn_mask) mask = describe_on_cpu(*attn_mask);
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), describe_on_cpu(query),
                                                describe_on_cpu(key), describe_on_cpu(value), mask, dropout_p,
                                                is_causal, scale, enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", fused_sdp_choice); }

}  // namespace softnpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &softnpu::fused_sdp_choice)
}  // namespace at::native
