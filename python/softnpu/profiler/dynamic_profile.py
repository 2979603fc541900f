"""torch_npu.profiler.dynamic_profile: profiling switched on while a job runs, by editing a JSON file.

    from torch_npu.profiler import dynamic_profile as dp
    dp.init("./dyn_cfg")          # creates ./dyn_cfg/profiler_config.json (a template) if absent
    for batch in loader:
        train(batch)
        dp.step()                 # reads the file when it changed; profiles `active` steps from `start_step`

The file's fields are torch_npu's: activities (["CPU", "NPU"]), prof_dir, analyse, record_shapes, profile_memory,
with_stack, with_flops, with_modules, active, warmup, start_step (0: the next step), is_rank / rank_list (profile only
those ranks), experimental_config (profiler_level, aic_metrics, l2_cache, op_attr, gc_detect_threshold,
data_simplification, record_op_args, export_type, msprof_tx). Each change of the file arms one collection.
dp.start(config_path) arms one at once from a file of that form.
"""

import json
import os
import warnings
from pathlib import Path

import torch

from . import experimental_config as _xc

__all__ = ["init", "start", "step"]

CONFIG_NAME = "profiler_config.json"
TEMPLATE = {
    "activities": ["CPU", "NPU"], "prof_dir": "./", "analyse": False, "record_shapes": False,
    "profile_memory": False, "with_stack": False, "with_flops": False, "with_modules": False, "active": 1,
    "warmup": 0, "start_step": 0, "is_rank": False, "rank_list": [],
    "experimental_config": {"profiler_level": "Level0", "aic_metrics": "AiCoreNone", "l2_cache": False,
                            "op_attr": False, "gc_detect_threshold": None, "data_simplification": True,
                            "record_op_args": False, "export_type": ["text"], "msprof_tx": False},
}


class _State:
    def __init__(self):
        self.path = None
        self.mtime = None
        self.step = 0
        self.armed = None  # (config, start step)
        self.prof = None
        self.remaining = 0


_state = _State()


def init(path: str) -> None:
    """Watches path/profiler_config.json (written from the template if absent)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / CONFIG_NAME
    if not config.exists():
        config.write_text(json.dumps(TEMPLATE, indent=4))
    _state.path = config
    _state.mtime = config.stat().st_mtime_ns
    _state.step = 0


def start(config_path: str | None = None) -> None:
    """Arms a collection from config_path (default: the file init() watches), starting at the next step."""
    path = Path(config_path) if config_path else _state.path
    if path is None:
        raise RuntimeError("dynamic_profile.start: no config file (call init(path) or pass config_path)")
    _arm(json.loads(Path(path).read_text()), immediate=True)


def step() -> None:
    """Marks the end of a training step: advances a running collection, or starts an armed one."""
    _state.step += 1
    if _state.prof is not None:
        _state.prof.step()
        _state.remaining -= 1
        if _state.remaining <= 0:
            _state.prof.stop()
            _state.prof = None
        return
    if _state.path is not None and _state.path.exists():
        mtime = _state.path.stat().st_mtime_ns
        if mtime != _state.mtime:
            _state.mtime = mtime
            try:
                _arm(json.loads(_state.path.read_text()), immediate=False)
            except (ValueError, OSError) as e:
                warnings.warn(f"dynamic_profile: {_state.path} is not a valid config ({e}); ignored")
    if _state.armed is not None and _state.step >= _state.armed[1]:
        config, _ = _state.armed
        _state.armed = None
        _begin(config)


def _arm(config: dict, immediate: bool) -> None:
    if config.get("is_rank") and torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_rank() not in config.get("rank_list", []):
            return
    start_step = int(config.get("start_step", 0))
    _state.armed = (config, _state.step if immediate or start_step <= _state.step else start_step)
    if immediate:
        _begin(config)
        _state.armed = None


def _experimental(cfg: dict) -> _xc._ExperimentalConfig:
    export = cfg.get("export_type", ["text"])
    export = export[0] if isinstance(export, list) and export else export
    metrics = cfg.get("aic_metrics", "AiCoreNone")
    return _xc._ExperimentalConfig(
        profiler_level=getattr(_xc.ProfilerLevel, cfg.get("profiler_level", "Level0"), cfg.get("profiler_level")),
        aic_metrics=getattr(_xc.AiCMetrics, metrics, metrics), l2_cache=cfg.get("l2_cache", False),
        op_attr=cfg.get("op_attr", False), gc_detect_threshold=cfg.get("gc_detect_threshold"),
        data_simplification=cfg.get("data_simplification", True), record_op_args=cfg.get("record_op_args", False),
        export_type=export, msprof_tx=cfg.get("msprof_tx", False))


def _begin(config: dict) -> None:
    from . import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    names = {"CPU": ProfilerActivity.CPU, "NPU": ProfilerActivity.NPU}
    activities = [names[a] for a in config.get("activities", ["CPU", "NPU"]) if a in names]
    active, warmup = int(config.get("active", 1)), int(config.get("warmup", 0))
    prof_dir = config.get("prof_dir") or "./"
    _state.prof = profile(
        activities=activities, schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(os.fspath(prof_dir), analyse_flag=bool(config.get("analyse"))),
        record_shapes=config.get("record_shapes", False), profile_memory=config.get("profile_memory", False),
        with_stack=config.get("with_stack", False), with_flops=config.get("with_flops", False),
        with_modules=config.get("with_modules", False),
        experimental_config=_experimental(config.get("experimental_config", {})))
    _state.prof.start()
    _state.remaining = warmup + active
