"""torch_npu.profiler's profiling calls over torch.profiler: profile and _KinetoProfile (torch's, plus torch_npu's
experimental_config), tensorboard_trace_handler (writes torch_npu's result directory), analyse (offline parsing).

The result directory, {worker_name}_{timestamp}_ascend_pt/, holds profiler_info.json (profiler_info_{rank}.json in a
distributed run: the settings and versions), FRAMEWORK/ (the raw data: the trace torch.profiler recorded, and the
long garbage collections when gc_detect_threshold is set) and ASCEND_PROFILER_OUTPUT/, which the exporter
(analysis/) computes from FRAMEWORK/ — at once, in a background process (async_mode), or later with analyse().
"""

import datetime
import gc
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.profiler as _torch_profiler

from . import analysis
from .experimental_config import _ExperimentalConfig

__all__ = ["_KinetoProfile", "analyse", "profile", "tensorboard_trace_handler"]

ASCEND_PT = "_ascend_pt"


def _split_config(experimental_config):
    """(torch_npu's config, the argument left for torch): torch's own _ExperimentalConfig passes through."""
    if experimental_config is None or isinstance(experimental_config, _ExperimentalConfig):
        return experimental_config or _ExperimentalConfig(), None
    return _ExperimentalConfig(), experimental_config


class _GcDetector:
    """Records Python garbage collections longer than the threshold (ms), as torch_npu's gc_detect_threshold."""

    def __init__(self, threshold_ms):
        self.threshold_us = threshold_ms * 1000
        self.events, self._start = [], None

    def __call__(self, phase, info):
        now = time.time_ns() / 1000
        if phase == "start":
            self._start = now
        elif self._start is not None:
            if now - self._start >= self.threshold_us:
                self.events.append((round(self._start, 3), round(now - self._start, 3)))
            self._start = None

    def attach(self):
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def detach(self):
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class _NpuProfileMixin:
    def _init_npu(self, experimental_config):
        self._npu_config = experimental_config
        self._gc = _GcDetector(experimental_config.gc_detect_threshold) if experimental_config.with_gc else None

    def start(self):
        if self._gc is not None:
            self._gc.attach()
        super().start()

    def stop(self):
        super().stop()
        if self._gc is not None:
            self._gc.detach()


class _KinetoProfile(_NpuProfileMixin, _torch_profiler._KinetoProfile):
    """torch's _KinetoProfile with torch_npu's experimental_config: start()/stop() around the work, then
    export_chrome_trace, or tensorboard_trace_handler(dir)(prof) for the Ascend result directory."""

    def __init__(self, *, activities=None, record_shapes=False, profile_memory=False, with_stack=False,
                 with_flops=False, with_modules=False, experimental_config=None, **kwargs):
        npu_config, torch_config = _split_config(experimental_config)
        super().__init__(activities=activities, record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack, with_flops=with_flops, with_modules=with_modules,
                         experimental_config=torch_config, **kwargs)
        self._init_npu(npu_config)


class profile(_NpuProfileMixin, _torch_profiler.profile):
    """torch.profiler.profile with torch_npu's experimental_config (a torch_npu.profiler._ExperimentalConfig)."""

    def __init__(self, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, **kwargs):
        npu_config, torch_config = _split_config(experimental_config)
        super().__init__(activities=activities, schedule=schedule, on_trace_ready=on_trace_ready,
                         record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack,
                         with_flops=with_flops, with_modules=with_modules, experimental_config=torch_config,
                         **kwargs)
        self._init_npu(npu_config)


def _activity_name(activity) -> str:
    return "ProfilerActivity.NPU" if activity == _torch_profiler.ProfilerActivity.PrivateUse1 else str(activity)


def _rank():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return None


def _profiler_info(prof, rank) -> dict:
    from softnpu import __version__

    config = getattr(prof, "_npu_config", None) or _ExperimentalConfig()
    common = {"activities": sorted(_activity_name(a) for a in prof.activities),
              "record_shapes": prof.record_shapes, "profile_memory": prof.profile_memory,
              "with_stack": prof.with_stack, "with_flops": prof.with_flops, "with_modules": prof.with_modules}
    info = {"config": {"common_config": common, "experimental_config": config.to_dict()},
            "torch_npu_version": __version__, "torch_version": torch.__version__,
            "cann_version": "none (softnpu: a software NPU, no CANN)", "end_info": {"collectionTimeEnd":
                                                                                  time.time_ns()}}
    if rank is not None:
        info["rank_id"] = rank
    return info


def _result_dir(dir_name: str, worker_name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S%f")[:-3]  # torch_npu's: to the millisecond
    path = Path(dir_name) / f"{worker_name}_{stamp}{ASCEND_PT}"
    suffix = 1
    while path.exists():  # two traces within a millisecond (schedule repeats)
        path = Path(dir_name) / f"{worker_name}_{stamp}{suffix}{ASCEND_PT}"
        suffix += 1
    return path


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None,
                              analyse_flag: bool = True, async_mode: bool = False):
    """on_trace_ready handler writing each trace as torch_npu's result directory under dir_name (default: the
    current directory, or $ASCEND_WORK_PATH/profiling_data as torch_npu). worker_name defaults to
    {hostname}_{pid}. analyse_flag=False keeps only the raw data (parse it later with analyse()); async_mode parses in
    a background process so training continues at once."""
    if dir_name is None:
        work = os.environ.get("ASCEND_WORK_PATH")
        dir_name = os.path.join(work, "profiling_data") if work else "."
    if not isinstance(dir_name, str) or not dir_name:
        raise ValueError(f"tensorboard_trace_handler: dir_name must be a non-empty path, got {dir_name!r}")
    worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"

    def handler(prof) -> None:
        rank = _rank()
        result = _result_dir(dir_name, worker)
        raw = result / analysis.RAW
        raw.mkdir(parents=True)
        prof.export_chrome_trace(str(raw / analysis.RAW_TRACE))
        detector = getattr(prof, "_gc", None)
        if detector is not None:
            (raw / analysis.RAW_GC).write_text(json.dumps(detector.events))
            detector.events = []
        info_name = "profiler_info.json" if rank is None else f"profiler_info_{rank}.json"
        (result / info_name).write_text(json.dumps(_profiler_info(prof, rank), indent=1))
        if not analyse_flag:
            return
        if async_mode:
            subprocess.Popen([sys.executable, "-c", "import sys; from softnpu.profiler import analyse; "
                              "analyse(sys.argv[1])", str(result)], start_new_session=True)
        else:
            analysis.export(result)

    return handler


def analyse(profiler_path: str, max_process_number: int | None = None, export_type=None) -> None:
    """Offline parsing, as torch_npu.profiler.profiler.analyse: profiler_path is a result directory, or a folder of
    them (every *_ascend_pt below it without ASCEND_PROFILER_OUTPUT is parsed). max_process_number and export_type
    are accepted for torch_npu code (parsing runs in this process, and writes the text form)."""
    path = Path(profiler_path)
    if not path.is_dir():
        raise FileNotFoundError(f"analyse: {profiler_path} is not a directory")
    targets = [path] if path.name.endswith(ASCEND_PT) else sorted(p for p in path.rglob(f"*{ASCEND_PT}") if p.is_dir())
    if not targets:
        raise FileNotFoundError(f"analyse: no *{ASCEND_PT} result directory under {profiler_path}")
    for result in targets:
        if (result / analysis.RAW / analysis.RAW_TRACE).is_file():
            analysis.export(result)
