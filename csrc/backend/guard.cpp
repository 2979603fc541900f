#include "backend/guard.h"

#include <c10/util/Exception.h>

#include "backend/allocator.h"
#include "backend/device.h"
#include "backend/gpu_trace.h"
#include "backend/npu_error.h"
#include "backend/stream.h"

namespace softnpu {

namespace {

c10::Device npu(c10::DeviceIndex index) { return c10::Device(c10::DeviceType::PrivateUse1, index); }

// Runs f with the runtime's current device set to `device` (events are created on the current device).
template <typename F>
void on_device(c10::DeviceIndex device, F&& f) {
  const auto prev = exchange_device(device);
  try {
    f();
  } catch (...) {
    set_device(prev);
    throw;
  }
  set_device(prev);
}

}  // namespace

c10::Device NPUGuardImpl::exchangeDevice(c10::Device d) const {
  TORCH_INTERNAL_ASSERT(d.is_privateuseone());
  return npu(exchange_device(d.index()));
}

c10::Device NPUGuardImpl::getDevice() const { return npu(current_device()); }

void NPUGuardImpl::setDevice(c10::Device d) const {
  TORCH_INTERNAL_ASSERT(d.is_privateuseone());
  set_device(d.index());
}

void NPUGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept { snpuSetDevice(d.index()); }

c10::DeviceIndex NPUGuardImpl::deviceCount() const noexcept { return device_count_noexcept(); }

// The CPU kernels underneath support every dtype, so every capability is on.
c10::DeviceCapability NPUGuardImpl::getDeviceCapability(c10::Device d) const {
  check_device_index(d.index() < 0 ? current_device() : d.index());
  return c10::DeviceCapability();
}

c10::Stream NPUGuardImpl::getStream(c10::Device d) const { return getCurrentNPUStream(d.index()); }

c10::Stream NPUGuardImpl::getDefaultStream(c10::Device d) const { return getDefaultNPUStream(d.index()); }

c10::Stream NPUGuardImpl::getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const {
  return getStreamFromPool(isHighPriority ? -(kStreamPriorityLevels - 1) : 0, d.index());
}

c10::Stream NPUGuardImpl::getNewStream(c10::Device d, int priority) const {
  return getStreamFromPool(priority, d.index());
}

c10::Stream NPUGuardImpl::exchangeStream(c10::Stream s) const { return setCurrentNPUStream(NPUStream(s)); }

bool NPUGuardImpl::queryStream(const c10::Stream& stream) const {
  const NPUStream npu_stream(stream);
  check_query_allowed(npu_stream);
  return npu_stream.query();
}

void NPUGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  const NPUStream npu_stream(stream);
  check_synchronize_allowed(npu_stream);
  npu_stream.synchronize();
}

void NPUGuardImpl::synchronizeDevice(c10::DeviceIndex device_index) const {
  on_device(device_index < 0 ? current_device() : device_index, [] {
    NPU_CHECK(snpuDeviceSynchronize());
  });
  gpu_trace::device_synchronization();
}

void* NPUGuardImpl::getStreamNativeHandle(const c10::Stream stream) const { return NPUStream(stream).handle(); }

void NPUGuardImpl::destroyEvent(void* event, c10::DeviceIndex) const noexcept {
  if (!event) return;
  gpu_trace::event_deletion(event);
  snpuEventDestroy(static_cast<snpuEvent_t>(event));
}

void NPUGuardImpl::record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                          c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ", device_index,
              " does not match recording stream's device index ", stream.device_index(), ".");
  const NPUStream npu_stream(stream);
  if (*event == nullptr) {
    // PYTORCH_DEFAULT events skip timing, as CUDA's; BACKEND_DEFAULT (torch.Event(enable_timing=True)) keeps it.
    const unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT ? snpuEventDefault : snpuEventDisableTiming;
    on_device(stream.device_index(), [&] {
      snpuEvent_t e = nullptr;
      NPU_CHECK(snpuEventCreate(&e, flags));
      *event = e;
    });
    gpu_trace::event_creation(*event);
  }
  NPU_CHECK(snpuEventRecord(static_cast<snpuEvent_t>(*event), npu_stream.handle()));
  gpu_trace::event_record(*event, npu_stream);
}

void NPUGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (!event) return;
  const NPUStream npu_stream(stream);
  NPU_CHECK(snpuStreamWaitEvent(npu_stream.handle(), static_cast<snpuEvent_t>(event)));
  gpu_trace::event_wait(event, npu_stream);
}

bool NPUGuardImpl::queryEvent(void* event) const {
  if (!event) return true;
  const snpuError_t err = snpuEventQuery(static_cast<snpuEvent_t>(event));
  if (err == snpuErrorNotReady) return false;
  NPU_CHECK(err);
  return true;
}

void NPUGuardImpl::synchronizeEvent(void* event) const {
  if (!event) return;
  NPU_CHECK(snpuEventSynchronize(static_cast<snpuEvent_t>(event)));
  gpu_trace::event_synchronization(event);
}

double NPUGuardImpl::elapsedTime(void* event1, void* event2, c10::DeviceIndex) const {
  TORCH_CHECK(event1 && event2, "Both events must be recorded before calculating elapsed time.");
  float ms = 0;
  const snpuError_t err =
      snpuEventElapsedTime(&ms, static_cast<snpuEvent_t>(event1), static_cast<snpuEvent_t>(event2));
  TORCH_CHECK(err != snpuErrorNotReady,
              "Both events must be completed before calculating elapsed time (synchronize them first).");
  TORCH_CHECK(err != snpuErrorInvalidHandle,
              "Both events must be created with enable_timing=True and recorded before calculating elapsed time.");
  NPU_CHECK(err);
  return ms;
}

void NPUGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const {
  NPUCachingAllocator::get()->recordStream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, NPUGuardImpl);

}  // namespace softnpu
