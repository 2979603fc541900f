"""torch_npu.npu.utils: where torch_npu keeps its device functions; here the same objects as torch.npu's."""

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
