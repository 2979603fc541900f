// Ops whose CompositeExplicitAutograd kernel would run on npu where the CPU runs a kernel of its own: they take the
// generic path, which runs the CPU's.
//
// - Ops with both a CPU kernel and a CompositeExplicitAutograd one (addr, native_layer_norm, native_group_norm, ...):
//   the composite is ATen's reference for backends without a kernel, and rounds differently (and gives other
//   auxiliary outputs) than the CPU kernel in reduced precision.
// - Composites that are not device-generic: they call a CPU/CUDA DispatchStub directly or reject other devices.
#include <torch/library.h>

#include "backend/ops/executor.h"

namespace softnpu {

namespace {

void execute(const c10::OperatorHandle& op, torch::jit::Stack* stack) { execute_op(op, stack); }

// Composite kernels that behave as intended on CPU and CUDA only.
constexpr const char* kNotDeviceGeneric[] = {
    "conj_physical_",  // calls conj_physical_stub itself instead of conj_physical.out
    "mode.values",     // "mode only supports CPU, CUDA and XPU device type"
    // call kaiser_window_stub themselves (the overloads without beta call that with beta directly)
    "kaiser_window", "kaiser_window.periodic", "kaiser_window.beta", "kaiser_window.out", "kaiser_window.periodic_out",
    "kaiser_window.beta_out",
    // Passes self as its own out= tensor, which addr.out tells apart by C++ reference (so an in-place self is not
    // broadcast): through the dispatcher's boxed call it would be broadcast and resized instead of rejected.
    "addr_",
};

// An op with a CPU kernel and a CompositeImplicitAutograd one for other backends, where the composite rounds each of
// its steps in float16/bfloat16 and the CPU kernel computes in float32 (nn.Mish's float16 gradient: 3x the CPU's error
// against float64). Only an op nothing differentiates: a PrivateUse1 kernel takes the composite's autograd away
// (mish's double backward calls another function). native_channel_shuffle, the other op with both kernels, keeps its
// differentiable composite, as on CUDA.
constexpr const char* kCpuKernelMoreAccurate[] = {"mish_backward"};

// Composites that Ascend runs as one kernel computing float16/bfloat16 in float32 with one rounding
// (aclnnBinaryCrossEntropyWithLogits), where the composite rounds each of its steps (a reduction='none' loss 1.3e-3
// off the float32 result rounded once): on the generic path, their half operands widened (ops/widen.cpp). The op's
// own autograd formula is kept (it has a derivatives.yaml entry, not the composite's).
constexpr const char* kOneKernelOnAscend[] = {"binary_cross_entropy_with_logits"};

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Structured ops (CompositeExplicitAutogradNonFunctional) are the executor's own registration.
  take_over_aten_ops(m, [](const c10::OperatorHandle& op) {
    return op.hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
           op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
           !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  });
  for (const char* name : kNotDeviceGeneric) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&execute>());
  for (const char* name : kCpuKernelMoreAccurate) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&execute>());
  for (const char* name : kOneKernelOnAscend) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&execute>());
}

}  // namespace softnpu
