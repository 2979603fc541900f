"""torch_npu.npu.mstx: markers and ranges a program puts on the profiler's timeline (MindStudio Tools Extension).

    torch_npu.npu.mstx.mark("checkpoint saved")
    rid = torch_npu.npu.mstx.range_start("data loading")
    ...
    torch_npu.npu.mstx.range_end(rid)

They are recorded in the trace only while a profiler runs (nothing is done otherwise), as user annotations that the
Ascend exporter turns into trace_view.json events of category "mstx" when _ExperimentalConfig(msprof_tx=True); torch's
Chrome trace shows them as annotations "mstx::mark::<message>" and "mstx::range::<message>". A range may end on
another thread than it started. `stream` is accepted for torch_npu code: the markers are host-side here.
"""

import itertools
import threading

import torch

__all__ = ["mark", "mstx_range", "range_end", "range_start"]

_MARK = "mstx::mark::"
_RANGE = "mstx::range::"
_ids = itertools.count(1)
_open = {}
_lock = threading.Lock()


def _profiling() -> bool:
    return torch.autograd.profiler._is_profiler_enabled


def mark(message: str, stream=None, domain: str = "default") -> None:
    if not isinstance(message, str):
        raise TypeError(f"mstx.mark: message must be a str, got {type(message).__name__}")
    if _profiling():
        handle = torch.ops.profiler._record_function_enter_new(_MARK + message, None)
        torch.ops.profiler._record_function_exit._RecordFunction(handle)


def range_start(message: str, stream=None, domain: str = "default") -> int:
    """Opens a range; returns its id for range_end (0 when no profiler runs, as torch_npu's invalid id)."""
    if not isinstance(message, str):
        raise TypeError(f"mstx.range_start: message must be a str, got {type(message).__name__}")
    if not _profiling():
        return 0
    handle = torch.ops.profiler._record_function_enter_new(_RANGE + message, None)
    with _lock:
        range_id = next(_ids)
        _open[range_id] = handle
    return range_id


def range_end(range_id: int, domain: str = "default") -> None:
    with _lock:
        handle = _open.pop(range_id, None)
    if handle is not None:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)


class mstx_range:
    """A range as a context manager or decorator: ``with mstx.mstx_range("forward"): ...``."""

    def __init__(self, message: str, stream=None, domain: str = "default"):
        self.message, self.stream, self.domain = message, stream, domain
        self._id = 0

    def __enter__(self):
        self._id = range_start(self.message, self.stream, self.domain)
        return self

    def __exit__(self, *exc):
        range_end(self._id, self.domain)
        return False

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with mstx_range(self.message, self.stream, self.domain):
                return fn(*args, **kwargs)

        wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
        return wrapped
