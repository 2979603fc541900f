"""Overlap analysis: per device and step, how the device's time splits into computing (kernels, copies), communication
(hccl collectives), the part of communication no computing hides, and free time — torch_npu's "Overlap Analysis"
process of trace_view.json and the columns of step_trace_time.csv.
"""

import dataclasses
from decimal import Decimal

from .trace import Trace


def union(intervals) -> list:
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def subtract(a: list, b: list) -> list:
    """a minus b; both unions (sorted, disjoint)."""
    out, j = [], 0
    for lo, hi in a:
        cur = lo
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return out


def total(intervals) -> Decimal:
    return sum((hi - lo for lo, hi in intervals), Decimal(0))


@dataclasses.dataclass
class StepOverlap:
    device: int
    step: int | None
    start: Decimal  # first device activity of the step
    end: Decimal
    host_start: Decimal | None  # the step's start on the host (ProfilerStep#N), for Preparing
    computing: list
    communication: list
    not_overlapped: list
    free: list


def analyse(trace: Trace) -> list:
    host_start = {s.id: s.ts for s in trace.steps}
    keys = sorted({(t.device, t.step) for t in trace.tasks} | {(c.device, c.step) for c in trace.collectives},
                  key=lambda k: (k[0], -1 if k[1] is None else k[1]))
    out = []
    for device, step in keys:
        tasks = [(t.ts, t.end) for t in trace.tasks if t.device == device and t.step == step]
        comms = [(c.ts, c.end) for c in trace.collectives if c.device == device and c.step == step]
        computing, communication = union(tasks), union(comms)
        busy = union(tasks + comms)
        start, end = busy[0][0], busy[-1][1]
        out.append(StepOverlap(device, step, start, end, host_start.get(step), computing, communication,
                               subtract(communication, computing), subtract([(start, end)], busy)))
    return out
