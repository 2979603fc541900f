"""torch_npu's NPU graph tensor dump specs: how a tensor reaches a host function launched from a captured graph.

torch_npu's print_npugraph_tensor / save_npugraph_tensor copy the tensor to host memory on a side stream and launch a
host function with a *pointer spec* of that host copy ("host_tensor_ptr", address, bytes, shape, dtype), plain
Python values a captured launch can keep; when the host function runs, the bytes at the address are taken into a
*buffer spec* ("host_tensor_buffer", bytes, shape, dtype) and the callback materializes it as a CPU tensor. The specs
are the same tuples as torch_npu's, so callbacks written for it read them unchanged."""

from __future__ import annotations

import ctypes
from typing import Any

import torch

_NPUGRAPH_TENSOR_PTR_SPEC_MARKER = "host_tensor_ptr"
_NPUGRAPH_TENSOR_BUFFER_SPEC_MARKER = "host_tensor_buffer"


def _make_npugraph_tensor_ptr_spec(tensor: torch.Tensor) -> tuple:
    """(marker, data_ptr, bytes, shape, dtype) of a contiguous host tensor."""
    return (
        _NPUGRAPH_TENSOR_PTR_SPEC_MARKER,
        tensor.data_ptr(),
        tensor.numel() * tensor.element_size(),
        tuple(tensor.shape),
        tensor.dtype,
    )


def _npugraph_tensor_buffer_spec(ptr_spec: tuple) -> tuple:
    """The buffer spec of a pointer spec: a copy of the bytes at its address, taken when the host function runs (so
    it reads what the captured copy wrote at that replay)."""
    _, address, nbytes, shape, dtype = ptr_spec
    buffer = bytearray(ctypes.string_at(address, nbytes)) if nbytes else bytearray()
    return (_NPUGRAPH_TENSOR_BUFFER_SPEC_MARKER, buffer, shape, dtype)


def _materialize_npugraph_tensor_arg(tensor_arg: Any) -> Any:
    """A CPU tensor for a buffer or pointer spec, a list of them for a list; anything else unchanged."""
    if isinstance(tensor_arg, tuple) and len(tensor_arg) == 5 and tensor_arg[0] == _NPUGRAPH_TENSOR_PTR_SPEC_MARKER:
        tensor_arg = _npugraph_tensor_buffer_spec(tensor_arg)
    if isinstance(tensor_arg, tuple) and len(tensor_arg) == 4 and tensor_arg[0] == _NPUGRAPH_TENSOR_BUFFER_SPEC_MARKER:
        _, buffer, shape, dtype = tensor_arg
        if len(buffer) == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buffer, dtype=dtype).reshape(shape)
    if isinstance(tensor_arg, list):
        return [_materialize_npugraph_tensor_arg(arg) for arg in tensor_arg]
    return tensor_arg
