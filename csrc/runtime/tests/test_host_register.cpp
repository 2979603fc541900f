// Registering the program's own host memory (snpuHostRegister / snpuHostUnregister, as cudaHostRegister): pinned
// for copies while registered, mapped for the device with snpuHostRegisterMapped, never freed by the runtime.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "test_util.h"

namespace softnpu::test {
namespace {

// A page-aligned buffer of the program's own (what torch's share_memory_() and numpy give).
struct Pages {
  explicit Pages(size_t n) : size(n), base(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) {}
  ~Pages() { munmap(base, size); }
  size_t size;
  void* base;
};

TEST(HostRegister, RegisteredMemoryIsPinnedUntilUnregistered) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> own(3 * page + 100, 0);  // ordinary heap memory, not page-aligned
  uint8_t* p = own.data() + 7;
  const size_t n = 2 * page;
  ASSERT_SNPU(snpuHostRegister(p, n, snpuHostRegisterDefault));
  snpuPointerAttributes attr{};
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, p + 10));
  EXPECT_EQ(attr.type, snpuMemoryTypeHost);
  EXPECT_EQ(attr.base, p);
  EXPECT_EQ(attr.size, n);
  EXPECT_EQ(attr.device, -1);

  // A copy into it is queued behind the gate and the call returns: pinned memory (into pageable memory it would
  // complete before returning).
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, n));
  ASSERT_SNPU(snpuMemsetAsync(dev, 0x6B, n, s));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(snpuMemcpyAsync(p, dev, n, snpuMemcpyDeviceToHost, s));
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorNotReady);
  EXPECT_EQ(p[n - 1], 0) << "the copy cannot have run: the gate holds the stream";
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(p[0], 0x6B);
  EXPECT_EQ(p[n - 1], 0x6B);

  EXPECT_EQ(snpuFreeHost(p), snpuErrorInvalidPointer) << "the program's memory: the runtime does not free it";
  ASSERT_SNPU(snpuHostUnregister(p));
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, p));
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);
  EXPECT_EQ(snpuHostUnregister(p), snpuErrorInvalidValue);
  p[0] = 1;  // still the program's memory
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(HostRegister, MappedRegistrationIsDeviceMemoryOfTheCurrentDevice) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Pages own(2 * page);
  ASSERT_SNPU(snpuHostRegister(own.base, own.size, snpuHostRegisterMapped));
  void* dev = nullptr;
  ASSERT_SNPU(snpuHostGetDevicePointer(&dev, own.base, 0));
  EXPECT_EQ(dev, own.base);
  ASSERT_SNPU(snpuMemsetAsync(dev, 0x21, own.size, nullptr));  // a device-side write into it
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(static_cast<uint8_t*>(own.base)[own.size - 1], 0x21);
  ASSERT_SNPU(snpuHostUnregister(own.base));
}

TEST(HostRegister, ChecksItsArguments) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Pages own(4 * page);
  char* base = static_cast<char*>(own.base);
  EXPECT_EQ(snpuHostRegister(nullptr, page, 0), snpuErrorInvalidValue);
  EXPECT_EQ(snpuHostRegister(base, 0, 0), snpuErrorInvalidValue);
  EXPECT_EQ(snpuHostRegister(base, page, 1), snpuErrorInvalidValue) << "unknown flags";
  EXPECT_EQ(snpuHostRegister(base + 8, page, snpuHostRegisterMapped), snpuErrorInvalidValue) << "misaligned";
  EXPECT_EQ(snpuHostRegister(base, page + 8, snpuHostRegisterMapped), snpuErrorInvalidValue) << "misaligned";
  ASSERT_SNPU(snpuHostRegister(base + page, page, 0));
  EXPECT_EQ(snpuHostRegister(base, 2 * page, 0), snpuErrorInvalidValue) << "overlaps the registration";
  EXPECT_EQ(snpuHostRegister(base + page + 8, 8, 0), snpuErrorInvalidValue) << "inside the registration";
  ASSERT_SNPU(snpuHostRegister(base, page, 0)) << "adjacent, not overlapping";
  EXPECT_EQ(snpuHostUnregister(base + page + 8), snpuErrorInvalidValue) << "not where a registration starts";
  EXPECT_EQ(snpuHostUnregister(nullptr), snpuErrorInvalidValue);
  void* pinned;
  ASSERT_SNPU(snpuMallocHost(&pinned, page));
  EXPECT_EQ(snpuHostRegister(pinned, page, 0), snpuErrorInvalidValue) << "pinned already";
  EXPECT_EQ(snpuHostUnregister(pinned), snpuErrorInvalidValue) << "allocated, not registered";
  ASSERT_SNPU(snpuFreeHost(pinned));
  ASSERT_SNPU(snpuHostUnregister(base));
  ASSERT_SNPU(snpuHostUnregister(base + page));
}

}  // namespace
}  // namespace softnpu::test
