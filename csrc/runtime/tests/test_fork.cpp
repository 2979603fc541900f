// Fork (runtime.h, Fork): a child forked after initialization fails every call at once with snpuErrorForked, since
// the compute threads that would run its work exist only in the parent; a child forked before initialization, or
// after snpuShutdown, has a runtime of its own. Each child runs under alarm(), so a call that hangs fails the test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "softnpu/runtime.h"
#include "test_util.h"

namespace {

using softnpu::test::launch;

// Runs body in a forked child that exits with its result (0 on success), killed by SIGALRM after 10 s. Returns the
// child's wait status description: "exit 0" when body succeeded.
std::string in_child(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    _exit(body());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return std::string("waitpid: ") + std::strerror(errno);
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status)) + " (SIGALRM: it hung)";
  return "exit " + std::to_string(WEXITSTATUS(status));
}

// 0 if the call failed with snpuErrorForked and a message saying why, else a distinct nonzero code.
int forked(snpuError_t e, int code) {
  if (e != snpuErrorForked) return code;
  return std::strstr(snpuGetLastErrorMessage(), "forked") ? 0 : 100 + code;
}

int use_runtime() {
  void* p = nullptr;
  int ran = 0;
  if (snpuMalloc(&p, 1024) != snpuSuccess) return 1;
  if (launch(nullptr, "child_kernel", [&ran] { return ran = 1, 0; }) != snpuSuccess) return 2;
  if (snpuDeviceSynchronize() != snpuSuccess || ran != 1) return 3;
  return snpuFree(p) == snpuSuccess ? 0 : 4;
}

TEST(Fork, AChildOfAnInitializedRuntimeFailsEveryCallAtOnce) {
  void* device_memory = nullptr;
  snpuStream_t stream = nullptr;
  snpuEvent_t event = nullptr;
  ASSERT_SNPU(snpuMalloc(&device_memory, 4096));
  ASSERT_SNPU(snpuStreamCreate(&stream, 0));
  ASSERT_SNPU(snpuEventCreate(&event, snpuEventDefault));
  ASSERT_SNPU(launch(stream, "parent_kernel", [] { return 0; }));
  EXPECT_EQ(snpuIsForkedChild(), 0);

  EXPECT_EQ(in_child([&] {
              if (snpuIsForkedChild() != 1) return 1;
              int count = 0, device = 0, cleanups = 0;
              char host[16] = {};
              void* p = nullptr;
              if (int r = forked(snpuInit(), 2)) return r;
              if (int r = forked(snpuGetDeviceCount(&count), 3)) return r;
              if (int r = forked(snpuGetDevice(&device), 4)) return r;
              if (int r = forked(snpuSetDevice(0), 5)) return r;
              if (int r = forked(snpuMalloc(&p, 64), 6)) return r;
              if (int r = forked(snpuMallocHost(&p, 64), 7)) return r;
              if (int r = forked(snpuFree(device_memory), 8)) return r;
              if (int r = forked(snpuMemcpy(host, device_memory, sizeof host, snpuMemcpyDeviceToHost), 9)) return r;
              if (int r = forked(snpuMemcpyAsync(device_memory, host, sizeof host, snpuMemcpyHostToDevice, stream),
                                 10))
                return r;
              if (int r = forked(snpuLaunchKernel(stream, "child_kernel", [](void*) { return 0; }, &cleanups,
                                                  [](void* arg) { ++*static_cast<int*>(arg); }),
                                 11))
                return r;
              if (cleanups != 1) return 12;  // the rejected launch still released its argument, once
              if (int r = forked(snpuStreamSynchronize(stream), 13)) return r;
              if (int r = forked(snpuStreamQuery(stream), 14)) return r;
              if (int r = forked(snpuEventRecord(event, stream), 15)) return r;
              if (int r = forked(snpuEventSynchronize(event), 16)) return r;
              if (int r = forked(snpuDeviceSynchronize(), 17)) return r;
              if (int r = forked(snpuShutdown(), 18)) return r;  // never waits for the parent's devices
              return 0;
            }),
            "exit 0");

  // The parent's runtime is untouched by its child.
  int ran = 0;
  ASSERT_SNPU(launch(stream, "after_fork", [&ran] { return ran = 1, 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(stream));
  EXPECT_EQ(ran, 1);
  EXPECT_SNPU(snpuEventDestroy(event));
  EXPECT_SNPU(snpuStreamDestroy(stream));
  EXPECT_SNPU(snpuFree(device_memory));
}

TEST(Fork, AChildForkedBeforeInitializationHasItsOwnRuntime) {
  EXPECT_EQ(in_child([] { return snpuIsForkedChild() == 0 ? use_runtime() : 10; }), "exit 0");
  ASSERT_EQ(use_runtime(), 0);  // and so has the parent, initialized after the fork
}

TEST(Fork, CountingDevicesLeavesAChildFreeToUseThem) {
  int count = 0;
  ASSERT_SNPU(snpuGetDeviceCount(&count));
  EXPECT_GT(count, 0);
  EXPECT_EQ(snpuIsInitialized(), 0);
  EXPECT_EQ(in_child([] { return snpuIsForkedChild() == 0 ? use_runtime() : 10; }), "exit 0");
  ASSERT_SNPU(snpuInit());
  EXPECT_EQ(snpuIsInitialized(), 1);
  int after = 0;
  ASSERT_SNPU(snpuGetDeviceCount(&after));
  EXPECT_EQ(after, count);
  ASSERT_SNPU(snpuShutdown());
  EXPECT_EQ(snpuIsInitialized(), 0);
}

TEST(Fork, AChildForkedAfterShutdownHasItsOwnRuntime) {
  ASSERT_EQ(use_runtime(), 0);
  ASSERT_SNPU(snpuShutdown());
  EXPECT_EQ(in_child([] { return snpuIsForkedChild() == 0 ? use_runtime() : 10; }), "exit 0");
}

TEST(Fork, AGrandchildOfAnInitializedRuntimeIsAForkedChildToo) {
  ASSERT_EQ(use_runtime(), 0);
  EXPECT_EQ(in_child([] {
              std::string grandchild = in_child([] { return forked(snpuInit(), 1); });
              return grandchild == "exit 0" ? 0 : 1;
            }),
            "exit 0");
}

}  // namespace
