// torch_npu's c10_npu::NPUEvent: an event of the npu device type over c10::Event, so recording, waiting and timing go
// through softnpu's guard implementation, the same events torch.npu.Event creates. Created lazily, at the first
// record, on the recording stream's device (torch_npu's rule). IPC handles are not offered.
#pragma once

#include <c10/core/Event.h>
#include <c10/util/Exception.h>

#include <optional>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace c10_npu {

struct NPUEvent {
  // torch_npu's flags: ACL_EVENT_TIME_LINE (8) asks for timing, which every softnpu event supports.
  NPUEvent() : event_(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT) {}
  explicit NPUEvent(unsigned int flags)
      : event_(c10::DeviceType::PrivateUse1, (flags & 8u) != 0 ? c10::EventFlag::BACKEND_DEFAULT
                                                                : c10::EventFlag::PYTORCH_DEFAULT) {}
  NPUEvent(const NPUEvent&) = delete;
  NPUEvent& operator=(const NPUEvent&) = delete;
  NPUEvent(NPUEvent&&) = default;
  NPUEvent& operator=(NPUEvent&&) = default;

  bool isCreated() const { return event_.was_marked_for_recording(); }
  c10::DeviceIndex device_index() const { return event_.device_index(); }
  std::optional<at::Device> device() const {
    if (!isCreated()) return std::nullopt;
    return at::Device(c10::DeviceType::PrivateUse1, device_index());
  }
  // True when the work recorded before the event has completed (or nothing was recorded).
  bool query() const { return event_.query(); }
  void record() { record(getCurrentNPUStream()); }
  void record(const NPUStream& stream) { event_.record(stream.unwrap()); }
  void recordOnce(const NPUStream& stream) {
    if (!isCreated()) record(stream);
  }
  // Makes the stream's later work wait for the recorded work (the host does not wait).
  void block(const NPUStream& stream) {
    if (isCreated()) event_.block(stream.unwrap());
  }
  // Milliseconds from this event to `other`, both recorded and completed.
  float elapsed_time(const NPUEvent& other) const {
    TORCH_CHECK(isCreated() && other.isCreated(),
                "Both events must be recorded before calculating elapsed time.");
    return static_cast<float>(event_.elapsedTime(other.event_));
  }
  void synchronize() const {
    if (isCreated()) event_.synchronize();
  }

 private:
  c10::Event event_;
};

}  // namespace c10_npu
