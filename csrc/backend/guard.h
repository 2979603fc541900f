// The device guard implementation for npu: what c10::DeviceGuard, c10::StreamGuard, c10::Event, torch.Stream,
// torch.Event and torch.accelerator use to switch devices and streams and to record and wait on events.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace softnpu {

struct NPUGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return static_type; }
  c10::Device exchangeDevice(c10::Device d) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device d) const override;
  void uncheckedSetDevice(c10::Device d) const noexcept override;
  c10::DeviceIndex deviceCount() const noexcept override;
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override;

  c10::Stream getStream(c10::Device d) const override;
  c10::Stream getDefaultStream(c10::Device d) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override;
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override;
  c10::Stream exchangeStream(c10::Stream s) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeDevice(c10::DeviceIndex device_index) const override;
  void* getStreamNativeHandle(const c10::Stream stream) const override;

  void destroyEvent(void* event, c10::DeviceIndex device_index) const noexcept override;
  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
              c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* event1, void* event2, c10::DeviceIndex device_index) const override;

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override;
};

}  // namespace softnpu
