// Sparse tensors are not supported on npu. Moving one there (x.to_sparse().npu(), torch.sparse_coo_tensor(...,
// device="npu")) builds a tensor of the SparsePrivateUse1 key, whose ops ATen implements per device (coalescing,
// sparse arithmetic: CPU and CUDA kernels over their own memory); the op path launches CPU kernels over strided views
// of device memory, which a sparse tensor is not. So every op on that key raises NotImplementedError naming the op
// and saying what to do, at the call that would make or use one, before anything is allocated.
#include <torch/library.h>

namespace softnpu {

namespace {

void refuse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().name(),
                              "' on npu: sparse tensors are not supported on npu. Keep sparse tensors on the CPU, "
                              "or make them dense (tensor.to_dense()) before moving them to npu.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse>()); }
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse>()); }

}  // namespace softnpu
