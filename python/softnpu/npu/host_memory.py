"""Pinned host memory (torch.cuda's host allocator functions, for npu): the statistics of ATen's caching host
allocator behind pin_memory() and pinned copies, and releasing its cache."""

from collections import OrderedDict
from typing import Any

from .. import _C


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """{"allocations": {"current", "peak", "allocated", "freed"}, "allocated_bytes": ..., "active_requests": ...,
    "active_bytes": ..., "num_host_alloc", "num_host_free", "host_alloc_time": {...}, "host_free_time": {...}}; read
    without initializing the device, so also before it is (torch_npu's answer; torch.cuda's is empty then)."""
    return _C._host_memory_stats()


def host_memory_stats() -> "OrderedDict[str, Any]":
    """host_memory_stats_as_nested_dict() flattened to "allocations.current"-style keys, sorted."""
    result = []

    def add(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                add(f"{prefix}.{k}" if prefix else k, v)
        else:
            result.append((prefix, obj))

    add("", host_memory_stats_as_nested_dict())
    result.sort()
    return OrderedDict(result)


def reset_accumulated_host_memory_stats() -> None:
    """Resets the "allocated" and "freed" counts of the host statistics."""
    _C._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    """Resets the "peak" values of the host statistics to the current ones."""
    _C._reset_peak_host_memory_stats()


def host_empty_cache() -> None:
    """Returns the cached pinned blocks no copy still uses to the system."""
    _C._host_empty_cache()
