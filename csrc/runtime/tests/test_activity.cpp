// Activity records (the profiler's device timeline) and the statistics snpuGetDeviceStats reports.
#include <algorithm>
#include <thread>

#include "test_util.h"

namespace softnpu::test {
namespace {

std::vector<snpuActivityRecord> drain_all() {
  std::vector<snpuActivityRecord> records;
  snpuActivityRecord batch[4];
  size_t n;
  do {
    EXPECT_SNPU(snpuActivityDrain(batch, 4, &n));
    records.insert(records.end(), batch, batch + n);
  } while (n == 4);
  return records;
}

const snpuActivityRecord* find(const std::vector<snpuActivityRecord>& records, const std::string& name) {
  for (const auto& r : records)
    if (name == r.name) return &r;
  return nullptr;
}

TEST(Activity, RecordsEveryKernelCopyAndMemsetWithItsStreamAndCorrelation) {
  drain_all();
  snpuStream_t s;
  ASSERT_SNPU(snpuSetDevice(1));
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  uint64_t sid;
  ASSERT_SNPU(snpuStreamGetInfo(s, nullptr, nullptr, &sid));
  void *dev, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev, 4096));
  ASSERT_SNPU(snpuMallocHost(&pinned, 4096));

  ASSERT_SNPU(launch(s, "before enabling", [] { return 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuActivityEnable(1));
  ASSERT_SNPU(snpuActivitySetCorrelationId(77));
  ASSERT_SNPU(launch(s, "traced", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return 0;
  }));
  ASSERT_SNPU(snpuActivitySetCorrelationId(78));
  ASSERT_SNPU(snpuMemcpyAsync(dev, pinned, 4096, snpuMemcpyHostToDevice, s));
  ASSERT_SNPU(snpuMemsetAsync(dev, 0, 4096, s));
  ASSERT_SNPU(snpuMemcpyAsync(dev, static_cast<char*>(dev) + 2048, 16, snpuMemcpyDeviceToDevice, s));
  ASSERT_SNPU(snpuMemcpyAsync(pinned, dev, 4096, snpuMemcpyDeviceToHost, s));
  ASSERT_SNPU(launch(s, "traced failure", [] { return 2; }));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuActivityEnable(0));
  ASSERT_SNPU(launch(s, "after disabling", [] { return 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(s));

  std::vector<snpuActivityRecord> records = drain_all();
  EXPECT_EQ(records.size(), 6u);
  EXPECT_EQ(find(records, "before enabling"), nullptr);
  EXPECT_EQ(find(records, "after disabling"), nullptr);
  const snpuActivityRecord* traced = find(records, "traced");
  ASSERT_NE(traced, nullptr);
  EXPECT_EQ(traced->device, 1);
  EXPECT_EQ(traced->stream_id, sid);
  EXPECT_EQ(traced->correlation_id, 77u);
  EXPECT_GE(traced->end_ns - traced->start_ns, 4'000'000);
  EXPECT_FALSE(traced->failed);
  for (const char* name : {"Memcpy HtoD", "Memset", "Memcpy DtoD", "Memcpy DtoH"}) {
    const snpuActivityRecord* r = find(records, name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->correlation_id, 78u) << name;
    EXPECT_LE(r->start_ns, r->end_ns) << name;
  }
  const snpuActivityRecord* failure = find(records, "traced failure");
  ASSERT_NE(failure, nullptr);
  EXPECT_TRUE(failure->failed);
  // Oldest first, on the profiler's clock (CLOCK_REALTIME).
  for (size_t i = 1; i < records.size(); ++i) EXPECT_LE(records[i - 1].end_ns, records[i].start_ns);
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LT(std::abs(now - records.back().end_ns), int64_t(60'000'000'000));
  size_t n = 1;
  ASSERT_SNPU(snpuActivityDrain(nullptr, 0, &n));
  EXPECT_EQ(n, 0u) << "drained";

  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuFreeHost(pinned));
  ASSERT_SNPU(snpuStreamDestroy(s));
  ASSERT_SNPU(snpuSetDevice(0));
}

// As CUPTI's: a record belongs to the session its launch happened in. Work queued before the start that runs after
// it has no launch in that trace (and no estimate of one); work launched during it is recorded even if it runs after
// the stop.
TEST(Activity, RecordsFollowTheLaunchNotTheExecution) {
  drain_all();
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_TRUE(gate.wait_started());
  ASSERT_SNPU(launch(s, "queued before the start", [] { return 0; }));
  ASSERT_SNPU(snpuActivityEnable(1));
  ASSERT_SNPU(launch(s, "launched during", [] { return 0; }));
  ASSERT_SNPU(snpuActivityEnable(0));
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  std::vector<snpuActivityRecord> records = drain_all();
  EXPECT_EQ(find(records, "gate"), nullptr);
  EXPECT_EQ(find(records, "queued before the start"), nullptr);
  EXPECT_NE(find(records, "launched during"), nullptr);
  EXPECT_EQ(records.size(), 1u);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// A profiler estimates a copy from its size, its direction and whether the host side is pinned: each copy's record
// carries them (kernels carry none).
TEST(Activity, CopyRecordsCarryTheirBytesDirectionAndPinning) {
  drain_all();
  void *dev, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev, 1 << 20));
  ASSERT_SNPU(snpuMallocHost(&pinned, 1 << 20));
  std::vector<char> pageable(1 << 20);
  ASSERT_SNPU(snpuActivityEnable(1));
  ASSERT_SNPU(snpuMemcpy(dev, pinned, 1000, snpuMemcpyHostToDevice));
  ASSERT_SNPU(snpuMemcpyAsync(dev, pageable.data(), 2000, snpuMemcpyHostToDevice, nullptr));  // staged
  ASSERT_SNPU(snpuMemcpy(pageable.data(), dev, 3000, snpuMemcpyDefault));                      // resolved to DtoH
  ASSERT_SNPU(snpuMemcpyAsync(pinned, dev, 4000, snpuMemcpyDeviceToHost, nullptr));
  ASSERT_SNPU(snpuMemcpyAsync(static_cast<char*>(dev) + 8192, dev, 5000, snpuMemcpyDeviceToDevice, nullptr));
  ASSERT_SNPU(snpuMemsetAsync(dev, 0, 6000, nullptr));
  ASSERT_SNPU(launch(nullptr, "a kernel", [] { return 0; }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  ASSERT_SNPU(snpuActivityEnable(0));

  struct Want {
    const char* name;
    uint64_t bytes;
    int kind;
    int pageable;
  };
  const Want want[] = {
      {"Memcpy HtoD", 1000, snpuMemcpyHostToDevice, 0},   {"Memcpy HtoD", 2000, snpuMemcpyHostToDevice, 1},
      {"Memcpy DtoH", 3000, snpuMemcpyDeviceToHost, 1},   {"Memcpy DtoH", 4000, snpuMemcpyDeviceToHost, 0},
      {"Memcpy DtoD", 5000, snpuMemcpyDeviceToDevice, 0}, {"Memset", 6000, -1, 0},
      {"a kernel", 0, -1, 0}};
  const std::vector<snpuActivityRecord> records = drain_all();
  ASSERT_EQ(records.size(), std::size(want));
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_STREQ(records[i].name, want[i].name) << i;
    EXPECT_EQ(records[i].bytes, want[i].bytes) << i;
    EXPECT_EQ(records[i].copy_kind, want[i].kind) << i;
    EXPECT_EQ(records[i].pageable, want[i].pageable) << i;
  }
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuFreeHost(pinned));
}

TEST(Stats, CountLaunchesCompletionsBusyTimeAndWaits) {
  snpuDeviceStats before, after;
  ASSERT_SNPU(snpuGetDeviceStats(0, &before));
  ASSERT_SNPU(launch(nullptr, "busy", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0;
  }));
  for (int i = 0; i < 9; ++i) ASSERT_SNPU(launch(nullptr, "empty", [] { return 0; }));
  ASSERT_SNPU(snpuDeviceSynchronize());  // had to wait for the 20 ms kernel
  ASSERT_SNPU(snpuGetDeviceStats(0, &after));
  EXPECT_EQ(after.kernels_launched - before.kernels_launched, 10u);
  EXPECT_EQ(after.kernels_completed - before.kernels_completed, 10u);
  EXPECT_GE(after.busy_ns - before.busy_ns, 19'000'000u);
  EXPECT_GE(after.sync_waits - before.sync_waits, 1u);
}

TEST(Stats, UnusedDeviceReportsNothing) {
  ScopedEnv env({{"SOFTNPU_DEVICE_COUNT", "3"}, {"ASCEND_RT_VISIBLE_DEVICES", nullptr}});
  snpuDeviceStats stats;
  stats.kernels_launched = 5;
  ASSERT_SNPU(snpuGetDeviceStats(2, &stats));
  EXPECT_EQ(stats.kernels_launched, 0u);
  EXPECT_EQ(stats.memory_in_use, 0u);
}

}  // namespace
}  // namespace softnpu::test
