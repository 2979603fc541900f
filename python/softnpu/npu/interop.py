"""torch.npu's interoperability calls with torch.cuda's names: peer access, IPC collection, the BLAS handle."""

from typing import Any

from .device import _device_index, _lazy_init, device_count


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """True between two distinct npu devices: every softnpu device reads every other's memory (device-to-device
    copies go straight through the runtime). A device is not its own peer, as in CUDA."""
    _lazy_init()
    d, p = _device_index(device), _device_index(peer_device)
    for i in (d, p):
        if not 0 <= i < device_count():
            raise AssertionError(f"Invalid device id {i}")
    return d != p


def ipc_collect() -> None:
    """Frees memory of tensors other processes received over IPC once they dropped them. npu tensors cannot be
    shared across processes (the software device's memory is private to its process), so there is none to free."""
    _lazy_init()


def current_blas_handle() -> int:
    """The BLAS handle of the current stream. softnpu's matrix kernels are ATen's CPU BLAS, which has no handle
    object: 0, as torch.cuda returns for a handle it does not own."""
    _lazy_init()
    return 0
