// Streams and scheduling: order within a stream, concurrency across streams, priorities, parked waits on events
// (on one device and across devices), the thread budget, and stream handles.
#include <mutex>
#include <thread>

#include "test_util.h"

namespace softnpu::test {
namespace {

// Kernel sizes for snpuKernelThreadBudget: above and below the size of small kernels, which run on one thread.
constexpr uint64_t kLargeWork = 64 << 20;
constexpr uint64_t kSmallWork = 4 << 10;

TEST(Streams, KernelsOfOneStreamRunInLaunchOrder) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::vector<int> order;  // unsynchronized on purpose: stream order must make the kernels' accesses ordered
  constexpr int kCount = 2000;
  for (int i = 0; i < kCount; ++i) ASSERT_SNPU(launch(s, "append", [&order, i] {
                                    order.push_back(i);
                                    return 0;
                                  }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_EQ(order.size(), size_t(kCount));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(order[i], i);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Streams, AStreamRunsOnOneComputeThreadAtATime) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  constexpr int kStreams = 4, kKernels = 300;
  snpuStream_t streams[kStreams];
  std::atomic<int> running[kStreams] = {};
  int counts[kStreams] = {};  // unsynchronized: each is touched only by its stream's kernels
  std::atomic<bool> overlapped{false};
  for (auto& s : streams) ASSERT_SNPU(snpuStreamCreate(&s, 0));
  for (int k = 0; k < kKernels; ++k) {
    for (int i = 0; i < kStreams; ++i) {
      ASSERT_SNPU(launch(streams[i], "count", [&, i] {
        if (running[i].fetch_add(1) != 0) overlapped = true;
        ++counts[i];
        running[i].fetch_sub(1);
        return 0;
      }));
    }
  }
  for (auto& s : streams) ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_FALSE(overlapped);
  for (int c : counts) EXPECT_EQ(c, kKernels);
}

TEST(Streams, KernelsOfTwoStreamsOverlapWithTwoCores) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  snpuStream_t a, b;
  ASSERT_SNPU(snpuStreamCreate(&a, 0));
  ASSERT_SNPU(snpuStreamCreate(&b, 0));
  // Each kernel waits for the other to be running: they can only both succeed if they run at the same time.
  std::atomic<int> arrived{0};
  auto rendezvous = [&arrived] {
    arrived.fetch_add(1);
    return eventually([&arrived] { return arrived.load() == 2; }) ? 0 : 1;
  };
  ASSERT_SNPU(launch(a, "rendezvous", rendezvous));
  ASSERT_SNPU(launch(b, "rendezvous", rendezvous));
  EXPECT_SNPU(snpuStreamSynchronize(a));
  EXPECT_SNPU(snpuStreamSynchronize(b));
}

TEST(Streams, HighPriorityQueuedWorkRunsBeforeLowPriorityQueuedWork) {
  ScopedEnv env({{"SOFTNPU_CORES", "1"}});
  int least, greatest;
  ASSERT_SNPU(snpuDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, 0);
  snpuStream_t low, high;
  ASSERT_SNPU(snpuStreamCreate(&low, least));
  ASSERT_SNPU(snpuStreamCreate(&high, greatest));

  Gate gate;  // occupies the only compute thread while both streams fill up
  ASSERT_SNPU(gate.hold(low));
  ASSERT_TRUE(gate.wait_started());
  std::mutex mutex;
  std::string order;
  auto append = [&](char c) {
    return [&, c] {
      std::lock_guard lock(mutex);
      order += c;
      return 0;
    };
  };
  for (int i = 0; i < 5; ++i) {
    ASSERT_SNPU(launch(low, "low", append('L')));
    ASSERT_SNPU(launch(high, "high", append('H')));
  }
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(low));
  ASSERT_SNPU(snpuStreamSynchronize(high));
  EXPECT_EQ(order, "HHHHHLLLLL");
}

