// torch_npu's c10_npu::NPUEvent over softnpu's events: a runtime event (ACL's aclrtEvent, the same events
// torch.npu.Event creates, through c10::Event of npu), or, with ACL_EVENT_IPC or opened from a handle, an event
// shared between processes (torch.npu.Event(interprocess=True)'s). Created lazily at the first record, on the
// recording stream's device (torch_npu's rule); an interprocess event asked for its handle first is created on the
// current device.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Optional.h>

#include <memory>

#include "third_party/acl/inc/acl/acl_rt.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace c10_npu {

struct C10_NPU_API NPUEvent {
  // Timed (ACL_EVENT_TIME_LINE), as torch_npu's default.
  NPUEvent();
  // ACL_EVENT_TIME_LINE asks for timing; ACL_EVENT_IPC makes an interprocess event, which has no timing.
  NPUEvent(unsigned int flags);
  // The event another process exported with ipc_handle, used on device_index; c10::Error if the handle names no
  // live event.
  NPUEvent(c10::DeviceIndex device_index, const aclrtIpcEventHandle* handle);

  ~NPUEvent();

  NPUEvent(const NPUEvent&) = delete;
  NPUEvent& operator=(const NPUEvent&) = delete;

  NPUEvent(NPUEvent&& other);
  NPUEvent& operator=(NPUEvent&& other);

  operator aclrtEvent() const { return event(); }

  c10::optional<at::Device> device() const {
    if (!isCreated()) return c10::nullopt;
    return at::Device(c10::DeviceType::PrivateUse1, device_index());
  }

  bool isCreated() const;
  c10::DeviceIndex device_index() const;
  // The runtime event (what ACL's event calls take); null before the first record and for an interprocess event,
  // which is not a runtime event here.
  aclrtEvent event() const;

  // True when the work recorded before the event has completed (or nothing was recorded).
  bool query() const;
  void record();
  void recordOnce(const NPUStream& stream);
  void record(const NPUStream& stream);
  // Makes the stream's later work wait for the recorded work (the host does not wait).
  void block(const NPUStream& stream);
  // Milliseconds from this event to `other`, both recorded, completed and timed.
  float elapsed_time(const NPUEvent& other) const;
  void synchronize() const;
  // The handle another process opens this event with (an ACL_EVENT_IPC event's; c10::Error for another).
  void ipc_handle(aclrtIpcEventHandle* handle);

 private:
  struct Impl;
  unsigned int flags_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace c10_npu
