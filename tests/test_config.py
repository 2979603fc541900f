"""Configuration: every variable of csrc/common/env_vars.def is documented in README.md, a malformed value of each is a
clear error naming it, and the documented effects of the variables hold."""

import re
import signal

import pytest
from conftest import REPO, declared_env_vars, run_many, run_python

VARS = declared_env_vars()

# Malformed values per kind of variable (STRING variables accept any text, so they cannot be malformed).
MALFORMED = {"BOOL": ["yes"], "INT": ["bogus"], "LIST": ["bogus"], "CONF": ["bogus"], "CHOICE": ["bogus"]}
# Well-formed text out of a variable's range.
OUT_OF_RANGE = {
    "SOFTNPU_DEVICE_COUNT": "0",
    "SOFTNPU_MEMORY_MB": "-5",
    "SOFTNPU_CORES": "0",
    "ASCEND_GLOBAL_LOG_LEVEL": "7",
    "ASCEND_RT_VISIBLE_DEVICES": "0,0",
    "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:abc",
    "OOM_SNAPSHOT_ENABLE": "3",
}

# Uses the device in every way that reads a variable: runtime start, allocation, a launch, a matrix op, a host
# fallback.
USE_DEVICE = """
try:
    import torch, torch_npu
    from torch_npu.testing.common_utils import get_npu_device, test_seed
    get_npu_device(), test_seed()
    x = torch.ones(4, device="npu")
    (x + x).cpu()
    (x @ x).cpu()
    torch.nonzero(x).cpu()
    print("NO ERROR")
except Exception as e:
    print(type(e).__name__)
    print(str(e).replace("\\n", " | "))
"""


def _readme_config_rows() -> dict[str, str]:
    readme = (REPO / "README.md").read_text()
    return {m.group(1): m.group(0) for m in re.finditer(r"^\|\s*`([A-Z][A-Z0-9_]+)`\s*\|.*$", readme, re.M)}


def test_readme_documents_every_variable():
    rows = _readme_config_rows()
    declared = {v.name for v in VARS}
    missing = declared - rows.keys()
    assert not missing, f"variables of env_vars.def not in README.md's configuration table: {sorted(missing)}"
    stale = rows.keys() - declared
    assert not stale, f"README.md documents variables softnpu does not read: {sorted(stale)}"
    for v in VARS:
        if v.default:  # the documented default is the declared one
            assert v.default in rows[v.name], (v.name, v.default, rows[v.name])


def _malformed_cases():
    cases = []
    for v in VARS:
        for value in MALFORMED.get(v.kind, []):
            cases.append((v.name, value))
        if v.name in OUT_OF_RANGE:
            cases.append((v.name, OUT_OF_RANGE[v.name]))
    return cases


CASES = _malformed_cases()


@pytest.fixture(scope="module")
def malformed_results():
    # One child per (variable, value), all at once.
    results = run_many([(USE_DEVICE, {name: value}) for name, value in CASES])
    return dict(zip(CASES, results))


def test_every_checkable_variable_has_a_malformed_case():
    names = {name for name, _ in CASES}
    for v in VARS:
        if v.kind != "STRING":
            assert v.name in names, v.name


@pytest.mark.parametrize("name,value", CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_malformed_value_is_a_clear_error_naming_the_variable(malformed_results, name, value):
    result = malformed_results[(name, value)]
    assert result.lines[0] != "NO ERROR", f"{name}={value!r} was accepted"
    kind, message = result.lines[0], result.lines[1]
    assert kind in ("RuntimeError", "ValueError", "ConfigurationError"), result.describe()  # the last a ValueError
    assert name in message and value in message, message
    assert "frame #" not in message  # a message, not a C++ backtrace


def test_runtime_variable_errors_keep_torch_usable_and_is_available_false():
    result = run_python(
        """
        import torch, torch_npu
        print(torch.npu.is_available(), torch.npu.device_count())  # never raise, as torch.cuda's
        try:
            torch.npu.init()
        except RuntimeError as e:
            print("init:", "SOFTNPU_MEMORY_MB" in str(e))
        print(torch.ones(2).sum().item())  # the CPU is unaffected
        """,
        env={"SOFTNPU_MEMORY_MB": "lots"},
    )
    assert result.lines == ["False 0", "init: True", "2.0"]


def test_unavailable_device_warning_is_readable():
    result = run_python("import torch, torch_npu; torch.npu.is_available()", env={"SOFTNPU_MEMORY_MB": "lots"})
    assert "SOFTNPU_MEMORY_MB='lots'" in result.stderr
    assert "frame #" not in result.stderr, result.stderr


def test_log_level_info_logs_every_launch_with_its_stream(tmp_path):
    code = """
        import torch, torch_npu
        x = torch.ones(4, device="npu")
        (x + x).cpu()
    """
    to_stdout, to_file = run_many([
        (code, {"ASCEND_GLOBAL_LOG_LEVEL": 1, "ASCEND_SLOG_PRINT_TO_STDOUT": 1}),
        (code, {"ASCEND_GLOBAL_LOG_LEVEL": 1, "ASCEND_SLOG_PRINT_TO_STDOUT": 0, "ASCEND_PROCESS_LOG_PATH": tmp_path}),
    ])
    launches = [line for line in to_stdout.lines if "aten::add" in line]
    assert launches and all("[INFO]" in line and re.search(r"stream \d+", line) for line in launches), to_stdout.stdout
    logs = list(tmp_path.glob("softnpu-*.log"))
    assert len(logs) == 1 and "aten::add" in logs[0].read_text()
    assert "aten::add" not in to_file.stdout
    # The default level (3, errors) logs no launches.
    quiet = run_python(code, env={"ASCEND_SLOG_PRINT_TO_STDOUT": 1})
    assert "aten::add" not in quiet.stdout


def test_protect_memory_crashes_host_code_that_reads_device_memory():
    result = run_python(
        """
        import ctypes, torch, torch_npu
        x = torch.arange(8.0, device="npu")
        print((x * x).sum().item(), flush=True)  # kernels and copies still work
        ctypes.string_at(x.data_ptr(), 4)  # the host dereferencing a device pointer
        print("read device memory from the host")
        """,
        env={"SOFTNPU_PROTECT_MEMORY": 1},
        check=False,
    )
    assert result.lines[:1] == ["140.0"]
    assert result.returncode == -signal.SIGSEGV, result.describe()
    # Without the switch, the same read works (device memory is host memory underneath).
    unprotected = run_python("""
        import ctypes, torch, torch_npu
        x = torch.arange(8.0, device="npu")
        torch.npu.synchronize()
        print(len(ctypes.string_at(x.data_ptr(), 4)))
    """)
    assert unprotected.lines == ["4"]


def test_visible_devices_changed_before_first_use_take_effect():
    # As CUDA_VISIBLE_DEVICES before CUDA initializes: counting (is_available) does not fix the devices, first use does.
    r = run_python("""
import os, torch, torch_npu
assert torch.npu.is_available() and torch.npu.device_count() == 3
os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "2,0"
print(torch.npu.device_count(), torch.ones(1, device="npu:1").device,
      [torch.npu.get_device_properties(i).physical_index for i in range(2)])
os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "1"
print(torch.npu.device_count())
""", env={"SOFTNPU_DEVICE_COUNT": "3"})
    assert r.stdout.split("\n")[:2] == ["2 npu:1 [2, 0]", "2"], r.stdout
