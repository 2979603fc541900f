#include "backend/stream.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "backend/device.h"
#include "backend/gpu_trace.h"
#include "backend/interrupt.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace {

// Stream ids: 0 is the default stream; pool streams are 1 + level * kStreamsPerPool + index, where level 0 is
// priority 0 and level k is priority -k.
constexpr c10::StreamId kPoolIds = kStreamPriorityLevels * kStreamsPerPool;

struct DeviceStreams {
  std::once_flag init;
  std::array<std::atomic<snpuStream_t>, 1 + kPoolIds> handles{};
  std::array<std::atomic<uint32_t>, kStreamPriorityLevels> next{};
  std::mutex create_mutex;
};

DeviceStreams& streams_of(c10::DeviceIndex device) {
  // Sized once from the device count, which cannot change in a process.
  static std::vector<DeviceStreams> all(device_count());
  DeviceStreams& ds = all.at(device);
  std::call_once(ds.init, [&] {
    snpuStream_t s = nullptr;
    NPU_CHECK(snpuGetDefaultStream(device, &s));
    ds.handles[0].store(s, std::memory_order_release);
  });
  return ds;
}

snpuStream_t handle_of(c10::DeviceIndex device, c10::StreamId id) {
  TORCH_CHECK(id >= 0 && id <= kPoolIds, "Invalid NPU stream id ", id);
  DeviceStreams& ds = streams_of(device);
  snpuStream_t h = ds.handles[id].load(std::memory_order_acquire);
  if (C10_LIKELY(h != nullptr)) return h;
  std::lock_guard<std::mutex> lock(ds.create_mutex);
  h = ds.handles[id].load(std::memory_order_acquire);
  if (h == nullptr) {
    const int priority = -static_cast<int>((id - 1) / kStreamsPerPool);
    int prev = 0;
    NPU_CHECK(snpuGetDevice(&prev));
    NPU_CHECK(snpuSetDevice(device));
    const snpuError_t err = snpuStreamCreate(&h, priority);
    snpuSetDevice(prev);
    NPU_CHECK(err);
    ds.handles[id].store(h, std::memory_order_release);
  }
  return h;
}

// The current stream id of each device, for this thread. 0 (default stream) until set.
thread_local std::array<c10::StreamId, 64> tls_current{};

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  if (device < 0) return current_device();
  check_device_index(device);
  return device;
}

}  // namespace

NPUStream stream_for(c10::DeviceIndex device, c10::StreamId id) {
  return NPUStream(c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id),
                   handle_of(device, id));
}

NPUStream::NPUStream(c10::Stream stream) : stream_(stream), handle_(nullptr) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "Expected an npu stream, got a stream of ",
              stream.device_type());
  check_device_index(stream.device_index());
  handle_ = handle_of(stream.device_index(), stream.id());
}

int NPUStream::priority() const {
  return id() == 0 ? 0 : -static_cast<int>((id() - 1) / kStreamsPerPool);
}

bool NPUStream::query() const {
  const snpuError_t err = snpuStreamQuery(handle_);
  if (err == snpuErrorNotReady) return false;
  NPU_CHECK(err);
  return true;
}

void NPUStream::synchronize() const {
  NPU_CHECK(snpuStreamSynchronize(handle_));
  gpu_trace::stream_synchronization(*this);
}

void NPUStream::synchronize_uninterruptibly() const {
  const UninterruptibleScope no_interrupt;
  NPU_CHECK(snpuStreamSynchronize(handle_));
  gpu_trace::stream_synchronization(*this);
}

NPUStream getCurrentNPUStream(c10::DeviceIndex device) {
  device = resolve(device);
  return stream_for(device, tls_current[device]);
}

NPUStream getDefaultNPUStream(c10::DeviceIndex device) { return stream_for(resolve(device), 0); }

NPUStream getStreamFromPool(int priority, c10::DeviceIndex device) {
  device = resolve(device);
  // Out-of-range priorities clamp, as in CUDA.
  const int level = std::min(std::max(-priority, 0), kStreamPriorityLevels - 1);
  const uint32_t index = streams_of(device).next[level].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
  return stream_for(device, 1 + level * kStreamsPerPool + index);
}

NPUStream setCurrentNPUStream(NPUStream stream) {
  c10::StreamId& slot = tls_current[stream.device_index()];
  const c10::StreamId prev = slot;
  slot = stream.id();
  return stream_for(stream.device_index(), prev);
}

}  // namespace softnpu
