"""torch.npu._fault: the chip's failures on demand, so that recovery code can be tested (issue 37).

Each fault enters through the runtime's own paths (the C seam's snpuFaultInject: the stream executor, snpuMalloc) or
the hccl backend, and fails as the real one does on torch_npu:

- ``kernel_error``: the ``at``-th kernel from now on (of ``device``, of ``stream``) fails with Ascend's code (default
  507015, an AI core exception): RuntimeError at the next synchronizing call ("EZ9999: Inner Error!", the code).
- ``uce``: an uncorrectable memory error in a range of device memory (``tensor=``, or ``ptr=`` and ``size=``), from
  now until torch.npu.restart_device repairs it (``at`` is not used): every kernel whose operands touch the range, and
  every copy reading it, fails with RuntimeError "UCE ERROR" (507053) at the next synchronizing call, the error naming
  the op and the operands hit; kernels not touching it run. torch.npu.check_uce_in_memory reports it, tensors_hit and
  torch.npu._get_uce_addr list what it hit.
- ``hang``: from the ``at``-th task on, the device's tasks never complete; host waits block (Ctrl-C still works)
  until torch.npu.stop_device, which fails them with "FORCE STOP" (107022).
- ``oom``: the ``at``-th device allocation of at least ``size`` bytes fails, and its retries of that size, until a
  smaller one succeeds: torch.OutOfMemoryError with torch_npu's message; what was allocated stays intact.
- ``slow``: each kernel on the device starts ``delay`` seconds late (a slow rank).
- ``hccl_timeout``: the ``at``-th hccl collective of this process from now on (or of op ``op``: ``all_reduce``,
  ``broadcast``, ... as torch.distributed names them) never starts: its peers fail when HCCL_EXEC_TIMEOUT runs out
  with HCCL's "EI0002" timeout (error code 507048), and so does this rank's own Work (a stuck rank on Ascend).
- ``dead_peer``: this process dies (SIGKILL) in that collective, as a crashed or killed rank does; its peers fail at
  once with EI0002 and HCCL's "Heartbeat Lost Occurred ... Process has exited" report (Ascend's heartbeat notices the
  loss within 30 s and fails the collective at HCCL_EXEC_TIMEOUT; here the closed connection tells at once).
  csrc/backend/c10d/collective_fault.h says how both enter the hccl backend.

``rank=`` restricts a fault to the process whose RANK it is (torchrun's environment). ``SOFTNPU_FAULT`` injects
faults at initialization, in the same words: ``kind[,key=value...]`` separated by ``;``, e.g.
``SOFTNPU_FAULT="oom,at=5;kernel_error,at=100,device=1,rank=0;dead_peer,op=all_reduce,at=3,rank=1"`` (keys: at,
device, rank, code, size, delay, op).
"""
import ctypes
import os
from typing import Iterable, List, Optional, Tuple

import torch

from .. import _C

__all__ = ["inject", "clear", "uce_ranges", "tensors_hit", "KINDS"]

KINDS = ("kernel_error", "uce", "hang", "oom", "slow", "hccl_timeout", "dead_peer")
_RUNTIME_KIND = {"kernel_error": 1, "uce": 2, "hang": 3, "oom": 4, "slow": 5}
_HCCL_KIND = {"hccl_timeout": 1, "dead_peer": 2}  # armed in the hccl backend (softnpu._c10d), not the runtime
_ENV_KEYS = ("at", "device", "rank", "code", "size", "delay", "op")


