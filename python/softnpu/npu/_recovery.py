"""torch.npu._recovery (torch_npu.npu._recovery): which storages are unsafe after a device fault; see recovery.py."""
from .recovery import (  # noqa: F401
    check_npu_storage_is_safe,
    check_npu_tensor_is_safe,
    get_npu_tensor_unsafe_check_flag,
    mark_all_npu_tensor_unsafe,
    restart_device,
    set_npu_tensor_unsafe_check_flag,
    stop_device,
    update_npu_storage_to_safe,
    update_npu_tensor_to_safe,
)
