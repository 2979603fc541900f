"""trace_view.json: the timeline torch_npu writes (a JSON list of Chrome trace events) — the host process ("Python":
torch ops as cpu_op, Python functions, annotations, runtime launches, mstx markers), and per device "Ascend
Hardware" (tasks on a track per stream, with torch_npu's args), "Overlap Analysis" (Computing, Communication,
Communication(Not Overlapped), Free) and "Communication" (hccl collectives); "async_npu" flows go from each launching
op to its kernel, "fwdbwd" flows from forward ops to their backward. Timestamps are strings of microseconds since
the epoch (every digit kept), durations numbers."""

import json
from pathlib import Path

from .communication import group_info, op_name
from .kernel_views import MODEL_ID, core_type
from .trace import Trace

# Device processes get pids no host process has (Linux pids stay below 2^22).
_DEVICE_PID_BASE = 1 << 30
HARDWARE, OVERLAP, COMMUNICATION = 0, 1, 2
OVERLAP_TRACKS = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]


def device_pid(device: int, process: int) -> int:
    return _DEVICE_PID_BASE + device * 4 + process


def _ts(v) -> str:
    return f"{v:.3f}"


def _meta(pid, name, tid=0, value=None, kind="process_name"):
    key = "labels" if kind == "process_labels" else "sort_index" if kind.endswith("sort_index") else "name"
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {key: name if value is None else value}}


def write(trace: Trace, overlaps: list, out: Path, msprof_tx: bool, gc_threshold_ms=None, gc_events=()) -> None:
    events = [_meta(trace.pid, "Python"), _meta(trace.pid, "CPU", kind="process_labels"),
              _meta(trace.pid, 0, value=0, kind="process_sort_index")]
    events += [e for e in trace.metadata if e.get("name") in ("thread_name", "thread_sort_index")]
    for e in trace.host_events:
        cat = {"privateuse1_runtime": "runtime"}.get(e.cat, e.cat)
        events.append({"ph": "X", "name": e.name, "pid": e.pid, "tid": e.tid, "ts": _ts(e.ts), "dur": float(e.dur),
                       "cat": cat, "args": e.args})
    if msprof_tx:
        for name, ts, dur, tid in trace.marks:
            events.append({"ph": "X" if dur else "i", "name": name, "pid": trace.pid, "tid": tid, "ts": _ts(ts),
                           "dur": float(dur), "cat": "mstx", "args": {}})
    for s in trace.steps:
        events.append({"ph": "X", "name": f"ProfilerStep#{s.id}", "pid": trace.pid, "tid": trace.pid,
                       "ts": _ts(s.ts), "dur": float(s.end - s.ts), "cat": "cpu_op", "args": {}})
    for ts, dur in gc_events:
        events.append({"ph": "X", "name": "GC", "pid": trace.pid, "tid": trace.pid, "ts": _ts(ts), "dur": dur,
                       "cat": "GC", "args": {}})
    for f in trace.flows:
        events.append({**f, "ts": _ts(f["ts"])})

    for device in trace.devices:
        hw = device_pid(device, HARDWARE)
        events += [_meta(hw, "Ascend Hardware"), _meta(hw, f"NPU {device}", kind="process_labels"),
                   _meta(hw, 1, value=device * 4 + 1, kind="process_sort_index")]
        for stream in sorted({t.stream for t in trace.tasks if t.device == device}):
            events += [_meta(hw, f"Stream {stream}", tid=stream, kind="thread_name"),
                       _meta(hw, None, tid=stream, value=stream, kind="thread_sort_index")]
    for t in trace.tasks:
        hw = device_pid(t.device, HARDWARE)
        correlation = t.args.get("correlation")
        args = {"Model Id": MODEL_ID, "Task Id": correlation, "Stream Id": t.stream, "Task Type": core_type(t),
                "Physic Stream Id": t.stream, "connection_id": correlation}
        args.update({k: v for k, v in t.args.items() if k not in ("External id", "correlation", "stream", "device")})
        events.append({"ph": "X", "name": t.name, "pid": hw, "tid": t.stream, "ts": _ts(t.ts), "dur": float(t.dur),
                       "args": args})
        if t.op is not None and correlation is not None:
            # torch_npu draws the arrow from the op itself (its start) to the task.
            events.append({"ph": "s", "bp": "e", "name": "torch_to_npu", "id": correlation, "pid": t.op.pid,
                           "tid": t.op.tid, "ts": _ts(t.op.ts), "cat": "async_npu"})
            events.append({"ph": "f", "bp": "e", "name": "torch_to_npu", "id": correlation, "pid": hw,
                           "tid": t.stream, "ts": _ts(t.ts), "cat": "async_npu"})

    if trace.collectives:
        group, _, _ = group_info(trace)
        for device in sorted({c.device for c in trace.collectives}):
            pid = device_pid(device, COMMUNICATION)
            events += [_meta(pid, "Communication"), _meta(pid, f"NPU {device}", kind="process_labels"),
                       _meta(pid, 1, value=device * 4 + 3, kind="process_sort_index"),
                       _meta(pid, f"Group {group} Communication", tid=0, kind="thread_name"),
                       _meta(pid, None, tid=0, value=0, kind="thread_sort_index")]
        for c in trace.collectives:
            events.append({"ph": "X", "name": op_name(c, group).split("@")[0], "pid": device_pid(c.device, COMMUNICATION),
                           "tid": 0, "ts": _ts(c.ts), "dur": float(c.dur),
                           "args": {"size(Byte)": c.bytes, "Stream Id": c.stream}})

    for device in sorted({o.device for o in overlaps}):
        pid = device_pid(device, OVERLAP)
        events += [_meta(pid, "Overlap Analysis"), _meta(pid, f"NPU {device}", kind="process_labels"),
                   _meta(pid, 1, value=device * 4 + 2, kind="process_sort_index")]
        for tid, name in enumerate(OVERLAP_TRACKS):
            events += [_meta(pid, name, tid=tid, kind="thread_name"),
                       _meta(pid, None, tid=tid, value=tid, kind="thread_sort_index")]
    for o in overlaps:
        pid = device_pid(o.device, OVERLAP)
        for tid, intervals in enumerate((o.computing, o.communication, o.not_overlapped, o.free)):
            for lo, hi in intervals:
                events.append({"ph": "X", "name": OVERLAP_TRACKS[tid], "pid": pid, "tid": tid, "ts": _ts(lo),
                               "dur": float(hi - lo), "args": {}})
    (out / "trace_view.json").write_text(json.dumps(events, default=str))
