"""torch_npu.utils: the public helpers of torch_npu's utils package.

- save_async: torch.save that returns before the file is written. The state is taken at the call (npu tensors are
  copied to the host then, keeping their npu location), the writing happens on a thread that the interpreter waits
  for at exit.
- npu_combine_tensors / get_part_combined_tensor / is_combined_tensor_valid, npu_change_data_ptr: many tensors
  pointing into one flat buffer (so one op, e.g. a fused optimizer step or a collective, covers them all), as
  torch_npu's: the members do not own the buffer's memory.
- print_error_log / print_warn_log / print_info_log: messages in torch_npu's log format.
- FlopsCounter: the flops of the matrix ops run on npu (softnpu/flops_count.py).
- get_cann_version(module): the version of a CANN component (torch_npu.npu.utils').
"""

import io
import os
import pickle
import threading

import torch
from torch.serialization import DEFAULT_PROTOCOL

from .error_code import ErrCode, pta_error

from .flops_count import _FlopsCounter as FlopsCounter
from .npu.utils import get_cann_version

__all__ = ["save_async", "npu_change_data_ptr", "npu_combine_tensors", "get_part_combined_tensor",
           "is_combined_tensor_valid",
           "print_error_log", "print_warn_log", "print_info_log", "FlopsCounter", "get_cann_version"]


def save_async(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL, _use_new_zipfile_serialization=True,
               _disable_byteorder_record=False, model=None):
    """torch.save of `obj` that returns before the file is written; returns the writing thread (join() waits).

    As torch_npu's: the file is what torch.save writes (npu tensors keep their npu location, so torch.load gives them
    back on npu) and holds the state at the call. torch_npu takes the device-to-host copies on a stream of its own and
    makes `model`'s next backward wait for them; here they complete before the call returns (the pickle is built in
    memory at once), so `model` needs no hook and only the writing of the file is left to the thread."""
    if not _use_new_zipfile_serialization:
        raise RuntimeError("torch_npu.save_async with _use_new_zipfile_serialization=False is not supported for npu "
                           "tensors: keep _use_new_zipfile_serialization=True, or move the tensors to the CPU and call "
                           "torch.save" + pta_error(ErrCode.PARAM))
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"save_async: model must be a torch.nn.Module, got {type(model).__name__}")
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_module=pickle_module, pickle_protocol=pickle_protocol,
               _disable_byteorder_record=_disable_byteorder_record)
    writer = threading.Thread(target=_write, args=(buffer, f), name="save_async")
    writer.start()
    return writer


def _write(buffer: io.BytesIO, f) -> None:
    data = buffer.getbuffer()
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as out:
            out.write(data)
    else:
        f.write(data)


def _storage_elements(tensor) -> int:
    """The elements of the tensor's storage, as torch_npu.get_storage_size counts them for ND tensors."""
    return tensor.untyped_storage().nbytes() // tensor.element_size()


def npu_change_data_ptr(dst, src, offset):
    """torch_npu.npu_change_data_ptr: `dst`'s storage now starts at element `offset` of `src`'s storage (same dtype,
    npu), keeping its size; every tensor over that storage follows (csrc/backend/change_data_ptr.cpp). As on
    torch_npu the storage does not own that memory: `src` must outlive `dst`'s use of it. Returns 0."""
    return torch.ops.npu.npu_change_data_ptr(dst, src, offset)


def npu_combine_tensors(list_of_tensor, require_copy_value=True):
    """One flat npu tensor holding every tensor of the list, each of which now points into its part (in list order,
    each taking its storage's elements), as torch_npu's: the members do not own that memory, so keep the returned
    tensor alive while they are used. None for an empty list or one without elements."""
    if len(list_of_tensor) == 0:
        return None
    if any(t is None for t in list_of_tensor):
        raise RuntimeError("Tensors to combine must not have `None`.")
    dtype = list_of_tensor[0].dtype
    for t in list_of_tensor:
        if t.dtype != dtype:
            raise RuntimeError("Tensors to combine must have the same dtype.")
        if t.device.type != "npu":
            raise RuntimeError(f"Tensors to combine must be on NPU, got {t.device.type}.")
        if not t.is_contiguous():
            raise RuntimeError("Tensors to combine must be contiguous.")
    total = sum(_storage_elements(t) for t in list_of_tensor)
    if total == 0:
        return None
    combined = torch.zeros(total, dtype=dtype, device=list_of_tensor[0].device)
    offset = 0
    for t in list_of_tensor:
        value = t.clone() if require_copy_value else None
        npu_change_data_ptr(t, combined, offset)
        if value is not None:
            with torch.no_grad():
                t.copy_(value)
        offset += _storage_elements(t)
    return combined


def get_part_combined_tensor(combined_tensor, index, size):
    """The `size` elements of a combined tensor from element `index` on (None for a None tensor or size 0)."""
    if combined_tensor is None or size == 0:
        return None
    if index + size > _storage_elements(combined_tensor):
        raise RuntimeError(f"(index + size) ({index + size}) > torch_npu.get_storage_size(combined_tensor) "
                           f"({_storage_elements(combined_tensor)})")
    part = torch.zeros(size, dtype=combined_tensor.dtype, device=combined_tensor.device)
    npu_change_data_ptr(part, combined_tensor, index)
    return part


def is_combined_tensor_valid(combined_tensor, list_of_tensor):
    """Whether every tensor of the list is contiguous and starts inside the combined tensor's memory."""
    if len(list_of_tensor) == 0:
        return True
    if combined_tensor is None:
        return False
    start = combined_tensor.data_ptr()
    end = start + _storage_elements(combined_tensor) * combined_tensor.element_size()
    return all(t is not None and start <= t.data_ptr() < end and t.is_contiguous() for t in list_of_tensor)


def _log(level, message):
    print(f"[{level}] {message}", flush=True)


def print_error_log(message):
    _log("ERROR", message)


def print_warn_log(message):
    _log("WARNING", message)


def print_info_log(message):
    _log("INFO", message)
