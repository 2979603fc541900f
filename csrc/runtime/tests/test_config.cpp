// Configuration (visible devices, malformed values of every variable), logging, and the runtime's life cycle
// (shutdown and initialization anew).
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "test_util.h"

namespace softnpu::test {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string make_temp_dir() {
  char pattern[] = "/tmp/softnpu-test-XXXXXX";
  char* dir = mkdtemp(pattern);
  return dir ? dir : "";
}

TEST(Config, VisibleDevicesSelectAndRenumber) {
  ScopedEnv env({{"SOFTNPU_DEVICE_COUNT", "4"}, {"ASCEND_RT_VISIBLE_DEVICES", "3,1"}});
  ASSERT_SNPU(env.init_result());
  int count;
  ASSERT_SNPU(snpuGetDeviceCount(&count));
  EXPECT_EQ(count, 2);
  snpuDeviceProp prop;
  ASSERT_SNPU(snpuGetDeviceProperties(&prop, 0));
  EXPECT_EQ(prop.physical_index, 3);
  ASSERT_SNPU(snpuGetDeviceProperties(&prop, 1));
  EXPECT_EQ(prop.physical_index, 1);
  EXPECT_EQ(snpuSetDevice(2), snpuErrorInvalidDevice);
  ASSERT_SNPU(snpuSetDevice(1));
  void* p;
  ASSERT_SNPU(snpuMalloc(&p, 100));
  snpuPointerAttributes attr;
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, p));
  EXPECT_EQ(attr.device, 1) << "visible index, not physical";
  ASSERT_SNPU(snpuFree(p));
}

TEST(Config, DevicePropertiesFollowTheConfiguration) {
  ScopedEnv env({{"SOFTNPU_DEVICE_COUNT", "3"}, {"SOFTNPU_MEMORY_MB", "64"}, {"SOFTNPU_CORES", "3"},
                 {"ASCEND_RT_VISIBLE_DEVICES", nullptr}});
  int count;
  ASSERT_SNPU(snpuGetDeviceCount(&count));
  EXPECT_EQ(count, 3);
  for (int d = 0; d < count; ++d) {
    snpuDeviceProp prop;
    ASSERT_SNPU(snpuGetDeviceProperties(&prop, d));
    EXPECT_STREQ(prop.name, "Ascend910B3") << "the default SoC";
    EXPECT_EQ(prop.total_memory, size_t(64) << 20);
    EXPECT_EQ(prop.compute_threads, 3);
    EXPECT_EQ(prop.ai_cores, 20) << "the SoC's, not SOFTNPU_CORES";
    EXPECT_EQ(prop.physical_index, d);
  }
}

// A value that is malformed for each kind of variable.
const char* malformed_value(const std::string& kind) {
  if (kind == "INT") return "12abc";
  if (kind == "BOOL") return "yes";
  if (kind == "LIST") return "0,x";
  if (kind == "CHOICE") return "bogus";
  return nullptr;  // free text cannot be malformed
}

TEST(Config, EveryMalformedRuntimeVariableIsAnInvalidConfigNamingIt) {
  int checked = 0;
  for (const env::Info& var : env::kTable) {
    if (std::string(var.layer) != "RUNTIME") continue;
    const char* bad = malformed_value(var.kind);
    if (!bad) continue;
    ++checked;
    ScopedEnv scoped({{var.name, bad}});
    EXPECT_EQ(scoped.init_result(), snpuErrorInvalidConfig) << var.name;
    EXPECT_NE(last_message().find(var.name), std::string::npos) << last_message();
    // Every other call fails the same way while the variable stays malformed.
    int count;
    EXPECT_EQ(snpuGetDeviceCount(&count), snpuErrorInvalidConfig) << var.name;
    void* p;
    EXPECT_EQ(snpuMalloc(&p, 16), snpuErrorInvalidConfig) << var.name;
    EXPECT_NE(last_message().find(var.name), std::string::npos) << last_message();
  }
  EXPECT_GE(checked, 9);
  EXPECT_SNPU(snpuInit()) << "restored";
}

