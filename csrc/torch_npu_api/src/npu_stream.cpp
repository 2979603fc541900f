// c10_npu::NPUStream and the stream functions: each call is the same call on softnpu's NPUStream (backend/stream.h),
// so torch.npu and an extension share current streams, pools and runtime handles.
#include "torch_npu/csrc/core/npu/NPUStream.h"

#include <mutex>
#include <unordered_set>

#include "backend/device.h"
#include "backend/guard.h"
#include "backend/stream.h"

namespace c10_npu {

namespace {

softnpu::NPUStream backend_stream(const NPUStream& s) { return softnpu::NPUStream(s.unwrap()); }
NPUStream facade(const softnpu::NPUStream& s) { return NPUStream(NPUStream::UNCHECKED, s.unwrap()); }

std::mutex g_preprocess_mutex;
std::unordered_set<c10::Stream> g_preprocess_streams;  // guarded by g_preprocess_mutex

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

void NPUStream::setDataPreprocessStream(bool is_data_preprocess_stream) {
  std::lock_guard<std::mutex> lock(g_preprocess_mutex);
  if (is_data_preprocess_stream)
    g_preprocess_streams.insert(stream_);
  else
    g_preprocess_streams.erase(stream_);
}
bool NPUStream::isDataPreprocessStream() {
  std::lock_guard<std::mutex> lock(g_preprocess_mutex);
  return g_preprocess_streams.count(stream_) != 0;
}

NPUStream getCurrentNPUStream(c10::DeviceIndex device_index) {
  return facade(softnpu::getCurrentNPUStream(device_index));
}
NPUStream getDefaultNPUStream(c10::DeviceIndex device_index) {
  return facade(softnpu::getDefaultNPUStream(device_index));
}
NPUStream getStreamFromPool(bool isHighPriority, c10::DeviceIndex device_index) {
  return facade(softnpu::getStreamFromPool(isHighPriority ? -(softnpu::kStreamPriorityLevels - 1) : 0, device_index));
}
NPUStream getNPUStreamFromPool(c10::DeviceIndex device) { return getStreamFromPool(false, device); }
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
