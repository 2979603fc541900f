// Errors: kernel failures (reported once, by the right call, with their details), exceptions, launch-blocking mode,
// calls refused inside kernels, and the error path of every public call.
#include <stdexcept>
#include <thread>

#include "test_util.h"

namespace softnpu::test {
namespace {

int fail_with_message(void*) {
  snpuKernelSetErrorMessage("index 7 is out of bounds");
  return 5;
}

int fail_silently(void*) { return 3; }

int succeed(void*) { return 0; }

TEST(KernelErrors, ReportedOnceByTheNextSynchronizeThenTheStreamIsUsable) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  uint64_t sid;
  ASSERT_SNPU(snpuStreamGetInfo(s, nullptr, nullptr, &sid));
  std::atomic<bool> later_ran{false};
  ASSERT_SNPU(snpuLaunchKernel(s, "gather", fail_with_message, nullptr, nullptr));
  ASSERT_SNPU(launch(s, "later", [&later_ran] {
    later_ran = true;
    return 0;
  }));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  EXPECT_TRUE(later_ran) << "work after a failed kernel still runs";
  std::string message = last_message();
  EXPECT_NE(message.find("gather"), std::string::npos) << message;
  EXPECT_NE(message.find("index 7 is out of bounds"), std::string::npos) << message;
  EXPECT_NE(message.find("ASCEND_LAUNCH_BLOCKING=1"), std::string::npos) << message;
  const char *name, *text;
  int code, device;
  uint64_t stream_id;
  ASSERT_SNPU(snpuGetLastKernelError(&name, &text, &code, &device, &stream_id));
  EXPECT_STREQ(name, "gather");
  EXPECT_STREQ(text, "index 7 is out of bounds");
  EXPECT_EQ(code, 5);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(stream_id, sid);
  EXPECT_SNPU(snpuGetLastKernelError(nullptr, nullptr, nullptr, nullptr, nullptr));

  EXPECT_SNPU(snpuStreamSynchronize(s)) << "reported once";
  ASSERT_SNPU(snpuLaunchKernel(s, "fine", succeed, nullptr, nullptr));
  EXPECT_SNPU(snpuStreamSynchronize(s));
  // The next failure is kept and reported again.
  ASSERT_SNPU(snpuLaunchKernel(s, "quiet", fail_silently, nullptr, nullptr));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuGetLastKernelError(&name, &text, &code, nullptr, nullptr));
  EXPECT_STREQ(name, "quiet");
  EXPECT_EQ(code, 3);
  EXPECT_NE(std::string(text).find("returned 3"), std::string::npos) << text;
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(KernelErrors, MessagesSetOutsideKernelsAreIgnored) {
  snpuKernelSetErrorMessage("set by the host");
  ASSERT_SNPU(snpuLaunchKernel(nullptr, "quiet", fail_silently, nullptr, nullptr));
  EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorKernelFailed);
  const char* text;
  ASSERT_SNPU(snpuGetLastKernelError(nullptr, &text, nullptr, nullptr, nullptr));
  EXPECT_EQ(std::string(text).find("set by the host"), std::string::npos) << text;
}

