// The OpenMP team of the calling compute thread, for the ATen kernels it runs next: shared by the two layers that run
// ATen on the runtime's compute threads (the backend's op path and compiled kernels, the offline executor).
// Stateless on purpose: the team size is OpenMP's own per-thread setting, so when both layers' kernels run on the same
// compute thread each sees the other's change (a cache per library would skip a change the other library undid).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <dlfcn.h>

namespace softnpu {

// n from snpuKernelThreadBudget. OpenMP's per-thread setting, so the user's torch.set_num_threads for CPU work is left
// alone.
inline void set_kernel_threads(int n) {
  at::internal::lazy_init_num_threads();
  // Looked up rather than linked: the OpenMP runtime is the one libtorch loaded.
  static const auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  static const auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (get && set && get() != n) set(n);
}

// Copies (dtype conversions included) of fewer elements than this run on the compute thread alone. ATen parallelizes
// a copy from 32K elements, and waking the OpenMP team, which sleeps between parallel regions, costs more than such a
// copy takes on one thread (~16K elements a microsecond): a float16 bmm of 8x128x64 by 8x64x128 on a 2-core AMD EPYC
// took 0.26 ms on the cube's float32 route with its three conversions on two threads, 0.21 ms on one thread.
constexpr int64_t kSerialCopyElements = int64_t{1} << 20;

// dst.copy_(src) in a kernel: on the compute thread alone below kSerialCopyElements, on the kernel's team above.
inline void kernel_copy(const at::Tensor& dst, const at::Tensor& src) {
  const int team = dst.numel() < kSerialCopyElements ? at::get_num_threads() : 1;
  if (team == 1) {
    dst.copy_(src);
    return;
  }
  set_kernel_threads(1);
  struct Restore {
    int team;
    ~Restore() { set_kernel_threads(team); }
  } restore{team};
  dst.copy_(src);
}

}  // namespace softnpu
