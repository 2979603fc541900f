"""torch_npu's recovery hooks over the software NPU's faults (torch.npu._fault): check_uce_in_memory, stop_device,
restart_device, and torch.npu._recovery (the storages marked unsafe after a fault until the program restores them).

As on torch_npu (MindSpeed-LLM's and MindIO's recovery): after a UCE or a hang, ``stop_device`` aborts the device's
work ("FORCE STOP" at the waits), ``check_uce_in_memory`` says what the UCE hit (0 nothing, 1 memory torch_npu does
not use, 2 its cached free memory, 3 memory of live tensors), ``_recovery.mark_all_npu_tensor_unsafe`` marks the
live storages (``restart_device(d, rebuild_all_resources=True)`` does it and turns the check on: ops then refuse
unsafe inputs), ``restart_device`` makes the device usable again (its memory repaired), and the program rebuilds what
was hit (from a replica or a checkpoint): a copy into a tensor, or ``update_npu_tensor_to_safe``, marks it safe."""
import torch

from .. import _C
from ..error_code import ErrCode, pta_error
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
    return 0


def restart_device(device_id: int, rebuild_all_resources: bool = False, disable_tensor_unsafe_check: bool = False) -> None:
    """Makes the device usable again: its UCE ranges are repaired (the memory stays, its contents are whatever the
    program restores), the errors its streams kept unreported are dropped. As torch_npu's: with
    ``rebuild_all_resources`` every live tensor of the device is marked unsafe and ops check their inputs (unless
    ``disable_tensor_unsafe_check``), so that nothing computed from memory the fault may have hit goes unnoticed
    until the program restores it (a copy into a tensor makes it safe)."""
    from . import _lazy_init

    _lazy_init()
    if rebuild_all_resources and not disable_tensor_unsafe_check:
        mark_all_npu_tensor_unsafe(device_id)
        set_npu_tensor_unsafe_check_flag(True)
    fault._check(fault._runtime().snpuDeviceRestart(int(device_id)), "restart_device")


# ---------------------------------------------------------------- torch.npu._recovery
# The marks live in the backend (csrc/backend/recovery.h), where every op checks its inputs against them while the
# flag is on, copies clear their destination's and the allocator clears a freed block's.


def check_npu_storage_is_safe(storage_obj) -> bool:
    if not isinstance(storage_obj, (torch.storage.TypedStorage, torch.storage.UntypedStorage)):
        raise RuntimeError(f"param type should be TypedStorage or UntypedStorage, could not be {type(storage_obj)}"
                           + pta_error(ErrCode.TYPE))
    storage = storage_obj.untyped() if isinstance(storage_obj, torch.storage.TypedStorage) else storage_obj
    return storage.device.type != "npu" or _C._npu_data_ptr_is_safe(storage.data_ptr())


def check_npu_tensor_is_safe(tensor_obj) -> bool:
    if not isinstance(tensor_obj, torch.Tensor):
        raise RuntimeError(f"param type should be Tensor, could not be {type(tensor_obj)}" + pta_error(ErrCode.TYPE))
    return check_npu_storage_is_safe(tensor_obj.untyped_storage())


def mark_all_npu_tensor_unsafe(device: int) -> None:
    """Marks every live block of the device unsafe (torch_npu's markAllBlockUnsafe)."""
    from .memory import memory_snapshot

    for segment in memory_snapshot():
        if segment["device"] != device:
            continue
        address = segment["address"]
        for block in segment["blocks"]:
            start = block.get("address", address)
            if block["state"] == "active_allocated":
                _C._mark_npu_data_ptr_unsafe(start)
            address = start + block["size"]


def update_npu_storage_to_safe(storage_obj) -> None:
    if not isinstance(storage_obj, (torch.storage.TypedStorage, torch.storage.UntypedStorage)):
        raise RuntimeError(f"param type should be TypedStorage or UntypedStorage, could not be {type(storage_obj)}"
                           + pta_error(ErrCode.TYPE))
    storage = storage_obj.untyped() if isinstance(storage_obj, torch.storage.TypedStorage) else storage_obj
    _C._update_npu_data_ptr(storage.data_ptr())


def update_npu_tensor_to_safe(tensor_obj) -> None:
    if not isinstance(tensor_obj, torch.Tensor):
        raise RuntimeError(f"param type should be Tensor, could not be {type(tensor_obj)}" + pta_error(ErrCode.TYPE))
    update_npu_storage_to_safe(tensor_obj.untyped_storage())


def set_npu_tensor_unsafe_check_flag(flag: bool) -> None:
    """Whether ops refuse inputs in unsafe blocks (torch_npu's npu data unsafe flag)."""
    _C._set_npu_data_unsafe_flag(bool(flag))


def get_npu_tensor_unsafe_check_flag() -> bool:
    return _C._get_npu_data_unsafe_flag()
