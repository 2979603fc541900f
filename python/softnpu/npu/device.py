"""Devices: counting, selecting, properties, synchronization (torch.cuda's device functions, for npu)."""

import atexit
import os
import re
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch

from .. import _C
from ..error_code import ErrCode, pta_error

_initialized = False
_init_lock = threading.Lock()


def _is_in_bad_fork() -> bool:
    """Whether this is a child forked after the runtime was initialized (torch.cuda's bad fork). The runtime's compute
    threads exist only in the parent, so the runtime refuses every npu use here, tensor ops and copies included."""
    return _C._is_in_bad_fork()


def _lazy_init() -> None:
    global _initialized
    if is_initialized():
        return
    if _is_in_bad_fork():  # before the lock, which a parent's thread may have held when it forked
        raise RuntimeError(
            "Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, you must use the "
            "'spawn' start method" + pta_error(ErrCode.UNAVAIL)
        )
    with _init_lock:
        if is_initialized():
            return
        from .acl_init import initialize as _acl_initialize

        _acl_initialize()  # torch_npu's checks before aclInit: TORCH_ACL_INIT_CONFIG_PATH, ACL_OP_INIT_MODE
        _C._init()  # a malformed SOFTNPU_*/ASCEND_* variable raises here, named
        _initialized = True
        from .memory import _install_oom_snapshot

        _install_oom_snapshot()
        from ..distributed import _check_environment
        from .fault import _apply_environment

        _check_environment()
        _apply_environment()
        atexit.register(_drain_autograd_device_threads)


def _drain_autograd_device_threads() -> None:
    """At exit, lets the autograd engine's npu threads drop the last backward's graph task before Python finalizes.

    torch.autograd.backward stashes a Python object (its contextvars context) in the thread-local state each graph
    task captures. The device thread that ran a backward's last npu node may still hold the task when the main thread
    has returned and the interpreter finalizes; dropping it then takes the GIL from a thread Python no longer lets
    in, which ends the process with "terminate called without an active exception" (exit status 134, about one run
    in three after any backward on npu). A backward of one node on each device's thread, run through the engine
    directly (no stashed object), completes only after that thread has let go of the previous task, and its own task
    holds nothing of Python's.
    """
    if not is_initialized() or _is_in_bad_fork():
        return
    engine = torch.autograd.Variable._execution_engine
    try:
        for index in range(device_count()):
            x = torch.zeros((), device=torch.device("npu", index), requires_grad=True)
            engine.run_backward((x * 1,), (torch.ones_like(x),), False, False, (), True, True)
    except RuntimeError:  # exiting: a device that cannot run this (stopped, failed) has no backward to drain either
        pass


def _device_index(device: Any, optional: bool = False) -> int:
    """The index of an npu device given as int, str, torch.device or None (the current device)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}" + pta_error(ErrCode.VALUE))
        device = device.index
    if device is None:
        if optional:
            return current_device()
        raise ValueError("Expected a npu device with an index, got None" + pta_error(ErrCode.VALUE))
    if not isinstance(device, int):
        raise ValueError(f"Expected an int, str or torch.device for a npu device, got {type(device).__name__}"
                         + pta_error(ErrCode.VALUE))
    return device


def is_available() -> bool:
    """Whether an npu device can be used (never raises)."""
    if _is_in_bad_fork():
        return False
    return _C._device_count_noexcept() > 0


def is_initialized() -> bool:
    # As torch.cuda: a forked child of an initialized process is not initialized (and cannot be).
    return _initialized and not _is_in_bad_fork()


def init() -> None:
    """Initializes the npu runtime (done lazily by the first use otherwise)."""
    _lazy_init()


def device_count() -> int:
    if _is_in_bad_fork():
        return 0
    return _C._device_count_noexcept()


def current_device() -> int:
    _lazy_init()
    return _C._current_device()


def set_device(device: Any) -> None:
    """Sets the current device. A negative index does nothing, as in CUDA."""
    index = _device_index(device, optional=True)
    if index >= 0:
        _lazy_init()
        _C._set_device(index)


class device:
    """Context manager that changes the current device (torch.cuda.device)."""

    def __init__(self, device: Any):
        self.idx = _device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            _lazy_init()
            self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *args):
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of a tensor current (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.is_npu else -1)


def synchronize(device: Any = None) -> None:
    """Waits for all work on every stream of the device; raises the first kernel error not yet reported."""
    _lazy_init()
    _C._synchronize(_device_index(device, optional=True))


class _CUuuid:
    """A device's UUID, as torch.cuda's and torch_npu's: str() in the 8-4-4-4-12 form, .bytes its 16 bytes."""

    __slots__ = ("_uuid",)

    def __init__(self, value: uuid.UUID):
        self._uuid = value

    @property
    def bytes(self) -> list[int]:
        return list(self._uuid.bytes)

    def __str__(self) -> str:
        return str(self._uuid)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CUuuid) and other._uuid == self._uuid

    def __hash__(self) -> int:
        return hash(self._uuid)


