"""Streams and events (torch.cuda.Stream / torch.cuda.Event, for npu), over torch.Stream and torch.Event."""

from typing import Any, Optional

import torch

from .. import _C
from .device import _device_index, _lazy_init, device as _device_ctx

_NPU_TYPE = None


def _npu_device_type() -> int:
    global _NPU_TYPE
    if _NPU_TYPE is None:
        _NPU_TYPE = _C._current_stream(0)[2] if _C._device_count_noexcept() else 0
    return _NPU_TYPE


class Stream(torch.Stream):
    """An in-order queue of work on an npu device. Priorities: lower numbers run first (0 is the default)."""

    def __new__(cls, device: Any = None, priority: int = 0, is_sync_launch: bool = False, **kwargs):
        if kwargs:  # wrapping an existing stream: stream_id, device_index, device_type
            _check_existing(**kwargs)
            return super().__new__(cls, **kwargs)
        _lazy_init()
        index = _device_index(device, optional=True)
        if index < 0:  # as torch.cuda.Stream: a negative index means the current device
            index = _C._current_device()
        if is_sync_launch:
            # torch_npu's sync-launch pool (launches bypass its task queue); every softnpu launch reaches the runtime
            # from the calling thread, so these are ordinary streams of a pool of their own (see SyncLaunchStream).
            stream_id, device_index, device_type = _C._sync_launch_stream(index)
            return super().__new__(cls, stream_id=stream_id, device_index=device_index, device_type=device_type)
        return super().__new__(cls, device=torch.device("npu", index), priority=priority)

    @property
    def npu_stream(self) -> int:
        """The runtime stream's handle (torch_npu: its aclrtStream), as an int: what torch.npu.npurt() and ACL
        take, and the key the backend reports the stream by to torch.npu._gpu_trace (the sanitizer's reports)."""
        return _C._stream_handle(self.stream_id, self.device_index)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.stream_id, self.device_index)

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        if event is None:
            event = Event()
        event.record(self)
        return event

    def set_data_preprocess_stream(self, is_data_preprocess_stream: bool = False) -> None:
        """torch_npu: marks a stream used for data preprocessing (a scheduling hint to ACL). Recorded."""
        self._data_preprocess = bool(is_data_preprocess_stream)

    def __repr__(self) -> str:
        return f"<torch_npu.npu.Stream device={self.device} npu_stream={self.npu_stream:#x}>"  # torch_npu's form


class ExternalStream(Stream):
    """A runtime stream the program created itself (torch.npu.npurt().npuStreamCreate, ACL's aclrtCreateStream), as
    a torch stream, as torch.cuda.ExternalStream: ops run on it while it is current, and the same handle gives an equal
    stream. The program keeps owning it (it must outlive its use here) and tracks its completion itself: as torch_npu's,
    synchronize() and query() raise RuntimeError; torch.npu.synchronize() waits for it as for every stream of its
    device. torch_npu also refuses events and record_stream on it, because its task queue does not know the stream;
    softnpu has no task queue, so those work as on CUDA's external streams."""

    def __new__(cls, stream_ptr: int, device: Any = None, priority: int = 0, is_sync_launch: bool = False):
        if priority != 0 or is_sync_launch:
            raise RuntimeError("ExternalStream: priority and is_sync_launch are the external stream's own; "
                               "they must keep their defaults")
        _lazy_init()
        index = _device_index(device, optional=True)  # the current device by default, as CUDA's and torch_npu's
        stream_id, device_index, device_type = _C._external_stream(stream_ptr, index)
        return super().__new__(cls, stream_id=stream_id, device_index=device_index, device_type=device_type)

    def __repr__(self) -> str:
        return f"<torch.npu.ExternalStream device={self.device} npu_stream={self.npu_stream:#x}>"


def _check_existing(stream_id: int, device_index: int, device_type: int) -> None:
    """Stream(stream_id=, device_index=, device_type=) names a stream that exists: a wrong id, device or device type
    fails here, at construction, as torch_npu's, rather than at the stream's first use."""
    _lazy_init()
    if device_type != _npu_device_type():
        raise RuntimeError(f"Stream: device_type {device_type} is not npu's ({_npu_device_type()})")
    if not 0 <= device_index < _C._device_count():
        raise RuntimeError(f"Stream: invalid device_index {device_index} (npu devices: {_C._device_count()})")
    _C._runtime_stream_id(stream_id, device_index)  # RuntimeError for an id no stream has


