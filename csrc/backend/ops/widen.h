// Operands computed in a wider dtype than they are stored in, on a compute thread. Two users:
// - the cube's float32 route: float16/bfloat16 matrix ops, and the normalizations whose statistics are float32
//   (ops/cube.h);
// - the dtypes ATen's CUDA kernels take and its CPU kernels lack (OpInfo's dtypesIfCUDA beyond its dtypes): histc of
//   integers, complex32 math, float16 FFTs and pooling, ... Code written for accelerators uses them freely (the MoE
//   layers of transformers count tokens per expert with histc on integers); on npu they compute in a wider dtype and
//   round once into outputs of the dtype CUDA gives (the Meta kernel's).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace softnpu {

struct KernelLaunch;

// A compute thread's scratch memory for widened operands: one block per operand of a kernel, kept and grown across
// kernels, so a steady workload converts into memory it already has (no allocation, no page faults per call).
// scratch_reset() starts a kernel (every block free again).
void scratch_reset();
at::Tensor scratch_tensor(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t numel, c10::ScalarType dtype);

// Replaces the tensor arguments whose dtype `target` maps to another (and ScalarType arguments, as norm's dtype=)
// with copies in that dtype in scratch memory; write_back() copies the written ones back into the device tensors.
// The op's fresh results come out in the wide dtype, and the caller's copy into its outputs rounds them once.
// `target` returns Undefined for a dtype that stays; `only`, when given, lists the argument positions that may widen
// (the others stay as they are).
class WideOperands {
 public:
  WideOperands(torch::jit::Stack& stack, const KernelLaunch& k,
               c10::function_ref<c10::ScalarType(c10::ScalarType)> target, const std::vector<int>* only = nullptr);
  void write_back();

 private:
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 1> written_;  // device tensor, its wide copy
};

// The dtypes an op ("aten::histc", every overload) computes wider because its CPU kernel lacks them, as a mask of
// 1 << ScalarType; 0 for most ops. Decided once per op (OpInfo::widened_dtypes).
uint64_t widened_dtypes(const std::string& name);

inline bool in_mask(uint64_t mask, c10::ScalarType dtype) {
  return (mask >> static_cast<int>(dtype)) & 1;
}

// The dtype a widened operand computes in: float16/bfloat16 in float32, complex32 in complex64, bool in uint8,
// integers in float64; Undefined for the dtypes an op keeps.
c10::ScalarType wider_dtype(uint64_t mask, c10::ScalarType dtype);

// Whether this launch widens: a device tensor is in one of its op's widened dtypes.
bool runs_widened(const KernelLaunch& k);

// A synchronizing launch (an op without a Meta kernel, as the margin losses' backwards) has no outputs shaped in
// advance to round into: its returns in the wide dtype are brought back to the dtype that was widened.
void narrow_returns(torch::jit::Stack& returns, const KernelLaunch& k);

}  // namespace softnpu
