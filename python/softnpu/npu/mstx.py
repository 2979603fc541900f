"""torch_npu.npu.mstx: markers and ranges a program puts on the profiler's timeline (MindStudio Tools Extension).

    torch_npu.npu.mstx.mark("checkpoint saved")
    rid = torch_npu.npu.mstx.range_start("data loading")
    ...
    torch_npu.npu.mstx.range_end(rid)
    depth = torch_npu.npu.mstx.range_push("forward")   # a stack per domain and per thread, as NVTX's
    torch_npu.npu.mstx.range_pop()

They are recorded in the trace only while a profiler runs (nothing is done otherwise), as user annotations that the
Ascend exporter turns into trace_view.json events of category "mstx" when _ExperimentalConfig(msprof_tx=True); torch's
Chrome trace shows them as annotations "mstx::mark::<message>" and "mstx::range::<message>". A range may end on
another thread than it started. Each call goes through torch_npu._C._mstx (softnpu._C._mstx), as torch_npu's.

As torch_npu's, invalid arguments (an empty or non-str message or domain, a stream that is not an npu Stream) warn
and do nothing, returning the "no range" value: 0 for range_start, -1 for range_push and range_pop; a failing call
is logged, never raised. A stream is checked to exist; the markers themselves are host-side here (torch_npu places
those given a stream in the stream's order on the device).
"""

import functools
import warnings

from .. import _C
from ..utils import print_error_log
from .streams import Stream

__all__ = ["annotate", "mark", "mstx_range", "range_end", "range_pop", "range_push", "range_start"]


def _no_exception(default):
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except Exception as ex:  # torch_npu's mstx never fails the program it annotates
                print_error_log(f"Call {func.__name__} failed. Exception: {ex}")
                return default
        return wrapper
    return decorator


def _valid(value, what: str, func: str, allow_empty: bool = False) -> bool:
    if isinstance(value, str) and (allow_empty or value):
        return True
    warnings.warn(f"Invalid {what} for mstx.{func} function. Please provide a valid {what} string.")
    return False


def _stream_args(stream, func: str):
    """(stream_id, device_index, device_type) of a stream argument, or None (with a warning) for an invalid one."""
    if isinstance(stream, Stream):
        return stream.stream_id, stream.device_index, stream.device_type
    warnings.warn(f"Invalid stream for mstx.{func} function. Please provide a valid stream.")
    return None


@_no_exception(None)
def mark(message: str, stream=None, domain: str = "default") -> None:
    # torch_npu accepts an empty domain for mark (not for the ranges).
    if not _valid(message, "message", "mark") or not _valid(domain, "domain", "mark", allow_empty=True):
        return
    if not stream:
        _C._mstx._mark_on_host(message, domain)
        return
    args = _stream_args(stream, "mark")
    if args is not None:
        _C._mstx._mark(message, *args, domain)


@_no_exception(0)
def range_start(message: str, stream=None, domain: str = "default") -> int:
    """Opens a range; returns its id for range_end (0 when no profiler runs, as torch_npu's invalid id)."""
    if not _valid(message, "message", "range_start") or not _valid(domain, "domain", "range_start"):
        return 0
    if not stream:
        return _C._mstx._range_start_on_host(message, domain)
    args = _stream_args(stream, "range_start")
    return 0 if args is None else _C._mstx._range_start(message, *args, domain)


@_no_exception(None)
def range_end(range_id: int, domain: str = "default") -> None:
    if not isinstance(range_id, int):
        warnings.warn("Invalid range id for mstx.range_end function. Please provide the return value of "
                      "mstx.range_start.")
        return
    if _valid(domain, "domain", "range_end"):
        _C._mstx._range_end(range_id, domain)


@_no_exception(-1)
def range_push(message: str, stream=None, domain: str = "default") -> int:
    """Opens a range on this thread's stack of the domain; returns its level (0 for the outermost), or -1."""
    if not _valid(message, "message", "range_push") or not _valid(domain, "domain", "range_push"):
        return -1
    if not stream:
        return _C._mstx._range_push_on_host(message, domain)
    args = _stream_args(stream, "range_push")
    return -1 if args is None else _C._mstx._range_push(message, *args, domain)


@_no_exception(-1)
def range_pop(domain: str = "default") -> int:
    """Closes the innermost range this thread pushed in the domain; returns the depth left, or -1 if none was open."""
    if not _valid(domain, "domain", "range_pop"):
        return -1
    return _C._mstx._range_pop(domain)


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
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with mstx_range(self.message, self.stream, self.domain):
                return fn(*args, **kwargs)

        return wrapped


class annotate(mstx_range):
    """torch_npu's mstx.annotate: mstx_range whose message defaults, as a decorator, to the function's name."""

    def __init__(self, message: str = "", stream=None, domain: str = "default"):
        super().__init__(message, stream, domain)

    def __call__(self, fn):
        if not self.message:
            self.message = fn.__name__
        return super().__call__(fn)