class Event(torch.Event):
    """A marker in a stream: completes when the work queued before it does; carries a timestamp if enable_timing.
    interprocess=True: shareable with other processes (ipc_handle / from_ipc_handle, and through torch.multiprocessing
    queues), as CUDA's interprocess events; such an event has no timing."""

    _ipc = None  # the interprocess event (softnpu._C._IpcEvent) of an interprocess one

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess and enable_timing:
            raise RuntimeError("Parameter interprocess cannot be specified together with other parameters.")
        _lazy_init()
        self = super().__new__(cls, device=torch.device("npu", _C._current_device()), enable_timing=enable_timing,
                               blocking=blocking)
        if interprocess:
            self._ipc = _C._IpcEvent(_C._current_device())
        return self

    @property
    def device(self) -> torch.device:
        # An interprocess event belongs to its device from the start (torch.Event's says npu until recorded).
        return torch.device("npu", self._ipc.device) if self._ipc is not None else super().device

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> "Event":
        """The interprocess event another process exported with ipc_handle(), used on `device`."""
        _lazy_init()
        index = _device_index(device, optional=True)
        if index < 0:
            index = _C._current_device()
        self = super().__new__(cls, device=torch.device("npu", index))
        self._ipc = _C._IpcEvent.open(index, handle)
        return self

    def ipc_handle(self) -> bytes:
        """64 bytes that another process of the same user turns into this event with Event.from_ipc_handle."""
        if self._ipc is None:
            raise RuntimeError("ipc_handle: the event was not created with interprocess=True")
        return self._ipc.handle()

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        stream = current_stream() if stream is None else stream
        if self._ipc is not None:
            self._ipc.record(stream.stream_id, stream.device_index)
        else:
            super().record(stream)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        stream = current_stream() if stream is None else stream
        if self._ipc is not None:
            self._ipc.wait(stream.stream_id, stream.device_index)
        else:
            super().wait(stream)

    def query(self) -> bool:
        return self._ipc.query() if self._ipc is not None else super().query()

    def synchronize(self) -> None:
        if self._ipc is not None:
            self._ipc.synchronize()
        else:
            super().synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and end_event (both recorded with enable_timing). Waits for both first,
        as torch_npu's does (CUDA's raises if either has not completed)."""
        self.synchronize()
        end_event.synchronize()
        return _C._event_elapsed_time(self.event_id, end_event.event_id)

    def recorded_time(self) -> int:
        """torch_npu's: when the work this event captured completed, in microseconds since the host started (ACL's
        aclrtEventGetTimestamp). Waits for the event; it must be recorded, with enable_timing."""
        if not self.event_id:
            raise RuntimeError("Event must be recorded before getting recorded timestamp.")
        return _C._event_recorded_time(self.event_id)

    def __reduce__(self):
        # torch.multiprocessing sends an interprocess event by its handle (torch's reduce_event, for npu).
        if self._ipc is None:
            raise RuntimeError("only an npu Event created with interprocess=True can be sent to another process")
        return Event.from_ipc_handle, (self.device, self.ipc_handle())

    def __repr__(self) -> str:
        # torch_npu's form
        return f"<torch_npu.npu.Event {self.event_id:#x}>" if self.event_id else "<torch_npu.npu.Event uninitialized>"


def _wrap(stream_tuple) -> Stream:
    stream_id, device_index, device_type = stream_tuple
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def current_stream(device: Any = None) -> Stream:
    """The current stream of the device (the current device by default), for this thread."""
    _lazy_init()
    return _wrap(_C._current_stream(_device_index(device, optional=True)))


def default_stream(device: Any = None) -> Stream:
    _lazy_init()
    return _wrap(_C._default_stream(_device_index(device, optional=True)))


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Makes the stream current for its device (None does nothing)."""
    if stream is None:
        return
    _lazy_init()
    _C._set_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Context manager that makes a stream current (and its device, while inside), as torch.cuda.StreamContext."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.device_ctx = _device_ctx(stream.device_index) if stream is not None else None
        self.prev_on_device = None
        self.prev_on_current = None

    def __enter__(self):
        if self.stream is None:
            return
        self.prev_on_current = current_stream()
        self.device_ctx.__enter__()
        self.prev_on_device = current_stream(self.stream.device_index)
        set_stream(self.stream)

    def __exit__(self, *args):
        if self.stream is None:
            return False
        set_stream(self.prev_on_device)
        self.device_ctx.__exit__(*args)
        set_stream(self.prev_on_current)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)


def _capturing(stream: torch.Stream) -> bool:
    from .graphs import _capturing as captures  # graphs imports this module

    return (stream.device_index, stream.stream_id) in captures


class ExternalEvent:
    """torch_npu's ExternalEvent: an event recorded and waited on explicitly, and reset for reuse (ACL's external
    events, made for graph capture). record/wait order streams as Event's do; after reset(), a wait does not wait
    until the next record (the event is a fresh, unrecorded one).

    Inside an NPU graph capture they are not recorded in the graph: torch_npu captures a wait on an external event
    before a task group, so that a replay waits for the group's update on another stream (graph_task_update_*);
    softnpu applies an update to the replays launched after it, which gives that order without a wait."""

    def __init__(self) -> None:
        self._event = Event()

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        stream = stream if stream is not None else current_stream()
        if not _capturing(stream):
            self._event.record(stream)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        stream = stream if stream is not None else current_stream()
        if not _capturing(stream):
            self._event.wait(stream)

    def reset(self, stream: Optional[torch.Stream] = None) -> None:
        # Work already ordered after the old event keeps its order; only later waits see the reset.
        self._event = Event()

    def query(self) -> bool:
        return self._event.query()


class SyncLaunchStream(Stream):
    """torch_npu's SyncLaunchStream: a stream whose launches bypass torch_npu's task queue (the host thread that
    feeds ACL's streams in the background) and reach the device stream from the calling thread. softnpu has no such
    queue: every launch reaches the runtime's stream from the calling thread, so a SyncLaunchStream is an ordinary
    stream of torch_npu's sync-launch pool (Stream(is_sync_launch=True): ids 64 to 67), asynchronous to the host as
    Ascend's device streams are, and usable wherever a Stream is."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs:  # wrapping an existing stream: stream_id, device_index, device_type
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=device, priority=priority, is_sync_launch=True)

    def __repr__(self) -> str:
        return f"<torch_npu.npu.SyncLaunchStream device={self.device} stream_id={self.stream_id}>"
