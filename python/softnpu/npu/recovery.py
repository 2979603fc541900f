"""torch_npu's recovery hooks over the software NPU's faults (torch.npu._fault): check_uce_in_memory, stop_device,
restart_device, and torch.npu._recovery (the storages marked unsafe after a fault until the program restores them).

As on torch_npu (MindSpeed-LLM's and MindIO's recovery): after a UCE or a hang, ``stop_device`` aborts the device's
work ("FORCE STOP" at the waits), ``check_uce_in_memory`` says what the UCE hit (0 nothing, 1 memory torch_npu does
not use, 2 its cached free memory, 3 memory of live tensors), ``_recovery.mark_all_npu_tensor_unsafe`` marks the
live storages, ``restart_device`` makes the device usable again (its memory repaired), and the program rebuilds what
was hit (from a replica or a checkpoint), marking it safe again with ``update_npu_tensor_to_safe``."""
import threading
from typing import Set, Tuple

import torch

from . import fault

__all__ = ["check_uce_in_memory", "stop_device", "restart_device", "_get_uce_addr"]

# check_uce_in_memory's answers (torch_npu's documented values).
UCE_NONE, UCE_NOT_PTA_MEMORY, UCE_PTA_TEMPORARY_MEMORY, UCE_PTA_RESIDENT_MEMORY = 0, 1, 2, 3


def _in_caching_allocator(device_id: int, ranges) -> bool:
    """Whether a UCE range overlaps a segment the caching allocator holds on the device (torch_npu's
    checkUceInMemPool)."""
    from .memory import memory_snapshot

    for segment in memory_snapshot():
        start = segment["address"]
        end = start + segment["total_size"]
        if segment["device"] == device_id and any(start < a + n and a < end for a, n in ranges):
            return True
    return False


def check_uce_in_memory(device_id: int) -> int:
    """As torch_npu: 0 no UCE on the device; 1 a UCE in memory the caching allocator does not hold (no recovery);
    2 in memory it only cached: emptying the cache (which this does, as torch_npu's) gives it back, so the step can be
    redone; 3 in memory of live tensors: what they hold must be rebuilt (a replica, a checkpoint)."""
    ranges = fault.uce_ranges(device_id)
    if not ranges:
        return UCE_NONE
    if not _in_caching_allocator(device_id, ranges):
        return UCE_NOT_PTA_MEMORY
    torch.npu.empty_cache()
    return UCE_PTA_RESIDENT_MEMORY if _in_caching_allocator(device_id, ranges) else UCE_PTA_TEMPORARY_MEMORY


def _get_uce_addr():
    """torch_npu.npu._get_uce_addr: the current device's UCE ranges as [{"ptr": address, "size": bytes}]
    (aclrtGetMemUceInfo), what recovery code compares with its tensors' storages."""
    return [{"ptr": address, "size": size} for address, size in fault.uce_ranges()]


def stop_device(device_id: int) -> int:
    """Aborts the device's work (aclrtDeviceTaskAbort): queued and running kernels fail with "FORCE STOP" (ACL
    107022) at the next wait, as do those launched until restart_device; a hung device returns. Returns 0."""
    fault._check(fault._runtime().snpuDeviceStop(int(device_id)), "stop_device")
    _set_npu_data_unsafe_flag(True)
    return 0


def restart_device(device_id: int, rebuild_all_resource: bool = False) -> None:
    """Makes the device usable again: its UCE ranges are repaired (the memory stays, its contents are whatever the
    program restores), the errors its streams kept unreported are dropped. ``rebuild_all_resource`` is torch_npu's
    reserved argument (no effect there either)."""
    fault._check(fault._runtime().snpuDeviceRestart(int(device_id)), "restart_device")


# ---------------------------------------------------------------- torch.npu._recovery

_lock = threading.Lock()
_unsafe: Set[Tuple[int, int]] = set()  # (device, storage data_ptr)
_data_unsafe = False


def _key(storage) -> Tuple[int, int]:
    return storage.device.index, storage.data_ptr()


def check_npu_storage_is_safe(storage_obj) -> bool:
    if not isinstance(storage_obj, (torch.storage.TypedStorage, torch.storage.UntypedStorage)):
        raise RuntimeError(f"param type should be TypedStorage or UntypedStorage, could not be {type(storage_obj)}")
    storage = storage_obj.untyped() if isinstance(storage_obj, torch.storage.TypedStorage) else storage_obj
    with _lock:
        return _key(storage) not in _unsafe


def check_npu_tensor_is_safe(tensor_obj) -> bool:
    if not isinstance(tensor_obj, torch.Tensor):
        raise RuntimeError(f"param type should be Tensor, could not be {type(tensor_obj)}")
    return tensor_obj.device.type != "npu" or check_npu_storage_is_safe(tensor_obj.untyped_storage())


def mark_all_npu_tensor_unsafe(device: int) -> None:
    """Marks every live block of the device unsafe (torch_npu's markAllBlockUnsafe)."""
    from .memory import memory_snapshot

    with _lock:
        for segment in memory_snapshot():
            if segment["device"] != device:
                continue
            address = segment["address"]
            for block in segment["blocks"]:
                start = block.get("address", address)
                if block["state"] == "active_allocated":
                    _unsafe.add((device, start))
                address = start + block["size"]


def update_npu_storage_to_safe(storage_obj) -> None:
    storage = storage_obj.untyped() if isinstance(storage_obj, torch.storage.TypedStorage) else storage_obj
    with _lock:
        _unsafe.discard(_key(storage))


def update_npu_tensor_to_safe(tensor_obj) -> None:
    if tensor_obj.device.type == "npu":
        update_npu_storage_to_safe(tensor_obj.untyped_storage())


def _set_npu_data_unsafe_flag(flag: bool) -> None:
    global _data_unsafe
    _data_unsafe = bool(flag)


def set_npu_data_unsafe_flag(flag: bool) -> None:
    _set_npu_data_unsafe_flag(flag)


def get_npu_data_unsafe_flag() -> bool:
    return _data_unsafe
