// Virtual memory (snpuMemAddressReserve, snpuMemMap, snpuMemUnmap, snpuMemAddressFree): reservations cost no
// capacity, mapped pages are accounted and usable by device code, unmapping returns them, misuse is refused, and
// SOFTNPU_PROTECT_MEMORY covers mapped pages.
#include <algorithm>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace softnpu::test {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

size_t granularity() {
  size_t g = 0;
  EXPECT_SNPU(snpuMemGetGranularity(&g));
  return g;
}

size_t in_use(int device = 0) {
  snpuDeviceStats s;
  EXPECT_SNPU(snpuGetDeviceStats(device, &s));
  return s.memory_in_use;
}

size_t free_memory() {
  size_t free_bytes = 0, total = 0;
  EXPECT_SNPU(snpuMemGetInfo(0, &free_bytes, &total));
  return free_bytes;
}

TEST(VirtualMemory, ReservingCostsNoCapacityAndMappingIsAccounted) {
  ScopedEnv env({{"SOFTNPU_MEMORY_MB", "64"}});
  const size_t g = granularity();
  ASSERT_EQ(g, 2 * kMiB);
  // A reservation larger than the capacity is only addresses.
  void* base = nullptr;
  ASSERT_SNPU(snpuMemAddressReserve(&base, 1024 * kMiB));
  EXPECT_EQ(free_memory(), 64 * kMiB);
  EXPECT_EQ(in_use(), 0u);
  snpuPointerAttributes attr;
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, static_cast<char*>(base) + 100 * kMiB));
  EXPECT_EQ(attr.type, snpuMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  EXPECT_EQ(attr.base, base);
  EXPECT_EQ(attr.size, 1024 * kMiB);

  char* p = static_cast<char*>(base);
  ASSERT_SNPU(snpuMemMap(p, 4 * g));
  ASSERT_SNPU(snpuMemMap(p + 10 * g, g));
  EXPECT_EQ(free_memory(), 64 * kMiB - 5 * g);
  EXPECT_EQ(in_use(), 5 * g);

  // Mapped pages are device memory: fresh ones read zero, copies and memsets reach them.
  std::vector<uint8_t> out(4 * g, 1), in(4 * g);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  ASSERT_SNPU(snpuMemcpy(out.data(), p, out.size(), snpuMemcpyDeviceToHost));
  EXPECT_EQ(std::count(out.begin(), out.end(), 0), static_cast<long>(out.size()));
  ASSERT_SNPU(snpuMemcpy(p, in.data(), in.size(), snpuMemcpyHostToDevice));
  ASSERT_SNPU(snpuMemsetAsync(p + 10 * g, 9, g, nullptr));
  ASSERT_SNPU(snpuMemcpy(out.data(), p, out.size(), snpuMemcpyDeviceToHost));
  EXPECT_EQ(out, in);
  uint8_t byte = 0;
  ASSERT_SNPU(snpuMemcpy(&byte, p + 11 * g - 1, 1, snpuMemcpyDeviceToHost));
  EXPECT_EQ(byte, 9);

  // Unmapping returns the capacity; the rest stays mapped with its data.
  ASSERT_SNPU(snpuMemUnmap(p + 2 * g, 2 * g));
  EXPECT_EQ(free_memory(), 64 * kMiB - 3 * g);
  EXPECT_EQ(in_use(), 3 * g);
  ASSERT_SNPU(snpuMemcpy(out.data(), p, 2 * g, snpuMemcpyDeviceToHost));
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), 2 * g));
  // Mapped again: fresh zeroed memory.
  ASSERT_SNPU(snpuMemMap(p + 2 * g, g));
  ASSERT_SNPU(snpuMemcpy(&byte, p + 2 * g, 1, snpuMemcpyDeviceToHost));
  EXPECT_EQ(byte, 0);

  // Releasing the reservation returns what was still mapped.
  ASSERT_SNPU(snpuMemAddressFree(base));
  EXPECT_EQ(free_memory(), 64 * kMiB);
  EXPECT_EQ(in_use(), 0u);
}

TEST(VirtualMemory, MappingBeyondTheCapacityFailsAndMapsNothing) {
  ScopedEnv env({{"SOFTNPU_MEMORY_MB", "16"}});
  const size_t g = granularity();
  void* base = nullptr;
  ASSERT_SNPU(snpuMemAddressReserve(&base, 64 * kMiB));
  char* p = static_cast<char*>(base);
  void* other = nullptr;
  ASSERT_SNPU(snpuMalloc(&other, 4 * kMiB));  // plain allocations share the capacity
  ASSERT_SNPU(snpuMemMap(p, 10 * kMiB));
  EXPECT_EQ(snpuMemMap(p + 10 * kMiB, 4 * g), snpuErrorMemoryAllocation);
  const std::string message = last_message();
  EXPECT_NE(message.find("out of memory on device 0"), std::string::npos) << message;
  EXPECT_NE(message.find("capacity 16.00 MiB"), std::string::npos) << message;
  EXPECT_EQ(free_memory(), 2 * kMiB);
  // The failed range is still unmapped: the part that fits maps.
  ASSERT_SNPU(snpuMemMap(p + 10 * kMiB, g));
  EXPECT_EQ(free_memory(), 0u);
  // Unmapping makes room again.
  ASSERT_SNPU(snpuMemUnmap(p, 4 * g));
  ASSERT_SNPU(snpuMemMap(p + 12 * kMiB, 4 * g));
  EXPECT_EQ(free_memory(), 0u);
  ASSERT_SNPU(snpuMemAddressFree(base));
  ASSERT_SNPU(snpuFree(other));
  EXPECT_EQ(free_memory(), 16 * kMiB);
}

