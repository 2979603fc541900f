// Device and pinned memory: allocation, capacity, pointer attributes, copies and memsets (pinned versus pageable),
// and protected device memory.
#include <cstring>
#include <numeric>
#include <thread>

#include "test_util.h"

namespace softnpu::test {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

TEST(Memory, MallocAlignsAndZeroSizeGivesNull) {
  void* p = nullptr;
  ASSERT_SNPU(snpuMalloc(&p, 1000));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  ASSERT_SNPU(snpuFree(p));
  void* z = reinterpret_cast<void*>(1);
  ASSERT_SNPU(snpuMalloc(&z, 0));
  EXPECT_EQ(z, nullptr);
  EXPECT_SNPU(snpuFree(nullptr));
  EXPECT_SNPU(snpuFreeHost(nullptr));
}

TEST(Memory, ExhaustingADeviceFailsWithSizesAndRecoversAfterFree) {
  ScopedEnv env({{"SOFTNPU_MEMORY_MB", "16"}});
  void *a = nullptr, *b = nullptr;
  ASSERT_SNPU(snpuMalloc(&a, 12 * kMiB));
  size_t free_bytes, total;
  ASSERT_SNPU(snpuMemGetInfo(0, &free_bytes, &total));
  EXPECT_EQ(total, 16 * kMiB);
  EXPECT_EQ(free_bytes, 4 * kMiB);

  EXPECT_EQ(snpuMalloc(&b, 8 * kMiB), snpuErrorMemoryAllocation);
  std::string message = last_message();
  EXPECT_NE(message.find("out of memory on device 0"), std::string::npos) << message;
  EXPECT_NE(message.find("tried to allocate 8.00 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("capacity 16.00 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("in use 12.00 MiB"), std::string::npos) << message;
  EXPECT_EQ(snpuMalloc(&b, size_t(1) << 60), snpuErrorMemoryAllocation);

  // Other devices have their own capacity.
  ASSERT_SNPU(snpuSetDevice(1));
  void* on1 = nullptr;
  ASSERT_SNPU(snpuMalloc(&on1, 8 * kMiB));
  ASSERT_SNPU(snpuFree(on1));
  ASSERT_SNPU(snpuSetDevice(0));

  ASSERT_SNPU(snpuFree(a));
  ASSERT_SNPU(snpuMalloc(&b, 8 * kMiB));
  ASSERT_SNPU(snpuMemsetAsync(b, 7, 8 * kMiB, nullptr));
  ASSERT_SNPU(snpuDeviceSynchronize());
  ASSERT_SNPU(snpuFree(b));
  ASSERT_SNPU(snpuMemGetInfo(0, &free_bytes, &total));
  EXPECT_EQ(free_bytes, total);
}

TEST(Memory, PointerAttributesCoverInteriorPointers) {
  void *dev0, *dev1, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev0, 10000));
  ASSERT_SNPU(snpuSetDevice(1));
  ASSERT_SNPU(snpuMalloc(&dev1, 5000));
  ASSERT_SNPU(snpuSetDevice(0));
  ASSERT_SNPU(snpuMallocHost(&pinned, 3000));

  snpuPointerAttributes attr;
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, static_cast<char*>(dev0) + 9999));
  EXPECT_EQ(attr.type, snpuMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  EXPECT_EQ(attr.base, dev0);
  EXPECT_EQ(attr.size, 10000u);
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, static_cast<char*>(dev1) + 17));
  EXPECT_EQ(attr.type, snpuMemoryTypeDevice);
  EXPECT_EQ(attr.device, 1);
  EXPECT_EQ(attr.base, dev1);
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, static_cast<char*>(pinned) + 2999));
  EXPECT_EQ(attr.type, snpuMemoryTypeHost);
  EXPECT_EQ(attr.device, -1);
  EXPECT_EQ(attr.base, pinned);
  EXPECT_EQ(attr.size, 3000u);
  int local = 0;
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, &local));
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);
  EXPECT_EQ(attr.device, -1);
  EXPECT_EQ(attr.base, nullptr);
  EXPECT_EQ(attr.size, 0u);
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, static_cast<char*>(dev0) + 10000));  // one past the end
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, nullptr));
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);

  ASSERT_SNPU(snpuFree(dev0));
  ASSERT_SNPU(snpuFree(dev1));
  ASSERT_SNPU(snpuFreeHost(pinned));
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, dev0));
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);
}