TEST(KernelErrors, OnlyTheFirstUnreportedFailureIsKept) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(snpuLaunchKernel(s, "first", fail_silently, nullptr, nullptr));
  ASSERT_SNPU(snpuLaunchKernel(s, "second", fail_with_message, nullptr, nullptr));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  const char* name;
  ASSERT_SNPU(snpuGetLastKernelError(&name, nullptr, nullptr, nullptr, nullptr));
  EXPECT_STREQ(name, "first");
  EXPECT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(KernelErrors, ExceptionsBecomeKernelFailures) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(launch(s, "throws", []() -> int { throw std::invalid_argument("shape [2, 3] is not [3, 2]"); }));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  const char *name, *text;
  int code;
  ASSERT_SNPU(snpuGetLastKernelError(&name, &text, &code, nullptr, nullptr));
  EXPECT_STREQ(name, "throws");
  EXPECT_STREQ(text, "shape [2, 3] is not [3, 2]");
  EXPECT_NE(code, 0);
  ASSERT_SNPU(launch(s, "throws an int", []() -> int { throw 42; }));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuGetLastKernelError(&name, &text, nullptr, nullptr, nullptr));
  EXPECT_NE(std::string(text).find("not a std::exception"), std::string::npos) << text;
  EXPECT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(KernelErrors, EventSynchronizeReportsOnlyFailuresBeforeItsRecord) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t before, after;
  ASSERT_SNPU(snpuEventCreate(&before, 0));
  ASSERT_SNPU(snpuEventCreate(&after, 0));
  ASSERT_SNPU(snpuEventRecord(before, s));
  ASSERT_SNPU(snpuLaunchKernel(s, "bad", fail_silently, nullptr, nullptr));
  ASSERT_SNPU(snpuEventRecord(after, s));
  EXPECT_SNPU(snpuEventSynchronize(before));
  EXPECT_EQ(snpuEventSynchronize(after), snpuErrorKernelFailed);
  EXPECT_SNPU(snpuEventSynchronize(after)) << "reported once";
  EXPECT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuEventDestroy(before));
  ASSERT_SNPU(snpuEventDestroy(after));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(KernelErrors, DeviceSynchronizeReportsEachStreamsFailureOnce) {
  snpuStream_t a, b;
  ASSERT_SNPU(snpuStreamCreate(&a, 0));
  ASSERT_SNPU(snpuStreamCreate(&b, 0));
  ASSERT_SNPU(snpuLaunchKernel(a, "on a", fail_silently, nullptr, nullptr));
  ASSERT_EQ(snpuStreamSynchronize(a), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuLaunchKernel(a, "a again", fail_silently, nullptr, nullptr));
  snpuEvent_t a_failed;  // makes b fail after a
  ASSERT_SNPU(snpuEventCreate(&a_failed, 0));
  ASSERT_SNPU(snpuEventRecord(a_failed, a));
  ASSERT_SNPU(snpuStreamWaitEvent(b, a_failed));
  ASSERT_SNPU(snpuLaunchKernel(b, "on b", fail_silently, nullptr, nullptr));
  const char* first;
  const char* second;
  EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuGetLastKernelError(&first, nullptr, nullptr, nullptr, nullptr));
  EXPECT_STREQ(first, "a again") << "the earliest failure first";
  EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuGetLastKernelError(&second, nullptr, nullptr, nullptr, nullptr));
  EXPECT_STREQ(second, "on b");
  EXPECT_SNPU(snpuDeviceSynchronize());
  ASSERT_SNPU(snpuEventDestroy(a_failed));
  ASSERT_SNPU(snpuStreamDestroy(a));
  ASSERT_SNPU(snpuStreamDestroy(b));
}

TEST(KernelErrors, SynchronousCopiesReportTheDefaultStreamsFailure) {
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  ASSERT_SNPU(snpuLaunchKernel(nullptr, "before copy", fail_silently, nullptr, nullptr));
  char host[64];
  EXPECT_EQ(snpuMemcpy(host, dev, 64, snpuMemcpyDeviceToHost), snpuErrorKernelFailed);
  const char* name;
  ASSERT_SNPU(snpuGetLastKernelError(&name, nullptr, nullptr, nullptr, nullptr));
  EXPECT_STREQ(name, "before copy");
  // A pageable async copy waits, so it reports too.
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(snpuLaunchKernel(s, "before async copy", fail_silently, nullptr, nullptr));
  EXPECT_EQ(snpuMemcpyAsync(host, dev, 64, snpuMemcpyDeviceToHost, s), snpuErrorKernelFailed);
  ASSERT_SNPU(snpuGetLastKernelError(&name, nullptr, nullptr, nullptr, nullptr));
  EXPECT_STREQ(name, "before async copy");
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(KernelErrors, FreeDoesNotConsumeFailures) {
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  ASSERT_SNPU(snpuLaunchKernel(nullptr, "bad", fail_silently, nullptr, nullptr));
  ASSERT_SNPU(snpuFree(dev));
  EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorKernelFailed);
}

