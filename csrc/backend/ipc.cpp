#include "backend/ipc.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/device.h"
#include "backend/npu_error.h"
#include "backend/stream.h"
#include "softnpu/runtime.h"

namespace softnpu {

namespace {

// ---------------------------------------------------------------- the counters (shared memory, sender's)

constexpr uint64_t kCountersPerFile = 1024;

// A memfd of counters, named so a receiver can tell it from another descriptor that took its number.
struct CounterFile {
  int fd = -1;
  int64_t* counters = nullptr;
  std::string handle;  // "<pid>:<fd>:<name>"
  std::vector<uint64_t> free;
};

int64_t add(int64_t* counter, int64_t delta) { return __atomic_add_fetch(counter, delta, __ATOMIC_ACQ_REL); }

struct SentData;

struct Sender {
  std::mutex mutex;
  std::vector<std::unique_ptr<CounterFile>> files;
  std::vector<SentData*> held;  // dropped by the sender while receivers still count on them
};

Sender& sender() {
  static Sender* s = new Sender;  // never destroyed: storages die during interpreter teardown
  return *s;
}

// The sender's block while it is shared: the storage's original DataPtr, freed once the sender dropped the storage
// and no receiver counts on it.
struct SentData {
  c10::DataPtr original;
  CounterFile* file;
  uint64_t slot;
  int64_t* counter() const { return file->counters + slot; }
};

CounterFile* new_counter_file() {
  const std::string name = "softnpu-ipc-counters-" + std::to_string(sender().files.size());
  auto file = std::make_unique<CounterFile>();
  file->fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  TORCH_CHECK(file->fd >= 0, "sharing an npu tensor: memfd_create failed: ", std::strerror(errno));
  const size_t bytes = kCountersPerFile * sizeof(int64_t);
  void* p = MAP_FAILED;
  if (ftruncate(file->fd, static_cast<off_t>(bytes)) == 0)
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file->fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(file->fd);
    TORCH_CHECK(false, "sharing an npu tensor: cannot map its reference counters: ", std::strerror(err));
  }
  file->counters = static_cast<int64_t*>(p);
  file->handle = std::to_string(getpid()) + ":" + std::to_string(file->fd) + ":" + name;
  for (uint64_t i = kCountersPerFile; i > 0; --i) file->free.push_back(i - 1);
  sender().files.push_back(std::move(file));
  return sender().files.back().get();
}

// Called with the sender's mutex held.
SentData* new_sent_data() {
  CounterFile* file = nullptr;
  for (auto& f : sender().files)
    if (!f->free.empty()) file = f.get();
  if (!file) file = new_counter_file();
  auto* sd = new SentData{c10::DataPtr(), file, file->free.back()};
  file->free.pop_back();
  *sd->counter() = 0;
  return sd;
}

// The block goes back to the allocator; called without the mutex (freeing takes the allocator's lock).
void free_sent(SentData* sd) {
  {
    std::lock_guard lock(sender().mutex);
    sd->file->free.push_back(sd->slot);
  }
  delete sd;
}

void sent_deleter(void* ctx) {
  auto* sd = static_cast<SentData*>(ctx);
  {
    std::lock_guard lock(sender().mutex);
    if (__atomic_load_n(sd->counter(), __ATOMIC_ACQUIRE) > 0) {
      sender().held.push_back(sd);
      return;
    }
  }
  free_sent(sd);
}

// ---------------------------------------------------------------- the receiver's mappings

struct Opened {
  void* base;
  int refs;
};

struct Receiver {
  std::mutex mutex;
  std::map<std::string, Opened> opened;                 // by memory handle
  std::map<std::string, int64_t*> counter_files;        // by counter file handle
};

Receiver& receiver() {
  static Receiver* r = new Receiver;
  return *r;
}

struct ReceivedData {
  std::string handle;
  int64_t* counter;
};

// The counter the sender keeps for a send, mapped from its counters file (once per file). Mutex held.
int64_t* received_counter(const std::string& file_handle, uint64_t offset) {
  TORCH_CHECK(offset < kCountersPerFile, "npu IPC: reference counter offset ", offset, " out of range");
  auto it = receiver().counter_files.find(file_handle);
  if (it == receiver().counter_files.end()) {
    const size_t first = file_handle.find(':'), second = file_handle.find(':', first + 1);
    TORCH_CHECK(first != std::string::npos && second != std::string::npos,
                "npu IPC: malformed reference counter handle '", file_handle, "'");
    const std::string path =
        "/proc/" + file_handle.substr(0, first) + "/fd/" + file_handle.substr(first + 1, second - first - 1);
    const std::string expected = "/memfd:" + file_handle.substr(second + 1) + " (deleted)";
    char link[256];
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    TORCH_CHECK(n > 0 && std::string(link, static_cast<size_t>(n)) == expected,
                "npu IPC: the sender's reference counters are gone (the sending process ended?)");
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    TORCH_CHECK(fd >= 0, "npu IPC: cannot open the sender's reference counters: ", std::strerror(errno));
    void* p = mmap(nullptr, kCountersPerFile * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TORCH_CHECK(p != MAP_FAILED, "npu IPC: cannot map the sender's reference counters: ", std::strerror(errno));
    it = receiver().counter_files.emplace(file_handle, static_cast<int64_t*>(p)).first;
  }
  return it->second + offset;
}

void received_deleter(void* ctx) {
  std::unique_ptr<ReceivedData> rd(static_cast<ReceivedData*>(ctx));
  add(rd->counter, -1);
  void* close_base = nullptr;
  {
    std::lock_guard lock(receiver().mutex);
    auto it = receiver().opened.find(rd->handle);
    if (it != receiver().opened.end() && --it->second.refs == 0) {
      close_base = it->second.base;
      receiver().opened.erase(it);
    }
  }
  // After the runtime's shutdown (interpreter exit) or in a bad fork the mapping is gone with it.
  if (close_base && snpuIsInitialized() && !in_bad_fork() && snpuIpcCloseMemHandle(close_base) != snpuSuccess)
    TORCH_WARN("npu IPC: closing a shared allocation failed: ", snpuGetLastErrorMessage());
}

}  // namespace

SharedStorage share_storage(const c10::Storage& storage) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  const c10::Device device = impl->device();
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "share_storage: not an npu storage");
  ipc_collect();
  SharedStorage out{device.index(), "", impl->nbytes(), 0, "", 0};
  void* ptr = impl->mutable_data();
  if (!ptr || impl->nbytes() == 0) return out;  // nothing to map: the receiver makes an empty storage

  snpuPointerAttributes attr;
  NPU_CHECK(snpuPointerGetAttributes(&attr, ptr));
  snpuIpcMemHandle_t handle;
  NPU_CHECK(snpuIpcGetMemHandle(&handle, ptr));
  out.handle.assign(handle.reserved, sizeof(handle.reserved));
  out.offset_bytes = static_cast<size_t>(static_cast<char*>(ptr) - static_cast<char*>(attr.base));
  // What is queued on the stream is in memory before the receiver can read it.
  getCurrentNPUStream(device.index()).synchronize();

  std::lock_guard lock(sender().mutex);
  SentData* sd;
  if (impl->data_ptr().get_deleter() == &sent_deleter) {
    sd = static_cast<SentData*>(impl->data_ptr().get_context());
  } else {
    sd = new_sent_data();
    sd->original = impl->set_data_ptr(c10::DataPtr(ptr, sd, &sent_deleter, device));
  }
  add(sd->counter(), 1);
  out.ref_counter_handle = sd->file->handle;
  out.ref_counter_offset = sd->slot;
  return out;
}

