"""torch.npu._gpu_trace: where c10's GPUTrace reports npu's events (as torch.cuda._gpu_trace for CUDA).

torch's Python interpreter hook calls ``torch.<device>._gpu_trace.<Name>Callbacks.fire_callbacks(...)``; the backend
reports through it (csrc/backend/gpu_trace.h) once ``torch._C._activate_gpu_trace()`` was called. Each registry here is
torch_npu.utils._npu_trace's (softnpu.npu_trace), where the sanitizer registers: one set of callbacks. Events are
runtime event handles; streams are runtime stream handles (``stream_key``: torch.npu.Stream.npu_stream).
"""

from .. import _C
from .. import npu_trace as _npu_trace

EventCreationCallbacks = _npu_trace.NPUEventCreationCallbacks
EventDeletionCallbacks = _npu_trace.NPUEventDeletionCallbacks
EventRecordCallbacks = _npu_trace.NPUEventRecordCallbacks
EventWaitCallbacks = _npu_trace.NPUEventWaitCallbacks
MemoryAllocationCallbacks = _npu_trace.NPUMemoryAllocationCallbacks
MemoryDeallocationCallbacks = _npu_trace.NPUMemoryDeallocationCallbacks
StreamCreationCallbacks = _npu_trace.NPUStreamCreationCallbacks
DeviceSynchronizationCallbacks = _npu_trace.NPUDeviceSynchronizationCallbacks
StreamSynchronizationCallbacks = _npu_trace.NPUStreamSynchronizationCallbacks
EventSynchronizationCallbacks = _npu_trace.NPUEventSynchronizationCallbacks


def stream_key(device_index: int, stream_id: int) -> int:
    """The key the backend reports a stream by (gpu_trace.h's stream_key): its runtime handle."""
    return _C._stream_handle(stream_id, device_index)
