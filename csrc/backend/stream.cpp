#include "backend/stream.h"

#include <c10/util/Exception.h>

#include <algorithm>
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

// torch_npu's StreamIdType: the kind of a stream in the bits above its pool index. softnpu has no secondary stream
// (torch_npu's second default stream for independent operators): ids of that kind are refused.
enum class StreamKind : c10::StreamId { kDefault = 0, kSecondary = 1, kSyncLaunch = 2, kNormal = 3, kHigh = 4 };
constexpr int kIndexBits = 5;  // kStreamsPerPool == 1 << kIndexBits
static_assert(kStreamsPerPool == 1 << kIndexBits);
constexpr c10::StreamId kExternalMarker = c10::StreamId{1} << 30;

c10::StreamId make_id(StreamKind kind, uint32_t index) {
  return (static_cast<c10::StreamId>(kind) << kIndexBits) | index;
}

// Each device's streams of the pools in one array: the default stream, the sync-launch pool, then the pools of each
// priority level.
constexpr size_t kSyncLaunchFirstSlot = 1;
constexpr size_t kPoolFirstSlot = kSyncLaunchFirstSlot + kSyncLaunchStreamsPerPool;
constexpr size_t kSlots = kPoolFirstSlot + kStreamPriorityLevels * kStreamsPerPool;

