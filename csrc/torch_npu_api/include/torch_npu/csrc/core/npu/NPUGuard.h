// torch_npu's device and stream guards: c10's inline guards over the npu device type's registered guard
// implementation, softnpu's (the one torch.npu.device and torch.npu.stream use).
#pragma once

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/InlineDeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <optional>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace c10_npu {

namespace detail {
inline c10::Device npu_device(c10::Device device) {
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "Expected an npu device, but got ", device);
  return device;
}
inline c10::Device npu_device(c10::DeviceIndex index) { return c10::Device(c10::DeviceType::PrivateUse1, index); }
}  // namespace detail

// Sets the current npu device for its lifetime.
struct NPUGuard {
  explicit NPUGuard(c10::DeviceIndex device_index) : guard_(detail::npu_device(device_index)) {}
  explicit NPUGuard(c10::Device device) : guard_(detail::npu_device(device)) {}
  NPUGuard(const NPUGuard&) = delete;
  NPUGuard& operator=(const NPUGuard&) = delete;

  // Both devices are npu: resetting is setting (the original device stays).
  void set_device(c10::Device device) { guard_.reset_device(detail::npu_device(device)); }
  void reset_device(c10::Device device) { guard_.reset_device(detail::npu_device(device)); }
  void set_index(c10::DeviceIndex device_index) { guard_.set_index(device_index); }
  c10::Device original_device() const { return guard_.original_device(); }
  c10::Device current_device() const { return guard_.current_device(); }

 private:
  c10::impl::InlineDeviceGuard<c10::impl::VirtualGuardImpl> guard_;
};

struct OptionalNPUGuard {
  OptionalNPUGuard() = default;
  explicit OptionalNPUGuard(std::optional<c10::Device> device) {
    if (device) set_device(*device);
  }
  explicit OptionalNPUGuard(std::optional<c10::DeviceIndex> index) {
    if (index) set_index(*index);
  }
  OptionalNPUGuard(const OptionalNPUGuard&) = delete;
  OptionalNPUGuard& operator=(const OptionalNPUGuard&) = delete;

  // Both devices are npu: resetting is setting (the original device stays).
  void set_device(c10::Device device) { guard_.reset_device(detail::npu_device(device)); }
  void reset_device(c10::Device device) { guard_.reset_device(detail::npu_device(device)); }
  void set_index(c10::DeviceIndex device_index) { guard_.reset_device(detail::npu_device(device_index)); }
  std::optional<c10::Device> original_device() const { return guard_.original_device(); }
  std::optional<c10::Device> current_device() const { return guard_.current_device(); }
  void reset() { guard_.reset(); }

 private:
  c10::impl::InlineOptionalDeviceGuard<c10::impl::VirtualGuardImpl> guard_;
};

// Makes a stream current (and its device) for its lifetime.
struct NPUStreamGuard {
  explicit NPUStreamGuard(c10::Stream stream) : guard_(NPUStream(stream)) {}
  NPUStreamGuard(const NPUStreamGuard&) = delete;
  NPUStreamGuard& operator=(const NPUStreamGuard&) = delete;

  void reset_stream(c10::Stream stream) { guard_.reset_stream(NPUStream(stream)); }
  NPUStream original_stream() const { return NPUStream(NPUStream::UNCHECKED, guard_.original_stream()); }
  NPUStream current_stream() const { return NPUStream(NPUStream::UNCHECKED, guard_.current_stream()); }
  c10::Device current_device() const { return guard_.current_device(); }
  c10::Device original_device() const { return guard_.original_device(); }

 private:
  c10::StreamGuard guard_;
};

struct OptionalNPUStreamGuard {
  OptionalNPUStreamGuard() = default;
  explicit OptionalNPUStreamGuard(std::optional<c10::Stream> stream) {
    if (stream) reset_stream(*stream);
  }
  OptionalNPUStreamGuard(const OptionalNPUStreamGuard&) = delete;
  OptionalNPUStreamGuard& operator=(const OptionalNPUStreamGuard&) = delete;

  void reset_stream(c10::Stream stream) { guard_.reset_stream(NPUStream(stream)); }
  std::optional<NPUStream> original_stream() const {
    auto s = guard_.original_stream();
    return s ? std::make_optional(NPUStream(NPUStream::UNCHECKED, *s)) : std::nullopt;
  }
  std::optional<NPUStream> current_stream() const {
    auto s = guard_.current_stream();
    return s ? std::make_optional(NPUStream(NPUStream::UNCHECKED, *s)) : std::nullopt;
  }
  void reset() { guard_.reset(); }

 private:
  c10::OptionalStreamGuard guard_;
};

}  // namespace c10_npu