TEST(Streams, PrioritiesOutsideTheRangeAreClamped) {
  int least, greatest;
  ASSERT_SNPU(snpuDeviceGetStreamPriorityRange(&least, &greatest));
  snpuStream_t s;
  int priority;
  ASSERT_SNPU(snpuStreamCreate(&s, greatest - 100));
  ASSERT_SNPU(snpuStreamGetInfo(s, nullptr, &priority, nullptr));
  EXPECT_EQ(priority, greatest);
  ASSERT_SNPU(snpuStreamDestroy(s));
  ASSERT_SNPU(snpuStreamCreate(&s, least + 100));
  ASSERT_SNPU(snpuStreamGetInfo(s, nullptr, &priority, nullptr));
  EXPECT_EQ(priority, least);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

// With one compute thread, a stream whose next task waits on an unfinished event must give the thread up: if it
// held it, the stream that completes the event could never run.
TEST(Streams, StreamWaitingOnAnEventIsParkedWithOneCore) {
  ScopedEnv env({{"SOFTNPU_CORES", "1"}});
  int least, greatest;
  ASSERT_SNPU(snpuDeviceGetStreamPriorityRange(&least, &greatest));
  snpuStream_t waiter, producer, holder;
  ASSERT_SNPU(snpuStreamCreate(&waiter, greatest));  // most urgent: scheduled first, reaches its wait first
  ASSERT_SNPU(snpuStreamCreate(&producer, least));
  ASSERT_SNPU(snpuStreamCreate(&holder, least));
  snpuEvent_t produced;
  ASSERT_SNPU(snpuEventCreate(&produced, snpuEventDisableTiming));

  Gate gate;
  ASSERT_SNPU(gate.hold(holder));
  ASSERT_TRUE(gate.wait_started());
  int value = 0;  // unsynchronized: the event must order the producer's write before the consumer's read
  int seen = -1;
  ASSERT_SNPU(launch(producer, "produce", [&value] {
    value = 42;
    return 0;
  }));
  ASSERT_SNPU(snpuEventRecord(produced, producer));
  ASSERT_SNPU(snpuStreamWaitEvent(waiter, produced));
  ASSERT_SNPU(launch(waiter, "consume", [&] {
    seen = value;
    return 0;
  }));
  gate.open();
  ASSERT_TRUE(eventually([&] { return snpuStreamQuery(waiter) == snpuSuccess; })) << "the waiting stream deadlocked";
  ASSERT_SNPU(snpuStreamSynchronize(waiter));
  EXPECT_EQ(seen, 42);
  ASSERT_SNPU(snpuEventDestroy(produced));
}

TEST(Streams, WaitsOrderStreamsAcrossDevicesWithOneCoreEach) {
  ScopedEnv env({{"SOFTNPU_CORES", "1"}, {"SOFTNPU_DEVICE_COUNT", "2"}, {"ASCEND_RT_VISIBLE_DEVICES", nullptr}});
  snpuStream_t s0, s1;
  ASSERT_SNPU(snpuSetDevice(0));
  ASSERT_SNPU(snpuStreamCreate(&s0, 0));
  ASSERT_SNPU(snpuSetDevice(1));
  ASSERT_SNPU(snpuStreamCreate(&s1, 0));
  ASSERT_SNPU(snpuSetDevice(0));
  snpuEvent_t on1, on0;
  ASSERT_SNPU(snpuEventCreate(&on1, 0));
  ASSERT_SNPU(snpuEventCreate(&on0, 0));

  // Device 0 waits for device 1, whose work is held by a gate.
  Gate gate;
  std::vector<int> trace;  // unsynchronized: the waits order every access
  ASSERT_SNPU(gate.hold(s1));
  ASSERT_SNPU(launch(s1, "one", [&trace] {
    trace.push_back(1);
    return 0;
  }));
  ASSERT_SNPU(snpuEventRecord(on1, s1));
  ASSERT_SNPU(snpuStreamWaitEvent(s0, on1));
  ASSERT_SNPU(launch(s0, "two", [&trace] {
    trace.push_back(2);
    return 0;
  }));
  // ... and device 1 then waits for device 0.
  ASSERT_SNPU(snpuEventRecord(on0, s0));
  ASSERT_SNPU(snpuStreamWaitEvent(s1, on0));
  ASSERT_SNPU(launch(s1, "three", [&trace] {
    trace.push_back(3);
    return 0;
  }));
  ASSERT_TRUE(gate.wait_started());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(snpuStreamQuery(s0), snpuErrorNotReady) << "device 0 ran past its wait while device 1 was held";
  EXPECT_EQ(snpuEventQuery(on1), snpuErrorNotReady);
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s1));
  ASSERT_SNPU(snpuStreamSynchronize(s0));
  EXPECT_EQ(trace, (std::vector<int>{1, 2, 3}));
  ASSERT_SNPU(snpuEventDestroy(on0));
  ASSERT_SNPU(snpuEventDestroy(on1));
}

