"""The `softnpu` command (python/softnpu/cli.py), run as installed: the console script next to this Python.

Each test runs the script in a child process with this session's configuration (tests/conftest.py: 2 devices of
2048 MiB) and the venv's bin directory first on PATH, as `source .venv/bin/activate` puts it, so that doctor's
npu-smi check finds softnpu's npu-smi.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import softnpu
import softnpu.host
from conftest import DEVICE_COUNT, MEMORY_MB, MKL_HALF_GEMM, Result, child_env

BIN = Path(sys.executable).parent  # not resolved: the venv's bin, whose python is a symlink
SOFTNPU = BIN / "softnpu"
CHECKS = ["torch", "autoload", "configuration", "devices", "op", "half precision", "npu-smi", "log directory"]
RUNTIME_CHECKS = ["devices", "op", "half precision", "npu-smi"]  # "not checked" when the configuration fails


def softnpu_command(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120) -> Result:
    if not os.access(SOFTNPU, os.X_OK):
        pytest.fail(f"{SOFTNPU} is not installed (make build installs it)")
    full_env = child_env({"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})})
    proc = subprocess.run([str(SOFTNPU), *args], env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def doctor_lines(result: Result) -> dict[str, tuple[str, str]]:
    """{check name: (OK or FAIL, text)} of doctor's output, which must be one line per check then a summary."""
    checks = {}
    for line in result.lines[:-1]:
        match = re.fullmatch(r"(OK|FAIL) +(\S.*?)  +(\S.*)", line)
        assert match, f"not a check line: {line!r}\n{result.describe()}"
        checks[match[2]] = (match[1], match[3])
    assert list(checks) == CHECKS, result.describe()
    return checks


# ---------------------------------------------------------------------------------------------------------- doctor


def test_doctor_passes_on_this_installation(tmp_path):
    log_dir = tmp_path / "log"  # does not exist yet: the runtime creates it
    r = softnpu_command("doctor", env={"ASCEND_PROCESS_LOG_PATH": log_dir})
    assert r.returncode == 0, r.describe()
    checks = doctor_lines(r)
    assert all(status == "OK" for status, _ in checks.values()), r.describe()
    assert r.lines[-1] == f"softnpu doctor: {len(CHECKS)} of {len(CHECKS)} checks passed"
    assert f"SOFTNPU_MEMORY_MB={MEMORY_MB}" in checks["configuration"][1]
    assert checks["devices"][1].startswith(f"{DEVICE_COUNT} devices: npu:0 {MEMORY_MB} MiB"), r.describe()
    assert str(BIN / "npu-smi") in checks["npu-smi"][1]
    assert str(log_dir) in checks["log directory"][1]
    # The half-precision choice follows the host's features, as ATen detects them.
    half = checks["half precision"][1]
    assert softnpu.host.cpu_model() in half, r.describe()
    for dtype, units in (("float16", ("avx512_fp16", "amx_fp16")), ("bfloat16", ("avx512_bf16", "amx_bf16"))):
        native = any(softnpu.host.features()[u] for u in units)
        expected = f"{dtype} ATen's kernel in {dtype}" if native else f"{dtype} float32 compute"
        assert expected in half, r.describe()


@pytest.mark.parametrize("name, value", [("SOFTNPU_DEVICE_COUNT", "abc"),  # read when the runtime starts
                                         ("PYTORCH_NPU_ALLOC_CONF", "bogus:1"),  # at the first allocation
                                         ("SOFTNPU_HALF_COMPUTE", "fast")])  # at the first matrix op
def test_doctor_names_a_malformed_variable(name, value):
    r = softnpu_command("doctor", env={name: value})
    assert r.returncode == 1, r.describe()
    checks = doctor_lines(r)
    status, text = checks["configuration"]
    assert status == "FAIL", r.describe()
    assert f"{name}='{value}' is not valid" in text, r.describe()
    assert f"hint: fix or unset {name}" in text, r.describe()
    for check in RUNTIME_CHECKS:
        assert checks[check][0] == "FAIL" and checks[check][1].startswith("not checked"), r.describe()
    for check in ("torch", "autoload", "log directory"):  # independent of the runtime: still checked
        assert checks[check][0] == "OK", r.describe()
    assert r.lines[-1] == f"softnpu doctor: 3 of {len(CHECKS)} checks passed"


