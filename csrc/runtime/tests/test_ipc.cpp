// Interprocess memory (runtime.h: snpuIpcGetMemHandle / snpuIpcOpenMemHandle / snpuIpcCloseMemHandle). The importer
// is a child forked while this process has no runtime, so it has a runtime of its own, as a separate
// program would; the two talk through pipes (the handle one way, a status byte back).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "softnpu/runtime.h"
#include "test_util.h"

namespace {

constexpr size_t kBytes = 1 << 20;
constexpr size_t kOffset = 4096;  // the tensor's place in its allocation, sent beside the handle as torch does

struct Message {
  snpuIpcMemHandle_t handle;
  uint64_t offset;
};

// A child forked now (before this process's runtime exists) running body(read end, write end); killed after 10 s.
class Importer {
 public:
  explicit Importer(const std::function<int(int, int)>& body) {
    // Forked after snpuShutdown, the child has a runtime of its own even where an earlier test initialized ours.
    if (snpuShutdown() != snpuSuccess) std::abort();
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      alarm(10);
      close(down[1]);
      close(up[0]);
      _exit(body(down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    to_child_ = down[1];
    from_child_ = up[0];
  }
  ~Importer() {
    close(to_child_);
    close(from_child_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool send(const void* data, size_t n) { return write(to_child_, data, n) == static_cast<ssize_t>(n); }
  // The child's next status byte (0: the step succeeded), or -1 if it ended.
  int status() {
    char c;
    return read(from_child_, &c, 1) == 1 ? c : -1;
  }
  std::string exit_status() {
    int status = 0;
    const pid_t pid = pid_;
    pid_ = -1;
    if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    return "exit " + std::to_string(WEXITSTATUS(status));
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
};

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool reply(int fd, char status) { return write(fd, &status, 1) == 1; }

std::vector<uint32_t> read_device(const void* ptr, size_t count) {
  std::vector<uint32_t> out(count);
  if (snpuMemcpy(out.data(), ptr, count * sizeof(uint32_t), snpuMemcpyDeviceToHost) != snpuSuccess) out.clear();
  return out;
}

void write_device(void* ptr, uint32_t first, size_t count) {
  std::vector<uint32_t> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = first + static_cast<uint32_t>(i);
  EXPECT_SNPU(snpuMemcpy(ptr, values.data(), count * sizeof(uint32_t), snpuMemcpyHostToDevice));
}

bool holds(const void* ptr, uint32_t first, size_t count) {
  const std::vector<uint32_t> v = read_device(ptr, count);
  if (v.size() != count) return false;
  for (size_t i = 0; i < count; ++i)
    if (v[i] != first + i) return false;
  return true;
}

constexpr size_t kCount = 1024;

TEST(Ipc, AnotherProcessSeesAndModifiesTheMemory) {
  Importer child([](int in, int out) {
    Message m;
    if (!read_all(in, &m, sizeof(m))) return 1;
    void* base = nullptr;
    if (snpuIpcOpenMemHandle(&base, m.handle, snpuIpcMemLazyEnablePeerAccess) != snpuSuccess) return 2;
    char* tensor = static_cast<char*>(base) + m.offset;
    snpuPointerAttributes attr;
    if (snpuPointerGetAttributes(&attr, tensor) != snpuSuccess || attr.type != snpuMemoryTypeDevice ||
        attr.device != 0 || attr.base != base)
      return 3;
    if (!holds(tensor, 100, kCount)) return 4;
    // A kernel on the child's device writes it, as an op would.
    if (softnpu::test::launch(nullptr, "importer_writes", [tensor] {
          for (size_t i = 0; i < kCount; ++i) reinterpret_cast<uint32_t*>(tensor)[i] = 7000 + static_cast<uint32_t>(i);
          return 0;
        }) != snpuSuccess ||
        snpuDeviceSynchronize() != snpuSuccess)
      return 5;
    // Freeing it is the exporter's business: here it is closed.
    if (snpuFree(base) != snpuErrorInvalidPointer) return 6;
    if (snpuIpcCloseMemHandle(base) != snpuSuccess) return 7;
    if (snpuPointerGetAttributes(&attr, tensor) != snpuSuccess || attr.type != snpuMemoryTypeUnregistered) return 8;
    return reply(out, 0) ? 0 : 9;
  });

  void* base = nullptr;
  ASSERT_SNPU(snpuMalloc(&base, kBytes));
  char* tensor = static_cast<char*>(base) + kOffset;
  write_device(tensor, 100, kCount);
  Message m{};
  ASSERT_SNPU(snpuIpcGetMemHandle(&m.handle, tensor));  // an interior pointer names its allocation
  snpuIpcMemHandle_t from_base;
  ASSERT_SNPU(snpuIpcGetMemHandle(&from_base, base));
  EXPECT_EQ(std::memcmp(&from_base, &m.handle, sizeof(m.handle)), 0);
  m.offset = kOffset;
  ASSERT_TRUE(child.send(&m, sizeof(m)));
  EXPECT_EQ(child.status(), 0);
  EXPECT_EQ(child.exit_status(), "exit 0");
  EXPECT_TRUE(holds(tensor, 7000, kCount));
  ASSERT_SNPU(snpuFree(base));
}

// Memory is private until first exported, then moved into shared memory in place: kernels writing it on two streams
// meanwhile lose nothing, and the importer sees every write.
TEST(Ipc, TheFirstExportMovesTheMemoryWhileKernelsWriteIt) {
  constexpr uint32_t kKernels = 400;
  Importer child([](int in, int out) {
    Message m;
    if (!read_all(in, &m, sizeof(m))) return 1;
    void* base = nullptr;
    if (snpuIpcOpenMemHandle(&base, m.handle, 0) != snpuSuccess) return 2;
    if (!holds(base, 0, kKernels)) return 3;
    if (snpuIpcCloseMemHandle(base) != snpuSuccess) return 4;
    return reply(out, 0) ? 0 : 5;
  });
  void* base = nullptr;
  ASSERT_SNPU(snpuMalloc(&base, 8 << 20));
  snpuStream_t streams[2];
  for (auto& s : streams) ASSERT_SNPU(snpuStreamCreate(&s, 0));
  auto* slots = static_cast<uint32_t*>(base);
  Message m{};
  for (uint32_t i = 0; i < kKernels; ++i) {
    // Each kernel spends a little while before it writes its slot, so the export lands among running kernels.
    ASSERT_SNPU(softnpu::test::launch(streams[i % 2], "writes_slot", [slots, i] {
      volatile uint32_t spin = 0;
      for (int k = 0; k < 2000; ++k) spin = spin + 1;
      slots[i] = i;
      return 0;
    }));
    if (i == kKernels / 4) {
      ASSERT_SNPU(snpuIpcGetMemHandle(&m.handle, base));
      snpuIpcMemHandle_t again;
      ASSERT_SNPU(snpuIpcGetMemHandle(&again, base));  // already shared: the same handle
      EXPECT_EQ(std::memcmp(&again, &m.handle, sizeof(again)), 0);
    }
  }
  ASSERT_SNPU(snpuDeviceSynchronize());
  EXPECT_TRUE(holds(base, 0, kKernels));
  ASSERT_TRUE(child.send(&m, sizeof(m)));
  EXPECT_EQ(child.status(), 0);
  EXPECT_EQ(child.exit_status(), "exit 0");
  for (auto& s : streams) ASSERT_SNPU(snpuStreamDestroy(s));
  ASSERT_SNPU(snpuFree(base));
}

TEST(Ipc, TheMappingOutlivesTheExportersFreeButNewOpensFail) {
  Importer child([](int in, int out) {
    Message m;
    if (!read_all(in, &m, sizeof(m))) return 1;
    void* base = nullptr;
    if (snpuIpcOpenMemHandle(&base, m.handle, 0) != snpuSuccess) return 2;
    if (!reply(out, 0)) return 3;
    char freed;
    if (!read_all(in, &freed, 1)) return 4;  // the exporter has freed its allocation
    if (!holds(static_cast<char*>(base) + m.offset, 100, kCount)) return 5;
    void* again = nullptr;
    if (snpuIpcOpenMemHandle(&again, m.handle, 0) != snpuErrorInvalidHandle) return 6;
    if (!std::strstr(snpuGetLastErrorMessage(), "no longer exists")) return 7;
    if (snpuIpcCloseMemHandle(base) != snpuSuccess) return 8;
    return reply(out, 0) ? 0 : 9;
  });

  void* base = nullptr;
  ASSERT_SNPU(snpuMalloc(&base, kBytes));
  write_device(static_cast<char*>(base) + kOffset, 100, kCount);
  Message m{};
  ASSERT_SNPU(snpuIpcGetMemHandle(&m.handle, base));
  m.offset = kOffset;
  ASSERT_TRUE(child.send(&m, sizeof(m)));
  ASSERT_EQ(child.status(), 0);
  snpuDeviceStats before;
  ASSERT_SNPU(snpuGetDeviceStats(0, &before));
  ASSERT_SNPU(snpuFree(base));
  snpuDeviceStats after;
  ASSERT_SNPU(snpuGetDeviceStats(0, &after));
  EXPECT_EQ(before.memory_in_use - after.memory_in_use, kBytes);  // the exporter's capacity is back at once
  ASSERT_TRUE(child.send("f", 1));
  EXPECT_EQ(child.status(), 0);
  EXPECT_EQ(child.exit_status(), "exit 0");
}

TEST(Ipc, ImportedMemoryIsNotAccountedToTheImporter) {
  Importer child([](int in, int out) {
    Message m;
    if (!read_all(in, &m, sizeof(m))) return 1;
    void* base = nullptr;
    snpuDeviceStats before, after;
    if (snpuGetDeviceStats(0, &before) != snpuSuccess) return 2;
    if (snpuIpcOpenMemHandle(&base, m.handle, 0) != snpuSuccess) return 3;
    if (snpuGetDeviceStats(0, &after) != snpuSuccess || after.memory_in_use != before.memory_in_use) return 4;
    // What was opened here is not this process's to export again.
    snpuIpcMemHandle_t h;
    if (snpuIpcGetMemHandle(&h, base) != snpuErrorInvalidPointer) return 5;
    if (snpuIpcCloseMemHandle(base) != snpuSuccess) return 6;
    return reply(out, 0) ? 0 : 7;
  });
  void* base = nullptr;
  ASSERT_SNPU(snpuMalloc(&base, kBytes));
  Message m{};
  ASSERT_SNPU(snpuIpcGetMemHandle(&m.handle, base));
  ASSERT_TRUE(child.send(&m, sizeof(m)));
  EXPECT_EQ(child.status(), 0);
  EXPECT_EQ(child.exit_status(), "exit 0");
  ASSERT_SNPU(snpuFree(base));
}

TEST(Ipc, AReservationIsExportedWholeWithThePagesMappedLater) {
  size_t granularity = 0;
  ASSERT_SNPU(snpuMemGetGranularity(&granularity));
  Importer child([granularity](int in, int out) {
    Message m;
    if (!read_all(in, &m, sizeof(m))) return 1;
    void* base = nullptr;
    if (snpuIpcOpenMemHandle(&base, m.handle, 0) != snpuSuccess) return 2;
    char* first = static_cast<char*>(base) + m.offset;
    if (!holds(first, 100, kCount)) return 3;
    write_device(first, 500, kCount);
    if (!reply(out, 0)) return 4;
    char mapped;
    if (!read_all(in, &mapped, 1)) return 5;  // the exporter mapped the next granule and wrote it
    if (!holds(first + granularity, 900, kCount)) return 6;
    if (snpuIpcCloseMemHandle(base) != snpuSuccess) return 7;
    return reply(out, 0) ? 0 : 8;
  });
  void* reserved = nullptr;
  ASSERT_SNPU(snpuMemAddressReserve(&reserved, 4 * granularity));
  char* first = static_cast<char*>(reserved) + granularity;  // the reservation's first granule stays a hole
  ASSERT_SNPU(snpuMemMap(first, granularity));
  write_device(first + kOffset, 100, kCount);
  Message m{};
  ASSERT_SNPU(snpuIpcGetMemHandle(&m.handle, first + kOffset));
  m.offset = granularity + kOffset;
  ASSERT_TRUE(child.send(&m, sizeof(m)));
  ASSERT_EQ(child.status(), 0);
  EXPECT_TRUE(holds(first + kOffset, 500, kCount));
  ASSERT_SNPU(snpuMemMap(first + granularity, granularity));
  write_device(first + granularity + kOffset, 900, kCount);
  ASSERT_TRUE(child.send("m", 1));
  EXPECT_EQ(child.status(), 0);
  EXPECT_EQ(child.exit_status(), "exit 0");
  ASSERT_SNPU(snpuMemAddressFree(reserved));
}

TEST(Ipc, RefusesWhatCannotBeShared) {
  void* base = nullptr;
  ASSERT_SNPU(snpuMalloc(&base, kBytes));
  snpuIpcMemHandle_t handle;
  ASSERT_SNPU(snpuIpcGetMemHandle(&handle, base));
  void* opened = nullptr;
  EXPECT_EQ(snpuIpcOpenMemHandle(&opened, handle, 0), snpuErrorInvalidValue);  // this process's own handle
  EXPECT_TRUE(std::strstr(snpuGetLastErrorMessage(), "this process")) << snpuGetLastErrorMessage();
  EXPECT_EQ(snpuIpcOpenMemHandle(&opened, handle, 2), snpuErrorInvalidValue);  // unknown flag

  snpuIpcMemHandle_t garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT_EQ(snpuIpcOpenMemHandle(&opened, garbage, 0), snpuErrorInvalidValue);

  int host = 0;
  EXPECT_EQ(snpuIpcGetMemHandle(&handle, &host), snpuErrorInvalidPointer);
  void* pinned = nullptr;
  ASSERT_SNPU(snpuMallocHost(&pinned, 4096));
  EXPECT_EQ(snpuIpcGetMemHandle(&handle, pinned), snpuErrorInvalidPointer);
  ASSERT_SNPU(snpuFreeHost(pinned));
  EXPECT_EQ(snpuIpcCloseMemHandle(base), snpuErrorInvalidPointer);  // not opened: this process's own memory
  ASSERT_SNPU(snpuFree(base));
}

}  // namespace
