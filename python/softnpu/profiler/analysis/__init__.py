"""The Ascend exporter: turns the raw data of a result directory ({worker}_{timestamp}_ascend_pt/FRAMEWORK/, the
trace torch.profiler recorded) into ASCEND_PROFILER_OUTPUT/ with torch_npu's files. It reads only the recorded trace,
so it gives the same files online (tensorboard_trace_handler) and offline (torch_npu.profiler.profiler.analyse).

| file | written by | when |
|---|---|---|
| trace_view.json | trace_view.py | always |
| kernel_details.csv, op_statistic.csv | kernel_views.py | always |
| api_statistic.csv | kernel_views.py | profiler_level Level1 or Level2 |
| operator_details.csv | operator_views.py | always |
| step_trace_time.csv | step_views.py | always |
| communication.json, communication_matrix.json | communication.py | the rank ran hccl collectives |
| memory_record.csv, operator_memory.csv | memory_views.py | profile_memory=True |
"""

import json
import shutil
import warnings
from pathlib import Path

from ..experimental_config import ExportType, ProfilerLevel, _ExperimentalConfig
from . import communication, kernel_views, memory_views, operator_views, overlap, step_views, trace_view
from .trace import load

OUTPUT = "ASCEND_PROFILER_OUTPUT"
RAW = "FRAMEWORK"
RAW_TRACE = "torch.trace.json"
RAW_GC = "gc.json"


def profiler_info_path(result_dir: Path) -> Path | None:
    found = sorted(result_dir.glob("profiler_info*.json"))
    return found[0] if found else None


def export(result_dir: str | Path) -> Path:
    """Writes result_dir/ASCEND_PROFILER_OUTPUT from result_dir/FRAMEWORK; returns the output folder."""
    result_dir = Path(result_dir)
    raw = result_dir / RAW / RAW_TRACE
    if not raw.is_file():
        raise FileNotFoundError(f"{result_dir}: no recorded trace ({RAW}/{RAW_TRACE}) to analyse")
    info_path = profiler_info_path(result_dir)
    info = json.loads(info_path.read_text()) if info_path else {}
    settings = info.get("config", {})
    config = _ExperimentalConfig.from_dict(settings.get("experimental_config", {}))
    common = settings.get("common_config", {})

    if config.export_type == ExportType.Db:
        warnings.warn("ExportType.Db: softnpu has no database exporter; the text files are written", stacklevel=2)
    trace = load(raw)
    out = result_dir / OUTPUT
    out.mkdir(parents=True, exist_ok=True)
    overlaps = overlap.analyse(trace)
    gc_path = result_dir / RAW / RAW_GC
    gc_events = json.loads(gc_path.read_text()) if gc_path.is_file() else []
    trace_view.write(trace, overlaps, out, msprof_tx=config._msprof_tx, gc_events=gc_events)
    kernel_views.write_kernel_details(trace, out, config._aic_metrics)
    kernel_views.write_op_statistic(trace, out)
    if config._profiler_level in (ProfilerLevel.Level1, ProfilerLevel.Level2):
        kernel_views.write_api_statistic(trace, out)
    operator_views.write(trace, out)
    step_views.write(overlaps, out)
    communication.write(trace, out)
    if common.get("profile_memory"):
        memory_views.write(trace, out)
    if config._data_simplification:
        shutil.rmtree(result_dir / RAW)
    return out
