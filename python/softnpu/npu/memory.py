"""Memory of the caching allocator (torch.cuda's memory functions, for npu). The statistics are c10's DeviceStats,
read through torch.accelerator, so their names are torch.cuda.memory_stats()'s."""

from collections import OrderedDict
from typing import Any

import torch

from .. import _C
from .device import _device_index, _lazy_init


def _index(device: Any) -> int:
    _lazy_init()
    return _device_index(device, optional=True)


def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: Any = None) -> int:
    """Bytes of device memory occupied by tensors."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Any = None) -> int:
    """Bytes of device memory held by the caching allocator (allocated plus cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Returns cached, unused device memory to the device (after the work that may still use it completes)."""
    if _C._device_count_noexcept():
        torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device."""
    return torch.accelerator.get_memory_info(_index(device))


def memory_snapshot() -> list:
    """Segments of the caching allocator with their blocks (as torch.cuda.memory_snapshot)."""
    _lazy_init()
    return _C._memory_snapshot()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of the main allocator statistics."""
    stats = memory_stats(device)

    def fmt(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(n) < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024
        return str(n)

    rows = [
        ("Allocated memory", "allocated_bytes", fmt),
        ("Active memory", "active_bytes", fmt),
        ("Requested memory", "requested_bytes", fmt),
        ("Reserved memory", "reserved_bytes", fmt),
        ("Non-releasable memory", "inactive_split_bytes", fmt),
        ("Allocations", "allocation", str),
        ("Active allocs", "active", str),
        ("Reserved segments", "segment", str),
    ]
    index = _index(device)
    lines = [f"NPU memory summary, device {index}", f"{'Metric':<24}{'Current':>14}{'Peak':>14}{'Alloc':>14}{'Freed':>14}"]
    for title, key, f in rows:
        vals = [stats.get(f"{key}.all.{k}", 0) for k in ("current", "peak", "allocated", "freed")]
        lines.append(f"{title:<24}" + "".join(f"{f(v):>14}" for v in vals))
    lines.append(f"OOMs: {stats.get('num_ooms', 0)}, allocation retries: {stats.get('num_alloc_retries', 0)}")
    return "\n".join(lines)
