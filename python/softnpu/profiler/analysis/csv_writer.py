"""CSV files as torch_npu writes them: a header row, then rows; timestamps in microseconds with a trailing tab (so
that spreadsheet programs keep all their digits, as torch_npu's files do)."""

import csv
from decimal import Decimal
from pathlib import Path


def us_timestamp(ts: Decimal) -> str:
    return f"{ts:.3f}\t"


def us(value) -> float:
    return round(float(value), 3)


def write(path: Path, headers: list, rows: list) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(headers)
        writer.writerows(rows)
