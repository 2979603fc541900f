#include "backend/ipc_event.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/device.h"
#include "backend/interrupt.h"
#include "backend/npu_error.h"

namespace softnpu {

struct IpcEventPage {
  struct Counters {
    std::atomic<uint64_t> recorded;
    std::atomic<uint64_t> completed;
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared between processes");

  explicit IpcEventPage(int fd) {
    void* p = mmap(nullptr, sizeof(Counters), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    TORCH_CHECK(p != MAP_FAILED, "npu interprocess event: mmap failed: ", std::strerror(errno));
    counters = static_cast<Counters*>(p);
  }
  ~IpcEventPage() { munmap(counters, sizeof(Counters)); }
  IpcEventPage(const IpcEventPage&) = delete;
  IpcEventPage& operator=(const IpcEventPage&) = delete;

  bool reached(uint64_t target) const { return counters->completed.load(std::memory_order_acquire) >= target; }

  Counters* counters;
};

namespace {

constexpr char kMagic[8] = {'S', 'N', 'P', 'U', 'E', 'V', 'T', '1'};
constexpr size_t kHandleSize = 64;  // cudaIpcEventHandle_t's

struct HandleData {
  char magic[8];
  int32_t pid;
  int32_t fd;
  uint64_t serial;
};

std::atomic<uint64_t> g_next_serial{1};

std::string memfd_name(uint64_t serial) { return "softnpu-ipc-event-" + std::to_string(serial); }

// A record's kernel: `completed` rises to the record's number (never falls: a later record may have completed first).
struct RecordArg {
  std::shared_ptr<IpcEventPage> page;
  uint64_t seq;
};

int complete_record(void* arg) {
  auto* a = static_cast<RecordArg*>(arg);
  uint64_t seen = a->page->counters->completed.load(std::memory_order_relaxed);
  while (seen < a->seq &&
         !a->page->counters->completed.compare_exchange_weak(seen, a->seq, std::memory_order_release)) {
  }
  return 0;
}

void free_record(void* arg) { delete static_cast<RecordArg*>(arg); }

// A wait's kernel holds its stream (and a compute thread, sleeping) until the record it waits for completes.
int await_record(void* arg) {
  auto* a = static_cast<RecordArg*>(arg);
  auto pause = std::chrono::microseconds(20);
  while (!a->page->reached(a->seq)) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(500));
  }
  return 0;
}

}  // namespace

IpcEvent::IpcEvent(c10::DeviceIndex device) : device_(device) {
  check_device_index(device);
  serial_ = (static_cast<uint64_t>(getpid()) << 32) | g_next_serial.fetch_add(1);
  fd_ = memfd_create(memfd_name(serial_).c_str(), MFD_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "npu interprocess event: memfd_create failed: ", std::strerror(errno));
  if (ftruncate(fd_, sizeof(IpcEventPage::Counters)) != 0) {
    const int err = errno;
    close(fd_);
    TORCH_CHECK(false, "npu interprocess event: ftruncate failed: ", std::strerror(err));
  }
  page_ = std::make_shared<IpcEventPage>(fd_);  // a new memfd reads as zeros: never recorded
}

IpcEvent::IpcEvent(c10::DeviceIndex device, const std::string& handle) : device_(device) {
  check_device_index(device);
  HandleData data{};
  TORCH_CHECK(handle.size() == kHandleSize, "Event.from_ipc_handle: an npu event handle has ", kHandleSize,
              " bytes, got ", handle.size());
  std::memcpy(&data, handle.data(), sizeof(data));
  TORCH_CHECK(std::memcmp(data.magic, kMagic, sizeof(kMagic)) == 0 && data.pid > 0 && data.fd >= 0,
              "Event.from_ipc_handle: not the handle of an npu interprocess event");
  const std::string path = "/proc/" + std::to_string(data.pid) + "/fd/" + std::to_string(data.fd);
  // The descriptor must still be the event's memfd (a number reused after the event went names another file).
  char link[256];
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  const std::string expected = "/memfd:" + memfd_name(data.serial) + " (deleted)";
  TORCH_CHECK(n > 0 && std::string(link, static_cast<size_t>(n)) == expected,
              "Event.from_ipc_handle: the event no longer exists (destroyed, or process ", data.pid, " ended)");
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "Event.from_ipc_handle: cannot open the event of process ", data.pid, ": ",
              std::strerror(errno));
  try {
    page_ = std::make_shared<IpcEventPage>(fd);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);  // the mapping keeps the page
  serial_ = data.serial;
}

IpcEvent::~IpcEvent() {
  if (fd_ >= 0) close(fd_);
}

std::string IpcEvent::handle() const {
  TORCH_CHECK(fd_ >= 0, "ipc_handle: the event was opened from a handle; export it from the process that made it");
  HandleData data{};
  std::memcpy(data.magic, kMagic, sizeof(kMagic));
  data.pid = static_cast<int32_t>(getpid());
  data.fd = fd_;
  data.serial = serial_;
  std::string out(kHandleSize, '\0');
  std::memcpy(out.data(), &data, sizeof(data));
  return out;
}

void IpcEvent::record(const NPUStream& stream) {
  TORCH_CHECK(stream.device_index() == device_, "Event device ", static_cast<int>(device_),
              " does not match recording stream's device ", static_cast<int>(stream.device_index()), ".");
  const uint64_t seq = page_->counters->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
  NPU_CHECK(snpuLaunchKernel(stream.handle(), "ipc_event_record", complete_record, new RecordArg{page_, seq},
                             free_record));
}

void IpcEvent::wait(const NPUStream& stream) {
  const uint64_t target = page_->counters->recorded.load(std::memory_order_acquire);
  if (page_->reached(target)) return;
  NPU_CHECK(
      snpuLaunchKernel(stream.handle(), "ipc_event_wait", await_record, new RecordArg{page_, target}, free_record));
}

bool IpcEvent::query() const { return page_->reached(page_->counters->recorded.load(std::memory_order_acquire)); }

void IpcEvent::synchronize() const {
  const uint64_t target = page_->counters->recorded.load(std::memory_order_acquire);
  auto pause = std::chrono::microseconds(20);
  auto since_poll = std::chrono::microseconds(0);
  while (!page_->reached(target)) {
    std::this_thread::sleep_for(pause);
    since_poll += pause;
    if (since_poll >= std::chrono::microseconds(kInterruptPollMicros)) {
      poll_interrupt();
      since_poll = std::chrono::microseconds(0);
    }
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace softnpu
