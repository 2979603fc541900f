"""torch_npu.profiler: torch_npu's profiler API over torch.profiler.

softnpu's device profiler plugs into torch.profiler (Kineto) as the PrivateUse1 profiler, so ``torch.profiler`` and
this module record the same trace: host ops, and the npu kernels, copies and memsets on per-stream tracks of their
device, each linked to the op that launched it. torch's Chrome trace and torch_npu's result directory
(``tensorboard_trace_handler``: ``{worker}_{timestamp}_ascend_pt/ASCEND_PROFILER_OUTPUT``) are two exporters of that
one trace. See README.md in this folder for what each file holds.
"""

import torch.profiler as _torch_profiler
from torch.profiler import ProfilerAction, record_function, supported_activities

from . import dynamic_profile
from .experimental_config import (
    AiCMetrics,
    ExportType,
    ProfilerLevel,
    _ExperimentalConfig,
    supported_ai_core_metrics,
    supported_export_type,
    supported_profiler_level,
)
from .profiler import _KinetoProfile, analyse, profile, tensorboard_trace_handler


class ProfilerActivity:
    """torch_npu's activity names: ``NPU`` is torch's ``ProfilerActivity.PrivateUse1``."""

    CPU = _torch_profiler.ProfilerActivity.CPU
    NPU = _torch_profiler.ProfilerActivity.PrivateUse1


def schedule(wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0):
    """torch_npu's schedule (``active`` comes before ``warmup`` when passed by position): skip ``skip_first`` steps,
    then cycle through ``wait`` idle, ``warmup`` and ``active`` recorded steps, ``repeat`` times (0: until the end)."""
    return _torch_profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)


__all__ = [
    "AiCMetrics",
    "ExportType",
    "ProfilerAction",
    "ProfilerActivity",
    "ProfilerLevel",
    "_ExperimentalConfig",
    "_KinetoProfile",
    "analyse",
    "dynamic_profile",
    "profile",
    "record_function",
    "schedule",
    "supported_activities",
    "supported_ai_core_metrics",
    "supported_export_type",
    "supported_profiler_level",
    "tensorboard_trace_handler",
]
