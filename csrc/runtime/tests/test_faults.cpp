// Faults on demand (snpuFaultInject) and the recovery calls: each fault fails where the real one does, with Ascend's
// code, and the device recovers as documented (snpuDeviceStop / snpuDeviceRestart).
#include <vector>

#include "test_util.h"

namespace softnpu::test {
namespace {

snpuFault fault(snpuFaultKind kind, int device = 0) {
  snpuFault f{};
  f.kind = kind;
  f.device = device;
  f.stream_id = -1;
  f.at = 1;
  return f;
}

int last_kernel_code() {
  int code = 0;
  EXPECT_SNPU(snpuGetLastKernelError(nullptr, nullptr, &code, nullptr, nullptr));
  return code;
}

class Faults : public ::testing::Test {
 protected:
  void TearDown() override {
    snpuFaultClear();
    snpuDeviceRestart(0);
  }
};

TEST_F(Faults, AKernelErrorFiresAtTheChosenKernelOnceWithAscendsCode) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuFault f = fault(snpuFaultKernelError);
  f.at = 2;
  ASSERT_SNPU(snpuFaultInject(&f));
  int ran = 0;
  for (int i = 0; i < 3; ++i) ASSERT_SNPU(launch(s, "k", [&ran] { return ++ran, 0; }));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  EXPECT_EQ(last_kernel_code(), SNPU_ACL_ERROR_RT_AICORE_EXCEPTION);
  EXPECT_NE(last_message().find("EZ9999"), std::string::npos) << last_message();
  EXPECT_EQ(ran, 2);  // the second never ran; the stream went on
  ASSERT_SNPU(launch(s, "k", [&ran] { return ++ran, 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST_F(Faults, AnOutOfMemoryFailsTheChosenAllocationOnly) {
  snpuFault f = fault(snpuFaultOutOfMemory);
  f.at = 2;
  f.size = 1 << 20;
  ASSERT_SNPU(snpuFaultInject(&f));
  void* small = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_SNPU(snpuMalloc(&small, 64));  // below the size: not counted
  ASSERT_SNPU(snpuMalloc(&a, 2 << 20));
  EXPECT_EQ(snpuMalloc(&b, 2 << 20), snpuErrorMemoryAllocation);
  EXPECT_EQ(snpuMalloc(&b, 4 << 20), snpuErrorMemoryAllocation);  // a retry, or larger: the device is still full
  ASSERT_SNPU(snpuMalloc(&b, 1 << 20));                           // smaller: goes through, and the fault ends
  ASSERT_SNPU(snpuFree(b));
  ASSERT_SNPU(snpuMalloc(&b, 2 << 20));
  for (void* p : {small, a, b}) ASSERT_SNPU(snpuFree(p));
}

TEST_F(Faults, AUceFailsReadsOfItsRangeUntilTheDeviceRestarts) {
  void* p = nullptr;
  ASSERT_SNPU(snpuMalloc(&p, 4096));
  snpuFault f = fault(snpuFaultMemoryUce);
  f.ptr = static_cast<char*>(p) + 1024;
  f.size = 512;
  f.at = 1000;  // no kernel runs here: only the copies read it
  ASSERT_SNPU(snpuFaultInject(&f));
  void* addrs[4];
  size_t sizes[4], count = 0;
  ASSERT_SNPU(snpuDeviceGetUceInfo(0, addrs, sizes, 4, &count));
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(addrs[0], f.ptr);
  EXPECT_EQ(sizes[0], 512u);
  std::vector<char> host(4096);
  ASSERT_SNPU(snpuMemcpy(host.data(), p, 1024, snpuMemcpyDeviceToHost));  // outside the range
  EXPECT_EQ(snpuMemcpy(host.data(), p, 4096, snpuMemcpyDeviceToHost), snpuErrorKernelFailed);
  EXPECT_EQ(last_kernel_code(), SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR);
  // Kernels learn whether their operands touch it: only the range's bytes do.
  EXPECT_EQ(snpuMemUceActive(), 1);
  EXPECT_EQ(snpuMemRangeHasUce(p, 1024), 0);
  EXPECT_EQ(snpuMemRangeHasUce(static_cast<char*>(p) + 1024 + 511, 1), 1);
  EXPECT_EQ(snpuMemRangeHasUce(static_cast<char*>(p) + 1536, 2560), 0);
  EXPECT_EQ(snpuMemRangeHasUce(p, 4096), 1);
  ASSERT_SNPU(snpuDeviceRestart(0));
  EXPECT_EQ(snpuMemUceActive(), 0);
  EXPECT_EQ(snpuMemRangeHasUce(p, 4096), 0);
  ASSERT_SNPU(snpuDeviceGetUceInfo(0, addrs, sizes, 4, &count));
  EXPECT_EQ(count, 0u);
  ASSERT_SNPU(snpuMemcpy(host.data(), p, 4096, snpuMemcpyDeviceToHost));
  ASSERT_SNPU(snpuFree(p));
}

TEST_F(Faults, AHungDeviceCompletesNothingUntilStoppedThenRestartsClean) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuFault f = fault(snpuFaultDeviceHang);
  ASSERT_SNPU(snpuFaultInject(&f));
  int ran = 0;
  ASSERT_SNPU(launch(s, "k", [&ran] { return ++ran, 0; }));
  EXPECT_EQ(snpuStreamSynchronizeTimeout(s, 200'000), snpuErrorNotReady);
  ASSERT_SNPU(snpuDeviceStop(0));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  EXPECT_EQ(last_kernel_code(), SNPU_ACL_ERROR_RT_DEVICE_TASK_ABORT);
  EXPECT_NE(last_message().find("FORCE STOP"), std::string::npos);
  EXPECT_EQ(ran, 0);
  ASSERT_SNPU(launch(s, "k", [&ran] { return ++ran, 0; }));  // aborted too while stopped
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  ASSERT_SNPU(launch(s, "k", [&ran] { return ++ran, 0; }));  // its error, kept unreported, goes with the restart
  while (snpuStreamQuery(s) == snpuErrorNotReady) std::this_thread::sleep_for(1ms);
  ASSERT_SNPU(snpuDeviceRestart(0));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(launch(s, "k", [&ran] { return ++ran, 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(ran, 1);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST_F(Faults, ASlowDeviceDelaysEachKernel) {
  snpuFault f = fault(snpuFaultSlow);
  f.delay_us = 50'000;
  ASSERT_SNPU(snpuFaultInject(&f));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) ASSERT_SNPU(launch(nullptr, "k", [] { return 0; }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
}

TEST_F(Faults, BadInjectionsAreRefused) {
  snpuFault f = fault(static_cast<snpuFaultKind>(99));
  EXPECT_EQ(snpuFaultInject(&f), snpuErrorInvalidValue);
  f = fault(snpuFaultMemoryUce);
  int host = 0;
  f.ptr = &host;
  f.size = 4;
  EXPECT_EQ(snpuFaultInject(&f), snpuErrorInvalidValue);
  f = fault(snpuFaultKernelError, 99);
  EXPECT_EQ(snpuFaultInject(&f), snpuErrorInvalidDevice);
}

}  // namespace
}  // namespace softnpu::test
