// The cube unit: how the matrix and convolution ops (mm, bmm, addmm, convolution, attention, ...) compute in float16
// and bfloat16. An NPU's cube takes half-precision inputs, accumulates in float32 and is its fastest unit. Host CPUs
// differ: with native half-precision units (AVX512-FP16 or AMX-FP16 for float16, AVX512-BF16 or AMX-BF16 for
// bfloat16) ATen's kernels in that dtype are the fastest path; without them ATen falls back to generic code up to
// 150x slower than float32. There the kernel runs ATen's float32 kernel on converted operands instead: float16 in,
// float32 accumulate, float16 out, as the cube does.
//
// Decided once per process from the host's capabilities (or SOFTNPU_HALF_COMPUTE), per dtype.
#pragma once

#include <c10/core/ScalarType.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <string>
#include <vector>

namespace softnpu {

struct KernelLaunch;

enum class CubeCompute {
  kNative,   // ATen's kernel in the tensors' own dtype
  kFloat32,  // ATen's float32 kernel on converted operands, results rounded back once
};

// How cube ops compute in `dtype` (float16 or bfloat16; every other dtype is native).
CubeCompute cube_compute(c10::ScalarType dtype);

// "float16: float32 compute (the host has no avx512_fp16 or amx_fp16)": one line per half-precision dtype, for
// softnpu report and doctor.
std::string cube_description();

// The half-precision dtypes in which an op ("aten::mm") may take the float32 route, as a mask (float16 1, bfloat16
// 2, and 4: float16 even on a host with float16 units; 8: both, always, for the op's contract rather than speed, as
// the normalizations whose statistics are float32; 0 for most ops): decided once per op (OpInfo::float32_dtypes).
unsigned float32_dtypes(const std::string& name);

// Whether such a mask takes the float32 route for the op's contract (8 above).
bool float32_contract(unsigned float32_dtypes);

// The arguments of a contract op that are its parameters ("weight", "bias", "running_mean", "running_var"), as
// opposed to its activations (input, grad_out) and saved statistics.
bool is_float32_contract_parameter(const std::string& argument);

// The argument positions a launch of a contract op widens: its parameters alone where it is given a weight, so ATen's
// CPU kernel takes its mixed-precision path (half activations read as they are, float32 parameters, float32
// statistics, float32 arithmetic), which converts no activation (batch norm's bfloat16 training step: 4.6 ms
// converting everything, against 1.4 ms for the CPU's kernel in bfloat16); null (every operand widens) without a
// weight (a layer_norm without one keeps half statistics on that path), for out= overloads and for other ops.
const std::vector<int>* float32_contract_operands(const KernelLaunch& k);

// The GEMMs the cube runs itself in float16 on the float32 route, decided once per op (OpInfo::cube_gemm): the
// functional overloads of the matrix products that dominate training.
enum class CubeGemm { kNone, kMm, kAddmm, kBmm, kBaddbmm };
CubeGemm cube_gemm(const c10::FunctionSchema& schema);

// Whether this launch of such an op takes the float32 route: some device tensor is in a dtype that computes in float32.
bool runs_in_float32(const KernelLaunch& k);

// The float32 route of a float16 GEMM through MKL's half-precision GEMM, which widens the operands while packing
// them (as sgemm packs anyway): on Intel CPUs sgemm's speed, where converting every operand first costs 12-15 % more.
// The float32 result goes into scratch memory and is rounded once into the output. Returns false, having done
// nothing, when the host's BLAS has no such GEMM, the host is not an Intel CPU (MKL's kernel is slower there than
// converting) or an operand has no BLAS layout; the caller then converts the operands (float32_operand).
bool run_half_gemm(const torch::jit::Stack& stack, const KernelLaunch& k, const std::vector<c10::IValue>& outputs);

// The float32 route of the other kernels: the dtype an operand of `dtype` computes in (float32, or Undefined to keep
// it), for WideOperands (ops/widen.h), which converts the operands; the op's fresh results are float32 and the caller
// copies them into its outputs, which rounds them once.
c10::ScalarType float32_operand(unsigned float32_dtypes, c10::ScalarType dtype);

}  // namespace softnpu
