"""The user's hooks see only the user's calls: softnpu's own work (shape inference, fallbacks, fused-op composites)
never shows up in a TorchFunctionMode, a TorchDispatchMode, or hooks that patch torch.* functions as msprobe's API dump
does; and the torch_npu names msprobe (mindstudio-probe) reads exist. A small model (Linear, LogSoftmax, NLLLoss,
forward and backward, and torch_npu.npu_rms_norm) runs on the CPU and on npu under each kind of hook: the recorded
calls must be the same. Then msprobe itself, installed pinned into the venv (without its dependencies: it never
touches torch), dumps the model on both devices and compares the dumps as its README shows.
"""

import functools
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_npu
from conftest import run_python
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

MSPROBE = "mindstudio-probe==26.2.0"
# What msprobe's dump and compare import beyond the venv (tensorboard: its monitor module, imported by msprobe.pytorch;
# absl-py: tensorboard's summary writer, which torch.utils.tensorboard imports).
MSPROBE_NEEDS = ["pandas==3.1.1", "openpyxl==3.1.5", "pytz==2026.6", "einops==0.8.2", "tensorboard==2.21.0",
                 "absl-py==2.5.1"]


def small_model(device):
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4).to(device)
    x = torch.randn(3, 8).to(device)
    target = torch.tensor([0, 2, 1]).to(device)
    weight = torch.ones(8).to(device)
    return lambda: (torch.nn.functional.nll_loss(torch.nn.functional.log_softmax(linear(x), dim=1), target).backward(),
                    torch_npu.npu_rms_norm(x, weight)[0])


class FunctionRecorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class DispatchRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


def test_modes_see_the_same_calls_on_npu_as_on_the_cpu():
    def record(device):
        step = small_model(device)
        with FunctionRecorder() as functions, DispatchRecorder() as dispatches:
            step()
        return functions.calls, dispatches.calls

    cpu_functions, cpu_dispatches = record("cpu")
    npu_functions, npu_dispatches = record("npu")
    torch.npu.synchronize()
    assert "backward" in cpu_functions and "aten._log_softmax_backward_data.default" in cpu_dispatches
    assert npu_functions == cpu_functions
    assert npu_dispatches == cpu_dispatches


def test_patched_torch_functions_see_the_same_calls_on_npu_as_on_the_cpu():
    # In a fresh process, so that no op's inferred shapes are cached yet: patched torch.*, Tensor and functional
    # callables (as msprobe's API dump patches them) record what they are called with.
    out = run_python("""
        import functools, torch, torch_npu
        calls = []

        def patch(owner, prefix):
            for name in dir(owner):
                f = getattr(owner, name)
                if name.startswith("_") and name not in ("__mul__", "__add__", "__sub__", "__truediv__", "__ne__"):
                    continue
                if not callable(f) or isinstance(f, type):
                    continue
                def wrapper(*args, _f=f, _name=prefix + name, **kwargs):
                    calls.append(_name)
                    return _f(*args, **kwargs)
                try:
                    setattr(owner, name, functools.wraps(f)(wrapper))
                except (AttributeError, TypeError):
                    pass

        def step(device):
            torch.manual_seed(0)
            linear = torch.nn.Linear(8, 4).to(device)
            x, target, weight = torch.randn(3, 8).to(device), torch.tensor([0, 2, 1]).to(device), torch.ones(8).to(device)
            calls.clear()
            loss = torch.nn.functional.nll_loss(torch.nn.functional.log_softmax(linear(x), dim=1), target)
            loss.backward()
            torch_npu.npu_rms_norm(x, weight)
            return list(calls)

        for owner, prefix in ((torch, "torch."), (torch.Tensor, "Tensor."), (torch.nn.functional, "F.")):
            patch(owner, prefix)
        cpu, npu = step("cpu"), step("npu")
        torch.npu.synchronize()
        print(cpu)
        print(npu)
    """)
    cpu, npu = out.lines[-2:]
    assert "F.nll_loss" in cpu
    assert npu == cpu


