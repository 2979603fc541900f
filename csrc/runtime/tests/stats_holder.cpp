// A process for test_stats.cpp to observe from outside: it holds 256 MiB on device 0 and runs a few kernels, prints
// "ready", then waits until its stdin closes (and exits normally) or it is killed. With the argument "busy" it keeps
// device 0 busy with 20 ms kernels meanwhile, so its AI core utilization shows.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "softnpu/runtime.h"

namespace {

int spin_20ms(void*) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  while (std::chrono::steady_clock::now() < end) {
  }
  return 0;
}

int nothing(void*) { return 0; }

bool check(snpuError_t e, const char* call) {
  if (e == snpuSuccess) return true;
  std::fprintf(stderr, "stats_holder: %s failed: %s\n", call, snpuGetLastErrorMessage());
  return false;
}

// Whether stdin has been closed, without waiting.
bool stdin_closed() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char buf[64];
  return read(STDIN_FILENO, buf, sizeof(buf)) <= 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool busy = argc > 1 && std::strcmp(argv[1], "busy") == 0;
  void* memory = nullptr;
  if (!check(snpuMalloc(&memory, size_t(256) << 20), "snpuMalloc")) return 1;
  for (int i = 0; i < 4; ++i)
    if (!check(snpuLaunchKernel(nullptr, "nothing", nothing, nullptr, nullptr), "snpuLaunchKernel")) return 1;
  if (!check(snpuStreamSynchronize(nullptr), "snpuStreamSynchronize")) return 1;
  std::printf("ready\n");
  std::fflush(stdout);

  if (!busy) {
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
    }
    return 0;
  }
  while (!stdin_closed()) {
    if (!check(snpuLaunchKernel(nullptr, "spin_20ms", spin_20ms, nullptr, nullptr), "snpuLaunchKernel") ||
        !check(snpuStreamSynchronize(nullptr), "snpuStreamSynchronize"))
      return 1;
  }
  return 0;
}
