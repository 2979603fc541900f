"""The recorded trace, read once: torch.profiler's Chrome trace (Kineto, with softnpu's PrivateUse1 activity
profiler) parsed into the host ops, device tasks, steps, collectives, memory records and markers that every view of
ASCEND_PROFILER_OUTPUT is computed from.

Times are kept as Decimal microseconds since the Unix epoch (Kineto's ts plus baseTimeNanoseconds): torch_npu's files
carry absolute timestamps, and a float cannot hold them to the nanosecond.
"""

import bisect
import dataclasses
import json
from decimal import Decimal
from pathlib import Path

# torch_npu.npu.mstx records its markers and ranges as user annotations with these prefixes (python/softnpu/npu/mstx.py).
MSTX_MARK = "mstx::mark::"
MSTX_RANGE = "mstx::range::"
# The arg by which the device profiler marks an hccl collective on its communication stream
# (csrc/backend/profiler/collective_trace.h): the bytes it carries.
COLLECTIVE_BYTES = "collective bytes"


@dataclasses.dataclass
class HostOp:
    name: str
    pid: int
    tid: int
    ts: Decimal
    dur: Decimal
    args: dict
    cat: str
    children: list = dataclasses.field(default_factory=list, repr=False)
    kernels: list = dataclasses.field(default_factory=list, repr=False)  # device tasks it launched itself
    parent: "HostOp | None" = dataclasses.field(default=None, repr=False)

    @property
    def end(self) -> Decimal:
        return self.ts + self.dur

    @property
    def external_id(self):
        return self.args.get("External id")


@dataclasses.dataclass
class DeviceTask:
    """A kernel, copy or memset as it ran on a stream of a device."""
    name: str
    kind: str  # "kernel", "gpu_memcpy", "gpu_memset"
    device: int
    stream: int
    ts: Decimal
    dur: Decimal
    args: dict
    op: HostOp | None = None  # the op that launched it
    step: int | None = None

    @property
    def end(self) -> Decimal:
        return self.ts + self.dur


@dataclasses.dataclass
class Collective:
    """An hccl collective on its communication stream: from its hand-over to Gloo to its completion."""
    name: str  # HCCL's name, e.g. hcom_allReduce_
    ts: Decimal
    dur: Decimal
    bytes: int
    device: int
    stream: int
    index: int = 0
    step: int | None = None

    @property
    def end(self) -> Decimal:
        return self.ts + self.dur


@dataclasses.dataclass
class Step:
    id: int
    ts: Decimal
    end: Decimal


@dataclasses.dataclass
class MemoryRecord:
    ts: Decimal
    device: int
    addr: int
    bytes: int
    total_allocated: int
    total_reserved: int
    stream: int
    tid: int


@dataclasses.dataclass
class Trace:
    pid: int
    host_events: list  # every host-side X event but steps, collectives and markers, in trace_view's form
    ops: list  # cpu_op HostOps (torch ops), each with its children and kernels
    tasks: list
    collectives: list
    steps: list
    memory: list
    marks: list  # (name, ts, dur, tid): mstx marks (dur 0) and ranges
    flows: list  # fwdbwd flow events, as recorded
    metadata: list  # M events of the host process
    distributed: dict
    devices: list

    def step_of(self, ts: Decimal) -> int | None:
        """The step whose interval holds ts; before the first step, None; past a step's end, that step."""
        starts = [s.ts for s in self.steps]
        i = bisect.bisect_right(starts, ts) - 1
        return self.steps[i].id if i >= 0 else (self.steps[0].id if self.steps else None)


