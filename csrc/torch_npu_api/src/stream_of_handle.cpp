#include "stream_of_handle.h"

#include "backend/device.h"

namespace torch_npu_api {

std::optional<softnpu::NPUStream> stream_of_handle(void* handle) {
  const c10::DeviceIndex current = softnpu::current_device();
  // The current device first: the common case, and no other device's streams are created by the lookup.
  for (c10::DeviceIndex d = -1; d < softnpu::device_count(); ++d) {
    const c10::DeviceIndex device = d < 0 ? current : d;
    if (d >= 0 && d == current) continue;
    for (const auto& s : {softnpu::getCurrentNPUStream(device), softnpu::getDefaultNPUStream(device)}) {
      if (s.handle() == handle) return s;
    }
  }
  return std::nullopt;
}

}  // namespace torch_npu_api