TEST(Memory, FreeingTheWrongKindOfPointerFails) {
  void *dev, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  ASSERT_SNPU(snpuMallocHost(&pinned, 4096));
  int local;
  EXPECT_EQ(snpuFree(static_cast<char*>(dev) + 8), snpuErrorInvalidPointer);
  EXPECT_NE(last_message().find("not its start"), std::string::npos) << last_message();
  EXPECT_EQ(snpuFree(pinned), snpuErrorInvalidPointer);
  EXPECT_NE(last_message().find("pinned host memory, not device memory"), std::string::npos) << last_message();
  EXPECT_EQ(snpuFree(&local), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuFreeHost(dev), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuFreeHost(&local), snpuErrorInvalidPointer);
  ASSERT_SNPU(snpuFree(dev));
  EXPECT_EQ(snpuFree(dev), snpuErrorInvalidPointer) << "double free";
  ASSERT_SNPU(snpuFreeHost(pinned));
  EXPECT_EQ(snpuFreeHost(pinned), snpuErrorInvalidPointer) << "double free";
}

TEST(Memory, AsyncCopiesAndMemsetMoveTheData) {
  constexpr size_t n = 3 * kMiB + 123;
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  void *dev_a, *dev_b, *in, *out;
  ASSERT_SNPU(snpuMalloc(&dev_a, n));
  ASSERT_SNPU(snpuMalloc(&dev_b, n));
  ASSERT_SNPU(snpuMallocHost(&in, n));
  ASSERT_SNPU(snpuMallocHost(&out, n));
  std::vector<uint8_t> data = pattern(n, 5);
  std::memcpy(in, data.data(), n);

  ASSERT_SNPU(snpuMemcpyAsync(dev_a, in, n, snpuMemcpyHostToDevice, s));
  ASSERT_SNPU(snpuMemcpyAsync(dev_b, dev_a, n, snpuMemcpyDeviceToDevice, s));
  ASSERT_SNPU(snpuMemcpyAsync(out, dev_b, n, snpuMemcpyDeviceToHost, s));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(std::memcmp(out, data.data(), n), 0);

  ASSERT_SNPU(snpuMemsetAsync(static_cast<char*>(dev_b) + 10, 0xAB, 100, s));
  ASSERT_SNPU(snpuMemcpyAsync(out, dev_b, n, snpuMemcpyDefault, s));  // inferred: device to host
  ASSERT_SNPU(snpuStreamSynchronize(s));
  const uint8_t* o = static_cast<const uint8_t*>(out);
  EXPECT_EQ(o[9], data[9]);
  for (size_t i = 10; i < 110; ++i) ASSERT_EQ(o[i], 0xAB) << i;
  EXPECT_EQ(o[110], data[110]);

  // Synchronous copies, between devices and with pageable memory.
  std::vector<uint8_t> back(n);
  void* dev1;
  ASSERT_SNPU(snpuSetDevice(1));
  ASSERT_SNPU(snpuMalloc(&dev1, n));
  ASSERT_SNPU(snpuSetDevice(0));
  ASSERT_SNPU(snpuMemcpy(dev1, dev_a, n, snpuMemcpyDeviceToDevice));
  ASSERT_SNPU(snpuMemcpy(back.data(), dev1, n, snpuMemcpyDefault));
  EXPECT_EQ(back, data);
  std::vector<uint8_t> other = pattern(n, 9);
  ASSERT_SNPU(snpuMemcpy(dev_a, other.data(), n, snpuMemcpyHostToDevice));
  ASSERT_SNPU(snpuMemcpy(back.data(), dev_a, n, snpuMemcpyDeviceToHost));
  EXPECT_EQ(back, other);
  std::vector<uint8_t> host_copy(n);
  ASSERT_SNPU(snpuMemcpy(host_copy.data(), other.data(), n, snpuMemcpyHostToHost));
  EXPECT_EQ(host_copy, other);

  for (void* p : {dev_a, dev_b, dev1}) ASSERT_SNPU(snpuFree(p));
  ASSERT_SNPU(snpuFreeHost(in));
  ASSERT_SNPU(snpuFreeHost(out));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Memory, AsyncCopyFromPinnedMemoryReturnsBeforeItRuns) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  void *dev, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  ASSERT_SNPU(snpuMallocHost(&pinned, 4096));
  std::memset(pinned, 0x5A, 4096);
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(snpuMemcpyAsync(dev, pinned, 4096, snpuMemcpyHostToDevice, s));
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorNotReady) << "the copy cannot have run: the gate holds the stream";
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  std::vector<uint8_t> back(4096);
  ASSERT_SNPU(snpuMemcpy(back.data(), dev, 4096, snpuMemcpyDeviceToHost));
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0x5A));
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuFreeHost(pinned));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// Large copies are split among helper threads; two at once (two streams) must both arrive whole.
TEST(Memory, LargeCopiesArriveWholeAlsoWhenConcurrent) {
  constexpr size_t kBytes = (size_t(9) << 20) + 12345;  // not a multiple of the chunk size
  snpuStream_t s[2];
  void* dev[2];
  void* pinned[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_SNPU(snpuStreamCreate(&s[i], 0));
    ASSERT_SNPU(snpuMalloc(&dev[i], kBytes));
    ASSERT_SNPU(snpuMallocHost(&pinned[i], kBytes));
    uint8_t* p = static_cast<uint8_t*>(pinned[i]);
    for (size_t j = 0; j < kBytes; ++j) p[j] = static_cast<uint8_t>(j * 7 + i);
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 2; ++i)
      ASSERT_SNPU(snpuMemcpyAsync(dev[i], pinned[i], kBytes, snpuMemcpyHostToDevice, s[i]));
    for (int i = 0; i < 2; ++i) ASSERT_SNPU(snpuStreamSynchronize(s[i]));
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t> back(kBytes);
    ASSERT_SNPU(snpuMemcpy(back.data(), dev[i], kBytes, snpuMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(back.data(), pinned[i], kBytes), 0) << "stream " << i;
    ASSERT_SNPU(snpuFree(dev[i]));
    ASSERT_SNPU(snpuFreeHost(pinned[i]));
    ASSERT_SNPU(snpuStreamDestroy(s[i]));
  }
}