TEST(Config, OutOfRangeValuesAreInvalidConfigs) {
  const std::vector<std::vector<std::pair<const char*, const char*>>> cases = {
      {{"SOFTNPU_DEVICE_COUNT", "0"}},
      {{"SOFTNPU_DEVICE_COUNT", "65"}},
      {{"SOFTNPU_MEMORY_MB", "0"}},
      {{"SOFTNPU_CORES", "-2"}},
      {{"ASCEND_GLOBAL_LOG_LEVEL", "5"}},
      {{"SOFTNPU_DEVICE_COUNT", "2"}, {"ASCEND_RT_VISIBLE_DEVICES", "2"}},
      {{"SOFTNPU_DEVICE_COUNT", "2"}, {"ASCEND_RT_VISIBLE_DEVICES", "0,0"}},
      {{"SOFTNPU_DEVICE_COUNT", "2"}, {"ASCEND_RT_VISIBLE_DEVICES", "0,,1"}},
  };
  for (const auto& vars : cases) {
    const char* culprit = vars.back().first;
    ScopedEnv env(vars);
    EXPECT_EQ(env.init_result(), snpuErrorInvalidConfig) << culprit << "=" << vars.back().second;
    EXPECT_NE(last_message().find(culprit), std::string::npos) << last_message();
  }
}

TEST(Config, EmptyValuesMeanTheDefault) {
  ScopedEnv env({{"SOFTNPU_DEVICE_COUNT", ""}, {"ASCEND_RT_VISIBLE_DEVICES", ""}});
  ASSERT_SNPU(env.init_result());
  int count;
  ASSERT_SNPU(snpuGetDeviceCount(&count));
  EXPECT_EQ(count, 2);
}

TEST(Logging, InfoLevelLogsEveryLaunchToTheProcessLogFile) {
  std::string dir = make_temp_dir() + "/nested/log";
  {
    ScopedEnv env({{"ASCEND_GLOBAL_LOG_LEVEL", "1"}, {"ASCEND_SLOG_PRINT_TO_STDOUT", "0"},
                   {"ASCEND_PROCESS_LOG_PATH", dir.c_str()}});
    ASSERT_SNPU(env.init_result());
    snpuStream_t s;
    ASSERT_SNPU(snpuStreamCreate(&s, 0));
    uint64_t id;
    ASSERT_SNPU(snpuStreamGetInfo(s, nullptr, nullptr, &id));
    ASSERT_SNPU(launch(s, "logged_kernel", [] { return 0; }));
    ASSERT_SNPU(snpuStreamSynchronize(s));
    ASSERT_SNPU(snpuStreamDestroy(s));
    std::string log = read_file(dir + "/softnpu-" + std::to_string(getpid()) + ".log");
    EXPECT_NE(log.find("[INFO] RUNTIME(" + std::to_string(getpid()) + ","), std::string::npos) << log;
    EXPECT_NE(log.find("launch logged_kernel on device 0 stream " + std::to_string(id)), std::string::npos) << log;
  }
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path().parent_path());
}

TEST(Logging, StdoutWhenAskedAndNothingBelowTheLevel) {
  {
    ScopedEnv env({{"ASCEND_GLOBAL_LOG_LEVEL", "1"}, {"ASCEND_SLOG_PRINT_TO_STDOUT", "1"}});
    testing::internal::CaptureStdout();
    ASSERT_SNPU(launch(nullptr, "printed_kernel", [] { return 0; }));
    ASSERT_SNPU(snpuDeviceSynchronize());
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_NE(out.find("[INFO] RUNTIME("), std::string::npos) << out;
    EXPECT_NE(out.find("printed_kernel"), std::string::npos) << out;
  }
  {
    ScopedEnv env({{"ASCEND_GLOBAL_LOG_LEVEL", "2"}, {"ASCEND_SLOG_PRINT_TO_STDOUT", "1"}});
    testing::internal::CaptureStdout();
    ASSERT_SNPU(launch(nullptr, "quiet_kernel", [] { return 0; }));
    ASSERT_SNPU(snpuDeviceSynchronize());
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(out.find("quiet_kernel"), std::string::npos) << out;
  }
  {
    // Kernel failures are errors: logged at the default level 3.
    ScopedEnv env({{"ASCEND_GLOBAL_LOG_LEVEL", nullptr}, {"ASCEND_SLOG_PRINT_TO_STDOUT", "1"}});
    testing::internal::CaptureStdout();
    ASSERT_SNPU(launch(nullptr, "failing_kernel", [] { return 9; }));
    EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorKernelFailed);
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_NE(out.find("[ERROR] RUNTIME("), std::string::npos) << out;
    EXPECT_NE(out.find("failing_kernel"), std::string::npos) << out;
  }
}

