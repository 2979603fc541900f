// c10_npu::NPUEvent: a c10::Event of npu (softnpu's runtime events, through its guard implementation) or softnpu's
// interprocess event (backend/ipc_event.h), the ones torch.npu.Event uses.
#include "torch_npu/csrc/core/npu/NPUEvent.h"

#include <c10/core/Event.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "backend/device.h"
#include "backend/ipc_event.h"
#include "backend/stream.h"

namespace c10_npu {

struct NPUEvent::Impl {
  std::optional<c10::Event> event;         // a runtime event (not interprocess)
  std::unique_ptr<softnpu::IpcEvent> ipc;  // interprocess: created at the first record or handle
};

namespace {

c10::EventFlag event_flag(unsigned int flags) {
  return (flags & ACL_EVENT_TIME_LINE) != 0 ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT;
}

bool interprocess(unsigned int flags) { return (flags & ACL_EVENT_IPC) != 0; }

}  // namespace

NPUEvent::NPUEvent() : NPUEvent(ACL_EVENT_TIME_LINE) {}

NPUEvent::NPUEvent(unsigned int flags) : flags_(flags), impl_(std::make_unique<Impl>()) {
  if (!interprocess(flags)) impl_->event.emplace(c10::DeviceType::PrivateUse1, event_flag(flags));
}

NPUEvent::NPUEvent(c10::DeviceIndex device_index, const aclrtIpcEventHandle* handle)
    : flags_(ACL_EVENT_IPC), impl_(std::make_unique<Impl>()) {
  TORCH_CHECK(handle != nullptr, "NPUEvent: the IPC event handle is null");
  softnpu::check_device_index(device_index);
  impl_->ipc = std::make_unique<softnpu::IpcEvent>(device_index,
                                                   std::string(handle->reserved, sizeof(handle->reserved)));
}

NPUEvent::~NPUEvent() = default;
NPUEvent::NPUEvent(NPUEvent&& other) = default;
NPUEvent& NPUEvent::operator=(NPUEvent&& other) = default;

bool NPUEvent::isCreated() const {
  if (!impl_) return false;  // moved from
  return impl_->ipc ? true : impl_->event && impl_->event->was_marked_for_recording();
}

c10::DeviceIndex NPUEvent::device_index() const {
  if (!isCreated()) return -1;
  return impl_->ipc ? impl_->ipc->device() : impl_->event->device_index();
}

aclrtEvent NPUEvent::event() const {
  if (!isCreated() || impl_->ipc) return nullptr;
  return impl_->event->eventId();
}

bool NPUEvent::query() const {
  if (!isCreated()) return true;
  return impl_->ipc ? impl_->ipc->query() : impl_->event->query();
}

void NPUEvent::record() { record(getCurrentNPUStream()); }

void NPUEvent::recordOnce(const NPUStream& stream) {
  if (!isCreated()) record(stream);
}

void NPUEvent::record(const NPUStream& stream) {
  TORCH_CHECK(impl_, "NPUEvent: the event was moved from");
  if (!interprocess(flags_)) {
    impl_->event->record(stream.unwrap());
    return;
  }
  if (!impl_->ipc) impl_->ipc = std::make_unique<softnpu::IpcEvent>(stream.device_index());
  TORCH_CHECK(impl_->ipc->device() == stream.device_index(), "Event device ", impl_->ipc->device(),
              " does not match recording stream's device ", stream.device_index(), ".");
  impl_->ipc->record(softnpu::NPUStream(stream.unwrap()));
}

void NPUEvent::block(const NPUStream& stream) {
  if (!isCreated()) return;
  if (impl_->ipc)
    impl_->ipc->wait(softnpu::NPUStream(stream.unwrap()));
  else
    impl_->event->block(stream.unwrap());
}

float NPUEvent::elapsed_time(const NPUEvent& other) const {
  TORCH_CHECK(isCreated() && other.isCreated(), "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(!impl_->ipc && !other.impl_->ipc, "elapsed_time: interprocess events have no timing");
  return static_cast<float>(impl_->event->elapsedTime(*other.impl_->event));
}

void NPUEvent::synchronize() const {
  if (!isCreated()) return;
  if (impl_->ipc)
    impl_->ipc->synchronize();
  else
    impl_->event->synchronize();
}

void NPUEvent::ipc_handle(aclrtIpcEventHandle* handle) {
  TORCH_CHECK(handle != nullptr, "NPUEvent::ipc_handle: the handle is null");
  TORCH_CHECK(impl_ && interprocess(flags_), "NPUEvent::ipc_handle: the event was not created with ACL_EVENT_IPC "
              "(torch.npu.Event(interprocess=True))");
  if (!impl_->ipc) impl_->ipc = std::make_unique<softnpu::IpcEvent>(softnpu::current_device());
  const std::string bytes = impl_->ipc->handle();
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, bytes.data(), std::min(bytes.size(), sizeof(handle->reserved)));
}

}  // namespace c10_npu