def load(path: str | Path) -> Trace:
    raw = json.loads(Path(path).read_text(), parse_float=Decimal)
    base = Decimal(int(raw.get("baseTimeNanoseconds", 0))) / 1000
    events = raw["traceEvents"]
    host_pids = {e["pid"] for e in events if e.get("cat") == "cpu_op"}
    pid = next(iter(host_pids)) if host_pids else 0

    def t(v) -> Decimal:
        return Decimal(v) + base

    ops, host_events, tasks, collectives, steps, memory, marks, flows, metadata = [], [], [], [], [], [], [], [], []
    for e in events:
        ph, cat, name = e.get("ph"), e.get("cat"), e.get("name", "")
        if ph == "M":
            if e.get("pid") == pid:
                metadata.append(e)
            continue
        if ph == "i" and name == "[memory]":
            a = e["args"]
            if a.get("Device Type") != 0:  # torch's DeviceType: 0 is the CPU
                memory.append(MemoryRecord(t(e["ts"]), int(a.get("Device Id", 0)), int(a.get("Addr", 0)),
                                           int(a["Bytes"]), int(a["Total Allocated"]), int(a["Total Reserved"]),
                                           int(a.get("Stream Ptr", 0) or 0), e.get("tid", 0)))
            continue
        if ph in ("s", "f") and cat == "fwdbwd":
            flows.append({**e, "ts": t(e["ts"])})
            continue
        if ph != "X" or cat == "Trace":
            continue
        ts, dur = t(e["ts"]), Decimal(e.get("dur", 0))
        args = e.get("args", {})
        if cat == "kernel" and COLLECTIVE_BYTES in args:
            collectives.append(Collective(name, ts, dur, int(args[COLLECTIVE_BYTES]), int(args.get("device", 0)),
                                          int(args.get("stream", e["tid"]))))
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            tasks.append(DeviceTask(name, cat, int(args.get("device", e["pid"])), int(args.get("stream", e["tid"])),
                                    ts, dur, args))
        elif cat == "user_annotation" and name.startswith("ProfilerStep#"):
            steps.append(Step(int(name.split("#", 1)[1]), ts, ts + dur))
        elif cat == "user_annotation" and name.startswith((MSTX_MARK, MSTX_RANGE)):
            mark = name.startswith(MSTX_MARK)
            marks.append((name[len(MSTX_MARK if mark else MSTX_RANGE):], ts, Decimal(0) if mark else dur, e["tid"]))
        else:
            op = HostOp(name, e["pid"], e["tid"], ts, dur, args, cat)
            host_events.append(op)
            if cat == "cpu_op":
                ops.append(op)

    steps.sort(key=lambda s: s.ts)
    _build_tree(ops)
    _attach_call_stacks(ops, [e for e in host_events if e.cat == "python_function"])
    by_external = {op.external_id: op for op in ops if op.external_id is not None}
    trace = Trace(pid, host_events, ops, sorted(tasks, key=lambda k: k.ts), sorted(collectives, key=lambda c: c.ts),
                  steps, sorted(memory, key=lambda m: m.ts), marks, flows, metadata, raw.get("distributedInfo") or {},
                  sorted({k.device for k in tasks} | {c.device for c in collectives}))
    for task in trace.tasks:
        task.op = by_external.get(task.args.get("External id"))
        if task.op is not None:
            task.op.kernels.append(task)
        task.step = trace.step_of(task.op.ts if task.op is not None else task.ts)
    for i, c in enumerate(trace.collectives):
        c.index, c.step = i, trace.step_of(c.ts)
    return trace


def _build_tree(ops: list) -> None:
    """Each op's children: the ops inside it on its thread (by time, as torch's tree)."""
    by_thread = {}
    for op in ops:
        by_thread.setdefault((op.pid, op.tid), []).append(op)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda o: (o.ts, -o.dur))
        stack = []
        for op in thread_ops:
            while stack and op.ts >= stack[-1].end:
                stack.pop()
            if stack:
                stack[-1].children.append(op)
            op.parent = stack[-1] if stack else None
            stack.append(op)


def _attach_call_stacks(ops: list, functions: list) -> None:
    """with_stack=True: each op's Python call stack (innermost frame first, torch_npu's ";\r\n" separator), from the
    python_function events enclosing it on its thread."""
    if not functions:
        return
    by_thread = {}
    for e in functions:
        by_thread.setdefault(e.tid, []).append((e.ts, 0, e))
    for op in ops:
        by_thread.setdefault(op.tid, []).append((op.ts, 1, op))
    for events in by_thread.values():
        events.sort(key=lambda x: (x[0], x[1], -x[2].dur))
        frames = []
        for ts, is_op, e in events:
            while frames and frames[-1].end < ts:
                frames.pop()
            if is_op:
                if frames and "Call stack" not in e.args:
                    e.args["Call stack"] = ";\r\n".join(f.name for f in reversed(frames))
            else:
                frames.append(e)


def innermost_op(ops_of_thread: list, ts: Decimal):
    """The innermost op of a thread (ops sorted by start) running at ts, or None."""
    found = None
    for op in ops_of_thread:
        if op.ts > ts:
            break
        if ts <= op.end:
            found = op
    return found
