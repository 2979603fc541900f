"""torch.npu's interoperability calls with torch.cuda's names: peer access, IPC collection, the BLAS handle (None)."""

import warnings
from typing import Any

from .. import _C
from .device import _device_index, _lazy_init, device_count


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """True between two distinct npu devices: every softnpu device reads every other's memory (device-to-device
    copies go straight through the runtime). A device is not its own peer, as in CUDA."""
    _lazy_init()
    d, p = _device_index(device), _device_index(peer_device)
    if not 0 <= d < device_count():
        raise AssertionError(f"Invalid device id {d}")
    if not 0 <= p < device_count():
        raise AssertionError(f"Invalid peer device id {p}")
    return d != p


def ipc_collect() -> None:
    """Frees the device memory of npu tensors this process sent to others (torch.multiprocessing) once every
    receiver dropped them, as torch.cuda.ipc_collect does (until then the blocks stay out of the cache)."""
    _lazy_init()
    _C._ipc_collect()


def current_blas_handle() -> None:
    """torch_npu's answer: an NPU has no cuBLAS-style handle (softnpu's matrix kernels are ATen's CPU BLAS, which has
    none either), so None, with a warning."""
    warnings.warn("NPU does not use blas handle.")
    return None
