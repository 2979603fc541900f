"""torch_npu.profiler._ExperimentalConfig and its enums: what an Ascend profile collects beyond torch's options.

The values are torch_npu's (strings, so profiler_info.json records them as torch_npu does). What each does here:
  - profiler_level: Level_none / Level0 (kernels, their ops, communication) / Level1 (adds api_statistic.csv and the
    hardware-counter columns of aic_metrics) / Level2 (as Level1: Level2's extra data is the chip's runtime and AI CPU
    internals, which a software NPU does not have);
  - aic_metrics: the AI Core hardware-counter group. kernel_details.csv carries that group's columns, as torch_npu
    writes them, filled with "N/A": a software NPU has no PMU counters (documented, never invented);
  - l2_cache, op_attr: chip-only data (L2 cache hit rates, operator attributes of the db export): accepted, recorded;
  - msprof_tx: torch_npu.npu.mstx markers and ranges appear in trace_view.json;
  - data_simplification: the raw trace (FRAMEWORK/) is removed once ASCEND_PROFILER_OUTPUT is written;
  - record_op_args: recorded in profiler_info.json (torch_npu dumps AclNN arguments; ATen kernels have none);
  - gc_detect_threshold: Python garbage collections longer than it (ms) appear in trace_view.json as "GC" events;
  - export_type: Text writes the files; Db is accepted and writes the text form (softnpu has no database exporter).
Invalid values are reset with a warning, as torch_npu does.
"""

import warnings

__all__ = [
    "AiCMetrics",
    "ExportType",
    "ProfilerLevel",
    "_ExperimentalConfig",
    "supported_ai_core_metrics",
    "supported_export_type",
    "supported_profiler_level",
]


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Text = "text"
    Db = "db"


def supported_profiler_level():
    return {ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2}


def supported_ai_core_metrics():
    return {AiCMetrics.PipeUtilization, AiCMetrics.ArithmeticUtilization, AiCMetrics.Memory, AiCMetrics.MemoryL0,
            AiCMetrics.MemoryUB, AiCMetrics.ResourceConflictRatio, AiCMetrics.L2Cache}


def supported_export_type():
    return {ExportType.Text, ExportType.Db}


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


class _ExperimentalConfig:
    def __init__(self, profiler_level: str = ProfilerLevel.Level0, aic_metrics: str = AiCMetrics.AiCoreNone,
                 l2_cache: bool = False, msprof_tx: bool = False, data_simplification: bool = True,
                 record_op_args: bool = False, op_attr: bool = False, gc_detect_threshold: float | None = None,
                 export_type: str = ExportType.Text, **future):
        if future:
            # torch_npu adds arguments release by release: accepted, recorded, with a warning naming them.
            _warn(f"_ExperimentalConfig: {sorted(future)} recorded, without effect on a software NPU")
        self._profiler_level = profiler_level
        self._aic_metrics = aic_metrics
        # Level1/Level2 collect PipeUtilization unless told otherwise (torch_npu's default).
        if profiler_level not in (ProfilerLevel.Level0, ProfilerLevel.Level_none) and aic_metrics == AiCMetrics.AiCoreNone:
            self._aic_metrics = AiCMetrics.PipeUtilization
        self._l2_cache = l2_cache
        self._msprof_tx = msprof_tx
        self._data_simplification = data_simplification
        self.record_op_args = record_op_args
        self._op_attr = op_attr
        self._gc_detect_threshold = gc_detect_threshold
        self._export_type = export_type
        self._future = dict(future)
        self._check_params()

    def _check_params(self) -> None:
        levels = supported_profiler_level() | {ProfilerLevel.Level_none}
        if self._profiler_level not in levels:
            _warn("Invalid parameter profiler_level, reset it to ProfilerLevel.Level0.")
            self._profiler_level = ProfilerLevel.Level0
        low = self._profiler_level in (ProfilerLevel.Level0, ProfilerLevel.Level_none)
        if self._aic_metrics not in supported_ai_core_metrics() | {AiCMetrics.AiCoreNone}:
            _warn("Invalid parameter aic_metrics, reset it to default.")
            self._aic_metrics = AiCMetrics.AiCoreNone if low else AiCMetrics.PipeUtilization
        if low and self._aic_metrics != AiCMetrics.AiCoreNone:
            _warn("Please use level1 or level2 if you want to collect aic metrics, reset aic metrics to None!")
            self._aic_metrics = AiCMetrics.AiCoreNone
        for name in ("_l2_cache", "_msprof_tx", "record_op_args", "_op_attr"):
            if not isinstance(getattr(self, name), bool):
                _warn(f"Invalid parameter {name.lstrip('_')}, which must be of boolean type, reset it to False.")
                setattr(self, name, False)
        if not isinstance(self._data_simplification, bool):
            _warn("Invalid parameter data_simplification, which must be of boolean type, reset it to default.")
            self._data_simplification = True
        if self._export_type not in supported_export_type():
            _warn("Invalid parameter export_type, reset it to text.")
            self._export_type = ExportType.Text
        if self._op_attr and self._export_type != ExportType.Db:
            _warn("op_attr switch is invalid with export type set as text.")
            self._op_attr = False
        threshold = self._gc_detect_threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or threshold < 0):
            _warn("Parameter gc_detect_threshold must be a non-negative number, reset it to default.")
            self._gc_detect_threshold = None

    @property
    def export_type(self) -> str:
        return self._export_type

    @property
    def with_gc(self) -> bool:
        return self._gc_detect_threshold is not None

    @property
    def gc_detect_threshold(self):
        return self._gc_detect_threshold

    def to_dict(self) -> dict:
        """profiler_info.json's "experimental_config" (torch_npu's attribute names)."""
        return {"_profiler_level": self._profiler_level, "_aic_metrics": self._aic_metrics,
                "_l2_cache": self._l2_cache, "_msprof_tx": self._msprof_tx,
                "_data_simplification": self._data_simplification, "record_op_args": self.record_op_args,
                "_op_attr": self._op_attr, "_gc_detect_threshold": self._gc_detect_threshold,
                "_export_type": self._export_type, **self._future}

    @classmethod
    def from_dict(cls, d: dict) -> "_ExperimentalConfig":
        return cls(profiler_level=d.get("_profiler_level", ProfilerLevel.Level0),
                   aic_metrics=d.get("_aic_metrics", AiCMetrics.AiCoreNone), l2_cache=d.get("_l2_cache", False),
                   msprof_tx=d.get("_msprof_tx", False), data_simplification=d.get("_data_simplification", True),
                   record_op_args=d.get("record_op_args", False), op_attr=d.get("_op_attr", False),
                   gc_detect_threshold=d.get("_gc_detect_threshold"),
                   export_type=d.get("_export_type", ExportType.Text))
