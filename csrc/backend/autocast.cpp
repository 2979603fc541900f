// Autocast for npu (torch.autocast("npu"), torch.npu.amp.autocast): CUDA's casting policy, op for op, through the
// op lists ATen shares between backends. The default lower-precision dtype is float16, as on Ascend.
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

// In namespace at: ATen's shared op lists name types (Tensor, ScalarType, ...) unqualified.
namespace at {

namespace {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer. In this case, combine "
              "the two layers using torch.nn.functional.binary_cross_entropy_with_logits or "
              "torch.nn.BCEWithLogitsLoss, which are safe to autocast.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define SOFTNPU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(SOFTNPU_LOWER_PRECISION_FP)
#undef SOFTNPU_LOWER_PRECISION_FP
#define SOFTNPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(SOFTNPU_FP32)
#undef SOFTNPU_FP32
#define SOFTNPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(SOFTNPU_FP32_SET_OPT_DTYPE)
#undef SOFTNPU_FP32_SET_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define SOFTNPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(SOFTNPU_PROMOTE)
#undef SOFTNPU_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace at
