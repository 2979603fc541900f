// torch_npu's operator-compilation switches. softnpu compiles no operators at run time (kernels are ATen's CPU
// kernels), so the JIT compile mode is always off, which is what torch_npu.npu.set_compile_mode(jit_compile=False)
// selects on Ascend.
#pragma once

namespace at_npu::native::env {

inline bool CheckJitDisable() { return true; }

}  // namespace at_npu::native::env
