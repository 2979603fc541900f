"""torch.npu._sanitizer (torch_npu.npu._sanitizer): the NPU sanitizer, enabled by ``TORCH_NPU_SANITIZER=1`` when softnpu
loads or by ``enable_npu_sanitizer()`` (best at the start of the program: what ran before is not known to it).

It runs in one of two modes (``SanitizerMode``), as torch_npu's:
- STREAM (the default): the stream check of torch_npu.npu._stream_check. ``NPUSanitizerDispatchMode`` records every
  op on npu tensors (and every kernel torch.compile built, ``compiled_kernel_launch``) with the stream it runs on;
  the device's reports reach the event handler through torch_npu.utils._npu_trace's callbacks. A data race between
  streams is printed to stderr with both accesses' ops, streams and stacks, and ``NPUSanitizerErrors`` is raised from
  the op that made the second access; missing ``record_stream`` calls are reported at deallocation
  (``event_handler.record_stream_errors``) and by ``event_handler.flush_record_stream_warnings()``.
- KERNEL (ASCEND_OPP_DEBUG_PATH set): the kernel check of torch_npu.npu._kernel_check, which traces each op's start
  and end with the Python stack that launched it.
"""

import atexit
import os
from typing import Any, Optional

import torch

from .. import npu_trace
from . import _kernel_check as kernel_check
from . import _stream_check as stream_check
from ..print_log import _print_warn_log
from ._stream_check import NPUSanitizerErrors  # noqa: F401  (torch.npu._sanitizer.NPUSanitizerErrors)


class SanitizerMode:
    STREAM = 0
    KERNEL = 1


# The stream check's callbacks: (register function of torch_npu.utils._npu_trace, handler method).
_STREAM_CHECK_CALLBACKS = (
    ("register_callback_for_npu_event_creation", "_handle_event_creation"),
    ("register_callback_for_npu_event_deletion", "_handle_event_deletion"),
    ("register_callback_for_npu_event_record", "_handle_event_record"),
    ("register_callback_for_npu_event_wait", "_handle_event_wait"),
    ("register_callback_for_npu_memory_allocation", "_handle_memory_allocation"),
    ("register_callback_for_npu_memory_deallocation", "_handle_memory_deallocation"),
    ("register_callback_for_npu_stream_creation", "_handle_stream_creation"),
    ("register_callback_for_npu_device_synchronization", "_handle_device_synchronization"),
    ("register_callback_for_npu_stream_synchronization", "_handle_stream_synchronization"),
    ("register_callback_for_npu_event_synchronization", "_handle_event_synchronization"),
    ("register_callback_for_npu_record_stream", "_handle_record_stream"),
    ("register_callback_for_npu_erase_stream", "_handle_erase_stream"),
)


class NPUSanitizer:
    """Holds the sanitizer's dispatch mode and event handler for the rest of the program once enabled."""

    def __init__(self) -> None:
        self.event_handler: Optional[Any] = None
        self.dispatch: Optional[torch.utils._python_dispatch.TorchDispatchMode] = None
        self.kernel_path_manager: Optional[kernel_check.KernelPathManager] = None
        self.mode = SanitizerMode.STREAM
        self.opp_debug_path = os.path.join(os.getcwd(), "opp_debug_path")
        self.enabled = False

    def enable(self) -> None:
        if self.enabled:
            return
        if os.getenv("ASCEND_OPP_DEBUG_PATH"):
            success = self.enable_kernel_check()
            self.mode = SanitizerMode.KERNEL
        else:
            success = self.enable_stream_check()
            self.mode = SanitizerMode.STREAM
        if success:
            if self.mode == SanitizerMode.STREAM:
                # The backend's reports through c10's GPUTrace, and the allocator's queued records.
                torch._C._activate_gpu_trace()
                npu_trace.queue_allocator_records(True)
            self.enabled = True

    def enable_kernel_check(self) -> bool:
        if not os.getenv("ASCEND_OPP_DEBUG_PATH"):
            _print_warn_log("ASCEND_OPP_DEBUG_PATH is not set! TORCH_NPU_SANITIZER takes no effect!")
            return False
        self.kernel_path_manager = kernel_check.KernelPathManager()
        self.opp_debug_path = self.kernel_path_manager.opp_debug_path
        if not os.path.exists(self.opp_debug_path):
            return False
        self.event_handler = kernel_check.EventHandler()
        npu_trace.register_callback_for_acl_start_execution(self.event_handler._handle_acl_start_execution,
                                                            "handle_acl_start_execution")
        npu_trace.register_callback_for_acl_finish_execution(self.event_handler._handle_acl_finish_execution,
                                                             "handle_acl_finish_execution")
        self.dispatch = kernel_check.KernelCheckDispatchMode()
        self.dispatch.__enter__()
        return True

    def enable_stream_check(self) -> bool:
        self.event_handler = stream_check.NPURecordStreamHandler()
        self.dispatch = stream_check.NPUSanitizerDispatchMode(self.event_handler)
        self.dispatch.__enter__()
        for register, method in _STREAM_CHECK_CALLBACKS:
            getattr(npu_trace, register)(getattr(self.event_handler, method), method.lstrip("_"))
        return True

    def disable(self) -> None:
        if not self.enabled:
            return
        self.dispatch.__exit__(None, None, None)
        self.dispatch = None  # exited: __del__ must not pop another mode
        if self.mode == SanitizerMode.STREAM:
            npu_trace.queue_allocator_records(False)
        self.enabled = False

    def __del__(self) -> None:
        # At interpreter exit the dispatch mode stack may be gone already.
        try:
            if self.dispatch:
                self.dispatch.__exit__(None, None, None)
        except Exception:  # noqa: BLE001
            pass

    def clear_debug_env(self) -> None:
        """Removes the kernel check's copy of the operator package (at exit)."""
        if self.kernel_path_manager:
            self.kernel_path_manager.clear_debug_env()


def compiled_kernel_launch(launch, kernel_name: str, device: int, argtypes):
    """The binding of a kernel compiled by torch.compile (softnpu.inductor.launch), seen by the sanitizer when it is
    enabled: the stream check records it as writing the tensors it takes as non-const pointers and reading those it
    takes as const; the kernel check traces its start and end as an op's."""
    if not npu_sanitizer.enabled:
        return launch
    if npu_sanitizer.mode == SanitizerMode.KERNEL:
        return kernel_check.traced_launch(launch, kernel_name, device)
    pointers = [t.strip().endswith("*") for t in argtypes]
    written = [p and not t.strip().startswith("const ") for p, t in zip(pointers, argtypes)]
    operator = f"compiled kernel {kernel_name}({', '.join(argtypes)})"

    def sanitized(*args):
        if not npu_sanitizer.enabled:  # disabled since the kernel was bound
            return launch(*args)
        arguments = stream_check.NPUArgumentHandler()
        for i, value in enumerate(args):
            if pointers[i]:
                arguments._handle_argument(value, written[i], False, f"arg{i}")
        if arguments.device is None:
            arguments.write_device = device
        return npu_sanitizer.dispatch.record_kernel(arguments, operator, lambda: launch(*args))

    return sanitized


def enable_npu_sanitizer() -> None:
    """Enables the sanitizer: the stream check (data races between streams, missing record_stream), or the kernel
    check when ASCEND_OPP_DEBUG_PATH is set. Enable it at the start of the program: what ran before is not known."""
    npu_sanitizer.enable()


npu_sanitizer = NPUSanitizer()

atexit.register(npu_sanitizer.clear_debug_env)