TEST(Streams, ManyCrossStreamHandOffsKeepProducerConsumerOrder) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  snpuStream_t producer, consumer;
  ASSERT_SNPU(snpuStreamCreate(&producer, 0));
  ASSERT_SNPU(snpuStreamCreate(&consumer, 0));
  constexpr int kRounds = 300;
  std::vector<snpuEvent_t> events(kRounds);
  std::vector<int> slots(kRounds, -1);  // unsynchronized: each slot is handed from producer to consumer by an event
  std::atomic<int> mismatches{0};
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_SNPU(snpuEventCreate(&events[i], snpuEventDisableTiming));
    ASSERT_SNPU(launch(producer, "produce", [&slots, i] {
      slots[i] = i;
      return 0;
    }));
    ASSERT_SNPU(snpuEventRecord(events[i], producer));
    ASSERT_SNPU(snpuStreamWaitEvent(consumer, events[i]));
    ASSERT_SNPU(launch(consumer, "consume", [&slots, &mismatches, i] {
      if (slots[i] != i) mismatches.fetch_add(1);
      return 0;
    }));
  }
  ASSERT_SNPU(snpuStreamSynchronize(consumer));
  EXPECT_EQ(mismatches.load(), 0);
  for (snpuEvent_t e : events) ASSERT_SNPU(snpuEventDestroy(e));
}

