// The fused ops' vectorized CPU kernels (the *_kernel.cc files of the family folders) and the choice among their
// builds. ATen's vector types take their width from the compiler flags, so, as ATen does with its own kernels, each
// kernel file is compiled once per CPU capability (DEFAULT, and on x86-64 AVX2 and AVX512: csrc/fused/CMakeLists.txt),
// each build in its own namespace softnpu::fused::<capability>, and the ops call the build of the capability torch
// runs its own kernels with (torch.backends.cpu.get_cpu_capability(), which honours ATEN_CPU_CAPABILITY). The entry
// points take raw pointers: the tensors are prepared in the ops' files, compiled for every host.
#pragma once

#include <ATen/Version.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>

namespace softnpu::fused {

// Where the cos/sin row of each row of x is: x [..., D] (rows of D contiguous elements) against a contiguous table
// [..., D] (cos or sin) broadcast to it. Plain data: the kernels' builds each have their own functions over it
// (rope_kernel.cc), as code shared by builds of different capabilities would be linked from one of them.
struct RopeRows {
  RopeRows(c10::IntArrayRef x_sizes, c10::IntArrayRef table_sizes) : D(x_sizes.back()) {
    lead = static_cast<int64_t>(x_sizes.size()) - 1;
    const int64_t pad = lead - (static_cast<int64_t>(table_sizes.size()) - 1);
    int64_t stride = D;
    xs.resize(lead);
    ts.resize(lead);
    tstride.resize(lead);
    for (int64_t d = lead - 1; d >= 0; --d) {
      xs[d] = x_sizes[d];
      ts[d] = d < pad ? 1 : table_sizes[d - pad];
      tstride[d] = ts[d] == 1 ? 0 : stride;
      stride *= ts[d];
    }
    for (int64_t d = 0; d < lead; ++d) {
      rows *= xs[d];
      table_rows *= ts[d];
    }
  }

  int64_t D, lead = 0, rows = 1, table_rows = 1;
  // x's leading sizes, the table's (1 where broadcast), and the table's element strides (0 where broadcast).
  c10::SmallVector<int64_t, 8> xs, ts, tstride;
};

// The entry points, one set per capability build. dtype is the element type of the tensors; gamma, rstd, dgamma and
// the table-gradient sums are of its compute type (float32 for half types).
#define SOFTNPU_FUSED_CPU_KERNELS(CAP)                                                                               \
  namespace CAP {                                                                                                   \
  /* normalization/rms_norm_kernel.cc */                                                                            \
  void rms_norm(c10::ScalarType dtype, const void* x1, const void* x2, const void* gamma, double eps, int64_t rows,  \
                int64_t n, void* y, void* rstd, void* sum);                                                         \
  void rms_norm_backward(c10::ScalarType dtype, const void* dy, const void* x, const void* gamma, const void* rstd,   \
                         int64_t rows, int64_t n, void* dx, void* dgamma);                                          \
  /* activations/fast_gelu_kernel.cc: n contiguous elements */                                                     \
  void fast_gelu(c10::ScalarType dtype, const void* x, int64_t n, void* y);                                          \
  void fast_gelu_backward(c10::ScalarType dtype, const void* grad, const void* x, int64_t n, void* dx);              \
  /* activations/scaled_masked_softmax_kernel.cc: rows of n contiguous x, row r's mask at mask + mask_rows[r] */     \
  void scaled_masked_softmax(c10::ScalarType dtype, const void* x, const bool* mask, const int64_t* mask_rows,       \
                             double scale, int64_t rows, int64_t n, void* y);                                        \
  void scaled_masked_softmax_backward(c10::ScalarType dtype, const void* dy, const void* y, const bool* mask,        \
                                      const int64_t* mask_rows, double scale, int64_t rows, int64_t n, void* dx);   \
  /* rotary/rope_kernel.cc */                                                                                       \
  void rope_forward(c10::ScalarType dtype, const RopeRows& rows, int64_t half, const void* x, const void* cos,       \
                    const void* sin, void* y);                                                                      \
  void rope_backward(c10::ScalarType dtype, const RopeRows& rows, int64_t half, const void* grad, const void* x,     \
                     const void* cos, const void* sin, void* dx, void* dcos, void* dsin);                           \
  }

SOFTNPU_FUSED_CPU_KERNELS(DEFAULT)
#if defined(SOFTNPU_CPU_KERNELS_X86)
SOFTNPU_FUSED_CPU_KERNELS(AVX2)
SOFTNPU_FUSED_CPU_KERNELS(AVX512)
#endif
#undef SOFTNPU_FUSED_CPU_KERNELS

enum class CpuCapability { kDefault, kAvx2, kAvx512 };

// torch's choice, read once.
inline CpuCapability cpu_capability() {
  static const CpuCapability cap = [] {
#if defined(SOFTNPU_CPU_KERNELS_X86)
    const std::string name = at::get_cpu_capability();
    if (name == "AVX512") return CpuCapability::kAvx512;
    if (name == "AVX2") return CpuCapability::kAvx2;
#endif
    return CpuCapability::kDefault;
  }();
  return cap;
}

// Calls kernel `fn` of the capability's build.
#if defined(SOFTNPU_CPU_KERNELS_X86)
#define SOFTNPU_CPU_KERNEL(fn, ...)                                                       \
  (::softnpu::fused::cpu_capability() == ::softnpu::fused::CpuCapability::kAvx512         \
       ? ::softnpu::fused::AVX512::fn(__VA_ARGS__)                                        \
       : ::softnpu::fused::cpu_capability() == ::softnpu::fused::CpuCapability::kAvx2     \
             ? ::softnpu::fused::AVX2::fn(__VA_ARGS__)                                    \
             : ::softnpu::fused::DEFAULT::fn(__VA_ARGS__))
#else
#define SOFTNPU_CPU_KERNEL(fn, ...) ::softnpu::fused::DEFAULT::fn(__VA_ARGS__)
#endif

}  // namespace softnpu::fused
