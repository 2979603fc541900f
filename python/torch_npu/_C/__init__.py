"""torch_npu._C: the entry points of torch_npu's extension module that code written for torch_npu calls directly.

- ``_distributed_c10d``: ``ProcessGroupHCCL`` (softnpu's hccl backend) with its ``Options`` (``hccl_config``);
- ``_cd``: ``DType``, torch_npu's numbers for ACL's data types (also exported as ``torch_npu.hifloat8``, ...);
- ``_storage_Use_Count(storage._cdata)``: how many references hold a storage (TRL reads it);
- ``_weak_ref_tensor(t)``: a tensor viewing t's memory without keeping it alive (vllm-ascend's graph outputs);
- ``_empty_strided_npu(size, stride, dtype)``: Inductor's allocation of strided npu buffers;
- ``_npu_npuCachingAllocator_set_allocator_settings(settings)``: torch.npu.memory._set_allocator_settings;
- ``_npu_hostEmptyCache()``: torch.npu.host_empty_cache (transfer_to_npu makes it torch._C._host_emptyCache);
- ``_npu_getDeviceCount()``: the runtime's device count (torch.npu.device_count()'s);
- ``_npurt``: torch.npu.npurt()'s module of raw runtime calls; ``_mstx``: the entry points behind torch.npu.mstx;
- ``_npu_getCurrentRawStream(device)`` / ``_npu_getCurrentRawStreamNoWait(device)``: the current stream's runtime
  handle (torch.npu.Stream.npu_stream), what Inductor's generated code passes around;
- the caching allocator's hooks of NPU graph trees (``torch_npu.npu._graph_tree``, what torch._C._cuda_* gives CUDA's
  graph trees): ``_npu_beginAllocateCurrentThreadToPool`` / ``_npu_endAllocateToPool`` / ``_npu_releasePool``,
  ``_npu_getCheckpointState`` / ``_npu_setCheckpointPoolState``, ``_npu_checkPoolLiveAllocations``,
  ``_npu_npuCachingAllocator_raw_delete``, ``_npu_isHistoryEnabled``, ``_has_Standard_Deleter`` /
  ``_free_And_Remove_DeleterFn`` for npu storages, ``_construct_NPU_Tensor_From_Storage_And_Metadata``, and torch's
  device-independent ones the graph trees call through here (``_add_cached_tensor``, ...);
- ``_npu_fused_infer_attention_score_out_graph(stream, handle, event, ...)``: a captured task group of
  npu_fused_infer_attention_score.out updated with new arguments (softnpu.npu._npugraph_handlers.ifa_handler).
"""

import softnpu._C
import torch
from softnpu.npu.graphs import _weak_ref_tensor  # noqa: F401
from softnpu.npu._npugraph_handlers.ifa_handler import _npu_fused_infer_attention_score_out_graph  # noqa: F401
from softnpu.npu.host_memory import host_empty_cache as _npu_hostEmptyCache  # noqa: F401
from softnpu.npu.memory import _set_allocator_settings as _npu_npuCachingAllocator_set_allocator_settings  # noqa: F401

from softnpu._C import _mstx, _npurt  # noqa: F401

from . import _cd  # noqa: F401

if torch.distributed.is_available():
    from . import _distributed_c10d  # noqa: F401

# torch's own count: a storage's references, whatever its device.
_storage_Use_Count = torch._C._storage_Use_Count


def _npu_getDeviceCount() -> int:
    """The runtime's device count (torch_npu's c10_npu::device_count), what torch.npu.device_count() reports: the
    devices ASCEND_RT_VISIBLE_DEVICES selects, 0 for a list the runtime refuses."""
    return softnpu._C._device_count_noexcept()


def _npu_getCurrentRawStream(device_index: int) -> int:
    return torch.npu.current_stream(device_index).npu_stream


# torch_npu's NoWait form skips draining its task queue; softnpu launches at the call, so there is no queue to drain.
_npu_getCurrentRawStreamNoWait = _npu_getCurrentRawStream


def _npu_get_soc_version() -> int:
    """torch_npu.npu.get_soc_version()'s number (tests read it from here)."""
    return torch.npu.get_soc_version()


def _empty_strided_npu(size, stride, dtype, device_index=None):
    """An uninitialized npu tensor of the given sizes, strides and dtype on the current device (or `device_index`):
    torch_npu's dispatcher-free allocation for Inductor, here torch.empty_strided itself (same storage size, and the
    same filling under torch.use_deterministic_algorithms)."""
    device = torch.device("npu", torch.npu.current_device() if device_index is None else device_index)
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


# NPU graph trees' allocator hooks (csrc/backend/python/graph_tree.cpp).
from softnpu._C import (  # noqa: E402,F401
    _free_And_Remove_DeleterFn,
    _has_Standard_Deleter,
    _npu_beginAllocateCurrentThreadToPool,
    _set_storage_access_error_msg,
    _set_storage_data_ptr_access_error_msg,
    _tensors_data_ptrs_at_indices_equal,
    _npu_checkPoolLiveAllocations,
    _npu_endAllocateToPool,
    _npu_getCheckpointState,
    _npu_isHistoryEnabled,
    _npu_NPUAllocator_AllocatorState,
    _npu_releasePool,
    _npu_setCheckpointPoolState,
)

# caching_allocator_delete's: a block by its address (graph trees free the checkpoint's dead blocks with it).
_npu_npuCachingAllocator_raw_delete = softnpu._C._raw_delete

# torch's own, device-independent: torch_npu's graph trees call them here (the others above are CUDA builds' only).
_add_cached_tensor = torch._C._add_cached_tensor
_remove_cached_tensor = torch._C._remove_cached_tensor
_set_cached_tensors_enabled = torch._C._set_cached_tensors_enabled
_construct_storage_from_data_pointer = torch._C._construct_storage_from_data_pointer


def _construct_NPU_Tensor_From_Storage_And_Metadata(metadata: dict, storage) -> torch.Tensor:
    """A tensor over `storage` with the sizes, strides, storage offset and dtype of `metadata` (graph trees'
    description of an output), in the private format it names (``npu_format``, metadata only on softnpu)."""
    t = torch.empty((0,), dtype=metadata["dtype"], device=storage.device)
    t.set_(storage, metadata["storage_offset"], metadata["size"], metadata["stride"])
    npu_format = metadata.get("npu_format")
    if npu_format is not None and int(torch.ops.npu.get_npu_format(t)) != npu_format:
        torch.ops.npu.npu_format_cast_(t, npu_format)
    return t
