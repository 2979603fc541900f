// NPU streams as c10::Stream values, in the manner of CUDA's and with torch_npu's stream ids: the kind of stream in
// bits 5 and up, its index in its pool below (0 is a device's default stream, 64 + i the sync-launch pool, 96 + i the
// normal-priority pool, 128 + i the high-priority one), and bit 30 set for an external stream (a runtime stream the
// program created itself, wrapped by getStreamFromExternal), whose index counts the external streams of its device.
// Pool streams are created lazily, never destroyed, and handed out round-robin. The current stream is per host
// thread and per device.
#pragma once

#include <c10/core/Stream.h>

#include <optional>

#include "softnpu/runtime.h"

namespace softnpu {

// Priorities as in CUDA: 0 is the lowest; more negative is higher. torch_npu's two levels: 0 (normal) and -1 (high).
constexpr int kStreamPriorityLevels = 2;
constexpr int kStreamsPerPool = 32;
constexpr int kSyncLaunchStreamsPerPool = 4;

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

  bool is_external() const;
  bool is_sync_launch() const;

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
// torch_npu's sync-launch pool (Stream(is_sync_launch=True)): launches reach the runtime from the calling thread, as
// every softnpu launch does, so these are ordinary streams in a pool of their own.
NPUStream getStreamFromSyncLaunchPool(c10::DeviceIndex device = -1);
// A runtime stream the program created (snpuStreamCreate, aclrtCreateStream, torch.npu.npurt().npuStreamCreate) as a
// torch stream, as CUDA's getStreamFromExternal: the same handle gives the same stream id. The stream must be live and
// of `device` (-1: the handle's own device). The program keeps owning it: destroying it is its business.
NPUStream getStreamFromExternal(snpuStream_t handle, c10::DeviceIndex device = -1);
// torch_npu's refusals on external streams, whose completion the program tracks itself: torch.Stream's synchronize()
// and query() and torch_npu's C++ NPUStream's call them; the backend's own waits (.item(), copies) do not.
void check_synchronize_allowed(const NPUStream& stream);
void check_query_allowed(const NPUStream& stream);
// Makes the stream current for its device on this thread; returns the previous current stream of that device.
NPUStream setCurrentNPUStream(NPUStream stream);

// The torch stream of a runtime handle, if a function above made one of it (a pool stream created already, or an
// external stream); for reports, which name streams by handle.
std::optional<NPUStream> find_stream(snpuStream_t handle);

// The stream with a given id on a device (the id must come from one of the functions above).
NPUStream stream_for(c10::DeviceIndex device, c10::StreamId id);

}  // namespace softnpu
