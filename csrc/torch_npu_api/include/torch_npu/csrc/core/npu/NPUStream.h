// torch_npu's c10_npu::NPUStream over softnpu's streams: the same c10::Stream values torch.npu.Stream and
// torch.npu.current_stream() use, and stream() is the runtime stream kernels are enqueued on (ACL's aclrtStream).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <ostream>

#include "third_party/acl/inc/acl/acl_rt.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace c10_npu {

class C10_NPU_API NPUStream {
 public:
  enum Unchecked { UNCHECKED };

  // Wraps a c10::Stream of device type npu (c10::Error otherwise).
  explicit NPUStream(c10::Stream stream);
  explicit NPUStream(Unchecked, c10::Stream stream) : stream_(stream) {}
  ~NPUStream() {}

  bool operator==(const NPUStream& other) const noexcept { return stream_ == other.stream_; }
  bool operator!=(const NPUStream& other) const noexcept { return !(*this == other); }

  operator aclrtStream() const { return stream(); }
  operator c10::Stream() const { return unwrap(); }

  c10::DeviceType device_type() const { return c10::DeviceType::PrivateUse1; }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  c10::Device device() const { return stream_.device(); }
  c10::StreamId id() const { return stream_.id(); }
  c10::Stream unwrap() const { return stream_; }
  c10::StreamData3 pack3() const { return stream_.pack3(); }
  static NPUStream unpack3(c10::StreamId stream_id, c10::DeviceIndex device_index, c10::DeviceType device_type) {
    return NPUStream(c10::Stream::unpack3(stream_id, device_index, device_type));
  }

  // True when all work queued on the stream has completed (an external stream raises: the caller tracks it).
  bool query() const;
  // Waits for the work queued so far; raises the first kernel error not reported yet (an external stream raises).
  void synchronize() const;
  // 0 is the lowest priority, more negative is higher (as torch.npu.Stream's priority).
  int priority() const;
  // The runtime stream. torch_npu's need_empty drains its task queue first; softnpu enqueues at the call, so there is
  // never a queue to drain and both overloads return the same handle.
  aclrtStream stream() const;
  aclrtStream stream(const bool need_empty) const { return stream(); }

  // torch_npu marks the streams that run data preprocessing (DVPP) so that its task queue treats them apart; softnpu
  // has no such queue: the mark is kept (per stream, for every NPUStream of it) and answered, nothing else.
  void setDataPreprocessStream(bool is_data_preprocess_stream);
  bool isDataPreprocessStream();

 private:
  c10::Stream stream_;
};

// device_index -1 is the current npu device.
C10_NPU_API NPUStream getCurrentNPUStream(c10::DeviceIndex device_index = -1);
C10_NPU_API NPUStream getDefaultNPUStream(c10::DeviceIndex device_index = -1);
// A stream of the pool (round-robin, as CUDA's), of high or normal priority.
C10_NPU_API NPUStream getStreamFromPool(bool isHighPriority = false, c10::DeviceIndex device_index = -1);
C10_NPU_API NPUStream getNPUStreamFromPool(c10::DeviceIndex device = -1);
C10_NPU_API aclrtStream getCurrentNPUStreamNoWait(c10::DeviceIndex device_index = -1);
// A stream the caller created (aclrtCreateStream) as an NPUStream; the same handle gives the same stream.
C10_NPU_API NPUStream getStreamFromExternal(aclrtStream stream, c10::DeviceIndex device_index);
// Makes the stream current for its device on this thread.
C10_NPU_API void setCurrentNPUStream(NPUStream stream);
// Waits for every stream of the current device; with check_error, raises the first kernel error.
C10_NPU_API bool npuSynchronizeDevice(bool check_error = true);

std::ostream& operator<<(std::ostream& stream, const NPUStream& s);

}  // namespace c10_npu

template <>
struct std::hash<c10_npu::NPUStream> {
  size_t operator()(c10_npu::NPUStream s) const noexcept { return std::hash<c10::Stream>{}(s.unwrap()); }
};
