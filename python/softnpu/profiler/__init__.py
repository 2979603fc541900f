"""torch_npu.profiler: torch_npu's profiler API over torch.profiler.

softnpu's device profiler plugs into torch.profiler (Kineto) as the PrivateUse1 profiler, so ``torch.profiler`` and
this module record the same trace: host ops, and the npu kernels, copies and memsets on per-stream tracks of their
device, each linked to the op that launched it. This module only gives torch.profiler torch_npu's spellings.
"""

import torch.profiler as _torch_profiler
from torch.profiler import ProfilerAction, profile, supported_activities


class ProfilerActivity:
    """torch_npu's activity names: ``NPU`` is torch's ``ProfilerActivity.PrivateUse1``."""

    CPU = _torch_profiler.ProfilerActivity.CPU
    NPU = _torch_profiler.ProfilerActivity.PrivateUse1


def schedule(wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0):
    """torch_npu's schedule (``active`` comes before ``warmup`` when passed by position): skip ``skip_first`` steps,
    then cycle through ``wait`` idle, ``warmup`` and ``active`` recorded steps, ``repeat`` times (0: until the end)."""
    return _torch_profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None, analyse_flag: bool = True,
                              async_mode: bool = False):
    """Writes each trace into ``dir_name`` as a Chrome trace, which TensorBoard's profiler plugin reads.

    ``analyse_flag`` and ``async_mode`` are accepted for torch_npu code; they control torch_npu's offline parsing of
    Ascend profiling data, which a softnpu trace does not need.
    """
    return _torch_profiler.tensorboard_trace_handler(dir_name, worker_name)


__all__ = [
    "ProfilerAction",
    "ProfilerActivity",
    "profile",
    "schedule",
    "supported_activities",
    "tensorboard_trace_handler",
]
