"""torch.npu._gpu_trace: the callbacks c10's GPUTrace fires for npu (as torch.cuda._gpu_trace for CUDA).

torch's Python interpreter hook calls ``torch.<device>._gpu_trace.<Name>Callbacks.fire_callbacks(...)``; the backend
reports through it (csrc/backend/gpu_trace.h) once ``torch._C._activate_gpu_trace()`` was called. Events are runtime
event handles; streams are runtime stream handles (``stream_key``: torch.npu.Stream.npu_stream).
"""

from collections.abc import Callable

from torch._utils import CallbackRegistry

from .. import _C

EventCreationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU event creation")
EventDeletionCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU event deletion")
EventRecordCallbacks: "CallbackRegistry[int, int]" = CallbackRegistry("NPU event record")
EventWaitCallbacks: "CallbackRegistry[int, int]" = CallbackRegistry("NPU event wait")
MemoryAllocationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU memory allocation")
MemoryDeallocationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU memory deallocation")
StreamCreationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU stream creation")
DeviceSynchronizationCallbacks: "CallbackRegistry[[]]" = CallbackRegistry("NPU device synchronization")
StreamSynchronizationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU stream synchronization")
EventSynchronizationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("NPU event synchronization")


def stream_key(device_index: int, stream_id: int) -> int:
    """The key the backend reports a stream by (gpu_trace.h's stream_key): its runtime handle."""
    return _C._stream_handle(stream_id, device_index)


def register_callback_for_event_creation(cb: Callable[[int], None]) -> None:
    EventCreationCallbacks.add_callback(cb)


def register_callback_for_event_deletion(cb: Callable[[int], None]) -> None:
    EventDeletionCallbacks.add_callback(cb)


def register_callback_for_event_record(cb: Callable[[int, int], None]) -> None:
    EventRecordCallbacks.add_callback(cb)


def register_callback_for_event_wait(cb: Callable[[int, int], None]) -> None:
    EventWaitCallbacks.add_callback(cb)


def register_callback_for_memory_allocation(cb: Callable[[int], None]) -> None:
    MemoryAllocationCallbacks.add_callback(cb)


def register_callback_for_memory_deallocation(cb: Callable[[int], None]) -> None:
    MemoryDeallocationCallbacks.add_callback(cb)


def register_callback_for_stream_creation(cb: Callable[[int], None]) -> None:
    StreamCreationCallbacks.add_callback(cb)


def register_callback_for_device_synchronization(cb: Callable[[], None]) -> None:
    DeviceSynchronizationCallbacks.add_callback(cb)


def register_callback_for_stream_synchronization(cb: Callable[[int], None]) -> None:
    StreamSynchronizationCallbacks.add_callback(cb)


def register_callback_for_event_synchronization(cb: Callable[[int], None]) -> None:
    EventSynchronizationCallbacks.add_callback(cb)