class _Fault(ctypes.Structure):  # runtime.h's snpuFault
    _fields_ = [
        ("kind", ctypes.c_int),
        ("device", ctypes.c_int),
        ("stream_id", ctypes.c_int64),
        ("at", ctypes.c_uint64),
        ("code", ctypes.c_int),
        ("message", ctypes.c_char_p),
        ("ptr", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("delay_us", ctypes.c_uint64),
    ]


_lib = None


def _runtime():
    """The runtime's C seam (libsoftnpu_runtime.so, already loaded by softnpu._C)."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.dirname(__file__)), "lib", "libsoftnpu_runtime.so"))
        lib.snpuFaultInject.argtypes = [ctypes.POINTER(_Fault)]
        lib.snpuDeviceGetUceInfo.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_size_t)]
        lib.snpuGetLastErrorMessage.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def _check(err: int, what: str) -> None:
    if err != 0:
        msg = _runtime().snpuGetLastErrorMessage().decode()
        raise (ValueError if err in (2, 3) else RuntimeError)(f"{what}: {msg}")


def _this_rank() -> Optional[int]:
    rank = os.environ.get("RANK")
    return int(rank) if rank is not None and rank.lstrip("-").isdigit() else None


def inject(kind: str, *, at: int = 1, device: Optional[int] = None, stream=None, rank: Optional[int] = None,
           code: Optional[int] = None, message: Optional[str] = None, tensor: Optional[torch.Tensor] = None,
           ptr: Optional[int] = None, size: Optional[int] = None, delay: Optional[float] = None,
           op: Optional[str] = None) -> None:
    """Arms a fault (see the module's table). ``at`` counts from now: 1 is the next kernel, task, allocation or
    collective. ``device`` defaults to the current device (every device for kernel_error and oom when None is
    meant: pass -1); ``stream`` (a torch.npu.Stream) restricts a kernel error to one stream; ``op`` restricts an
    hccl fault to one collective op."""
    if kind not in KINDS:
        raise ValueError(f"torch.npu._fault.inject: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if at < 1:
        raise ValueError(f"torch.npu._fault.inject: at counts from 1 (the next event), got {at}")
    if op is not None and kind not in _HCCL_KIND:
        raise ValueError(f"torch.npu._fault.inject: op= applies to the hccl kinds ({', '.join(_HCCL_KIND)}), "
                         f"not {kind!r}")
    if rank is not None and rank != _this_rank():
        return
    if kind in _HCCL_KIND:
        _c10d()._inject_fault(_HCCL_KIND[kind], at, op or "")
        return
    from . import current_device, _lazy_init

    _lazy_init()
    if tensor is not None:
        device = tensor.device.index
        ptr = tensor.untyped_storage().data_ptr() + tensor.storage_offset() * tensor.element_size()
        size = tensor.numel() * tensor.element_size()
    if device is None:
        device = current_device()
    f = _Fault(kind=_RUNTIME_KIND[kind], device=device, stream_id=-1, at=at, code=code or 0,
               message=message.encode() if message else None, ptr=ptr or 0, size=size or 0,
               delay_us=int((delay or 0) * 1e6))
    if stream is not None:
        f.stream_id = _C._runtime_stream_id(stream.stream_id, stream.device_index)
    if kind == "uce" and not (ptr and size):
        raise ValueError("torch.npu._fault.inject: a uce needs tensor= or ptr= and size=")
    _check(_runtime().snpuFaultInject(ctypes.byref(f)), f"torch.npu._fault.inject({kind!r})")


def clear() -> None:
    """Disarms every fault not yet fired (hccl faults included) and ends slow devices. UCE ranges, hangs and stops
    stay until torch.npu.restart_device (they are the device's state, not armed faults)."""
    _runtime().snpuFaultClear()
    if torch.distributed.is_available():
        _c10d()._clear_faults()


def _c10d():
    """The hccl backend's module (softnpu._c10d needs torch.distributed imported first)."""
    import torch.distributed  # noqa: F401
    from .. import _c10d

    return _c10d


def uce_ranges(device: Optional[int] = None) -> List[Tuple[int, int]]:
    """The device's memory ranges with an uncorrectable error, as (address, size) (aclrtGetMemUceInfo)."""
    from . import current_device

    device = current_device() if device is None else device
    cap = 128  # MAX_MEM_UCE_INFO_ARRAY_SIZE
    addrs, sizes, count = (ctypes.c_void_p * cap)(), (ctypes.c_size_t * cap)(), ctypes.c_size_t(0)
    _check(_runtime().snpuDeviceGetUceInfo(device, addrs, sizes, cap, ctypes.byref(count)), "uce_ranges")
    return [(addrs[i] or 0, sizes[i]) for i in range(count.value)]


def tensors_hit(tensors: Iterable[torch.Tensor]) -> List[int]:
    """Indices of the tensors whose storage overlaps a UCE range of its device (the tensors a recovery restores)."""
    ranges = {}
    hit = []
    for i, t in enumerate(tensors):
        if t.device.type != "npu":
            continue
        if t.device.index not in ranges:
            ranges[t.device.index] = uce_ranges(t.device.index)
        storage = t.untyped_storage()
        start, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        if any(start < a + n and a < end for a, n in ranges[t.device.index]):
            hit.append(i)
    return hit


def _apply_environment() -> None:
    """Injects the faults SOFTNPU_FAULT names (called once, when torch.npu initializes)."""
    text = os.environ.get("SOFTNPU_FAULT", "").strip()
    for spec in filter(None, (s.strip() for s in text.split(";"))):
        kind, *pairs = [p.strip() for p in spec.split(",")]
        kwargs = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in _ENV_KEYS:
                raise ValueError(f"SOFTNPU_FAULT='{text}' is not valid: expected kind[,key=value...] separated by "
                                 f"';' with keys {', '.join(_ENV_KEYS)}; got {pair!r}")
            if key == "op":
                kwargs[key] = value
                continue
            try:
                kwargs[key] = float(value) if key == "delay" else int(value)
            except ValueError:
                raise ValueError(f"SOFTNPU_FAULT='{text}' is not valid: {key} must be a number, got {value!r}")
        if kind not in KINDS:
            raise ValueError(f"SOFTNPU_FAULT='{text}' is not valid: unknown kind {kind!r}; expected one of "
                             f"{', '.join(KINDS)}")
        try:
            inject(kind, **kwargs)
        except ValueError as e:
            raise ValueError(f"SOFTNPU_FAULT='{text}' is not valid: {e}") from None
