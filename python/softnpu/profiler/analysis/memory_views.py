"""memory_record.csv and operator_memory.csv (profile_memory=True): the npu caching allocator's reports (each
allocation and free, with the device's allocated and reserved totals) as torch_npu writes them.

memory_record.csv: one row per report, component PTA (the framework's allocator: softnpu's caching allocator, the only
one a software NPU has), totals in MB. operator_memory.csv: one row per block, named after the op that allocated it
(the innermost op running on the allocating thread), with its size in KB and its allocation and release times;
blocks still held at the end have no release time. "Total Active" is the allocated total (softnpu's allocator
reports no separate active figure to the profiler)."""

from collections import defaultdict
from pathlib import Path

from . import csv_writer
from .trace import Trace, innermost_op

RECORD_HEADERS = ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)",
                  "Stream Ptr", "Device Type"]
OPERATOR_HEADERS = ["Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Active Release Time(us)",
                    "Duration(us)", "Active Duration(us)", "Allocation Total Allocated(MB)",
                    "Allocation Total Reserved(MB)", "Allocation Total Active(MB)", "Release Total Allocated(MB)",
                    "Release Total Reserved(MB)", "Release Total Active(MB)", "Stream Ptr", "Device Type"]
MB = 1024 * 1024


def mb(n: int) -> float:
    return round(n / MB, 4)


def write(trace: Trace, out: Path) -> None:
    records = [["PTA", csv_writer.us_timestamp(m.ts), mb(m.total_allocated), mb(m.total_reserved),
                mb(m.total_allocated), m.stream, f"NPU:{m.device}"] for m in trace.memory]
    csv_writer.write(out / "memory_record.csv", RECORD_HEADERS, records)

    ops_by_thread = defaultdict(list)
    for op in trace.ops:
        ops_by_thread[op.tid].append(op)
    for ops in ops_by_thread.values():
        ops.sort(key=lambda o: o.ts)
    live, rows = {}, []
    for m in trace.memory:
        key = (m.device, m.addr)
        if m.bytes > 0:
            op = innermost_op(ops_by_thread.get(m.tid, []), m.ts)
            live[key] = (m, op.name if op is not None else "PTA_Unknown")
            continue
        if key not in live:
            continue  # allocated before the profile started
        alloc, name = live.pop(key)
        duration = csv_writer.us(m.ts - alloc.ts)
        rows.append(_row(name, alloc, m, duration))
    for alloc, name in live.values():
        rows.append(_row(name, alloc, None, ""))
    rows.sort(key=lambda r: r[2])
    csv_writer.write(out / "operator_memory.csv", OPERATOR_HEADERS, rows)


def _row(name, alloc, free, duration) -> list:
    release = csv_writer.us_timestamp(free.ts) if free else ""
    after = [mb(free.total_allocated), mb(free.total_reserved), mb(free.total_allocated)] if free else ["", "", ""]
    return [name, round(alloc.bytes / 1024, 3), csv_writer.us_timestamp(alloc.ts), release, release, duration,
            duration, mb(alloc.total_allocated), mb(alloc.total_reserved), mb(alloc.total_allocated), *after,
            alloc.stream, f"NPU:{alloc.device}"]