def _device_uuid(physical_index: int) -> _CUuuid:
    # Names the physical device, not its number in this process (ASCEND_RT_VISIBLE_DEVICES renumbers): the same in
    # every process on this host, distinct per device and per host.
    return _CUuuid(uuid.uuid5(uuid.NAMESPACE_OID, f"softnpu/{uuid.getnode():012x}/{physical_index}"))


@dataclass(frozen=True)
class _NPUDeviceProperties:
    """The device as the chip it presents (SOFTNPU_SOC_VERSION): name, cores and L2 are the SoC profile's; the host
    threads that actually run its kernels (SOFTNPU_CORES) are `softnpu report`'s business, not the chip's. The
    fields torch_npu keeps for torch.cuda's callers but an NPU has no value for (a compute capability, warps,
    registers, ...) are None, as torch_npu's."""

    name: str  # the SoC, as torch_npu's: "Ascend910B3"
    total_memory: int
    cube_core_num: int  # the chip's AI (cube) cores
    vector_core_num: int
    multi_processor_count: int  # torch_npu's: the vector cores (the units DataParallel's balance check counts)
    L2_cache_size: int  # bytes
    uuid: _CUuuid
    soc_version: int  # torch_npu's SocVersion number (get_soc_version())
    clock_rate: int  # kHz, as CUDA's cudaDeviceProp::clockRate: the software device counts 1 GHz (a cycle per ns)
    physical_index: int
    major: None = None
    minor: None = None
    is_multi_gpu_board: None = None
    is_integrated: None = None
    max_threads_per_multi_processor: None = None
    warp_size: None = None
    regs_per_multiprocessor: None = None
    gcnArchName: None = None

    def __repr__(self) -> str:  # torch_npu's form
        return (
            f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1 << 20)}MB, "
            f"cube_core_num={self.cube_core_num}, vector_core_num={self.vector_core_num}, uuid={self.uuid}, "
            f"L2_cache_size={self.L2_cache_size // (1 << 20)}MB)"
        )


def get_device_properties(device: Any = None) -> _NPUDeviceProperties:
    _lazy_init()
    p = _C._get_device_properties(_device_index(device, optional=True))
    return _NPUDeviceProperties(
        name=p["name"],
        total_memory=p["total_memory"],
        cube_core_num=p["ai_cores"],
        vector_core_num=p["vector_cores"],
        multi_processor_count=p["vector_cores"] or p["ai_cores"],
        L2_cache_size=_C._soc_profile()["l2_bytes"],
        uuid=_device_uuid(p["physical_index"]),
        soc_version=p["soc_version"],
        clock_rate=p["clock_rate_khz"],
        physical_index=p["physical_index"],
    )


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_soc_version() -> int:
    """torch_npu's number of the chip the devices present as (c10_npu::SocVersion: 220-225 a 910B, 250-255 an A3,
    200-205 a 310P), as torch_npu.npu.get_soc_version(). Read from the SoC profile, without initializing npu."""
    return _C._soc_profile()["soc_version"]


_CAPABILITY_NOTE = ("The return value of get_device_capability is only for compatibility with PyTorch and does not "
                    "represent the actual capability of the NPU device.")


def get_device_capability(device: Any = None) -> Optional[tuple[int, int]]:
    """torch_npu's answer: an NPU has no CUDA compute capability, so None (with a warning), unless
    TORCH_NPU_DEVICE_CAPABILITY says "major.minor" for code that insists on one (read at every call, for every
    device). A value not of that form is warned about and None returned."""
    configured = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY")
    if not configured:
        warnings.warn("You can set the device capability via the environment variable TORCH_NPU_DEVICE_CAPABILITY. "
                      + _CAPABILITY_NOTE)
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)", configured)
    if match is None:
        warnings.warn(f"torch.npu.get_device_capability can't parse TORCH_NPU_DEVICE_CAPABILITY environment variable: "
                      f"{configured}. Expected format is 'major.minor' where major and minor are non-negative integers "
                      "(e.g., '8.0').")
        return None
    warnings.warn(_CAPABILITY_NOTE)
    return int(match.group(1)), int(match.group(2))


_utilization_samples: dict[int, tuple[float, int]] = {}


def utilization(device: Any = None) -> int:
    """Percent of time, since the previous call for the device (over 0.1 s at the first), that its compute threads
    were running kernels, as torch.cuda.utilization reports the GPU's."""
    _lazy_init()
    index = _device_index(device, optional=True)
    threads = _C._get_device_properties(index)["compute_threads"]
    now, busy = time.monotonic(), _C._runtime_stats(index)["busy_ns"]
    if index not in _utilization_samples:
        time.sleep(0.1)
        _utilization_samples[index] = (now, busy)
        now, busy = time.monotonic(), _C._runtime_stats(index)["busy_ns"]
    t0, b0 = _utilization_samples[index]
    _utilization_samples[index] = (now, busy)
    elapsed_ns = max((now - t0) * 1e9, 1.0)
    return int(min(100.0, 100.0 * (busy - b0) / (elapsed_ns * threads)))
