// c10_npu::NPUStream and the stream functions: each call is the same call on softnpu's NPUStream (backend/stream.h),
// so torch.npu and an extension share current streams, pools and runtime handles.
#include "torch_npu/csrc/core/npu/NPUStream.h"

#include "backend/device.h"
#include "backend/guard.h"
#include "backend/stream.h"

namespace c10_npu {

namespace {

softnpu::NPUStream backend_stream(const NPUStream& s) { return softnpu::NPUStream(s.unwrap()); }
NPUStream facade(const softnpu::NPUStream& s) { return NPUStream(NPUStream::UNCHECKED, s.unwrap()); }

}  // namespace

NPUStream::NPUStream(c10::Stream stream) : stream_(stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "Expected an npu stream, got a stream of ",
              stream.device_type());
}

bool NPUStream::query() const {
  const softnpu::NPUStream s = backend_stream(*this);
  softnpu::check_query_allowed(s);
  return s.query();
}
void NPUStream::synchronize() const {
  const softnpu::NPUStream s = backend_stream(*this);
  softnpu::check_synchronize_allowed(s);
  s.synchronize();
}
int NPUStream::priority() const { return backend_stream(*this).priority(); }
aclrtStream NPUStream::stream() const { return backend_stream(*this).handle(); }

NPUStream getCurrentNPUStream(c10::DeviceIndex device_index) {
  return facade(softnpu::getCurrentNPUStream(device_index));
}
NPUStream getDefaultNPUStream(c10::DeviceIndex device_index) {
  return facade(softnpu::getDefaultNPUStream(device_index));
}
NPUStream getStreamFromPool(bool isHighPriority, c10::DeviceIndex device_index) {
  return facade(softnpu::getStreamFromPool(isHighPriority ? -(softnpu::kStreamPriorityLevels - 1) : 0, device_index));
}
NPUStream getNPUStreamFromPool(c10::DeviceIndex device_index) { return getStreamFromPool(false, device_index); }
aclrtStream getCurrentNPUStreamNoWait(c10::DeviceIndex device_index) {
  return getCurrentNPUStream(device_index).stream();
}
NPUStream getStreamFromExternal(aclrtStream stream, c10::DeviceIndex device_index) {
  return facade(softnpu::getStreamFromExternal(static_cast<snpuStream_t>(stream), device_index));
}
void setCurrentNPUStream(NPUStream stream) { softnpu::setCurrentNPUStream(backend_stream(stream)); }

bool npuSynchronizeDevice(bool check_error) {
  try {
    softnpu::NPUGuardImpl().synchronizeDevice(softnpu::current_device());
  } catch (const c10::Error&) {
    if (check_error) throw;
    return false;
  }
  return true;
}

std::ostream& operator<<(std::ostream& stream, const NPUStream& s) { return stream << s.unwrap(); }

}  // namespace c10_npu
