// Where PyTorch's Meta kernels describe an op's outputs (dtypes, shapes) otherwise than its CPU kernel does, and
// CUDA's agrees with the CPU's: the generic path allocates what the Meta kernel infers, so the fix is applied there,
// once per argument metadata (the Meta cache keeps the fixed result). Found by the differential fuzzer
// (tests/fuzz_ops.py); tests/test_ops.py checks each against the CPU.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace softnpu {

// Corrects the Meta kernel's returns for these arguments.
using MetaFix = void (*)(c10::ArrayRef<c10::IValue> args, std::vector<c10::IValue>& returns);

// The fix of the op named "aten::name.overload", or null: decided once, when its OpInfo is made.
MetaFix meta_fix(const std::string& name);

}  // namespace softnpu