TEST(KernelErrors, LastKernelErrorIsPerThreadAndEmptyUntilReported) {
  std::thread([] {
    EXPECT_EQ(snpuGetLastKernelError(nullptr, nullptr, nullptr, nullptr, nullptr), snpuErrorInvalidValue);
  }).join();
}

TEST(LaunchBlocking, EachLaunchWaitsAndReturnsItsOwnError) {
  ScopedEnv env({{"ASCEND_LAUNCH_BLOCKING", "1"}});
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  std::atomic<bool> done{false};
  ASSERT_SNPU(launch(s, "slow", [&done] {
    std::this_thread::sleep_for(30ms);
    done = true;
    return 0;
  }));
  EXPECT_TRUE(done) << "the launch returned before its kernel ran";
  EXPECT_EQ(snpuLaunchKernel(s, "culprit", fail_with_message, nullptr, nullptr), snpuErrorKernelFailed);
  const char* name;
  ASSERT_SNPU(snpuGetLastKernelError(&name, nullptr, nullptr, nullptr, nullptr));
  EXPECT_STREQ(name, "culprit");
  EXPECT_EQ(last_message().find("ASCEND_LAUNCH_BLOCKING=1"), std::string::npos)
      << "no point suggesting what is already set: " << last_message();
  EXPECT_SNPU(snpuStreamSynchronize(s));
  // Copies, memsets and event records block too.
  void *dev, *pinned;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  ASSERT_SNPU(snpuMallocHost(&pinned, 64));
  Gate gate;
  std::thread opener([&gate] {
    std::this_thread::sleep_for(30ms);
    gate.open();
  });
  snpuStream_t other;
  ASSERT_SNPU(snpuStreamCreate(&other, 0));
  ASSERT_SNPU(gate.hold(other));  // returns only once the gate opened
  EXPECT_SNPU(snpuStreamQuery(other));
  opener.join();
  ASSERT_SNPU(snpuMemsetAsync(dev, 1, 64, s));
  ASSERT_SNPU(snpuMemcpyAsync(pinned, dev, 64, snpuMemcpyDeviceToHost, s));
  EXPECT_EQ(static_cast<unsigned char*>(pinned)[63], 1);
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuFreeHost(pinned));
  ASSERT_SNPU(snpuStreamDestroy(s));
  ASSERT_SNPU(snpuStreamDestroy(other));
}

// Everything a kernel calls runs on a compute thread: calls that wait for the device would deadlock.
TEST(NotPermitted, WaitingCallsAreRefusedInsideKernels) {
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  snpuStream_t victim;
  ASSERT_SNPU(snpuStreamCreate(&victim, 0));
  std::vector<std::pair<std::string, snpuError_t>> results;
  std::vector<std::string> messages;
  ASSERT_SNPU(launch(nullptr, "impatient", [&] {
    char host[64];
    auto note = [&](const char* what, snpuError_t r) {
      results.emplace_back(what, r);
      messages.push_back(snpuGetLastErrorMessage());
    };
    note("snpuStreamSynchronize", snpuStreamSynchronize(nullptr));
    note("snpuDeviceSynchronize", snpuDeviceSynchronize());
    note("snpuEventSynchronize", snpuEventSynchronize(e));
    note("snpuMemcpy", snpuMemcpy(host, dev, 64, snpuMemcpyDeviceToHost));
    note("snpuMemcpyAsync", snpuMemcpyAsync(host, dev, 64, snpuMemcpyDeviceToHost, nullptr));
    note("snpuFree", snpuFree(dev));
    note("snpuStreamDestroy", snpuStreamDestroy(victim));
    note("snpuShutdown", snpuShutdown());
    return 0;
  }));
  ASSERT_SNPU(snpuDeviceSynchronize());
  ASSERT_EQ(results.size(), 8u);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].second, snpuErrorNotPermitted) << results[i].first;
    EXPECT_NE(messages[i].find("inside a kernel"), std::string::npos) << messages[i];
  }
  // Nothing was harmed.
  EXPECT_SNPU(snpuStreamQuery(victim));
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuStreamDestroy(victim));
  ASSERT_SNPU(snpuEventDestroy(e));
}

