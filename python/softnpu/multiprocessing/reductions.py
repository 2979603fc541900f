"""torch.multiprocessing's reductions for npu tensors, CUDA's (torch/multiprocessing/reductions.py) for the npu
device; torch_npu's names (``rebuild_npu_tensor``, ``reduce_tensor``, ``reduce_storage``).

- A sent npu tensor travels as a handle to the device allocation holding its storage plus the storage's offset and
  size in it (``UntypedStorage._share_npu_``); the receiver maps the allocation (``_new_shared_npu``) and sees the
  same memory: writes on either side are seen by the other once synchronized. Several tensors of one storage, or
  one tensor sent twice, map it once per process (``shared_cache``).
- Lifetimes are CUDA IPC's: the sender's block is not reused while any receiver holds a storage made from it (a
  counter in shared memory, see csrc/backend/ipc.h); a receiver keeps it alive after the sender dropped its tensor.
  ``torch.npu.ipc_collect()`` frees the blocks receivers have let go of (every send does too).
- What was queued on the sender's current stream before the send is complete when the receiver reads it.
- The tensor's format (``get_npu_format``) travels with it.
- As with CUDA: a storage alone cannot be pickled (send a tensor), the receiving process must not be a fork of an
  initialized parent (start it with ``spawn`` or ``forkserver``), and a process cannot receive its own tensors
  through a pickle.
"""

import torch
from torch.multiprocessing import reductions as _torch
from torch.multiprocessing.reductions import StorageWeakRef, shared_cache, storage_from_cache

from .. import _C

_torch_reduce_tensor = _torch.reduce_tensor
_torch_reduce_storage = _torch.reduce_storage


def _share_npu_(self):
    """The storage's IPC description, torch's ``_share_cuda_`` tuple: (device, handle, size in bytes, offset in
    bytes in the allocation, reference counter handle, counter offset, event handle, event sync required)."""
    return _C._share_npu_(self)


def _new_shared_npu(cls, device, handle, size, offset, ref_counter_handle, ref_counter_offset, event_handle=None,
                    event_sync_required=False):
    """The storage another process described with ``_share_npu_``, mapped here."""
    return _C._new_shared_npu(device, handle, size, offset, ref_counter_handle, ref_counter_offset)


def _release_ipc_counter_npu(cls, ref_counter_handle, ref_counter_offset, device=None):
    """Lets the sender's block go for a send whose storage this process already has."""
    _C._release_ipc_counter(ref_counter_handle, ref_counter_offset)


def rebuild_npu_tensor(tensor_cls, tensor_size, tensor_stride, tensor_offset, storage_cls, dtype, storage_device,
                       storage_handle, storage_size_bytes, storage_offset_bytes, requires_grad, ref_counter_handle,
                       ref_counter_offset, event_handle, event_sync_required, npu_format=2):
    """torch_npu's arguments (CUDA's rebuild_cuda_tensor's), and the tensor's format (ND by default)."""
    device = torch.device("npu", storage_device)
    if storage_handle is None or storage_size_bytes == 0:
        storage = torch.UntypedStorage(0, device=device)
    else:
        storage = storage_from_cache(torch.UntypedStorage, (storage_handle, storage_offset_bytes))
        if storage is None:
            torch.npu._lazy_init()  # in a fork of an initialized parent: CUDA's RuntimeError, with NPU
            storage = _C._new_shared_npu(storage_device, storage_handle, storage_size_bytes, storage_offset_bytes,
                                         ref_counter_handle, ref_counter_offset)
            shared_cache[(storage_handle, storage_offset_bytes)] = StorageWeakRef(storage)
        else:
            _C._release_ipc_counter(ref_counter_handle, ref_counter_offset)
    if isinstance(storage, torch.TypedStorage):
        storage = storage._untyped_storage
    t = torch._utils._rebuild_tensor(torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True),
                                     tensor_offset, tensor_size, tensor_stride)
    if tensor_cls == torch.nn.parameter.Parameter:
        t = torch.nn.parameter.Parameter(t, requires_grad=requires_grad)
    else:
        t.requires_grad = requires_grad
    if npu_format != 2:
        torch.ops.npu.npu_format_cast_(t, npu_format)
    return t


def reduce_tensor(tensor):
    """torch's reduce_tensor, with npu tensors sent as handles to their device memory."""
    if tensor.device.type != "npu" or tensor.is_nested or tensor.layout != torch.strided:
        return _torch_reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        # torch's own message for the same case on any device.
        return _torch_reduce_tensor(tensor)
    storage = tensor._typed_storage()
    (device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle, ref_counter_offset,
     event_handle, event_sync_required) = _C._share_npu_(storage._untyped_storage)
    if handle is not None:
        shared_cache[handle] = StorageWeakRef(storage)
    # _backward_hooks purposely omitted, as torch does (Note [Don't serialize hooks]).
    return (rebuild_npu_tensor, (type(tensor), tensor.size(), tensor.stride(), tensor.storage_offset(),
                                 type(storage), tensor.dtype, device, handle, storage_size_bytes,
                                 storage_offset_bytes, tensor.requires_grad, ref_counter_handle, ref_counter_offset,
                                 event_handle, event_sync_required, torch.ops.npu.get_npu_format(tensor)))


def reduce_storage(storage):
    """torch's reduce_storage; an npu storage is refused as a CUDA one is."""
    if storage.device.type == "npu":
        raise RuntimeError("Cannot pickle NPU storage; try pickling a NPU tensor instead")
    return _torch_reduce_storage(storage)


def _add_reductions():
    """Registers the reducers with multiprocessing's ForkingPickler (after torch's own, which they wrap), and the
    storage methods torch's CUDA path has (``_share_npu_``, ``_new_shared_npu``, ``_release_ipc_counter_npu``)."""
    from multiprocessing.reduction import ForkingPickler

    torch.UntypedStorage._share_npu_ = _share_npu_
    torch.UntypedStorage._new_shared_npu = classmethod(_new_shared_npu)
    torch.UntypedStorage._release_ipc_counter_npu = classmethod(_release_ipc_counter_npu)
    ForkingPickler.register(torch.UntypedStorage, reduce_storage)
    for t in torch._tensor_classes:
        ForkingPickler.register(t, reduce_tensor)
    ForkingPickler.register(torch.Tensor, reduce_tensor)
    ForkingPickler.register(torch.nn.parameter.Parameter, reduce_tensor)


_add_reductions()

__all__ = ["rebuild_npu_tensor", "reduce_tensor", "reduce_storage"]