def test_torch_npu_names_msprobe_reads():
    x = torch.randn(2, 3, device="npu")
    assert torch_npu.get_npu_format(x) == torch_npu.Format.ND == 2
    assert isinstance(torch_npu.get_npu_format(x), torch_npu.Format)
    assert torch_npu.Format.FRACTAL_NZ == 29 and torch_npu.Format.UNDEFINED == -1 and torch_npu.Format.NC1HWC0 == 3
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(x, torch_npu.Format.NCHW)) == torch_npu.Format.NCHW
    # torch_npu's pickles name _rebuild_npu_tensor: host storage, offset, size, stride, requires_grad, hooks, format.
    from torch_npu.utils.storage import _rebuild_npu_tensor

    torch.serialization.add_safe_globals([torch_npu.utils.storage._rebuild_npu_tensor])
    t = _rebuild_npu_tensor(torch.arange(6.0).storage(), 0, (2, 3), (3, 1), True, {}, 1)
    assert t.device.type == "npu" and t.requires_grad and torch_npu.get_npu_format(t) == torch_npu.Format.NHWC
    assert torch.equal(t.detach().cpu(), torch.arange(6.0).view(2, 3))
    assert torch_npu.npu.utils.npu_check_overflow(torch.tensor([1.0, float("inf")], device="npu"))
    assert not torch_npu.npu.utils.npu_check_overflow(x)
    assert importlib.import_module("torch_npu.distributed.distributed_c10d") is torch.distributed.distributed_c10d


def pip_install(*requirements):
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *requirements], check=True)


@pytest.fixture(scope="module")
def msprobe():
    if any(importlib.util.find_spec(m) is None for m in ("msprobe", "tensorboard", "absl")):
        try:
            pip_install(MSPROBE, *MSPROBE_NEEDS)
        except subprocess.CalledProcessError:
            pytest.skip(f"{MSPROBE} could not be installed (no package index?)")
    return Path(sys.executable).parent / "msprobe"


DUMP = """
    import json, torch, torch_npu
    from msprobe.pytorch import PrecisionDebugger
    device, out = DEVICE, OUT
    config = {"task": "statistics", "dump_path": out, "rank": [], "step": [], "level": "L1",
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    json.dump(config, open(out + ".json", "w"))
    debugger = PrecisionDebugger(config_path=out + ".json")
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4).to(device)
    x, target, weight = torch.randn(3, 8).to(device), torch.tensor([0, 2, 1]).to(device), torch.ones(8).to(device)
    debugger.start()
    loss = torch.nn.functional.nll_loss(torch.nn.functional.log_softmax(linear(x), dim=1), target)
    loss.backward()
    torch_npu.npu_rms_norm(x, weight)
    debugger.stop()
    debugger.step()
"""


def test_msprobe_dump_and_compare_npu_against_cpu(msprobe, tmp_path):
    dumps = {}
    for device in ("cpu", "npu"):
        run_python(DUMP.replace("DEVICE", repr(device)).replace("OUT", repr(str(tmp_path / device))), timeout=300)
        (path,) = (tmp_path / device).glob("step0/*/dump.json")
        dumps[device] = path
    calls = {d: list(json.loads(p.read_text())["data"]) for d, p in dumps.items()}
    assert "Functional.nll_loss.0.backward" in calls["cpu"] and "NPU.npu_rms_norm.0.forward" in calls["cpu"]
    assert calls["npu"] == calls["cpu"]

    subprocess.run([str(msprobe), "compare", "--target_path", str(dumps["npu"]), "--golden_path", str(dumps["cpu"]),
                    "--output_path", str(tmp_path / "compare")], check=True, capture_output=True)
    import pandas

    (result,) = (tmp_path / "compare").glob("compare_result_*.csv")
    rows = pandas.read_csv(result)
    assert len(rows) == 22  # every input and output of the 7 calls
    assert (rows["Result"] == "pass").all(), rows[rows["Result"] != "pass"].to_string()
    assert (rows["NPU Name"] == rows["Bench Name"]).all()
