"""torch.npu.memory._record_memory_history / _snapshot / _dump_snapshot, as torch.cuda's: the snapshot has
torch.cuda.memory._snapshot()'s format, which PyTorch's visualiser (torch.cuda._memory_viz) renders; stacks are Python
and C++ frames; OOM_SNAPSHOT_ENABLE writes a snapshot when an OutOfMemoryError is raised."""

import base64
import json
import pickle
import re

import pytest
import torch
from conftest import MiB, run_python
from torch.cuda import _memory_viz


@pytest.fixture
def recording():
    torch.npu.memory._record_memory_history(stacks="python", clear_history=True)
    yield
    torch.npu.memory._record_memory_history(None)


def _train_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64).npu(), torch.randn(32, 8).npu()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return model, loss.item()


def _blocks(snapshot, state="active_allocated"):
    return [b for seg in snapshot["segments"] for b in seg["blocks"] if b["state"] == state]


def test_history_records_every_event_with_python_frames(recording):
    x = torch.empty(1000, device="npu")  # 4000 bytes
    address = x.data_ptr()
    del x
    trace = torch.npu.memory._snapshot()["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc" and e["addr"] == address]
    assert allocs and allocs[-1]["size"] == 4000
    frames = allocs[-1]["frames"]
    assert any(f["filename"] == __file__ and f["name"] == "test_history_records_every_event_with_python_frames"
               for f in frames), frames
    actions = [e["action"] for e in trace if e.get("addr") == address]
    assert actions[-3:] == ["alloc", "free_requested", "free_completed"]
    assert trace[-1]["action"] == "snapshot"
    assert all(e["time_us"] > 0 for e in trace)


def test_live_blocks_carry_the_stack_that_allocated_them(recording):
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
    snap = torch.npu.memory._snapshot()
    (block,) = [b for b in _blocks(snap) if b["address"] == x.data_ptr()]
    assert block["requested_size"] == 3 * MiB and block["size"] >= 3 * MiB
    assert any(f["filename"] == __file__ for f in block["frames"])
    seg = next(s for s in snap["segments"] if s["address"] <= x.data_ptr() < s["address"] + s["total_size"])
    assert seg["segment_type"] == "large" and seg["segment_pool_id"] == (0, 0)
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]


def test_cpp_stacks_with_stacks_all():
    torch.npu.memory._record_memory_history(stacks="all")
    try:
        x = torch.empty(100, device="npu")
        (block,) = [b for b in _blocks(torch.npu.memory._snapshot()) if b["address"] == x.data_ptr()]
    finally:
        torch.npu.memory._record_memory_history(None)
    names = [f["name"] for f in block["frames"]]
    assert any("softnpu::" in n for n in names), names  # the allocator's own C++ frames
    assert any(f["filename"] == __file__ for f in block["frames"])


def test_max_entries_keeps_the_newest_events():
    torch.npu.memory._record_memory_history(max_entries=8, clear_history=True)
    try:
        for _ in range(20):
            torch.empty(10, device="npu")
        last = torch.empty(10, device="npu")
        trace = torch.npu.memory._snapshot()["device_traces"][0]
    finally:
        torch.npu.memory._record_memory_history(None)
    assert len(trace) == 8
    assert trace[-2]["action"] == "alloc" and trace[-2]["addr"] == last.data_ptr()


def test_state_mode_keeps_stacks_but_no_history():
    torch.npu.memory._record_memory_history("state", clear_history=True)
    try:
        x = torch.empty(100, device="npu")
        snap = torch.npu.memory._snapshot()
    finally:
        torch.npu.memory._record_memory_history(None)
    assert snap["device_traces"] == [[], []]
    (block,) = [b for b in _blocks(snap) if b["address"] == x.data_ptr()]
    assert block["frames"]


def test_bad_arguments_are_errors():
    with pytest.raises(RuntimeError, match="expected context"):
        torch.npu.memory._record_memory_history(context="bogus")
    with pytest.raises(RuntimeError, match="expected stacks"):
        torch.npu.memory._record_memory_history(stacks="bogus")


