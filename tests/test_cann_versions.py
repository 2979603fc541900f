"""The CANN softnpu presents: CANN 9.0.0 (torch_npu for torch 2.13's) with its driver, 25.5.0. The driver release is
stated once (top-level CMakeLists.txt) and read the same by npu-smi and get_cann_version(module="DRIVER")."""

import re
import subprocess
import sys
from pathlib import Path

import softnpu
import torch
from torch_npu.npu.utils import _is_gte_cann_version, get_cann_version


def test_cann_and_driver_versions():
    assert torch.version.cann == get_cann_version() == get_cann_version("RUNTIME") == "9.0.0"
    info = (Path(softnpu.__file__).parent / "driver" / "version.info").read_text()
    assert info.splitlines() == ["Version=25.5.0"]
    assert get_cann_version(module="DRIVER") == "25.5.0"
    # torch_npu's gates for CANN 8.5.0 / driver 25.5 features (pinned expandable segments, aclgraph DFX ops) open.
    assert _is_gte_cann_version("8.5.0") and _is_gte_cann_version("9.0.0") and not _is_gte_cann_version("9.0.1")
    assert _is_gte_cann_version("25.5.0", module="DRIVER") and not _is_gte_cann_version("26.0.0", module="DRIVER")


def test_npu_smi_prints_the_driver_version():
    out = subprocess.run([str(Path(sys.executable).parent / "npu-smi"), "info"], capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"npu-smi 25\.5\.0\s+Version: 25\.5\.0\s", out), out[:300]