TEST(Lifecycle, ShutdownWaitsForWorkReleasesEverythingAndInitStartsAfresh) {
  snpuStream_t s;
  snpuEvent_t e;
  void *dev, *pinned;
  ASSERT_SNPU(snpuSetDevice(1));
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  ASSERT_SNPU(snpuMalloc(&dev, 1 << 20));
  ASSERT_SNPU(snpuMallocHost(&pinned, 4096));
  std::atomic<bool> done{false};
  std::atomic<int> cleanups{0};
  struct Arg {
    std::atomic<bool>* done;
    std::atomic<int>* cleanups;
  };
  Arg arg{&done, &cleanups};
  ASSERT_SNPU(snpuLaunchKernel(
      s, "slow",
      [](void* a) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        *static_cast<Arg*>(a)->done = true;
        return 1;  // never reported: shutdown drops it
      },
      &arg, [](void* a) { ++*static_cast<Arg*>(a)->cleanups; }));
  ASSERT_SNPU(snpuEventRecord(e, s));
  ASSERT_SNPU(snpuShutdown());
  EXPECT_TRUE(done);
  EXPECT_EQ(cleanups.load(), 1);
  EXPECT_SNPU(snpuShutdown()) << "twice is fine";

  // The next call initializes anew: old handles and pointers are gone, memory is free, device 0 is current.
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuEventQuery(e), snpuErrorInvalidHandle);
  snpuPointerAttributes attr;
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, dev));
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);
  ASSERT_SNPU(snpuPointerGetAttributes(&attr, pinned));
  EXPECT_EQ(attr.type, snpuMemoryTypeUnregistered);
  EXPECT_EQ(snpuFree(dev), snpuErrorInvalidPointer);
  size_t free_bytes, total;
  ASSERT_SNPU(snpuMemGetInfo(1, &free_bytes, &total));
  EXPECT_EQ(free_bytes, total);
  snpuDeviceStats stats;
  ASSERT_SNPU(snpuGetDeviceStats(1, &stats));
  EXPECT_EQ(stats.memory_in_use, 0u);
  int device;
  ASSERT_SNPU(snpuGetDevice(&device));
  EXPECT_EQ(device, 0);
  ASSERT_SNPU(snpuSetDevice(1));
  EXPECT_SNPU(snpuDeviceSynchronize()) << "the dropped failure is not reported after re-initialization";
  ASSERT_SNPU(snpuSetDevice(0));
  snpuStream_t fresh;
  ASSERT_SNPU(snpuStreamCreate(&fresh, 0));
  ASSERT_SNPU(launch(fresh, "after", [] { return 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(fresh));
  ASSERT_SNPU(snpuStreamDestroy(fresh));
}

TEST(Lifecycle, ShutdownWaitsForWorkThatLaunchesMoreWork) {
  std::atomic<bool> grandchild_ran{false};
  ASSERT_SNPU(launch(nullptr, "parent", [&]() -> int {
    std::this_thread::sleep_for(20ms);
    snpuStream_t other_device;
    if (snpuGetDefaultStream(1, &other_device) != snpuSuccess) return 1;
    return launch(other_device, "child", [&]() -> int {
      std::this_thread::sleep_for(20ms);
      return launch(nullptr, "grandchild", [&] {
        grandchild_ran = true;
        return 0;
      });
    });
  }));
  ASSERT_SNPU(snpuShutdown());
  EXPECT_TRUE(grandchild_ran);
}

TEST(Lifecycle, ConcurrentFirstCallsInitializeOnce) {
  ASSERT_SNPU(snpuShutdown());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::vector<snpuStream_t> defaults(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      if (snpuGetDefaultStream(0, &defaults[i]) != snpuSuccess) failures.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (snpuStream_t s : defaults) EXPECT_EQ(s, defaults[0]);
}

}  // namespace
}  // namespace softnpu::test