TEST(ErrorPaths, NullArgumentsAreInvalidValues) {
  int i;
  size_t n;
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  const std::vector<std::pair<const char*, snpuError_t>> calls = {
      {"snpuGetDeviceCount", snpuGetDeviceCount(nullptr)},
      {"snpuGetDevice", snpuGetDevice(nullptr)},
      {"snpuGetDeviceProperties", snpuGetDeviceProperties(nullptr, 0)},
      {"snpuMemGetInfo free", snpuMemGetInfo(0, nullptr, &n)},
      {"snpuMemGetInfo total", snpuMemGetInfo(0, &n, nullptr)},
      {"snpuMalloc", snpuMalloc(nullptr, 16)},
      {"snpuMallocHost", snpuMallocHost(nullptr, 16)},
      {"snpuPointerGetAttributes", snpuPointerGetAttributes(nullptr, &i)},
      {"snpuDeviceGetStreamPriorityRange least", snpuDeviceGetStreamPriorityRange(nullptr, &i)},
      {"snpuDeviceGetStreamPriorityRange greatest", snpuDeviceGetStreamPriorityRange(&i, nullptr)},
      {"snpuStreamCreate", snpuStreamCreate(nullptr, 0)},
      {"snpuGetDefaultStream", snpuGetDefaultStream(0, nullptr)},
      {"snpuEventCreate", snpuEventCreate(nullptr, 0)},
      {"snpuEventElapsedTime", snpuEventElapsedTime(nullptr, e, e)},
      {"snpuLaunchKernel fn", snpuLaunchKernel(nullptr, "k", nullptr, nullptr, nullptr)},
      {"snpuLaunchKernel name", snpuLaunchKernel(nullptr, nullptr, succeed, nullptr, nullptr)},
      {"snpuActivityDrain count", snpuActivityDrain(nullptr, 0, nullptr)},
      {"snpuActivityDrain out", snpuActivityDrain(nullptr, 4, &n)},
      {"snpuGetDeviceStats", snpuGetDeviceStats(0, nullptr)},
  };
  for (const auto& [call, result] : calls) EXPECT_EQ(result, snpuErrorInvalidValue) << call;
  EXPECT_EQ(snpuEventRecord(nullptr, nullptr), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuEventQuery(nullptr), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuEventSynchronize(nullptr), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuEventDestroy(nullptr), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuStreamWaitEvent(nullptr, nullptr), snpuErrorInvalidHandle);
  EXPECT_NE(last_message().find("NULL"), std::string::npos) << last_message();
  ASSERT_SNPU(snpuEventDestroy(e));
}

TEST(ErrorPaths, BadDevicesAreInvalidDevices) {
  int count;
  ASSERT_SNPU(snpuGetDeviceCount(&count));
  snpuDeviceProp prop;
  size_t a, b;
  snpuStream_t s;
  snpuDeviceStats stats;
  for (int bad : {-1, count, 1000}) {
    EXPECT_EQ(snpuSetDevice(bad), snpuErrorInvalidDevice) << bad;
    EXPECT_NE(last_message().find("device " + std::to_string(bad) + " does not exist"), std::string::npos)
        << last_message();
    EXPECT_EQ(snpuGetDeviceProperties(&prop, bad), snpuErrorInvalidDevice) << bad;
    EXPECT_EQ(snpuMemGetInfo(bad, &a, &b), snpuErrorInvalidDevice) << bad;
    EXPECT_EQ(snpuGetDefaultStream(bad, &s), snpuErrorInvalidDevice) << bad;
    EXPECT_EQ(snpuGetDeviceStats(bad, &stats), snpuErrorInvalidDevice) << bad;
  }
  int current;
  ASSERT_SNPU(snpuGetDevice(&current));
  EXPECT_EQ(current, 0) << "a failed snpuSetDevice leaves the current device";
}

