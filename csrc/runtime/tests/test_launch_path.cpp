// The launch hot path allocates nothing in steady state. This executable replaces the global operator new to count
// allocations (the runtime's objects are linked in, so its allocations are counted too).
#include <cstdlib>
#include <new>
#include <thread>

#include "test_util.h"

namespace {

std::atomic<long> g_allocations{0};

}  // namespace

// GCC takes the replacement pair for a mismatch: operator new here is malloc, so free is its match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace softnpu::test {
namespace {

int empty_kernel(void*) { return 0; }

TEST(LaunchPath, LaunchingAllocatesNothingInSteadyState) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer's operator new takes precedence over this file's, so nothing can be counted";
#endif
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  constexpr int kLaunches = 1000;  // with the events, just under the queue's bound (launches would wait beyond it)
  auto round = [&] {
    Gate gate;  // keeps the queue filling, so it must hold every launch
    EXPECT_SNPU(gate.hold(s));
    long before = g_allocations.load();
    for (int i = 0; i < kLaunches; ++i) {
      EXPECT_SNPU(snpuLaunchKernel(s, "empty", empty_kernel, nullptr, nullptr));
      if (i % 100 == 0) {
        EXPECT_SNPU(snpuEventRecord(e, s));
      }
    }
    long allocations = g_allocations.load() - before;
    gate.open();
    EXPECT_SNPU(snpuStreamSynchronize(s));
    return allocations;
  };
  EXPECT_GT(round(), 0) << "the queue grows to its working size, and the count sees the runtime's allocations";
  EXPECT_EQ(round(), 0);
  ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// As CUDA's launch queue, a stream's queue is bounded: a host 1024 tasks ahead waits for the device.
TEST(LaunchPath, LaunchWaitsWhenTheQueueIsFull) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  for (int i = 0; i < 1023; ++i) ASSERT_SNPU(snpuLaunchKernel(s, "empty", empty_kernel, nullptr, nullptr));
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    opened = true;
    gate.open();
  });
  ASSERT_SNPU(snpuLaunchKernel(s, "the 1025th task", empty_kernel, nullptr, nullptr));
  EXPECT_TRUE(opened) << "the launch returned while 1024 tasks were queued";
  opener.join();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

}  // namespace
}  // namespace softnpu::test