def test_visualiser_renders_a_training_step(recording, tmp_path):
    model, _ = _train_step()  # kept alive: its parameters and optimizer state are the live blocks
    path = tmp_path / "snapshot.pickle"
    torch.npu.memory._dump_snapshot(str(path))
    snap = pickle.loads(path.read_bytes())
    assert _blocks(snap) and snap["device_traces"][0]
    # The Python renderers read every field they need.
    summary = _memory_viz.segsum(snap)
    assert "segments:" in summary and "total_allocated" in summary
    text = _memory_viz.trace(snap)
    # Each allocation is placed in the segment it came from ("b = seg_1[32768:512.0B]" or "b = a[...]").
    assert re.search(r"^[a-z]+ = (seg_\d+|[a-z]+)\[\d+:", text, re.M), text[:500]
    flame = _memory_viz.segments(snap, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in flame and "_train_step" in flame
    # The HTML viewers carry the snapshot itself for MemoryViz.js.
    for html, kind in ((_memory_viz.trace_plot(snap), "Active Memory Timeline"),
                       (_memory_viz.segment_plot(snap), "Allocator State History")):
        assert kind in html
        payload = json.loads(re.search(r'(\[\{"name": "snapshot.pickle".*?\}\])', html).group(1))
        embedded = pickle.loads(base64.b64decode(payload[0]["base64"]).rstrip(b"\x00") + b"")
        assert embedded["segments"] == snap["segments"]


def test_command_line_visualiser_writes_html(recording, tmp_path):
    model, _ = _train_step()
    path = tmp_path / "snapshot.pickle"
    torch.npu.memory._dump_snapshot(str(path))
    out = tmp_path / "trace.html"
    r = run_python(f"import sys; sys.argv = ['_memory_viz', 'trace_plot', {str(path)!r}, '-o', {str(out)!r}];"
                   "import runpy; runpy.run_module('torch.cuda._memory_viz', run_name='__main__')", timeout=300)
    assert out.exists() and "snapshot.pickle" in out.read_text(), r.describe()


def test_oom_snapshot_is_written_on_a_real_oom(tmp_path):
    code = f"""
import glob, pickle, torch, torch_npu
keep = torch.empty(8 << 20, dtype=torch.uint8, device="npu")
try:
    torch.empty(1 << 30, dtype=torch.uint8, device="npu")
except torch.OutOfMemoryError as e:
    print("OOM")
(name,) = glob.glob({str(tmp_path)!r} + "/oom_snapshot_*.pickle")
snap = pickle.load(open(name, "rb"))
# The size of the segment it tried: 1 GiB + torch_npu's 32-byte pad, a large segment rounded to 2 MiB.
print(any(e["action"] == "oom" and e["size"] == (1 << 30) + (2 << 20) for e in snap["device_traces"][0]))
print(any(b["state"] == "active_allocated" and b["requested_size"] == 8 << 20 and b["frames"]
          for s in snap["segments"] for b in s["blocks"]))
"""
    r = run_python(code, env={"OOM_SNAPSHOT_ENABLE": "1", "OOM_SNAPSHOT_PATH": str(tmp_path),
                              "SOFTNPU_MEMORY_MB": "256"}, timeout=300)
    assert r.lines[-3:] == ["OOM", "True", "True"], r.describe()


def test_oom_snapshot_state_only(tmp_path):
    code = f"""
import glob, pickle, torch, torch_npu
keep = torch.empty(8 << 20, dtype=torch.uint8, device="npu")
try:
    torch.empty(1 << 30, dtype=torch.uint8, device="npu")
except torch.OutOfMemoryError:
    pass
(name,) = glob.glob({str(tmp_path)!r} + "/oom_snapshot_*.pickle")
snap = pickle.load(open(name, "rb"))
print(snap["device_traces"][0] == [], len(snap["segments"]) > 0)
"""
    r = run_python(code, env={"OOM_SNAPSHOT_ENABLE": "2", "OOM_SNAPSHOT_PATH": str(tmp_path),
                              "SOFTNPU_MEMORY_MB": "256"}, timeout=300)
    assert r.lines[-1] == "True True", r.describe()


def test_free_completes_after_the_other_streams_work(recording):
    side = torch.npu.Stream()
    x = torch.ones(1000, device="npu")
    address = x.data_ptr()
    with torch.npu.stream(side):
        torch.npu._sleep(200_000_000)
        y = x * 2
    x.record_stream(side)
    del x
    pending = [e["action"] for e in torch.npu.memory._snapshot()["device_traces"][0] if e.get("addr") == address]
    assert pending[-2:] == ["alloc", "free_requested"]  # in use on `side`: not reusable yet
    side.synchronize()
    torch.empty(1000, device="npu")  # the allocator notices the completed use
    done = [e["action"] for e in torch.npu.memory._snapshot()["device_traces"][0] if e.get("addr") == address]
    assert "free_completed" in done[done.index("free_requested"):]
    assert y.sum().item() == 2000


def test_skip_actions():
    torch.npu.memory._record_memory_history(stacks="python", clear_history=True, skip_actions=["free_requested"])
    try:
        x = torch.empty(100, device="npu")
        del x
        actions = {e["action"] for e in torch.npu.memory._snapshot()["device_traces"][0]}
    finally:
        torch.npu.memory._record_memory_history(None)
    assert "alloc" in actions and "free_completed" in actions and "free_requested" not in actions
    with pytest.raises(RuntimeError, match="Unknown TraceEntry action"):
        torch.npu.memory._record_memory_history(skip_actions=["bogus"])


def test_out_of_memory_observer_sees_the_failed_allocation():
    code = """
import torch, torch_npu
seen = []
torch.npu.memory._attach_out_of_memory_observer(lambda *args: seen.append(args))
keep = torch.ones(1 << 20, dtype=torch.uint8, device="npu")
try:
    torch.empty(1 << 30, dtype=torch.uint8, device="npu")
except torch.OutOfMemoryError:
    pass
(device, alloc, allocated, free), = seen
print(device, alloc, allocated >= 1 << 20, 0 < free <= 256 << 20, int(keep.sum().item()))
"""
    r = run_python(code, env={"SOFTNPU_MEMORY_MB": "256"}, timeout=300)
    # alloc is the segment it tried, as CUDA's: 1 GiB + torch_npu's 32-byte pad, rounded to 2 MiB.
    assert r.lines[-1] == f"0 {(1 << 30) + (2 << 20)} True True {1 << 20}", r.describe()
