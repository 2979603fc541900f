// Events shared between processes: torch.npu.Event(interprocess=True), ipc_handle() and Event.from_ipc_handle(), as
// CUDA's interprocess events (cudaIpcGetEventHandle / cudaIpcOpenEventHandle).
//
// The event's state is two counters in a page of shared memory (a memfd the creator holds): `recorded`, raised by
// each record on the host, and `completed`, raised to a record's number by a kernel queued at the record, in stream
// order, when the work before it has run. Any process that mapped the page (through /proc/<pid>/fd of the creator,
// allowed to the same user, as the runtime's memory handles) waits for the latest record made before its wait: a
// wait on a stream is a kernel that holds the stream until `completed` reaches it, synchronize polls on the host.
// Two processes recording the same event at once complete it at the later record of the two (CUDA leaves this
// undefined too). The page lives while a process maps it; a handle opens while the creator's event exists.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

#include "backend/stream.h"

namespace softnpu {

struct IpcEventPage;

class IpcEvent {
 public:
  // A new event of `device`, never recorded (query() is true, as CUDA's).
  explicit IpcEvent(c10::DeviceIndex device);
  // The event another process (or this one) exported as `handle` (64 bytes), used on `device`. RuntimeError if the
  // handle is malformed or its event no longer exists.
  IpcEvent(c10::DeviceIndex device, const std::string& handle);
  ~IpcEvent();
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;

  c10::DeviceIndex device() const { return device_; }
  // 64 bytes naming the event to other processes of the same user.
  std::string handle() const;
  // ASYNC: completes when the work queued on the stream so far has run. The stream must be of the event's device.
  void record(const NPUStream& stream);
  // ASYNC: the work queued on the stream later runs after the latest record (of any process) has completed.
  void wait(const NPUStream& stream);
  bool query() const;
  // Waits on the host for the latest record; Ctrl-C interrupts it.
  void synchronize() const;

 private:
  c10::DeviceIndex device_;
  int fd_ = -1;  // the creator's memfd (-1 in an opener: its mapping is enough)
  uint64_t serial_ = 0;
  std::shared_ptr<IpcEventPage> page_;  // kernels in flight hold it too
};

}  // namespace softnpu