// Staging buffers are pooled: copies in flight at the same time must each keep their own, round after round.
TEST(Memory, StagedCopiesInFlightKeepTheirOwnSources) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  constexpr int kCopies = 8;
  constexpr size_t kBytes = 100000;
  std::vector<void*> dev(kCopies);
  for (auto& d : dev) ASSERT_SNPU(snpuMalloc(&d, kBytes));
  for (int round = 0; round < 3; ++round) {
    Gate gate;
    ASSERT_SNPU(gate.hold(s));
    for (int i = 0; i < kCopies; ++i) {
      std::vector<uint8_t> src(kBytes, static_cast<uint8_t>(round * kCopies + i));
      ASSERT_SNPU(snpuMemcpyAsync(dev[i], src.data(), kBytes, snpuMemcpyHostToDevice, s));
    }
    gate.open();
    ASSERT_SNPU(snpuStreamSynchronize(s));
    for (int i = 0; i < kCopies; ++i) {
      std::vector<uint8_t> back(kBytes);
      ASSERT_SNPU(snpuMemcpy(back.data(), dev[i], kBytes, snpuMemcpyDeviceToHost));
      ASSERT_EQ(back, std::vector<uint8_t>(kBytes, static_cast<uint8_t>(round * kCopies + i))) << round << " " << i;
    }
  }
  for (auto& d : dev) ASSERT_SNPU(snpuFree(d));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Memory, AsyncCopyFromPageableMemoryIsStagedWithoutWaiting) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  std::vector<uint8_t> pageable(4096, 0x3C);
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(snpuMemcpyAsync(dev, pageable.data(), 4096, snpuMemcpyHostToDevice, s));
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorNotReady) << "host to device from pageable memory does not wait";
  std::fill(pageable.begin(), pageable.end(), 0);  // the caller may reuse its buffer at once
  gate.open();
  std::vector<uint8_t> back(4096, 0);
  ASSERT_SNPU(snpuMemcpyAsync(back.data(), dev, 4096, snpuMemcpyDeviceToHost, s));
  EXPECT_SNPU(snpuStreamQuery(s)) << "device to host into pageable memory completes before returning";
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0x3C)) << "the staged source, not the reused buffer, was copied";
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Memory, CopiesCheckPointerKindsAndBounds) {
  void *dev, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  ASSERT_SNPU(snpuMallocHost(&pinned, 4096));
  std::vector<uint8_t> host(8192);
  EXPECT_EQ(snpuMemcpyAsync(host.data(), pinned, 16, snpuMemcpyHostToDevice, nullptr), snpuErrorInvalidPointer);
  EXPECT_NE(last_message().find("needs device memory as dst"), std::string::npos) << last_message();
  EXPECT_EQ(snpuMemcpyAsync(dev, dev, 16, snpuMemcpyHostToDevice, nullptr), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuMemcpyAsync(dev, host.data(), 16, snpuMemcpyDeviceToHost, nullptr), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuMemcpyAsync(dev, host.data(), 16, snpuMemcpyDeviceToDevice, nullptr), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuMemcpy(dev, host.data(), 16, snpuMemcpyHostToHost), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuMemcpy(dev, host.data(), 4097, snpuMemcpyHostToDevice), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("overrun"), std::string::npos) << last_message();
  EXPECT_EQ(snpuMemcpy(host.data(), static_cast<char*>(dev) + 4000, 100, snpuMemcpyDeviceToHost),
            snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemcpy(dev, host.data(), 16, static_cast<snpuMemcpyKind>(7)), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemcpy(nullptr, host.data(), 16, snpuMemcpyDefault), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemcpyAsync(dev, nullptr, 16, snpuMemcpyDefault, nullptr), snpuErrorInvalidValue);
  EXPECT_SNPU(snpuMemcpy(nullptr, nullptr, 0, snpuMemcpyDefault));
  EXPECT_EQ(snpuMemsetAsync(host.data(), 0, 16, nullptr), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuMemsetAsync(pinned, 0, 16, nullptr), snpuErrorInvalidPointer);
  EXPECT_EQ(snpuMemsetAsync(dev, 0, 4097, nullptr), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMemsetAsync(nullptr, 0, 16, nullptr), snpuErrorInvalidValue);
  EXPECT_SNPU(snpuMemsetAsync(nullptr, 0, 0, nullptr));
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuFreeHost(pinned));
}

