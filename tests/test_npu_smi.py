"""npu-smi sees the processes using the devices, with their memory, and forgets them when they end."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

NPU_SMI = Path(sys.executable).parent / "npu-smi"

HOLDER = """
import sys, torch, torch_npu
x = torch.empty({mib} << 20, dtype=torch.uint8, device="npu:0")
x.fill_(1)
torch.npu.synchronize()
print("ready", flush=True)
sys.stdin.readline()  # holds the memory until told to exit
"""


def _start_holder(mib: int, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(mib=mib)], env=child_env(env), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc


def _wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"holder did not start: {line!r}\n{err}")


def _smi() -> dict:
    out = subprocess.run([str(NPU_SMI), "info", "--json"], env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _entries(info: dict, pid: int) -> list[dict]:
    return [p for p in info["processes"] if p["pid"] == pid]


def test_npu_smi_lists_a_process_holding_memory_until_it_exits():
    holder = _start_holder(256)
    # A process that sees only physical device 1 (as its npu:0): npu-smi reports the physical device.
    renumbered = _start_holder(64, {"ASCEND_RT_VISIBLE_DEVICES": "1"})
    try:
        _wait_ready(holder)
        _wait_ready(renumbered)
        info = _smi()
        entries = _entries(info, holder.pid)
        assert len(entries) == 1, info
        assert entries[0]["device"] == 0
        assert 250 <= entries[0]["memory_mb"] <= 270, entries
        device0 = next(d for d in info["devices"] if d["id"] == 0)
        assert device0["memory_used_mb"] >= 256 and device0["memory_total_mb"] > device0["memory_used_mb"]
        other = _entries(info, renumbered.pid)
        assert [(e["device"], 60 <= e["memory_mb"] <= 70) for e in other] == [(1, True)], info
    finally:
        holder.stdin.close()  # a normal exit
        holder.wait(timeout=60)
        renumbered.send_signal(signal.SIGKILL)  # a process that cannot clean up after itself
        renumbered.wait(timeout=60)
    info = _smi()
    assert _entries(info, holder.pid) == [], info
    assert _entries(info, renumbered.pid) == [], info