TEST(Streams, WaitingOnANeverRecordedOrCompletedEventDoesNotBlock) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t never, done;
  ASSERT_SNPU(snpuEventCreate(&never, 0));
  ASSERT_SNPU(snpuEventCreate(&done, 0));
  ASSERT_SNPU(snpuEventRecord(done, nullptr));
  ASSERT_SNPU(snpuEventSynchronize(done));
  ASSERT_SNPU(snpuStreamWaitEvent(s, never));
  ASSERT_SNPU(snpuStreamWaitEvent(s, done));
  std::atomic<bool> ran{false};
  ASSERT_SNPU(launch(s, "after", [&ran] {
    ran = true;
    return 0;
  }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_TRUE(ran);
  ASSERT_SNPU(snpuEventDestroy(never));
  ASSERT_SNPU(snpuEventDestroy(done));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Streams, ThreadBudgetDividesTheHostCoresAmongRunningKernels) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  int host = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(snpuKernelThreadBudget(kLargeWork), 1) << "outside a kernel";

  std::atomic<int> alone{0};
  ASSERT_SNPU(launch(nullptr, "alone", [&alone] {
    alone = snpuKernelThreadBudget(kLargeWork);
    return 0;
  }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(alone.load(), std::min(2, host));

  snpuStream_t a, b;
  ASSERT_SNPU(snpuStreamCreate(&a, 0));
  ASSERT_SNPU(snpuStreamCreate(&b, 0));
  std::atomic<int> arrived{0}, left{0};
  std::atomic<int> budgets[2] = {};
  auto together = [&](int i) {
    return [&, i] {
      arrived.fetch_add(1);
      if (!eventually([&] { return arrived.load() == 2; })) return 1;
      budgets[i] = snpuKernelThreadBudget(kLargeWork);
      left.fetch_add(1);
      return eventually([&] { return left.load() == 2; }) ? 0 : 1;  // both stay running while both ask
    };
  };
  ASSERT_SNPU(launch(a, "together", together(0)));
  ASSERT_SNPU(launch(b, "together", together(1)));
  ASSERT_SNPU(snpuStreamSynchronize(a));
  ASSERT_SNPU(snpuStreamSynchronize(b));
  int expected = std::min(2, std::max(1, host / 2));
  EXPECT_EQ(budgets[0].load(), expected);
  EXPECT_EQ(budgets[1].load(), expected);
}

TEST(Streams, SmallKernelsRunOnOneThread) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  int host = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<int> small{0}, large{0};
  ASSERT_SNPU(launch(nullptr, "sizes", [&] {
    small = snpuKernelThreadBudget(kSmallWork);
    large = snpuKernelThreadBudget(kLargeWork);
    return 0;
  }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(small.load(), 1);
  EXPECT_EQ(large.load(), std::min(2, host));
}

// A small kernel that is compute-bound (its bytes understate its work) gets a large kernel's threads once it has run
// long on one thread twice in a row; a short small kernel, and the same kernel at another size, keep one thread.
TEST(Streams, SmallKernelsThatRunLongGetTheThreadsOfLargeOnes) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  const int large = std::min(2, std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  auto budgets_of = [](const char* name, uint64_t work, std::chrono::microseconds runs_for) {
    std::vector<int> budgets;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(launch(nullptr, name, [&budgets, work, runs_for] {
                  budgets.push_back(snpuKernelThreadBudget(work));
                  std::this_thread::sleep_for(runs_for);
                  return 0;
                }),
                snpuSuccess);
      EXPECT_EQ(snpuDeviceSynchronize(), snpuSuccess);
    }
    return budgets;
  };
  static const char kLong[] = "long small kernel";
  EXPECT_EQ(budgets_of(kLong, kSmallWork, std::chrono::milliseconds(2)), (std::vector<int>{1, 1, large, large}));
  EXPECT_EQ(budgets_of(kLong, 2 * kSmallWork, std::chrono::microseconds(0)), (std::vector<int>{1, 1, 1, 1}))
      << "another size of the same kernel is another kernel";
  static const char kShort[] = "short small kernel";
  EXPECT_EQ(budgets_of(kShort, kSmallWork, std::chrono::microseconds(0)), (std::vector<int>{1, 1, 1, 1}));
}

// Inside a replayed graph, each recorded kernel is timed as itself: the long one learns, the short one does not.
TEST(Streams, RecordedKernelsOfAGraphLearnTheirOwnBudget) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});
  const int large = std::min(2, std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::vector<int> long_budgets, short_budgets;
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(launch(s, "recorded long", [&long_budgets] {
    long_budgets.push_back(snpuKernelThreadBudget(kSmallWork));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return 0;
  }));
  ASSERT_SNPU(launch(s, "recorded short", [&short_budgets] {
    short_budgets.push_back(snpuKernelThreadBudget(kSmallWork));
    return 0;
  }));
  snpuGraph_t graph;
  ASSERT_SNPU(snpuStreamEndCapture(s, &graph));
  for (int i = 0; i < 3; ++i) ASSERT_SNPU(snpuGraphLaunch(graph, s));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(long_budgets, (std::vector<int>{1, 1, large}));
  EXPECT_EQ(short_budgets, (std::vector<int>{1, 1, 1}));
  ASSERT_SNPU(snpuGraphDestroy(graph));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Streams, KernelSeesTheStreamItRunsOn) {
  EXPECT_EQ(snpuKernelCurrentStream(), nullptr);
  snpuStream_t s, dflt;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(snpuGetDefaultStream(0, &dflt));
  std::atomic<snpuStream_t> seen_created{nullptr}, seen_default{nullptr};
  ASSERT_SNPU(launch(s, "where", [&] {
    seen_created = snpuKernelCurrentStream();
    return 0;
  }));
  ASSERT_SNPU(launch(nullptr, "where", [&] {
    seen_default = snpuKernelCurrentStream();
    return 0;
  }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(seen_created.load(), s);
  EXPECT_EQ(seen_default.load(), dflt);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Streams, InfoGivesDevicePriorityAndUniqueIds) {
  snpuStream_t dflt, a, b;
  ASSERT_SNPU(snpuGetDefaultStream(1, &dflt));
  int device = -1, priority = 1;
  uint64_t id = 99;
  ASSERT_SNPU(snpuStreamGetInfo(dflt, &device, &priority, &id));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(priority, 0);
  EXPECT_EQ(id, 0u);
  ASSERT_SNPU(snpuSetDevice(1));
  ASSERT_SNPU(snpuStreamCreate(&a, 0));
  ASSERT_SNPU(snpuStreamCreate(&b, 0));
  uint64_t ida, idb;
  ASSERT_SNPU(snpuStreamGetInfo(a, &device, nullptr, &ida));
  ASSERT_SNPU(snpuStreamGetInfo(b, nullptr, nullptr, &idb));
  EXPECT_EQ(device, 1);
  EXPECT_NE(ida, 0u);
  EXPECT_NE(ida, idb);
  ASSERT_SNPU(snpuStreamGetInfo(nullptr, &device, nullptr, &id));  // NULL: the current device's default stream
  EXPECT_EQ(device, 1);
  EXPECT_EQ(id, 0u);
  ASSERT_SNPU(snpuStreamDestroy(a));
  ASSERT_SNPU(snpuStreamDestroy(b));
  ASSERT_SNPU(snpuSetDevice(0));
}

TEST(Streams, QueryReportsQueuedWork) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  EXPECT_EQ(snpuStreamQuery(s), snpuSuccess);
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorNotReady);
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(snpuStreamQuery(s), snpuSuccess);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Streams, DestroyWaitsForTheWorkAndInvalidatesTheHandle) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::atomic<bool> done{false};
  ASSERT_SNPU(launch(s, "slow", [&done] {
    std::this_thread::sleep_for(50ms);
    done = true;
    return 0;
  }));
  ASSERT_SNPU(snpuStreamDestroy(s));
  EXPECT_TRUE(done);
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorInvalidHandle);
  EXPECT_EQ(launch(s, "late", [] { return 0; }), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuStreamDestroy(s), snpuErrorInvalidHandle);
  // A stream created later does not revive the stale handle, even if it reuses its slot.
  snpuStream_t again;
  ASSERT_SNPU(snpuStreamCreate(&again, 0));
  EXPECT_NE(again, s);
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorInvalidHandle);
  ASSERT_SNPU(snpuStreamDestroy(again));
}