TEST(Memory, FreeWaitsForQueuedWorkUsingTheMemory) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  std::atomic<bool> wrote{false};
  ASSERT_SNPU(launch(s, "late writer", [dev, &wrote] {
    std::this_thread::sleep_for(50ms);
    std::memset(dev, 1, 4096);
    wrote = true;
    return 0;
  }));
  ASSERT_SNPU(snpuFree(dev));
  EXPECT_TRUE(wrote);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Memory, StatisticsFollowAllocations) {
  snpuDeviceStats before, during, after;
  ASSERT_SNPU(snpuGetDeviceStats(0, &before));
  void* p;
  ASSERT_SNPU(snpuMalloc(&p, 3 * kMiB));
  ASSERT_SNPU(snpuGetDeviceStats(0, &during));
  EXPECT_EQ(during.memory_in_use, before.memory_in_use + 3 * kMiB);
  EXPECT_GE(during.memory_peak, during.memory_in_use);
  ASSERT_SNPU(snpuFree(p));
  ASSERT_SNPU(snpuGetDeviceStats(0, &after));
  EXPECT_EQ(after.memory_in_use, before.memory_in_use);
  EXPECT_EQ(after.memory_peak, during.memory_peak);
}

int write_and_read(void* arg) {
  auto* p = static_cast<volatile int*>(arg);
  p[0] = 1234;
  return p[0] == 1234 ? 0 : 1;
}

TEST(MemoryDeathTest, ProtectedDeviceMemoryCrashesHostReadsButWorksInKernels) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedEnv env({{"SOFTNPU_PROTECT_MEMORY", "1"}});
  ASSERT_SNPU(env.init_result());
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  ASSERT_SNPU(snpuLaunchKernel(nullptr, "write and read", write_and_read, dev, nullptr));
  ASSERT_SNPU(snpuDeviceSynchronize());
  int value = 0;
  ASSERT_SNPU(snpuMemcpy(&value, dev, sizeof(value), snpuMemcpyDeviceToHost));
  EXPECT_EQ(value, 1234);
  ASSERT_SNPU(snpuMemsetAsync(dev, 0, 4096, nullptr));
  ASSERT_SNPU(snpuMemcpy(&value, dev, sizeof(value), snpuMemcpyDeviceToHost));
  EXPECT_EQ(value, 0);
  // Allocated while no device code runs: inaccessible from the start.
  void* fresh;
  ASSERT_SNPU(snpuMalloc(&fresh, 4096));
  EXPECT_DEATH({ value = *static_cast<volatile int*>(dev); }, "");
  EXPECT_DEATH({ *static_cast<volatile int*>(fresh) = 1; }, "");
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuFree(fresh));
}