struct DeviceStreams {
  std::once_flag init;
  std::array<std::atomic<snpuStream_t>, kSlots> handles{};
  std::array<std::atomic<uint32_t>, kStreamPriorityLevels> next{};
  std::atomic<uint32_t> next_sync_launch{0};
  std::mutex create_mutex;
  // External streams by their index in the id (entries never removed: an id stays bound to its handle).
  std::mutex external_mutex;
  std::vector<snpuStream_t> external;
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

bool is_external_id(c10::StreamId id) { return id >= 0 && (id & kExternalMarker) != 0; }

// The slot of a pool stream's id, with the priority its runtime stream is created with; raises for an id no stream
// of the pools can have (as torch_npu's checks: a wrong kind, or an index beyond its pool).
size_t slot_of(c10::StreamId id, int* priority) {
  TORCH_CHECK(id >= 0 && id < (c10::StreamId{1} << 30), "Invalid NPU stream id ", id);
  const auto kind = static_cast<StreamKind>(id >> kIndexBits);
  const auto index = static_cast<size_t>(id & (kStreamsPerPool - 1));
  *priority = 0;
  switch (kind) {
    case StreamKind::kDefault:
      TORCH_CHECK(index == 0, "Invalid NPU stream id ", id, ": the default stream's index is 0, not ", index);
      return 0;
    case StreamKind::kSyncLaunch:
      TORCH_CHECK(index < kSyncLaunchStreamsPerPool, "Invalid sync launch stream index ", index, " for NPU stream id ",
                  id, " (pool size is ", kSyncLaunchStreamsPerPool, ")");
      return kSyncLaunchFirstSlot + index;
    case StreamKind::kNormal:
    case StreamKind::kHigh: {
      const auto level = static_cast<size_t>(kind) - static_cast<size_t>(StreamKind::kNormal);
      *priority = -static_cast<int>(level);
      return kPoolFirstSlot + level * kStreamsPerPool + index;
    }
    default:
      TORCH_CHECK(false, "Invalid NPU stream id ", id, ": no NPU stream has kind ", (id >> kIndexBits));
  }
}

snpuStream_t external_handle(c10::DeviceIndex device, c10::StreamId id) {
  DeviceStreams& ds = streams_of(device);
  const auto index = static_cast<size_t>(id & (kExternalMarker - 1));
  std::lock_guard<std::mutex> lock(ds.external_mutex);
  TORCH_CHECK(index < ds.external.size(), "Unrecognized external NPU stream id ", id, " on device ",
              static_cast<int>(device));
  return ds.external[index];
}

snpuStream_t handle_of(c10::DeviceIndex device, c10::StreamId id) {
  if (is_external_id(id)) return external_handle(device, id);
  int priority = 0;
  const size_t slot = slot_of(id, &priority);
  DeviceStreams& ds = streams_of(device);
  snpuStream_t h = ds.handles[slot].load(std::memory_order_acquire);
  if (C10_LIKELY(h != nullptr)) return h;
  std::lock_guard<std::mutex> lock(ds.create_mutex);
  h = ds.handles[slot].load(std::memory_order_acquire);
  if (h == nullptr) {
    int prev = 0;
    NPU_CHECK(snpuGetDevice(&prev));
    NPU_CHECK(snpuSetDevice(device));
    const snpuError_t err = snpuStreamCreate(&h, priority);
    snpuSetDevice(prev);
    NPU_CHECK(err);
    ds.handles[slot].store(h, std::memory_order_release);
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
  int priority = 0;
  if (is_external()) {
    NPU_CHECK(snpuStreamGetInfo(handle_, nullptr, &priority, nullptr));
  } else {
    slot_of(id(), &priority);
  }
  return priority;
}

bool NPUStream::is_external() const { return is_external_id(id()); }

bool NPUStream::is_sync_launch() const {
  return !is_external() && (id() >> kIndexBits) == static_cast<c10::StreamId>(StreamKind::kSyncLaunch);
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
  return stream_for(device, make_id(static_cast<StreamKind>(static_cast<int>(StreamKind::kNormal) + level), index));
}

NPUStream getStreamFromSyncLaunchPool(c10::DeviceIndex device) {
  device = resolve(device);
  const uint32_t index =
      streams_of(device).next_sync_launch.fetch_add(1, std::memory_order_relaxed) % kSyncLaunchStreamsPerPool;
  return stream_for(device, make_id(StreamKind::kSyncLaunch, index));
}

NPUStream getStreamFromExternal(snpuStream_t handle, c10::DeviceIndex device) {
  TORCH_CHECK(handle != nullptr, "External NPU stream does not support nullptr.");
  int owner = -1;
  const snpuError_t err = snpuStreamGetInfo(handle, &owner, nullptr, nullptr);
  TORCH_CHECK(err == snpuSuccess, "External NPU stream ", static_cast<const void*>(handle),
              " is not a live runtime stream (", snpuGetErrorName(err), ")");
  if (device < 0) device = static_cast<c10::DeviceIndex>(owner);
  check_device_index(device);
  TORCH_CHECK(device == owner, "External NPU stream ", static_cast<const void*>(handle), " belongs to npu:", owner,
              ", not npu:", static_cast<int>(device));
  DeviceStreams& ds = streams_of(device);
  size_t index = 0;
  {
    std::lock_guard<std::mutex> lock(ds.external_mutex);
    const auto it = std::find(ds.external.begin(), ds.external.end(), handle);
    index = static_cast<size_t>(it - ds.external.begin());
    if (it == ds.external.end()) {
      TORCH_CHECK(index < static_cast<size_t>(kExternalMarker), "Too many external NPU streams are registered.");
      ds.external.push_back(handle);
    }
  }
  return stream_for(device, kExternalMarker | static_cast<c10::StreamId>(index));
}

std::optional<NPUStream> find_stream(snpuStream_t handle) {
  int device = -1;
  if (handle == nullptr || snpuStreamGetInfo(handle, &device, nullptr, nullptr) != snpuSuccess) return std::nullopt;
  const auto d = static_cast<c10::DeviceIndex>(device);
  DeviceStreams& ds = streams_of(d);
  const auto id_of_slot = [](size_t slot) -> c10::StreamId {
    if (slot < kPoolFirstSlot) return slot == 0 ? 0 : make_id(StreamKind::kSyncLaunch, slot - kSyncLaunchFirstSlot);
    const size_t level = (slot - kPoolFirstSlot) / kStreamsPerPool;
    return make_id(static_cast<StreamKind>(static_cast<size_t>(StreamKind::kNormal) + level),
                   (slot - kPoolFirstSlot) % kStreamsPerPool);
  };
  for (size_t slot = 0; slot < kSlots; ++slot)
    if (ds.handles[slot].load(std::memory_order_acquire) == handle) return stream_for(d, id_of_slot(slot));
  c10::StreamId index = 0;
  {
    std::lock_guard<std::mutex> lock(ds.external_mutex);
    const auto it = std::find(ds.external.begin(), ds.external.end(), handle);
    if (it == ds.external.end()) return std::nullopt;
    index = it - ds.external.begin();
  }
  return stream_for(d, kExternalMarker | index);
}

void check_synchronize_allowed(const NPUStream& stream) {
  TORCH_CHECK(!stream.is_external(), "External NPU stream is not supported in NPUStream::synchronize. "
              "The caller is responsible for synchronization of external streams.");
}

void check_query_allowed(const NPUStream& stream) {
  TORCH_CHECK(!stream.is_external(), "Cannot query external NPU stream status. "
              "The caller must track stream completion externally.");
}

NPUStream setCurrentNPUStream(NPUStream stream) {
  c10::StreamId& slot = tls_current[stream.device_index()];
  const c10::StreamId prev = slot;
  slot = stream.id();
  return stream_for(stream.device_index(), prev);
}

}  // namespace softnpu