c10::Storage open_shared_storage(int device, const std::string& handle, size_t size_bytes, size_t offset_bytes,
                                 const std::string& ref_counter_handle, uint64_t ref_counter_offset) {
  TORCH_CHECK(handle.size() == SNPU_IPC_HANDLE_SIZE, "npu IPC: a memory handle has ", SNPU_IPC_HANDLE_SIZE,
              " bytes, got ", handle.size());
  std::lock_guard lock(receiver().mutex);
  int64_t* counter = received_counter(ref_counter_handle, ref_counter_offset);
  auto it = receiver().opened.find(handle);
  if (it == receiver().opened.end()) {
    snpuIpcMemHandle_t h;
    std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
    void* base = nullptr;
    NPU_CHECK(snpuIpcOpenMemHandle(&base, h, snpuIpcMemLazyEnablePeerAccess));
    it = receiver().opened.emplace(handle, Opened{base, 0}).first;
  }
  ++it->second.refs;
  c10::DataPtr data(static_cast<char*>(it->second.base) + offset_bytes, new ReceivedData{handle, counter},
                    &received_deleter, c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), size_bytes,
                                                            std::move(data), /*allocator=*/nullptr,
                                                            /*resizable=*/false));
}

void release_ipc_counter(const std::string& ref_counter_handle, uint64_t ref_counter_offset) {
  std::lock_guard lock(receiver().mutex);
  add(received_counter(ref_counter_handle, ref_counter_offset), -1);
}

bool ipc_collect() {
  std::vector<SentData*> done;
  bool remain;
  {
    std::lock_guard lock(sender().mutex);
    auto& held = sender().held;
    for (auto it = held.begin(); it != held.end();) {
      if (__atomic_load_n((*it)->counter(), __ATOMIC_ACQUIRE) <= 0) {
        done.push_back(*it);
        it = held.erase(it);
      } else {
        ++it;
      }
    }
    remain = !held.empty();
  }
  for (SentData* sd : done) free_sent(sd);
  return remain;
}

}  // namespace softnpu