TEST(Memory, UnprotectedDeviceMemoryIsPlainHostMemory) {
  ScopedEnv env({{"SOFTNPU_PROTECT_MEMORY", "0"}});
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  *static_cast<volatile int*>(dev) = 5;  // the default: no protection, no crash
  EXPECT_EQ(*static_cast<volatile int*>(dev), 5);
  ASSERT_SNPU(snpuFree(dev));
}

// Mapped host memory (snpuHostAllocMapped, behind torch_npu's swapped memory): the host and the device address the
// same bytes, copies and memsets take it as device memory of its device, no capacity is accounted, and snpuFreeHost
// waits for the device code that may still use it.
TEST(Memory, MappedHostMemoryIsDeviceMemoryOfItsDevice) {
  constexpr size_t n = kMiB + 7;
  size_t free_before, total;
  ASSERT_SNPU(snpuMemGetInfo(0, &free_before, &total));
  void* mapped;
  ASSERT_SNPU(snpuHostAlloc(&mapped, n, snpuHostAllocMapped));
  size_t free_after;
  ASSERT_SNPU(snpuMemGetInfo(0, &free_after, &total));
  EXPECT_EQ(free_after, free_before) << "mapped host memory is not the device's capacity";
  void* dev = nullptr;
  ASSERT_SNPU(snpuHostGetDevicePointer(&dev, static_cast<char*>(mapped) + 16, 0));
  EXPECT_EQ(dev, static_cast<char*>(mapped) + 16);
  snpuPointerAttributes attr{};
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, dev));
  EXPECT_EQ(attr.type, snpuMemoryTypeHost);
  EXPECT_EQ(attr.device, 0);
  EXPECT_EQ(attr.base, mapped);

  // Device side of every kind of copy and of a memset; the host sees the device's writes.
  std::vector<uint8_t> data = pattern(n, 3);
  ASSERT_SNPU(snpuMemcpy(mapped, data.data(), n, snpuMemcpyHostToDevice));
  void* other;
  ASSERT_SNPU(snpuMalloc(&other, n));
  ASSERT_SNPU(snpuMemcpy(other, mapped, n, snpuMemcpyDeviceToDevice));
  ASSERT_SNPU(snpuMemsetAsync(mapped, 0x5A, n, nullptr));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(static_cast<uint8_t*>(mapped)[n - 1], 0x5A);
  std::vector<uint8_t> back(n);
  ASSERT_SNPU(snpuMemcpy(back.data(), other, n, snpuMemcpyDefault));
  EXPECT_EQ(back, data);
  ASSERT_SNPU(snpuMemcpy(mapped, other, n, snpuMemcpyDefault));  // inferred: device to device
  // Still pinned host memory for a copy whose kind says host.
  ASSERT_SNPU(snpuMemcpy(other, mapped, n, snpuMemcpyHostToDevice));
  ASSERT_SNPU(snpuMemcpy(back.data(), mapped, n, snpuMemcpyDeviceToHost));
  EXPECT_EQ(back, data);

  // Freed after the kernel queued before it, which still writes it.
  std::atomic<bool> ran{false};
  ASSERT_SNPU(launch(nullptr, "late writer", [&] {
    std::this_thread::sleep_for(50ms);
    std::memset(dev, 1, n);
    ran = true;
    return 0;
  }));
  ASSERT_SNPU(snpuFreeHost(mapped));
  EXPECT_TRUE(ran.load());
  ASSERT_SNPU(snpuFree(other));
}

TEST(Memory, HostAllocChecksItsArguments) {
  void* p;
  EXPECT_EQ(snpuHostAlloc(&p, 4096, 1), snpuErrorInvalidValue);
  ASSERT_SNPU(snpuHostAlloc(&p, 4096, snpuHostAllocDefault));
  void* dev;
  EXPECT_EQ(snpuHostGetDevicePointer(&dev, p, 0), snpuErrorInvalidValue) << "pinned, not mapped";
  ASSERT_SNPU(snpuFreeHost(p));
  ASSERT_SNPU(snpuHostAlloc(&p, 4096, snpuHostAllocMapped));
  EXPECT_EQ(snpuHostGetDevicePointer(&dev, p, 1), snpuErrorInvalidValue);
  int local;
  EXPECT_EQ(snpuHostGetDevicePointer(&dev, &local, 0), snpuErrorInvalidValue);
  EXPECT_EQ(snpuFree(p), snpuErrorInvalidPointer);
  ASSERT_SNPU(snpuFreeHost(p));
}

}  // namespace
}  // namespace softnpu::test
