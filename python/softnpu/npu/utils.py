"""torch_npu.npu.utils: where torch_npu keeps its device functions; here the same objects as torch.npu's, and
``npu_check_overflow``."""

import torch

from .device import (  # noqa: F401
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_soc_version,
    is_available,
    set_device,
    synchronize,
)


def npu_check_overflow(grad):
    """Whether ``grad`` (a tensor or a float) holds inf or nan: torch_npu's check in its inf/nan mode (the 910B's).
    Reads the value back, so it synchronizes."""
    total = float(grad.float().sum()) if isinstance(grad, torch.Tensor) else float(grad)
    return total in (float("inf"), -float("inf")) or total != total