def test_doctor_fails_when_npu_smi_is_not_on_path():
    r = softnpu_command("doctor", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 1, r.describe()
    checks = doctor_lines(r)
    assert [name for name, (status, _) in checks.items() if status == "FAIL"] == ["npu-smi"], r.describe()
    assert str(BIN) in checks["npu-smi"][1], r.describe()  # the hint says where softnpu's npu-smi is


# ---------------------------------------------------------------------------------------------------------- report


def report_configuration(result: Result) -> dict[str, tuple[str, str]]:
    """{variable: (value, "set" or "default")} of report's Configuration section."""
    lines = result.lines
    start = lines.index("Configuration (each variable as set in the environment, or its default)") + 1
    end = lines.index("", start)
    rows = {}
    for line in lines[start:end]:
        match = re.fullmatch(r"  (\w+) +(\S.*?) +(set|default) +(\S.*)", line)
        assert match, f"not a variable line: {line!r}\n{result.describe()}"
        rows[match[1]] = (match[2], match[3])
    return rows


def test_report_lists_every_variable_and_the_devices():
    # Without the CANN variables this process's import of softnpu set (the child's import sets them again).
    unset = {name: None for name in softnpu.cann.SET_AT_IMPORT}
    r = softnpu_command("report", env={"ASCEND_RT_VISIBLE_DEVICES": "1,0", "ASCEND_GLOBAL_LOG_LEVEL": "2", **unset})
    assert r.returncode == 0, r.describe()
    assert r.lines[0].startswith(f"softnpu {softnpu.__version__} ")
    rows = report_configuration(r)
    table = softnpu._C._env_table()  # (name, layer, kind, default, doc)
    assert list(rows) == [row[0] for row in table], r.describe()
    set_here = {"SOFTNPU_DEVICE_COUNT": str(DEVICE_COUNT), "SOFTNPU_MEMORY_MB": str(MEMORY_MB),
                "ASCEND_RT_VISIBLE_DEVICES": "1,0", "ASCEND_GLOBAL_LOG_LEVEL": "2"}
    for name, _, _, default, _ in table:
        expected = (set_here[name], "set") if name in set_here else (default or '""', "default")
        assert rows[name] == expected, f"{name}\n{r.describe()}"

    assert f"Devices: {DEVICE_COUNT} SOFTWARE NPUs presenting as Ascend910B3 (soc version 223, 20 AI cores; " \
           "SOFTNPU_SOC_VERSION)" in r.lines, r.describe()
    devices = [line for line in r.lines if re.match(r"  npu:\d ", line)]
    assert len(devices) == DEVICE_COUNT, r.describe()
    for index, physical in enumerate((1, 0)):  # renumbered in the order ASCEND_RT_VISIBLE_DEVICES gives
        assert devices[index].startswith(f"  npu:{index}  "), r.describe()
        assert f"physical {physical} " in devices[index] and f"memory {MEMORY_MB} MiB" in devices[index]


@pytest.mark.parametrize("mode", ["native", "float32"])
def test_report_shows_how_half_precision_computes(mode):
    r = softnpu_command("report", env={"SOFTNPU_HALF_COMPUTE": mode})
    assert r.returncode == 0, r.describe()
    start = r.lines.index("Half precision (matrix and convolution ops)") + 1
    how = "ATen's kernel in {}" if mode == "native" else "float32 compute"
    expected = [f"  {dtype:<9} {how.format(dtype)} (SOFTNPU_HALF_COMPUTE={mode})" for dtype in ("float16", "bfloat16")]
    if mode == "float32":
        expected[0] += MKL_HALF_GEMM
    assert r.lines[start:start + 2] == expected, r.describe()
    assert any(line.startswith("cpu     " + softnpu.host.cpu_model()) for line in r.lines), r.describe()


def test_report_with_a_malformed_variable():
    r = softnpu_command("report", env={"SOFTNPU_DEVICE_COUNT": "abc"})
    assert r.returncode == 1, r.describe()
    assert report_configuration(r)["SOFTNPU_DEVICE_COUNT"] == ("abc", "set")
    devices = [line for line in r.lines if line.startswith("Devices:")]
    assert len(devices) == 1 and "unavailable" in devices[0] and "SOFTNPU_DEVICE_COUNT='abc'" in devices[0]


# ----------------------------------------------------------------------------------------- report --sync-points

SCRIPT = """
import sys
import torch

x = torch.arange(10, device="npu")
y = x + 1          # asynchronous
z = y[2:5] * x[3]  # integer indexing stays asynchronous
for _ in range(int(sys.argv[1])):
    y = x[x > 4]   # a boolean mask: the output's shape depends on the data
print("script ran", sys.argv[1:], y.cpu().tolist())
sys.exit(int(sys.argv[2]))
"""


def sync_point_report(result: Result, script: str) -> tuple[int, dict[str, int]]:
    """(total, {op: count}) of the report printed after the script's output."""
    lines = result.lines
    heads = [i for i, line in enumerate(lines) if line.startswith(f"softnpu: {script} took ")]
    assert len(heads) == 1, result.describe()
    head = re.match(rf"softnpu: {re.escape(script)} took (\d+) synchronizing host fallbacks?\b", lines[heads[0]])
    assert head, result.describe()
    counts = {}
    for line in lines[heads[0] + 1:]:
        match = re.fullmatch(r" +(\d+)  (\S+)", line)
        assert match, f"not a count line: {line!r}\n{result.describe()}"
        counts[match[2]] = int(match[1])
    return int(head[1]), counts


@pytest.mark.parametrize("masks, status", [(3, 0), (1, 3)])
def test_sync_points_lists_the_fallbacks_and_returns_the_scripts_status(tmp_path, masks, status):
    (tmp_path / "train.py").write_text(SCRIPT)
    r = softnpu_command("report", "--sync-points", "train.py", str(masks), str(status), cwd=tmp_path)
    assert r.returncode == status, r.describe()
    ran = f"script ran ['{masks}', '{status}'] [5, 6, 7, 8, 9]"
    assert ran in r.lines, r.describe()
    total, counts = sync_point_report(r, "train.py")
    assert r.lines.index(ran) < r.lines.index(next(line for line in r.lines if line.startswith("softnpu: ")))
    assert counts.get("aten::index.Tensor") == masks, r.describe()
    assert total == sum(counts.values()), r.describe()


def test_sync_points_of_a_script_that_raises(tmp_path):
    (tmp_path / "fails.py").write_text(textwrap.dedent("""
        import torch
        x = torch.ones(4, device="npu")
        x[x > 0].sum()
        def inner():
            raise ValueError("boom")
        inner()
    """))
    r = softnpu_command("report", "--sync-points", "fails.py", cwd=tmp_path)
    assert r.returncode == 1, r.describe()
    # Python's traceback of the script: its frames, not runpy's nor the command's
    assert "ValueError: boom" in r.stderr and 'File "fails.py", line 7, in <module>' in r.stderr, r.describe()
    assert "runpy" not in r.stderr and "cli.py" not in r.stderr, r.describe()
    assert sync_point_report(r, "fails.py") == (1, {"aten::index.Tensor": 1})


# ---------------------------------------------------------------------------------------------------- usage


@pytest.mark.parametrize("args, message, usage", [
    (["report", "--sync-points", "no-such-script.py"], "softnpu: cannot open no-such-script.py", False),  # as python
    (["report", "--sync-points"], "--sync-points needs a SCRIPT", True),
    (["frobnicate"], "invalid choice: 'frobnicate'", True),
    ([], "the following arguments are required: COMMAND", True),
])
def test_usage_errors_exit_2(tmp_path, args, message, usage):
    r = softnpu_command(*args, cwd=tmp_path)
    assert r.returncode == 2, r.describe()
    assert message in r.stderr and r.stdout == "", r.describe()
    assert r.stderr.startswith("usage: softnpu") == usage, r.describe()


def test_version():
    r = softnpu_command("--version")
    assert r.returncode == 0, r.describe()
    assert r.stdout == f"softnpu {softnpu.__version__}\n", r.describe()
