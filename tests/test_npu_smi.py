"""npu-smi sees the processes using the devices, with their memory, and forgets them when they end; it prints
Ascend's 910B table, which npu-smi readers such as nputop parse."""

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MEMORY_MB, child_env, run_python

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


# nputop (an Ascend TUI over `npu-smi info`), pinned, and what it imports beyond the venv; none of it touches torch.
NPUTOP = ["nputop==0.0.3", "textual==8.2.8", "mdit-py-plugins==0.7.0", "platformdirs==4.14.9"]

# nputop as its README runs it, without a terminal: its app under textual's headless driver. Its NPU panel's refresh
# runs `npu-smi info` from PATH and parses it (NPUStats.parse_npu_info); the panel is rendered as text, and the
# parse of the same output is printed beside the output itself.
NPUTOP_RUN = """
import asyncio, io, json, subprocess
from rich.console import Console
from nputop.main import NPUStats, SystemMonitorApp

async def main():
    app = SystemMonitorApp()
    async with app.run_test(size=(200, 60)):
        stats = app.query_one(NPUStats)
        stats.update_stats()  # what its one-second timer calls
        console = Console(file=io.StringIO(), width=200, color_system=None)
        console.print(stats.content)
        smi = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, check=True).stdout
        devices, processes = stats.parse_npu_info(smi)
    print(json.dumps({"screen": console.file.getvalue(), "smi": smi, "devices": devices, "processes": processes}))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def nputop():
    if importlib.util.find_spec("nputop") is None or importlib.util.find_spec("textual") is None:
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *NPUTOP], check=True)
        except subprocess.CalledProcessError:
            pytest.skip(f"{NPUTOP[0]} could not be installed (no package index?)")


def _device_rows(smi: str) -> list[tuple[str, str, int, int]]:
    """(NPU, Bus-Id, HBM used, HBM total) of each device, read from npu-smi's 910B table."""
    rows = re.findall(r"^\| (\d+) +\S+ +\| OK +\|.*\n\| 0 +\| (\S+) +\| \d+ +0 +/ 0 +(\d+) */ (\d+) +\|$", smi,
                      re.MULTILINE)
    return [(npu, bus, int(used), int(total)) for npu, bus, used, total in rows]


def test_nputop_shows_bus_ids_and_hbm_usage_of_each_device(nputop):
    holder = _start_holder(256)
    renumbered = _start_holder(64, {"ASCEND_RT_VISIBLE_DEVICES": "1"})
    try:
        _wait_ready(holder)
        _wait_ready(renumbered)
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # softnpu's npu-smi first
        out = json.loads(run_python(NPUTOP_RUN, env={"PATH": path}, timeout=120).stdout)
    finally:
        holder.stdin.close()
        renumbered.stdin.close()
        holder.wait(timeout=60)
        renumbered.wait(timeout=60)
    smi, devices = out["smi"], out["devices"]
    rows = _device_rows(smi)
    assert [bus for _, bus, _, _ in rows] == ["0000:C1:00.0", "0000:C2:00.0"], smi
    # nputop reads every device's bus id and HBM usage as npu-smi prints them.
    assert [(d["id"], d["bus_id"], d["hbm_used"], d["hbm_total"]) for d in devices] == \
        [(npu, bus, used, total) for npu, bus, used, total in rows], (devices, smi)
    assert [d["name"] for d in devices] == ["910B3", "910B3"] and all(d["health"] == "OK" for d in devices)
    assert devices[0]["hbm_total"] == MEMORY_MB and devices[0]["hbm_used"] >= 256, devices
    assert devices[1]["hbm_used"] >= 64, devices
    mine = [p for p in out["processes"] if p["pid"] == str(holder.pid)]
    assert [(p["npu_id"], p["memory"] >= 256) for p in mine] == [("0", True)], out["processes"]
    other = [p for p in out["processes"] if p["pid"] == str(renumbered.pid)]
    assert [(p["npu_id"], p["memory"] >= 64) for p in other] == [("1", True)], out["processes"]
    # Its panel shows both devices (name, health) and the holder among the processes.
    screen = out["screen"]
    assert screen.count("910B3") == 2 and str(holder.pid) in screen, screen