TEST(VirtualMemory, MisuseIsRefusedWithReasons) {
  const size_t g = granularity();
  void* base = nullptr;
  EXPECT_EQ(snpuMemAddressReserve(&base, g + 1), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemAddressReserve(&base, 0), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemAddressReserve(nullptr, g), snpuErrorInvalidValue);
  ASSERT_SNPU(snpuMemAddressReserve(&base, 8 * g));
  char* p = static_cast<char*>(base);
  EXPECT_EQ(snpuMemMap(p + 1, g), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("not aligned"), std::string::npos) << last_message();
  EXPECT_EQ(snpuMemMap(p, g / 2), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemMap(p + 6 * g, 4 * g), snpuErrorInvalidValue);  // leaves the reservation
  ASSERT_SNPU(snpuMemMap(p, 2 * g));
  EXPECT_EQ(snpuMemMap(p + g, 2 * g), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("already mapped"), std::string::npos) << last_message();
  EXPECT_EQ(snpuMemUnmap(p + g, 2 * g), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("not mapped"), std::string::npos) << last_message();
  EXPECT_EQ(in_use(), 2 * g);  // the refused calls changed nothing

  int on_stack = 0;
  EXPECT_EQ(snpuMemMap(&on_stack, g), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("not in a reservation"), std::string::npos) << last_message();
  // A reservation is not an allocation, and the other way round.
  EXPECT_EQ(snpuFree(base), snpuErrorInvalidPointer);
  EXPECT_NE(last_message().find("snpuMemAddressFree"), std::string::npos) << last_message();
  void* plain = nullptr;
  ASSERT_SNPU(snpuMalloc(&plain, g));
  EXPECT_EQ(snpuMemAddressFree(plain), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemAddressFree(p + g), snpuErrorInvalidValue);
  ASSERT_SNPU(snpuFree(plain));
  ASSERT_SNPU(snpuMemAddressFree(base));
  EXPECT_EQ(in_use(), 0u);
}

int fill_pages(void* arg) {
  std::memset(arg, 5, 2 * kMiB);
  return 0;
}

TEST(VirtualMemory, UnmapWaitsForQueuedWork) {
  const size_t g = granularity();
  void* base = nullptr;
  ASSERT_SNPU(snpuMemAddressReserve(&base, 4 * g));
  ASSERT_SNPU(snpuMemMap(base, g));
  // The kernel writes the page after the host has moved on; unmapping must not pull it away first.
  for (int i = 0; i < 50; ++i) ASSERT_SNPU(snpuLaunchKernel(nullptr, "fill", fill_pages, base, nullptr));
  ASSERT_SNPU(snpuMemUnmap(base, g));
  EXPECT_SNPU(snpuStreamQuery(nullptr));
  ASSERT_SNPU(snpuMemAddressFree(base));
}

int write_and_read(void* arg) {
  auto* p = static_cast<volatile int*>(arg);
  p[0] = 1234;
  return p[0] == 1234 ? 0 : 1;
}

TEST(VirtualMemoryDeathTest, ProtectedMappedPagesCrashHostReadsButWorkInKernels) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedEnv env({{"SOFTNPU_PROTECT_MEMORY", "1"}});
  ASSERT_SNPU(env.init_result());
  const size_t g = granularity();
  void* base = nullptr;
  ASSERT_SNPU(snpuMemAddressReserve(&base, 4 * g));
  char* p = static_cast<char*>(base);
  ASSERT_SNPU(snpuMemMap(p + g, g));
  ASSERT_SNPU(snpuLaunchKernel(nullptr, "write and read", write_and_read, p + g, nullptr));
  ASSERT_SNPU(snpuDeviceSynchronize());
  int value = 0;
  ASSERT_SNPU(snpuMemcpy(&value, p + g, sizeof(value), snpuMemcpyDeviceToHost));
  EXPECT_EQ(value, 1234);
  EXPECT_DEATH({ value = *static_cast<volatile int*>(static_cast<void*>(p + g)); }, "");
  // Device code running made the mapped pages accessible, never the unmapped ones (that would commit them).
  EXPECT_EQ(in_use(), g);
  ASSERT_SNPU(snpuMemAddressFree(base));
}

}  // namespace
}  // namespace softnpu::test
