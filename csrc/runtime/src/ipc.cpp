// Interprocess memory (runtime.h: snpuIpcGetMemHandle / snpuIpcOpenMemHandle / snpuIpcCloseMemHandle), CUDA IPC's
// calls over the memfds exported device memory lives in (memory.cpp: memory moves into one when first exported). A
// handle names the exporter's process, the descriptor number of the allocation's memfd there and the memfd's name; the
// importer opens /proc/<pid>/fd/<fd> (allowed to the same user) and checks the name, so a descriptor number reused for
// something else after the allocation was freed is refused rather than mapped.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "errors.h"
#include "kernel.h"
#include "runtime_state.h"
#include "softnpu/runtime.h"

using namespace softnpu::rt;

namespace {

constexpr char kMagic[8] = {'S', 'N', 'P', 'U', 'I', 'P', 'C', '1'};

// The handle's bytes (64, as cudaIpcMemHandle_t).
struct HandleData {
  char magic[8];
  int32_t pid;
  int32_t fd;
  int32_t device;
  int32_t reserved;
  uint64_t serial;
  uint64_t size;
};
static_assert(sizeof(HandleData) <= SNPU_IPC_HANDLE_SIZE, "an IPC handle holds HandleData");

template <class F>
snpuError_t guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(snpuErrorMemoryAllocation, "the host is out of memory");
  } catch (const std::exception& e) {
    return fail(snpuErrorInternal, std::string("internal error: ") + e.what());
  }
}

std::string memfd_link(uint64_t serial) { return "/memfd:softnpu-" + std::to_string(serial) + " (deleted)"; }

}  // namespace

extern "C" {

snpuError_t snpuIpcGetMemHandle(snpuIpcMemHandle_t* handle, void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!handle) return fail(snpuErrorInvalidValue, "snpuIpcGetMemHandle: handle is NULL");
    if (in_kernel())
      return fail(snpuErrorNotPermitted, "snpuIpcGetMemHandle is not allowed inside a kernel: it may wait for the "
                                         "device code running, which could deadlock");
    Allocation a;
    if (!ptr || !rt->memory.find(ptr, &a) || a.type != snpuMemoryTypeDevice)
      return fail(snpuErrorInvalidPointer, "snpuIpcGetMemHandle: the pointer is not device memory of snpuMalloc");
    if (a.imported)
      return fail(snpuErrorInvalidPointer,
                  "snpuIpcGetMemHandle: the memory was opened from another process (export it from its owner)");
    // Private until first exported (memory.h): moved into shared memory now.
    if (a.fd < 0)
      if (snpuError_t e = rt->memory.share(ptr, &a)) return e;
    HandleData data{};
    std::memcpy(data.magic, kMagic, sizeof(kMagic));
    data.pid = static_cast<int32_t>(getpid());
    data.fd = a.fd;
    data.device = a.device->index;
    data.serial = a.serial;
    data.size = a.pages ? a.size : a.mapped;  // a reservation is exported whole, its holes included
    std::memset(handle->reserved, 0, sizeof(handle->reserved));
    std::memcpy(handle->reserved, &data, sizeof(data));
    return snpuSuccess;
  });
}

snpuError_t snpuIpcOpenMemHandle(void** ptr, snpuIpcMemHandle_t handle, unsigned int flags) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (!ptr) return fail(snpuErrorInvalidValue, "snpuIpcOpenMemHandle: ptr is NULL");
    if (flags & ~static_cast<unsigned>(snpuIpcMemLazyEnablePeerAccess))
      return fail(snpuErrorInvalidValue, "snpuIpcOpenMemHandle: unknown flags " + std::to_string(flags));
    HandleData data;
    std::memcpy(&data, handle.reserved, sizeof(data));
    if (std::memcmp(data.magic, kMagic, sizeof(kMagic)) != 0 || data.pid <= 0 || data.fd < 0 || data.size == 0)
      return fail(snpuErrorInvalidValue, "snpuIpcOpenMemHandle: not a handle of snpuIpcGetMemHandle");
    if (data.pid == getpid())
      return fail(snpuErrorInvalidValue, "snpuIpcOpenMemHandle: the handle was exported by this process; use the "
                                         "pointer itself (CUDA's rule too)");
    Device* device = rt->device(data.device);
    if (!device) return rt->invalid_device(data.device, "snpuIpcOpenMemHandle");
    const std::string path = "/proc/" + std::to_string(data.pid) + "/fd/" + std::to_string(data.fd);
    const std::string gone = "snpuIpcOpenMemHandle: the exported allocation no longer exists (freed, or process " +
                             std::to_string(data.pid) + " ended)";
    char link[256];
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n < 0) {
      if (errno == EACCES || errno == EPERM)
        return fail(snpuErrorNotPermitted, "snpuIpcOpenMemHandle: no access to " + path + " (" +
                                               std::strerror(errno) + "): the exporter runs as another user");
      return fail(snpuErrorInvalidHandle, gone);
    }
    if (std::string(link, static_cast<size_t>(n)) != memfd_link(data.serial)) return fail(snpuErrorInvalidHandle, gone);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return fail(snpuErrorInvalidHandle, gone + " (" + std::strerror(errno) + ")");
    struct stat st;
    snpuError_t err = snpuSuccess;
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != data.size)
      err = fail(snpuErrorInvalidHandle, gone);
    else
      err = rt->memory.map_imported(device, fd, data.size, ptr);
    close(fd);  // the mapping keeps the memory
    return err;
  });
}

snpuError_t snpuIpcCloseMemHandle(void* ptr) {
  return guarded([&] {
    Runtime* rt;
    if (snpuError_t e = acquire_runtime(&rt)) return e;
    if (in_kernel())
      return fail(snpuErrorNotPermitted, "snpuIpcCloseMemHandle is not allowed inside a kernel: it waits for the "
                                         "device, which could deadlock");
    Allocation a;
    if (!ptr || !rt->memory.find(ptr, &a) || !a.imported || a.base != ptr)
      return fail(snpuErrorInvalidPointer, "snpuIpcCloseMemHandle: the pointer is not memory opened by "
                                           "snpuIpcOpenMemHandle");
    a.device->synchronize(false);  // queued work never sees the pages go (as snpuFree)
    return rt->memory.unmap_imported(ptr);
  });
}

}  // extern "C"
