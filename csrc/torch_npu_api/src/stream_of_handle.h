// The torch.npu stream behind a runtime stream handle (an aclrtStream an extension got from
// c10_npu::getCurrentNPUStream().stream()): a device's current or default stream. A stream of the pool that is not
// current on this thread, or one made by aclrtCreateStream, has none.
#pragma once

#include <optional>

#include "backend/stream.h"

namespace torch_npu_api {

std::optional<softnpu::NPUStream> stream_of_handle(void* handle);

}  // namespace torch_npu_api
