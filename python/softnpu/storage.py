"""torch_npu.utils.storage: ``_rebuild_npu_tensor``, the function torch_npu's pickles of npu tensors name (tools such
as msprobe list it in ``torch.serialization.add_safe_globals`` so that ``torch.load(weights_only=True)`` takes them)."""

import torch

from .fused import Format, npu_format_cast


def _rebuild_npu_tensor(storage, storage_offset, size, stride, requires_grad, backward_hooks, npu_storage_info):
    """The npu tensor torch_npu pickled: ``storage`` holds its data on the host; ``npu_storage_info`` is its format
    (an int) or a bool (no format: ND)."""
    tensor = torch.empty(0, dtype=storage.dtype, device=storage.device)
    tensor.set_(storage, storage_offset, size, stride)
    tensor = tensor.npu()
    if not isinstance(npu_storage_info, bool) and npu_storage_info != Format.ND:
        tensor = npu_format_cast(tensor, npu_storage_info)
    tensor.requires_grad = requires_grad
    tensor._backward_hooks = backward_hooks
    return tensor
