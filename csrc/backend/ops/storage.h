// Growing and shrinking npu storages (Tensor.resize_, UntypedStorage.resize_, out= tensors resized by an op): a new
// block from the caching allocator, the old contents copied on the current stream, the old block returned in stream
// order.
#pragma once

#include <c10/core/StorageImpl.h>

namespace softnpu {

void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes);

}  // namespace softnpu
