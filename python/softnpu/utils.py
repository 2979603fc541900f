"""torch_npu.utils: the public helpers of torch_npu's utils package.

- save_async: torch.save that returns before the file is written. The state is taken at the call (npu tensors are
  copied to the host then), the writing happens on a thread that the interpreter waits for at exit.
- npu_combine_tensors / get_part_combined_tensor / is_combined_tensor_valid: many tensors as views of one flat
  buffer (so one op, e.g. a fused optimizer step or a collective, covers them all).
- print_error_log / print_warn_log / print_info_log: messages in torch_npu's log format.
- FlopsCounter: the flops of the matrix ops run on npu (softnpu/flops_count.py).
- get_cann_version(module): the version of a CANN component (torch_npu.npu.utils').
"""

import threading

import torch

from .flops_count import _FlopsCounter as FlopsCounter
from .npu.utils import get_cann_version

__all__ = ["save_async", "npu_combine_tensors", "get_part_combined_tensor", "is_combined_tensor_valid",
           "print_error_log", "print_warn_log", "print_info_log", "FlopsCounter", "get_cann_version"]


def _to_host(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu() if obj.device.type != "cpu" else obj.detach().clone()
    if isinstance(obj, dict):
        return type(obj)((k, _to_host(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_to_host(v) for v in obj)
    return obj


def save_async(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True, model=None):
    """Saves `obj` as torch.save would, writing on a background thread; returns the thread (join() waits)."""
    state = _to_host(obj if model is None else model.state_dict())
    kwargs = {"pickle_protocol": pickle_protocol, "_use_new_zipfile_serialization": _use_new_zipfile_serialization}
    if pickle_module is not None:
        kwargs["pickle_module"] = pickle_module
    writer = threading.Thread(target=torch.save, args=(state, f), kwargs=kwargs, name="save_async")
    writer.start()
    return writer


def npu_combine_tensors(list_of_tensor, require_copy_value=True):
    """One flat tensor holding every tensor of the list, each of which becomes a view of its part (in list order).
    Returns None for an empty list. All tensors must share device and dtype."""
    tensors = [t for t in list_of_tensor if t is not None]
    if not tensors:
        return None
    first = tensors[0]
    for t in tensors:
        if t.device != first.device or t.dtype != first.dtype:
            raise ValueError(f"npu_combine_tensors: tensors must share device and dtype, got {first.device}/"
                             f"{first.dtype} and {t.device}/{t.dtype}")
    combined = torch.zeros(sum(t.numel() for t in tensors), dtype=first.dtype, device=first.device)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            part = combined[offset:offset + n]
            if require_copy_value:
                part.copy_(t.reshape(-1))
            t.set_(combined.untyped_storage(), offset, t.size())
            offset += n
    return combined


def get_part_combined_tensor(combined_tensor, index, size):
    """The `size` elements of a combined tensor from element `index` on, as a view."""
    if index + size > combined_tensor.numel():
        raise ValueError(f"get_part_combined_tensor: elements {index}..{index + size} are past the combined tensor's "
                         f"{combined_tensor.numel()}")
    return combined_tensor[index:index + size]


def is_combined_tensor_valid(combined_tensor, list_of_tensor):
    """Whether every tensor of the list is still the view npu_combine_tensors made of it."""
    if combined_tensor is None:
        return not [t for t in list_of_tensor if t is not None]
    base = combined_tensor.untyped_storage().data_ptr()
    offset = 0
    for t in list_of_tensor:
        if t is None:
            continue
        if (t.untyped_storage().data_ptr() != base or t.storage_offset() != offset or not t.is_contiguous()):
            return False
        offset += t.numel()
    return offset == combined_tensor.numel()


def _log(level, message):
    print(f"[{level}] {message}", flush=True)


def print_error_log(message):
    _log("ERROR", message)


def print_warn_log(message):
    _log("WARNING", message)


def print_info_log(message):
    _log("INFO", message)
