"""torch.npu: the npu device module, with CUDA's names and semantics (torch.cuda's API, for the npu device)."""

from . import _gpu_trace, _sanitizer  # torch.npu._gpu_trace: where torch's GPUTrace hook looks
from . import _memory_viz  # torch_npu.npu._memory_viz
from . import _utils  # torch.load restores npu storages through torch.npu._utils._get_device_index, as CUDA's
from ._utils import _get_device_index  # torch_npu's torch.npu._get_device_index
from . import amp
from .ascend import (
    are_compatible_impl_enabled,
    clear_npu_overflow_flag,
    config,
    finalize_dump,
    get_mm_bmm_format_nd,
    get_npu_overflow_flag,
    get_option,
    init_dump,
    is_jit_compile_false,
    obfuscation_calculate,
    obfuscation_finalize,
    obfuscation_initialize,
    set_aoe,
    set_compile_mode,
    set_deterministic_level,
    set_dump,
    set_mm_bmm_format_nd,
    set_op_timeout_ms,
    set_option,
    stress_detect,
    use_compatible_impl,
)
from . import backends
from .backends import (  # the attention and linear algebra switches too, as torch_npu's torch.npu has them
    CubeMathType,
    conv,
    disable_deterministic_with_backward,
    enable_deterministic_with_backward,
    enable_flash_sdp,
    enable_math_sdp,
    enable_mem_efficient_sdp,
    flash_sdp_enabled,
    get_autocast_dtype,
    is_autocast_enabled,
    math_sdp_enabled,
    matmul,
    mem_efficient_sdp_enabled,
    preferred_linalg_library,
    sdp_kernel,
    set_autocast_dtype,
    set_autocast_enabled,
)
from . import aclnn
from .device import (
    _is_in_bad_fork,
    _lazy_init,  # torch calls torch.npu._lazy_init when it first creates an npu tensor (as torch.cuda's)
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_soc_version,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
    utilization,
)
from .graphs import (
    NPUGraph,
    graph,
    graph_pool_handle,
    graph_task_group_begin,
    graph_task_group_end,
    graph_task_update_begin,
    graph_task_update_end,
    is_current_stream_capturing,
    make_graphed_callables,
    super_kernel_scope_begin,
    super_kernel_scope_end,
)
from ._npugraph_handlers import NpuGraphOpHandler, register_npu_graph_handler
from . import _aclgraph_update_plan  # noqa: F401  (torch_npu.npu._aclgraph_update_plan)
from . import memory
from .limits import get_device_limit, get_stream_limit, reset_stream_limit, set_device_limit, set_stream_limit
from .interop import can_device_access_peer, current_blas_handle, ipc_collect
from .host_func import _launch_host_func, _launch_host_func_pending, _subscribe_report, _unsubscribe_report
from . import _npugraph_conditional_nodes  # noqa: F401  (torch_npu.npu._npugraph_conditional_nodes)
from .legacy_types import *  # noqa: F403 (FloatTensor, ..., FloatStorage, ...)
from .legacy_types import __all__ as _legacy_types
from .host_memory import (
    host_empty_cache,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
)
from .memory import (
    MemPool,
    NPUPluggableAllocator,
    change_current_allocator,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    empty_virt_addr_cache,
    get_allocator_backend,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from .random import (
    _get_generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    ExternalEvent,
    ExternalStream,
    Stream,
    StreamContext,
    SyncLaunchStream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from .sync import sync_points
from .sync_debug import get_sync_debug_mode, set_sync_debug_mode
from . import utils  # torch_npu.npu.utils
from . import fault as _fault  # torch.npu._fault: the chip's failures on demand
from . import _recovery  # torch.npu._recovery
from .recovery import _get_uce_addr, check_uce_in_memory, restart_device, stop_device
from . import mstx  # torch_npu.npu.mstx: markers and ranges on the profiler timeline


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the chip the devices present as takes bfloat16 (torch_npu: from Ascend910B1 on; not on a 310P)."""
    from .. import _C

    return bool(_C._soc_profile()["supports_bf16"])


def get_amp_supported_dtype():
    """Lower-precision dtypes autocast may use on npu: torch_npu's list for the chip. Without bfloat16 (310P),
    torch.autocast("npu", dtype=torch.bfloat16) warns that the dtype is not supported and disables autocast, as on
    torch_npu."""
    import torch

    return [torch.float16, torch.bfloat16, torch.float32] if is_bf16_supported() else [torch.float16, torch.float32]


def __getattr__(name: str):
    # default_generators is filled on first use, as torch.cuda.default_generators is at lazy init.
    if name == "default_generators":
        from .random import _generators

        return _generators()
    # torch.cuda._initialized, read live: torch.utils.checkpoint saves and restores a device's RNG state only if
    # getattr(device_module, "_initialized", False). A module attribute here would be a copy that never changes.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module 'torch.npu' has no attribute '{name}'")


def npurt():
    """The NPU runtime's raw calls (torch_npu's npurt, as torch.cuda.cudart()): npuStreamCreate(address of a
    c_void_p), npuStreamDestroy(handle), npuHostRegister(ptr, size, flags), npuHostUnregister(ptr), each returning
    ACL's error code (0 on success) rather than raising. The same module every call (softnpu._C._npurt)."""
    from .. import _C

    _lazy_init()
    return _C._npurt


def _sleep(cycles: int) -> None:
    """Keeps the current stream busy for `cycles` cycles of the device clock (a spinning kernel), as
    torch.cuda._sleep; for tests. The clock is get_device_properties().clock_rate kHz: 1 GHz, so 10**9 cycles take a
    second."""
    from .. import _C

    _C._sleep(cycles)


__all__ = [
    "Event",
    "ExternalEvent",
    "ExternalStream",
    "MemPool",
    "NPUGraph",
    "NPUPluggableAllocator",
    "Stream",
    "StreamContext",
    "amp",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "change_current_allocator",
    "can_device_access_peer",
    "clear_npu_overflow_flag",
    "config",
    "conv",
    "current_blas_handle",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_allocator_backend",
    "get_amp_supported_dtype",
    "get_autocast_dtype",
    "get_device_capability",
    "get_device_name",
    "get_soc_version",
    "get_device_properties",
    "get_npu_overflow_flag",
    "get_option",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "graph",
    "graph_pool_handle",
    "host_empty_cache",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "initial_seed",
    "is_jit_compile_false",
    "ipc_collect",
    "is_autocast_enabled",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "matmul",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "mstx",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_aoe",
    "set_autocast_dtype",
    "set_autocast_enabled",
    "enable_deterministic_with_backward",
    "disable_deterministic_with_backward",
    "backends",
    "set_compile_mode",
    "set_device",
    "set_op_timeout_ms",
    "set_option",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "stress_detect",
    "sync_points",
    "synchronize",
    "check_uce_in_memory",
    "restart_device",
    "stop_device",
    "use_mem_pool",
    "utilization",
    "are_compatible_impl_enabled",
    "finalize_dump",
    "get_mm_bmm_format_nd",
    "init_dump",
    "obfuscation_calculate",
    "obfuscation_finalize",
    "obfuscation_initialize",
    "set_deterministic_level",
    "set_dump",
    "set_mm_bmm_format_nd",
    "use_compatible_impl",
    "CubeMathType",
    "graph_task_group_begin",
    "graph_task_group_end",
    "graph_task_update_begin",
    "graph_task_update_end",
    "super_kernel_scope_begin",
    "super_kernel_scope_end",
    "NpuGraphOpHandler",
    "register_npu_graph_handler",
    "get_device_limit",
    "get_stream_limit",
    "reset_stream_limit",
    "set_device_limit",
    "set_stream_limit",
    "empty_virt_addr_cache",
    "SyncLaunchStream",
    "npurt",
] + _legacy_types
