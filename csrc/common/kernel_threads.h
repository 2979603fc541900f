// The OpenMP team of the calling compute thread, for the ATen kernels it runs next: shared by the two layers that run
// ATen on the runtime's compute threads (the backend's op path and compiled kernels, the offline executor).
// Stateless on purpose: the team size is OpenMP's own per-thread setting, so when both layers' kernels run on the same
// compute thread each sees the other's change (a cache per library would skip a change the other library undid).
#pragma once

#include <ATen/Parallel.h>
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

}  // namespace softnpu
