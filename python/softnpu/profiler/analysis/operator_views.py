"""operator_details.csv: every torch op of the host, with its host time and the device time of the kernels it
launched itself (self) and with those of the ops it called (total); "With AICore" counts kernels alone (not copies
or memsets), as torch_npu counts AI Core tasks. Input Shapes with record_shapes=True, Call Stack with with_stack=True."""

from pathlib import Path

from . import csv_writer
from .trace import Trace

HEADERS = ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
           "Device Self Duration(us)", "Device Total Duration(us)", "Device Self Duration With AICore(us)",
           "Device Total Duration With AICore(us)"]


def _device_time(op, total: bool, kernels_only: bool) -> float:
    own = sum(float(k.dur) for k in op.kernels if not kernels_only or k.kind == "kernel")
    if total:
        own += sum(_device_time(c, True, kernels_only) for c in op.children)
    return own


def write(trace: Trace, out: Path) -> None:
    rows = []
    for op in trace.ops:
        dims = op.args.get("Input Dims")
        shapes = ";".join(",".join(str(x) for x in d) if isinstance(d, list) and d and not isinstance(d[0], list)
                          else "" for d in dims) if dims else ""
        stack = op.args.get("Call stack", "")
        host_self = float(op.dur) - sum(float(c.dur) for c in op.children)
        rows.append([op.name, shapes, stack, csv_writer.us(host_self), csv_writer.us(op.dur),
                     csv_writer.us(_device_time(op, False, False)), csv_writer.us(_device_time(op, True, False)),
                     csv_writer.us(_device_time(op, False, True)), csv_writer.us(_device_time(op, True, True))])
    csv_writer.write(out / "operator_details.csv", HEADERS, rows)