TEST(Streams, TheDefaultStreamCannotBeDestroyed) {
  snpuStream_t dflt;
  ASSERT_SNPU(snpuGetDefaultStream(0, &dflt));
  EXPECT_EQ(snpuStreamDestroy(dflt), snpuErrorInvalidHandle);
  EXPECT_NE(last_message().find("default stream"), std::string::npos) << last_message();
  EXPECT_EQ(snpuStreamDestroy(nullptr), snpuErrorInvalidHandle);
  EXPECT_SNPU(snpuStreamQuery(dflt));
}

TEST(Streams, CurrentDeviceIsPerHostThread) {
  ASSERT_SNPU(snpuSetDevice(1));
  int other = -1;
  std::thread([&other] { snpuGetDevice(&other); }).join();
  EXPECT_EQ(other, 0);
  int mine = -1;
  ASSERT_SNPU(snpuGetDevice(&mine));
  EXPECT_EQ(mine, 1);
  // The NULL stream follows the current device.
  std::atomic<int> device_of_kernel{-1};
  ASSERT_SNPU(launch(nullptr, "where", [&] {
    int device = -1;
    snpuStreamGetInfo(snpuKernelCurrentStream(), &device, nullptr, nullptr);
    device_of_kernel = device;
    return 0;
  }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(device_of_kernel.load(), 1);
  ASSERT_SNPU(snpuSetDevice(0));
}

TEST(Streams, KernelsMayLaunchMoreWork) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::atomic<int> ran{0};
  ASSERT_SNPU(launch(s, "parent", [&] {
    // Launch onto its own stream (runs after the parent) and onto the NULL stream of the kernel's device.
    if (launch(snpuKernelCurrentStream(), "child", [&ran] { return ++ran, 0; }) != snpuSuccess) return 1;
    if (launch(nullptr, "child", [&ran] { return ++ran, 0; }) != snpuSuccess) return 1;
    return 0;
  }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(ran.load(), 2);
  ASSERT_SNPU(snpuStreamDestroy(s));
}

}  // namespace
}  // namespace softnpu::test

namespace softnpu::test {
namespace {

// The timed waits a host uses to stay responsive (Ctrl-C): snpuErrorNotReady when the time is up, the work still
// queued and completed by the next wait; a launch into a full queue gives up without enqueueing or cleaning up.
TEST(Streams, TimedWaitsGiveUpAndLeaveTheWorkQueued) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::atomic<bool> release{false};
  ASSERT_SNPU(launch(s, "hold", [&release] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0;
  }));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, snpuEventDisableTiming));
  ASSERT_SNPU(snpuEventRecord(e, s));
  EXPECT_EQ(snpuStreamSynchronizeTimeout(s, 2000), snpuErrorNotReady);
  EXPECT_EQ(snpuEventSynchronizeTimeout(e, 2000), snpuErrorNotReady);
  int device = -1;
  ASSERT_SNPU(snpuStreamGetInfo(s, &device, nullptr, nullptr));
  ASSERT_SNPU(snpuSetDevice(device));
  EXPECT_EQ(snpuDeviceSynchronizeTimeout(2000), snpuErrorNotReady);

  // Fill the queue behind the held kernel: a launch then finds no room, and gives up without taking its argument.
  static std::atomic<int> ran{0}, cleanups{0};
  auto count = [](void*) {
    ran.fetch_add(1);
    return 0;
  };
  auto cleanup = [](void*) { cleanups.fetch_add(1); };
  int enqueued = 0;
  snpuError_t err = snpuSuccess;
  while (enqueued < 2000 && (err = snpuLaunchKernelTimeout(s, "count", count, nullptr, cleanup, 1000)) == snpuSuccess)
    ++enqueued;
  EXPECT_EQ(err, snpuErrorNotReady);
  EXPECT_GE(enqueued, 1000);
  EXPECT_LT(enqueued, 1024);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(cleanups.load(), 0);
  release = true;
  ASSERT_SNPU(snpuEventSynchronizeTimeout(e, UINT64_MAX));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(ran.load(), enqueued);
  EXPECT_EQ(cleanups.load(), enqueued);
  ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

}  // namespace
}  // namespace softnpu::test
