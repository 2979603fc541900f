"""NPUGraph.debug_dump's files (torch_npu.npu._npugraph_utils): the captured graph as a Chrome trace (a JSON list
of events, as ACL's graph JSON print gives torch_npu), and align_trace_json, which lays each stream's tasks out back
to back for viewing (chrome://tracing, Perfetto).

The raw dump has one complete event ("ph": "X") per recorded node, in launch order: its name (the kernel's, or
"Memcpy HtoD" and the like), the capturing stream as "stream<id>" (softnpu runs a graph's nodes in launch order on
that stream, joined streams included), args "Task Type" (KERNEL, MEMCPY, MEMSET), "Task Id" (the node's index)
and "Task Group" (the segment of torch.npu.graph_task_group_begin/end it belongs to, 0 outside any). A dump
records no times: "ts" is the node's index, "dur" 1."""

import json
from pathlib import Path

_GAP_US = 0.2  # between consecutive tasks of a stream in the aligned trace, as torch_npu's


def _task_type(name: str) -> str:
    if name.startswith("Memcpy"):
        return "MEMCPY"
    if name.startswith("Memset"):
        return "MEMSET"
    return "KERNEL"


def write_graph_json(path, segments, device_index: int, stream_id: int) -> None:
    """Writes the raw dump of a graph whose segments recorded the nodes named in `segments` (a list per segment)."""
    events, index = [], 0
    for group, names in enumerate(segments):
        for name in names:
            events.append({"name": name, "ph": "X", "pid": device_index, "tid": f"stream{stream_id}", "ts": index,
                           "dur": 1, "args": {"Task Type": _task_type(name), "Task Id": index, "Task Group": group}})
            index += 1
    with open(path, "w", encoding="utf-8") as f:
        json.dump(events, f, ensure_ascii=False, indent=2)


def align_trace_json(input, output, merge_gap=0.0):  # noqa: A002  (torch_npu's parameter name)
    """Writes `output` (by default the input's name with .aligned.json for .json) from the raw dump `input`: each
    stream's tasks in their order, the first at 0 and each next 0.2 us after the previous one ends. merge_gap is the
    gap torch_npu inserts when it merges the virtual streams of STREAM_ACTIVE tasks into their stream; a softnpu
    dump has none, so it only has to be a non-negative number. Returns the output's path."""
    if not isinstance(merge_gap, (int, float)) or merge_gap < 0:
        raise ValueError(f"merge_gap must be a non-negative number, got {merge_gap!r}")
    in_path = Path(input)
    out_path = Path(output) if output else in_path.with_suffix(".aligned.json")
    with in_path.open("r", encoding="utf-8") as f:
        events = json.load(f)
    if not isinstance(events, list):
        raise RuntimeError(f"{in_path}: a graph dump is a JSON list of trace events")
    by_stream: dict = {}
    for position, event in enumerate(events):
        if event.get("ph") == "X":
            by_stream.setdefault(event.get("tid"), []).append((event.get("ts", 0), position))
    aligned = [dict(event) for event in events]
    for tasks in by_stream.values():
        end = None
        for _, position in sorted(tasks):
            event = aligned[position]
            event["ts"] = 0.0 if end is None else end + _GAP_US
            end = event["ts"] + event.get("dur", 0)
    with out_path.open("w", encoding="utf-8") as f:
        json.dump(aligned, f, ensure_ascii=False, indent=2)
    return out_path
