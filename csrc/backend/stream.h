// NPU streams as c10::Stream values, in the manner of CUDA's: id 0 is a device's default stream; other ids index
// per-priority pools of streams created lazily and never destroyed, handed out round-robin. The current stream is
// per host thread and per device.
#pragma once

#include <c10/core/Stream.h>

#include "softnpu/runtime.h"

namespace softnpu {

// Priorities as in CUDA: 0 is the lowest; more negative is higher. kStreamPriorityLevels levels, 0 .. -(levels-1).
constexpr int kStreamPriorityLevels = 3;
constexpr int kStreamsPerPool = 32;

class NPUStream {
 public:
  // Wraps a c10::Stream of device type npu (raises otherwise).
  explicit NPUStream(c10::Stream stream);

  c10::Stream unwrap() const { return stream_; }
  operator c10::Stream() const { return stream_; }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  c10::Device device() const { return stream_.device(); }
  c10::StreamId id() const { return stream_.id(); }
  int priority() const;
  snpuStream_t handle() const { return handle_; }

  bool query() const;
  // Waits for the work queued so far; Ctrl-C interrupts the wait (interrupt.h).
  void synchronize() const;
  // The same, never interrupted: for waits whose end the host must see before it goes on (a copy into host memory
  // that is freed afterwards).
  void synchronize_uninterruptibly() const;

  bool operator==(const NPUStream& o) const { return stream_ == o.stream_; }
  bool operator!=(const NPUStream& o) const { return !(*this == o); }

 private:
  NPUStream(c10::Stream stream, snpuStream_t handle) : stream_(stream), handle_(handle) {}
  friend NPUStream stream_for(c10::DeviceIndex, c10::StreamId);
  c10::Stream stream_;
  snpuStream_t handle_;
};

// Device -1 means the current device.
NPUStream getCurrentNPUStream(c10::DeviceIndex device = -1);
NPUStream getDefaultNPUStream(c10::DeviceIndex device = -1);
NPUStream getStreamFromPool(int priority = 0, c10::DeviceIndex device = -1);
// Makes the stream current for its device on this thread; returns the previous current stream of that device.
NPUStream setCurrentNPUStream(NPUStream stream);

// The stream with a given id on a device (the id must come from one of the functions above).
NPUStream stream_for(c10::DeviceIndex device, c10::StreamId id);

}  // namespace softnpu
