"""torch_npu's resource limits: how many cube (AI) cores and vector cores the operators of a device, or of one stream,
may occupy (ACL's aclrtSetDeviceResLimit / aclrtSetStreamResLimit). On Ascend they partition the chip between
concurrent work; the limits are validated against the chip the devices present as (its SoC profile), kept per device
and per stream, and read back as torch_npu reads them. softnpu's kernels are scheduled on the device's compute threads
(SOFTNPU_CORES), which these limits do not divide.

As torch_npu: set_device_limit may be called once per process; a stream without limits of its own reports its
device's."""

from typing import Optional

from .. import _C
from .device import _lazy_init, device_count
from .streams import Stream

_CUBE, _VECTOR = "cube_core_num", "vector_core_num"
_device_limits: dict[int, dict[str, int]] = {}
_stream_limits: dict[tuple[int, int], dict[str, int]] = {}


def _chip_cores() -> dict[str, int]:
    profile = _C._soc_profile()
    return {_CUBE: profile["ai_cores"], _VECTOR: profile["vector_cores"]}


def _checked(kind: str, value: int) -> Optional[int]:
    if value == -1:  # torch_npu: -1 leaves that limit as it is
        return None
    most = _chip_cores()[kind]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise RuntimeError(f"{kind.replace('_num', '')} limit must be an int from 1 to {most} (the chip's "
                           f"{_C._soc_profile()['name']} has {most}), got {value!r}")
    return value


def _check_device(device) -> int:
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be an int, but got {type(device).__name__}")
    if device < 0 or device >= device_count():
        raise AssertionError("Invalid device id")
    return device


def _check_stream(stream) -> tuple[int, int]:
    if stream is None:
        raise AssertionError("stream cannot be None")
    if not isinstance(stream, Stream):
        raise AssertionError(f"stream should be torch_npu.npu.Stream, could not be {type(stream)}")
    return stream.device_index, stream.stream_id


class _CallOnce:
    """A function callable once per process, as torch_npu's set_device_limit: the first call counts even if its
    arguments are refused, and `called` says whether it happened (tests reset it to call again)."""

    def __init__(self, func):
        self.func = func
        self.called = False
        self.__name__, self.__doc__, self.__wrapped__ = func.__name__, func.__doc__, func

    def __call__(self, *args, **kwargs):
        if self.called:
            raise RuntimeError(f"Function '{self.func.__name__}' has already been called, You can only set this "
                               "interface once.")
        self.called = True
        return self.func(*args, **kwargs)


@_CallOnce
def set_device_limit(device: int, cube_num: int = -1, vector_num: int = -1) -> None:
    """Limits the cube and vector cores the operators of `device` may use (-1: unchanged). Once per process."""
    device = _check_device(device)
    _lazy_init()
    limits = {_CUBE: _checked(_CUBE, cube_num), _VECTOR: _checked(_VECTOR, vector_num)}
    _device_limits.setdefault(device, {}).update({k: v for k, v in limits.items() if v is not None})


def get_device_limit(device: int) -> dict[str, int]:
    """{"cube_core_num": ..., "vector_core_num": ...} for the device: its limits, else the chip's core counts."""
    device = _check_device(device)
    _lazy_init()
    return {**_chip_cores(), **_device_limits.get(device, {})}


def set_stream_limit(stream: Stream, cube_num: int = -1, vector_num: int = -1) -> None:
    """Limits the cores the operators launched on `stream` may use (-1: unchanged)."""
    key = _check_stream(stream)
    _lazy_init()
    limits = {_CUBE: _checked(_CUBE, cube_num), _VECTOR: _checked(_VECTOR, vector_num)}
    _stream_limits.setdefault(key, {}).update({k: v for k, v in limits.items() if v is not None})


def reset_stream_limit(stream: Stream) -> None:
    """The stream's operators follow the device's limits again."""
    _stream_limits.pop(_check_stream(stream), None)


def get_stream_limit(stream: Stream) -> dict[str, int]:
    """The stream's limits, else its device's."""
    device, stream_id = _check_stream(stream)
    _lazy_init()
    return {**get_device_limit(device), **_stream_limits.get((device, stream_id), {})}


__all__ = ["set_device_limit", "get_device_limit", "set_stream_limit", "reset_stream_limit", "get_stream_limit"]
