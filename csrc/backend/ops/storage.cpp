#include "backend/ops/storage.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "backend/allocator.h"
#include "backend/npu_error.h"
#include "backend/stream.h"

namespace softnpu {

void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceGuard guard(storage->device());
  const NPUStream stream = getCurrentNPUStream();
  // Even for 0 bytes: the allocator's empty DataPtr carries the device, a default-constructed one would say cpu.
  c10::DataPtr new_data = NPUCachingAllocator::get()->allocate_on(new_bytes, stream);
  const size_t keep = std::min(new_bytes, storage->nbytes());
  if (keep > 0 && storage->data_ptr().get()) {
    NPU_CHECK(snpuMemcpyAsync(new_data.get(), storage->data_ptr().get(), keep, snpuMemcpyDeviceToDevice,
                              stream.handle()));
    // The old block may belong to another stream's free list: it must outlive the copy just queued here.
    NPUCachingAllocator::get()->recordStream(storage->data_ptr(), stream);
  }
  storage->set_data_ptr_noswap(std::move(new_data));
  storage->set_nbytes(new_bytes);
}

}  // namespace softnpu
