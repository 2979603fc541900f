"""torch.npu._utils: _get_device_index, as torch.cuda._utils's. torch.load asks the device module for it when it
restores a storage saved on a device ("npu" without an index is the current device, as "cuda" is)."""

from typing import Any

import torch
from torch._utils import _get_device_index as _torch_get_device_index


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index of an npu device given as torch.device, str, int or torch.npu.device; with `optional`, None or a
    device without an index is the current npu device; with `allow_cpu`, a CPU device is -1."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu:
            if device.type not in ("npu", "cpu"):
                raise ValueError(f"Expected a npu or cpu device, but got: {device}")
        elif device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")
    if isinstance(device, torch.npu.device):
        return device.idx
    # torch's generic answer for "current device" asks the first available accelerator, which need not be npu.
    if optional and (device is None or (device.type == "npu" and device.index is None)):
        return torch.npu.current_device()
    return _torch_get_device_index(device, optional, allow_cpu)
