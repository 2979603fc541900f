// Quantized tensors are not supported on npu (its tensors are strided, of the plain dtypes). The ops that make
// quantized tensors raise NotImplementedError naming themselves at the call: through the generic path they would run
// the CPU's quantizing kernel into a plain float output that the Meta kernel shaped, a wrong result found much later.
#include <torch/library.h>

namespace softnpu {

namespace {

void refuse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().name(),
                              "' on npu: quantized tensors are not supported on npu. Quantize on the CPU "
                              "(tensor.cpu()), or use torch.float16/bfloat16 for reduced precision on npu.");
}

constexpr const char* kQuantizingOps[] = {
    "quantize_per_tensor",
    "quantize_per_tensor.tensor_qparams",
    "quantize_per_tensor.tensors",
    "quantize_per_tensor_dynamic",
    "quantize_per_channel",
    "_make_per_tensor_quantized_tensor",
    "_make_per_channel_quantized_tensor",
    "_empty_affine_quantized",
    "_empty_per_channel_affine_quantized",
};

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kQuantizingOps) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse>());
}

}  // namespace softnpu
