"""torch_npu.utils._npu_trace: the callbacks the npu device reports to, and what the sanitizer registers in them.

Two kinds of reports, as torch_npu's:
- the stream check's (``[stream check]``): event creation, deletion, record and wait, memory allocation and
  deallocation, stream creation, device, stream and event synchronization, record_stream and eraseStream. The
  backend reports events, synchronizations and allocations through c10's GPUTrace, which calls
  ``torch.npu._gpu_trace.<Name>Callbacks`` (the same registries as these); deallocations, record_stream and eraseStream
  are queued by the allocator from whatever thread frees (csrc/backend/gpu_trace.h) and delivered here, in the order
  they happened, before the next report and before each op the sanitizer records (``deliver_allocator_records``).
- the kernel check's (``[kernel check]``): the start and the end of each operator's execution on the device.

Streams are reported by their runtime handle (torch.npu.Stream.npu_stream), events and memory by their addresses.
"""

import os
from collections.abc import Callable, Iterable

from . import _C
from .print_log import _print_error_log


def print_check_msg(msg: str) -> None:
    """The sanitizer's messages on stdout, tagged with the process id (torch_npu's format)."""
    print(f"[sanitizer]({os.getpid()}) {msg}")


class CallbackRegistry:
    """Named callbacks of one report. A callback that raises is logged and the others still run (a sanitizer bug must
    not break the program); registering a name again replaces its callback, so a sanitizer enabled anew does not leave
    its previous handler listening."""

    def __init__(self, name: str):
        self.name = name
        self.callback_list: list[tuple[Callable, str]] = []

    def add_callback(self, cb: Callable, cb_name: str) -> None:
        self.remove_callback(cb_name)
        self.callback_list.append((cb, cb_name))

    def remove_callback(self, cb_name: str) -> None:
        self.callback_list = [(cb, name) for cb, name in self.callback_list if name != cb_name]

    def fire_callbacks(self, *args, **kwargs) -> None:
        for cb, cb_name in self.callback_list:
            try:
                cb(*args, **kwargs)
            except Exception as e:  # noqa: BLE001  (reported, never raised into the device's report)
                _print_error_log(f"Exception in callback {cb_name} for {self.name} registered with NPU trace: {e!r}")


class _GPUTraceRegistry(CallbackRegistry):
    """A report c10's GPUTrace delivers: the allocator's queued records come first, since they happened before it (a
    block is queued as freed before it can be allocated again)."""

    def fire_callbacks(self, *args, **kwargs) -> None:
        deliver_allocator_records()
        super().fire_callbacks(*args, **kwargs)


NPUACLStartExecuteCallbacks = CallbackRegistry("[kernel check] NPU acl start execution")
NPUACLFinishExecuteCallbacks = CallbackRegistry("[kernel check] NPU acl finish execution")
NPUEventCreationCallbacks = _GPUTraceRegistry("[stream check] NPU event creation")
NPUEventDeletionCallbacks = _GPUTraceRegistry("[stream check] NPU event deletion")
NPUEventRecordCallbacks = _GPUTraceRegistry("[stream check] NPU event record")
NPUEventWaitCallbacks = _GPUTraceRegistry("[stream check] NPU event wait")
NPUMemoryAllocationCallbacks = _GPUTraceRegistry("[stream check] NPU memory allocation")
NPUMemoryDeallocationCallbacks = CallbackRegistry("[stream check] NPU memory deallocation")
NPUStreamCreationCallbacks = _GPUTraceRegistry("[stream check] NPU stream creation")
NPUDeviceSynchronizationCallbacks = _GPUTraceRegistry("[stream check] NPU device synchronization")
NPUStreamSynchronizationCallbacks = _GPUTraceRegistry("[stream check] NPU stream synchronization")
NPUEventSynchronizationCallbacks = _GPUTraceRegistry("[stream check] NPU event synchronization")
NPURecordStreamCallbacks = CallbackRegistry("[stream check] NPU record_stream")
NPUEraseStreamCallbacks = CallbackRegistry("[stream check] NPU erase_stream")

# The allocator's record kinds (gpu_trace.h's AllocatorRecordKind), in its order.
_ALLOCATOR_RECORDS = (
    lambda ptr, stream: NPUMemoryDeallocationCallbacks.fire_callbacks(ptr),
    NPURecordStreamCallbacks.fire_callbacks,
    NPUEraseStreamCallbacks.fire_callbacks,
)


def queue_allocator_records(enabled: bool) -> None:
    """Whether the allocator queues its deallocations, record_stream and eraseStream calls for these callbacks (the
    stream check turns it on while it listens; nothing is queued otherwise)."""
    _C._npu_trace_queue_allocator_records(enabled)


def deliver_allocator_records(settle_streams: Iterable[int] = ()) -> None:
    """Fires the callbacks of the allocator's records queued so far. With settle_streams (stream handles), first waits
    until those streams' launched kernels have run, without synchronizing with them: a tensor the host dropped while a
    kernel used it is freed when that kernel has run (its launch record holds it), so its deallocation is delivered
    too."""
    for kind, ptr, stream in _C._npu_trace_take_allocator_records(list(settle_streams)):
        _ALLOCATOR_RECORDS[kind](ptr, stream)


def register_callback_for_acl_start_execution(cb: Callable[[str], None], cb_name: str) -> None:
    NPUACLStartExecuteCallbacks.add_callback(cb, cb_name)


def register_callback_for_acl_finish_execution(cb: Callable[[str], None], cb_name: str) -> None:
    NPUACLFinishExecuteCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_creation(cb: Callable[[int], None], cb_name: str) -> None:
    NPUEventCreationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_deletion(cb: Callable[[int], None], cb_name: str) -> None:
    NPUEventDeletionCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_record(cb: Callable[[int, int], None], cb_name: str) -> None:
    NPUEventRecordCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_wait(cb: Callable[[int, int], None], cb_name: str) -> None:
    NPUEventWaitCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_memory_allocation(cb: Callable[[int], None], cb_name: str) -> None:
    NPUMemoryAllocationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_memory_deallocation(cb: Callable[[int], None], cb_name: str) -> None:
    NPUMemoryDeallocationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_stream_creation(cb: Callable[[int], None], cb_name: str) -> None:
    NPUStreamCreationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_device_synchronization(cb: Callable[[], None], cb_name: str) -> None:
    NPUDeviceSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_stream_synchronization(cb: Callable[[int], None], cb_name: str) -> None:
    NPUStreamSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_synchronization(cb: Callable[[int], None], cb_name: str) -> None:
    NPUEventSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_record_stream(cb: Callable[[int, int], None], cb_name: str) -> None:
    """cb(storage data_ptr, stream handle) for each Tensor.record_stream (and the allocator's recordStream)."""
    NPURecordStreamCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_erase_stream(cb: Callable[[int, int], None], cb_name: str) -> None:
    """cb(storage data_ptr, stream handle) for each eraseStream (torch_npu.erase_stream)."""
    NPUEraseStreamCallbacks.add_callback(cb, cb_name)
