// The GEMM of the fused ops' CPU kernels: y = x @ w into a given y, through oneDNN's matmul for float32.
//
// ATen sends a float32 mm to MKL, whose kernels on AMD processors are its AVX2 ones (mkl_blas_def_sgemm_kernel_0_zen
// in a profile of this 2-core AMD EPYC), while oneDNN's matmul (ATen's route for bfloat16) runs AVX512 brgemm kernels:
// a 4096x256 . 256x512 float32 product on one thread took 11.5 ms through at::mm, 5.2 ms through oneDNN. The float32
// result is IEEE float32 unless torch's float32 matmul precision for mkldnn allows bf16/tf32, which oneDNN then
// honours as ATen does. bfloat16 already reaches oneDNN through at::mm, float16 stays on at::mm (oneDNN's needs
// avx512_fp16).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Context.h>

namespace at::native {
// Exported by libtorch_cpu (TORCH_API in ATen/native/mkldnn/Matmul.h, a header the wheel does not ship): result =
// alpha * mat1 @ mat2 + beta * result, for 2-D operands that are contiguous or transposed.
void mkldnn_matmul(const Tensor& mat1, const Tensor& mat2, const Tensor& result, float beta, float alpha);
}  // namespace at::native

namespace softnpu::fused {

// Whether oneDNN's float32 matmul can run here: ATen built with it, not turned off by the user
// (torch.backends.mkldnn.enabled), and the processor has what mkldnn_matmul requires on x86 (avx512bw, vl and dq).
inline bool onednn_float_gemm() {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq");
  return cpu && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn();
#else
  return false;
#endif
}

// Whether mkldnn_matmul takes a 2-D operand as it is: row-major, or the transpose of a row-major matrix (it copies
// others, such as a row range of a transposed matrix, which at::mm reads in place through its leading dimension).
inline bool onednn_layout(const at::Tensor& t) {
  return t.is_contiguous() || (t.stride(0) == 1 && t.stride(1) == t.size(0));
}

// y = x @ w into y [m, n], a row-major matrix (a row range of an output). Inside a parallel region the GEMM runs on
// the calling thread alone (oneDNN and MKL both see the enclosing OpenMP region).
inline void matmul_into(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w) {
  const bool onednn = x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat &&
                      y.is_contiguous() && onednn_layout(x) && onednn_layout(w) &&
                      x.size(0) * x.size(1) * w.size(1) > 16 * 16 * 16 && onednn_float_gemm();
  at::Tensor out = y;
  if (onednn) at::native::mkldnn_matmul(x, w, out, /*beta=*/0.0f, /*alpha=*/1.0f);
  else at::mm_out(out, x, w);
}

}  // namespace softnpu::fused
