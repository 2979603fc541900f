// torch_npu's get_npu_overflow_flag / clear_npu_overflow_flag: whether a kernel produced inf or nan in float16 or
// bfloat16 since the flag was last cleared (Ascend's floating-point status register). Checking costs a pass over
// every half-precision output, so kernels check only once the program has called either function (armed).
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace softnpu {

void arm_overflow_check();
bool overflow_flag();
void clear_overflow_flag();

// On the compute thread, after a kernel: sets the flag if armed and a half-precision output holds inf or nan.
void check_overflow(const std::vector<c10::IValue>& outputs);
void check_overflow(const at::Tensor& written);

}  // namespace softnpu
