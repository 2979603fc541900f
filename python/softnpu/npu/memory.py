"""Memory of the caching allocator (torch.cuda's memory functions, for npu). The statistics are c10's DeviceStats,
read through torch.accelerator, so their names are torch.cuda.memory_stats()'s. Also the allocator's controls
(memory fraction, MemPool, raw allocations) and its history: _record_memory_history / _snapshot / _dump_snapshot in
the format torch.cuda._memory_viz renders, and the snapshot OOM_SNAPSHOT_ENABLE writes on an OutOfMemoryError."""

import contextlib
import os
import pickle
import sys
import time
import warnings
from collections import OrderedDict
from typing import Any, Optional

import torch

from .. import _C
from ..error_code import ErrCode, pta_error
from .device import _device_index, _lazy_init, is_initialized
from .streams import Stream


def _index(device: Any) -> int:
    _lazy_init()
    return _device_index(device, optional=True)


def _erase_stream(tensor: torch.Tensor, stream: Any) -> None:
    """torch_npu.erase_stream: undoes tensor.record_stream(stream), so that freeing the tensor returns its memory to
    its own stream's pool at once instead of after `stream`'s work up to then. The caller must have ordered that work
    before the memory's next use (stream.wait_event / an event wait), or the next tensor there may be overwritten."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor should be torch.Tensor, could not be {type(tensor)}")
    if not isinstance(stream, Stream):
        raise TypeError(f"stream should be torch_npu.npu.Stream, could not be {type(stream)}")
    _C._erase_stream(tensor, stream.stream_id, stream.device_index)


def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    """torch.cuda.memory_stats()'s keys, and torch_npu's num_oom_rejections (allocations refused by
    PYTORCH_NPU_ALLOC_CONF's throw_on_npumalloc_oom)."""
    index = _index(device)
    stats = torch.accelerator.memory_stats(index)
    stats["num_oom_rejections"] = _C._oom_rejections(index)
    return OrderedDict(sorted(stats.items()))


def _set_allocator_settings(settings: str) -> None:
    """Changes the caching allocators' configuration at run time: the keys of PYTORCH_NPU_ALLOC_CONF that torch_npu
    changes at run time (expandable_segments, max_split_size_mb, max_non_split_rounding_mb, throw_on_npumalloc_oom,
    per_process_memory_fraction, pinned_max_round_threshold_mb, pinned_max_cached_size_mb,
    release_lock_on_npumalloc), in the variable's syntax; the others raise ValueError."""
    _C._set_allocator_settings(settings)


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


def empty_virt_addr_cache() -> None:
    """torch_npu: the light empty_cache of expandable segments (unmaps their free virtual ranges, keeping the
    physical pages for later allocations). softnpu's expandable segments release both together, so this is
    empty_cache: the cached memory goes back to the device either way. Nothing before npu is initialized."""
    if is_initialized():
        empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device."""
    return torch.accelerator.get_memory_info(_index(device))


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """memory_stats() as nested dictionaries ("allocated_bytes.all.current" is d["allocated_bytes"]["all"]["current"])."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        d = nested
        for part in path:
            d = d.setdefault(part, {})
        d[last] = value
    return nested


def memory_cached(device: Any = None) -> int:
    """Deprecated name of memory_reserved (as in torch.cuda)."""
    warnings.warn("`torch.npu.memory_cached` has been renamed to `torch.npu.memory_reserved`", FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated name of max_memory_reserved (as in torch.cuda)."""
    warnings.warn(
        "`torch.npu.max_memory_cached` has been renamed to `torch.npu.max_memory_reserved`", FutureWarning, stacklevel=2
    )
    return max_memory_reserved(device)


def reset_max_memory_cached(device: Any = None) -> None:
    warnings.warn(
        "torch.npu.reset_max_memory_cached now calls torch.npu.reset_peak_memory_stats, which resets /all/ peak "
        "memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Caps the memory the caching allocator may reserve on the device at fraction * its capacity; allocations
    beyond it raise torch.OutOfMemoryError (after the cache is released and the allocation retried)."""
    index = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`" + pta_error(ErrCode.TYPE))
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1" + pta_error(ErrCode.VALUE))
    _C._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _C._get_memory_fraction(_index(device))


def get_allocator_backend() -> str:
    """The allocator behind npu memory: "native", softnpu's caching allocator (torch.cuda's name for its own)."""
    return "native"


class NPUPluggableAllocator:
    """A device allocator from a shared library (torch_npu's / torch.cuda's CUDAPluggableAllocator): its functions are
    `void* alloc(size_t size, int device, snpuStream_t stream)` and `void free(void* ptr, size_t size, int device,
    snpuStream_t stream)`, which allocate device memory through the runtime (snpuMalloc / snpuFree of
    libsoftnpu_runtime.so, as aclrtMalloc / aclrtFree on Ascend). Installed by change_current_allocator."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str):
        import ctypes

        self._lib = ctypes.CDLL(path_to_so_file)
        self._alloc = ctypes.cast(getattr(self._lib, alloc_fn_name), ctypes.c_void_p).value
        self._free = ctypes.cast(getattr(self._lib, free_fn_name), ctypes.c_void_p).value
        self._allocator = _PluggableAllocatorFunctions(self)

    def allocator(self) -> "_PluggableAllocatorFunctions":
        """The allocator's optional functions (torch_npu's C++ allocator object): set_get_device_stats_fn and
        set_reset_peak_status_fn."""
        return self._allocator


class _PluggableAllocatorFunctions:
    """The optional functions of an NPUPluggableAllocator, each an address (ctypes.cast(lib.fn, c_void_p).value) of a
    function with torch_npu's signature: `DeviceStats get_device_stats(c10::DeviceIndex)` answers
    torch.npu.memory_stats and `void reset_peak_status(c10::DeviceIndex)` is what torch.npu.reset_peak_memory_stats
    calls, while the allocator is current (given before or after change_current_allocator)."""

    def __init__(self, owner: NPUPluggableAllocator):
        self._owner = owner
        self.get_device_stats_fn = 0
        self.reset_peak_status_fn = 0

    def set_get_device_stats_fn(self, fn: int) -> None:
        self.get_device_stats_fn = int(fn)
        if _current_pluggable is self._owner:
            _C._pluggable_set_device_stats_fn(self.get_device_stats_fn)

    def set_reset_peak_status_fn(self, fn: int) -> None:
        self.reset_peak_status_fn = int(fn)
        if _current_pluggable is self._owner:
            _C._pluggable_set_reset_peak_status_fn(self.reset_peak_status_fn)


_current_pluggable: Optional[NPUPluggableAllocator] = None


def change_current_allocator(allocator: NPUPluggableAllocator) -> None:
    """Every later npu allocation calls `allocator`'s functions instead of the caching allocator; only before the
    first npu allocation of the process (RuntimeError after it)."""
    global _current_pluggable
    if not isinstance(allocator, NPUPluggableAllocator):
        raise TypeError(f"change_current_allocator expects an NPUPluggableAllocator, got {type(allocator).__name__}")
    _lazy_init()
    _C._change_current_allocator(allocator._alloc, allocator._free)
    _C._pluggable_set_device_stats_fn(allocator._allocator.get_device_stats_fn)
    _C._pluggable_set_reset_peak_status_fn(allocator._allocator.reset_peak_status_fn)
    _current_pluggable = allocator  # its library stays loaded while the process may call it


def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    """Allocates `size` bytes from the caching allocator for `stream` (default: the device's current stream); returns
    the device address, freed by caching_allocator_delete."""
    index = _index(device)
    if stream is None:
        stream = torch.npu.current_stream(index)
    if not isinstance(stream, torch.Stream):
        raise TypeError(
            "Invalid type for stream argument, must be `torch.npu.Stream` or `torch.Stream` of a npu device"
        )
    return _C._raw_alloc(size, stream.device_index, stream.stream_id)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Frees memory from caching_allocator_alloc (its device and stream are tracked by the allocator)."""
    _C._raw_delete(mem_ptr)


def memory_snapshot(mempool_id: Optional[tuple[int, int]] = None, include_traces: bool = True) -> list:
    """Segments of the caching allocator with their blocks (as torch.cuda.memory_snapshot), of every pool or of
    one MemPool."""
    _lazy_init()
    return _C._memory_snapshot(tuple(mempool_id) if mempool_id is not None else (0, 0))["segments"]


def _record_memory_history(
    enabled: Any = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: Optional[list] = None,
) -> None:
    """Records the stack of every allocation and, with enabled="all", a history of up to max_entries allocator
    events per device (alloc, free_requested, free_completed, segment_alloc, segment_free, oom, snapshot), as
    torch.cuda.memory._record_memory_history. stacks="python" gathers Python frames, "all" Python and C++ frames.
    enabled=None stops recording; skip_actions lists actions not to record. As torch.cuda's, it records every device
    (`device` is accepted and unused)."""
    _lazy_init()
    if isinstance(enabled, bool):  # the legacy signature: _record_memory_history(True/False, ...)
        enabled = "all" if enabled else None
    _C._record_memory_history(enabled, context, stacks, max_entries, clear_history, skip_actions or [])


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict:
    """The allocator's state and history: {"segments": [...], "device_traces": [[...] per device],
    "allocator_settings": {...}}, torch.cuda.memory._snapshot()'s format, which torch.cuda._memory_viz renders."""
    _lazy_init()
    return _C._memory_snapshot((0, 0))


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickles _snapshot() to `filename` (for pytorch.org/memory_viz or `python -m torch.cuda._memory_viz`)."""
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def _attach_out_of_memory_observer(observer) -> None:
    """Calls observer(device, alloc_size, device_allocated, device_free) before an OutOfMemoryError is raised."""
    _lazy_init()

    def call(device: int, alloc: int, free: int) -> None:
        observer(device, alloc, memory_allocated(device), free)

    _C._attach_out_of_memory_observer(call)


def _install_oom_snapshot() -> None:
    """OOM_SNAPSHOT_ENABLE (1: history and state, 2: state only): records from the start and writes
    $OOM_SNAPSHOT_PATH/oom_snapshot_<pid>_<time>.pickle when an OutOfMemoryError is raised, as torch_npu does."""
    mode, path = _C._oom_snapshot_config()
    if not mode:
        return
    _C._record_memory_history("all" if mode == 1 else "state", "all" if mode == 1 else "state", "python", sys.maxsize,
                              False, [])

    def dump(device: int, alloc: int, free: int) -> None:
        name = os.path.join(path, f"oom_snapshot_{os.getpid()}_{time.strftime('%Y%m%d%H%M%S')}.pickle")
        os.makedirs(path, exist_ok=True)
        with open(name, "wb") as f:
            pickle.dump(_C._memory_snapshot((0, 0)), f)
        warnings.warn(f"NPU out of memory: the memory snapshot was written to {name} (OOM_SNAPSHOT_ENABLE)")

    _C._attach_out_of_memory_observer(dump)


class MemPool:
    """A private pool of the caching allocator (torch.cuda.MemPool): allocations inside use_mem_pool(pool) come from
    the pool's own segments; when the MemPool is deleted, its free segments return to the device, the others as
    their tensors are freed. With `allocator` (an NPUPluggableAllocator), the pool's segments are allocated and
    freed by its functions instead of the runtime, as torch.cuda.MemPool(allocator=...) does."""

    def __init__(self, allocator: Optional["NPUPluggableAllocator"] = None, use_on_oom: bool = False,
                 no_split: bool = False):
        if allocator is not None and not isinstance(allocator, NPUPluggableAllocator):
            raise TypeError(f"MemPool's allocator must be an NPUPluggableAllocator, got {type(allocator).__name__}")
        _lazy_init()
        self._allocator = allocator  # its library stays loaded while the pool's segments may be freed
        self._id = _C._mempool_create(allocator._alloc if allocator else 0, allocator._free if allocator else 0)

    @property
    def id(self) -> tuple[int, int]:
        return self._id

    @property
    def allocator(self) -> Optional["NPUPluggableAllocator"]:
        return self._allocator

    def use_count(self) -> int:
        """References to the pool: this object and every use_mem_pool context that is active."""
        return _C._mempool_use_count(self._id)

    def snapshot(self, include_traces: bool = True) -> list:
        """The pool's segments, as memory_snapshot()."""
        return memory_snapshot(self._id, include_traces)

    def __del__(self):
        if getattr(self, "_id", None) is not None and _C is not None:
            _C._mempool_release(self._id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None):
    """Routes the current thread's allocations on the device to `pool` (as torch.cuda.use_mem_pool; other threads,
    such as autograd's, are not routed)."""
    index = _index(device)
    _C._mempool_begin(index, pool.id)
    try:
        yield
    finally:
        _C._mempool_end(index, pool.id)


def _summary_size(n: int, scale_of: int) -> str:
    # The unit is chosen by the row's first value, so a row's columns read in one unit.
    unit = "B "
    for bigger in ("KB", "MB", "GB", "TB", "PB"):
        if scale_of < 768 * 1024:
            break
        unit, n, scale_of = bigger, n // 1024, scale_of / 1024
    return f"{n:7d} {unit}"


def _summary_count(n: int, scale_of: int) -> str:
    unit = " "
    for bigger in ("K", "M"):
        if scale_of < 750 * 1000:
            break
        unit, n, scale_of = bigger, n // 1000, scale_of / 1000
    return f"{n:7d} {unit} "


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """The allocator's statistics as torch_npu's table (torch.cuda.memory_summary's layout, NPU's names): each
    metric's current, peak, total allocated and total freed, per pool unless abbreviated."""
    index = _index(device)
    stats = memory_stats(index)
    rule, bar = "-" * 75, "=" * 75
    lines = [
        bar,
        f" {'':16} PyTorch NPU memory summary, device ID {index:<18d} ",
        rule,
        f"  {'':9} NPU OOMs: {stats.get('num_ooms', 0):<13d} | {'':6} npuMalloc retries: "
        f"{stats.get('num_alloc_retries', 0):<9d}  ",
        bar,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]

    def row(title: str, prefix: str, fmt, scale: list[int]) -> str:
        values = [stats.get(prefix + k, 0) for k in ("current", "peak", "allocated", "freed")]
        return f" {title:<21} | " + " | ".join(fmt(v, p) for v, p in zip(values, scale)) + " "

    pooled = [
        ("allocated_bytes", "Allocated memory", _summary_size),
        ("active_bytes", "Active memory", _summary_size),
        ("reserved_bytes", "NPU reserved memory", _summary_size),
        ("inactive_split_bytes", "Non-releasable memory", _summary_size),
        ("allocation", "Allocations", _summary_count),
        ("active", "Active allocs", _summary_count),
        ("segment", "NPU reserved segments", _summary_count),
        ("inactive_split", "Non-releasable allocs", _summary_count),
    ]
    for key, title, fmt in pooled:
        lines.append(rule)
        scale = [stats.get(f"{key}.all.{k}", 0) for k in ("current", "peak", "allocated", "freed")]
        pools = [("all", title)] + ([] if abbreviated else [("large_pool", "      from large pool"),
                                                             ("small_pool", "      from small pool")])
        lines += [row(name, f"{key}.{pool}.", fmt, scale) for pool, name in pools]
    for key, title in (("oversize_allocations", "Oversize allocations"), ("oversize_segments", "Oversize NPU segments")):
        lines.append(rule)
        lines.append(row(title, f"{key}.", _summary_count,
                         [stats.get(f"{key}.{k}", 0) for k in ("current", "peak", "allocated", "freed")]))
    lines.append(bar)
    return "|" + "|\n|".join(lines) + "|\n"