TEST(ErrorPaths, DestroyedAndForgedHandlesAreInvalidHandles) {
  snpuStream_t s;
  snpuEvent_t e;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  ASSERT_SNPU(snpuStreamDestroy(s));
  ASSERT_SNPU(snpuEventDestroy(e));
  auto forged_stream = reinterpret_cast<snpuStream_t>(uintptr_t(0xdead0000beef));
  auto forged_event = reinterpret_cast<snpuEvent_t>(uintptr_t(0x12345));
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  snpuEvent_t live;
  ASSERT_SNPU(snpuEventCreate(&live, 0));
  for (snpuStream_t bad : {s, forged_stream}) {
    int i;
    uint64_t id;
    EXPECT_EQ(snpuStreamQuery(bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuStreamSynchronize(bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuStreamDestroy(bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuStreamGetInfo(bad, &i, &i, &id), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuStreamWaitEvent(bad, live), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuEventRecord(live, bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuLaunchKernel(bad, "k", succeed, nullptr, nullptr), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuMemsetAsync(dev, 0, 64, bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuMemcpyAsync(dev, dev, 64, snpuMemcpyDeviceToDevice, bad), snpuErrorInvalidHandle);
  }
  for (snpuEvent_t bad : {e, forged_event}) {
    float ms;
    EXPECT_EQ(snpuEventQuery(bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuEventSynchronize(bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuEventRecord(bad, nullptr), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuEventDestroy(bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuStreamWaitEvent(nullptr, bad), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuEventElapsedTime(&ms, bad, live), snpuErrorInvalidHandle);
    EXPECT_EQ(snpuEventElapsedTime(&ms, live, bad), snpuErrorInvalidHandle);
  }
  ASSERT_SNPU(snpuFree(dev));
  ASSERT_SNPU(snpuEventDestroy(live));
}

TEST(ErrorPaths, RejectedLaunchStillReleasesItsArgument) {
  int cleanups = 0;
  auto cleanup = [](void* arg) { ++*static_cast<int*>(arg); };
  auto forged = reinterpret_cast<snpuStream_t>(uintptr_t(0x999));
  EXPECT_EQ(snpuLaunchKernel(forged, "k", succeed, &cleanups, cleanup), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuLaunchKernel(nullptr, "k", nullptr, &cleanups, cleanup), snpuErrorInvalidValue);
  EXPECT_EQ(cleanups, 2);
  ASSERT_SNPU(snpuLaunchKernel(nullptr, "k", succeed, &cleanups, cleanup));
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_EQ(cleanups, 3);
}

TEST(ErrorPaths, ErrorNamesAndMessages) {
  EXPECT_STREQ(snpuGetErrorName(snpuSuccess), "snpuSuccess");
  EXPECT_STREQ(snpuGetErrorName(snpuErrorMemoryAllocation), "snpuErrorMemoryAllocation");
  EXPECT_STREQ(snpuGetErrorName(snpuErrorNotPermitted), "snpuErrorNotPermitted");
  EXPECT_STREQ(snpuGetErrorName(static_cast<snpuError_t>(99)), "snpuErrorUnknown");
  std::thread([] { EXPECT_STREQ(snpuGetLastErrorMessage(), ""); }).join();
  EXPECT_EQ(snpuSetDevice(77), snpuErrorInvalidDevice);
  std::string message = snpuGetLastErrorMessage();
  std::thread([] { EXPECT_STREQ(snpuGetLastErrorMessage(), "") << "messages are per thread"; }).join();
  EXPECT_NE(message.find("snpuSetDevice"), std::string::npos) << message;
}

}  // namespace
}  // namespace softnpu::test
