"""step_trace_time.csv: per device and step (ProfilerStep#N of a schedule; one row without steps), the device's
Computing, Communication, Communication(Not Overlapped), Overlapped and Free time in microseconds, Stage (the
step's span on the device less Bubble), Bubble (time in hcom_receive: point-to-point receives, 0 without them) and
Preparing (from the step's start on the host to its first device task)."""

from pathlib import Path

from . import csv_writer
from .overlap import total

HEADERS = ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
           "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]


def write(overlaps: list, out: Path) -> None:
    rows = []
    for o in overlaps:
        computing, communication = total(o.computing), total(o.communication)
        not_overlapped = total(o.not_overlapped)
        bubble = 0
        preparing = o.start - o.host_start if o.host_start is not None and o.start > o.host_start else 0
        rows.append([o.device, "" if o.step is None else o.step, csv_writer.us(computing),
                     csv_writer.us(not_overlapped), csv_writer.us(communication - not_overlapped),
                     csv_writer.us(communication), csv_writer.us(total(o.free)),
                     csv_writer.us(o.end - o.start - bubble), bubble, csv_writer.us(not_overlapped - bubble),
                     csv_writer.us(preparing)])
    csv_writer.write(out / "step_trace_time.csv", HEADERS, rows)
