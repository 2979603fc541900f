// Interrupting host waits (snpuSetInterruptCheck): every wait a caller starts gives up within a check interval of the
// check asking, whatever the length of the work it waits for, and leaves the runtime consistent (a launch enqueued
// nothing and released its argument; a synchronize left the work queued, completing later).
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace softnpu::test {
namespace {

std::atomic<bool> g_interrupt{false};
std::atomic<int> g_checks{0};

int check() {
  g_checks.fetch_add(1);
  return g_interrupt.load() ? 1 : 0;
}

// Installs the check for one test, then asks it to interrupt after `after`.
class Interrupter {
 public:
  explicit Interrupter(std::chrono::milliseconds after) {
    g_interrupt = false;
    g_checks = 0;
    snpuSetInterruptCheck(&check);
    thread_ = std::thread([after] {
      std::this_thread::sleep_for(after);
      g_interrupt = true;
    });
  }
  ~Interrupter() {
    thread_.join();
    snpuSetInterruptCheck(nullptr);
    g_interrupt = false;
  }

 private:
  std::thread thread_;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The kernels a wait waits for: long ones, so only an interrupt ends the wait early.
void queue_sleepers(snpuStream_t s, int count, std::chrono::milliseconds each) {
  for (int i = 0; i < count; ++i) ASSERT_SNPU(launch(s, "sleeper", [each] {
                                    std::this_thread::sleep_for(each);
                                    return 0;
                                  }));
}

TEST(Interrupt, StreamSynchronizeIsInterruptedAndTheWorkStillCompletes) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::atomic<int> ran{0};
  for (int i = 0; i < 6; ++i) ASSERT_SNPU(launch(s, "long", [&ran] {
                                std::this_thread::sleep_for(500ms);
                                ran.fetch_add(1);
                                return 0;
                              }));
  {
    Interrupter interrupter(200ms);
    const auto start = Clock::now();
    EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorInterrupted);
    EXPECT_LT(seconds_since(start), 1.0);
    EXPECT_NE(last_message().find("interrupted"), std::string::npos) << last_message();
  }
  EXPECT_LT(ran.load(), 6);
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), 6);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Interrupt, EventAndDeviceSynchronizeAreInterrupted) {
  snpuStream_t s;
  snpuEvent_t e;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(snpuEventCreate(&e, snpuEventDefault));
  queue_sleepers(s, 4, 500ms);
  ASSERT_SNPU(snpuEventRecord(e, s));
  {
    Interrupter interrupter(100ms);
    const auto start = Clock::now();
    EXPECT_EQ(snpuEventSynchronize(e), snpuErrorInterrupted);
    EXPECT_LT(seconds_since(start), 1.0);
  }
  {
    Interrupter interrupter(100ms);
    const auto start = Clock::now();
    EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorInterrupted);
    EXPECT_LT(seconds_since(start), 1.0);
  }
  ASSERT_SNPU(snpuEventSynchronize(e));
  ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// A launch into a full queue of long kernels: interrupted, it enqueued nothing and its cleanup ran once.
TEST(Interrupt, ALaunchWaitingForRoomIsInterruptedAndReleasesItsArgument) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_TRUE(gate.wait_started());
  snpuError_t err = snpuSuccess;
  std::atomic<int> cleanups{0};
  {
    Interrupter interrupter(200ms);
    const auto start = Clock::now();
    for (int i = 0; i < 4096 && err == snpuSuccess; ++i) {
      err = snpuLaunchKernel(
          s, "filler", [](void*) { return 0; }, &cleanups,
          [](void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); });
    }
    EXPECT_EQ(err, snpuErrorInterrupted);
    EXPECT_LT(seconds_since(start), 1.0);
  }
  const int before_open = cleanups.load();
  EXPECT_EQ(before_open, 1);  // only the interrupted launch's, at once
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(cleanups.load(), 1024);  // the 1023 queued behind the gate after they ran, the dropped one once
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// A copy into pageable host memory waits for the work before it interruptibly, and enqueues nothing then: the host
// buffer is never written after the call returned.
TEST(Interrupt, APageableCopyIsInterruptedBeforeItIsQueued) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  void* device = nullptr;
  ASSERT_SNPU(snpuMalloc(&device, 64));
  ASSERT_SNPU(snpuMemsetAsync(device, 7, 64, s));
  queue_sleepers(s, 3, 400ms);
  std::vector<unsigned char> host(64, 0);
  {
    Interrupter interrupter(100ms);
    const auto start = Clock::now();
    EXPECT_EQ(snpuMemcpyAsync(host.data(), device, 64, snpuMemcpyDeviceToHost, s), snpuErrorInterrupted);
    EXPECT_LT(seconds_since(start), 1.0);
  }
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(host[0], 0);  // the abandoned copy never ran
  ASSERT_SNPU(snpuMemcpyAsync(host.data(), device, 64, snpuMemcpyDeviceToHost, s));
  EXPECT_EQ(host[63], 7);
  ASSERT_SNPU(snpuFree(device));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// Waits that must see their end are not interrupted: a stream's destruction waits for its work.
TEST(Interrupt, StreamDestroyIsNotInterrupted) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::atomic<bool> ran{false};
  ASSERT_SNPU(launch(s, "long", [&ran] {
    std::this_thread::sleep_for(300ms);
    ran = true;
    return 0;
  }));
  Interrupter interrupter(0ms);
  ASSERT_SNPU(snpuStreamDestroy(s));
  EXPECT_TRUE(ran.load());
}

TEST(Interrupt, WithoutACheckWaitsRunToTheirEnd) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  queue_sleepers(s, 2, 100ms);
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

}  // namespace
}  // namespace softnpu::test
