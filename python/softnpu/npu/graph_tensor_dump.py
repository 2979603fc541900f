"""torch_npu's NPU graph tensor dump specs: how a tensor reaches a host function launched from a captured graph.

torch_npu's print_npugraph_tensor / save_npugraph_tensor copy the tensor to host memory on a side stream and launch a
host function with a *pointer spec* of that host copy ("host_tensor_ptr", address, bytes, shape, dtype), plain
Python values a captured launch can keep; when the host function runs, the bytes at the address are taken into a
*buffer spec* ("host_tensor_buffer", bytes, shape, dtype) and the callback materializes it as a CPU tensor. The specs
are the same tuples as torch_npu's, so callbacks written for it read them unchanged.

The ops themselves, torch.ops.npu.print_npugraph_tensor and save_npugraph_tensor (.tensor_list), have their schemas and
Meta kernels in csrc/fused/debug/npugraph_tensor.cpp; their CPU and npu kernels are here, because their work is
Python's (print, torch.save). On an npu tensor the kernel orders a side stream after the current one, copies the
tensor to host memory there and launches a host function on it, then makes the current stream wait for the side
stream: eagerly that prints or saves once, in stream order; captured into an NPU graph, at every replay, with what
the replay computed."""

from __future__ import annotations

import ctypes
import os
import threading
from datetime import datetime
from typing import Any

import torch
from torch.fx.node import has_side_effect

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


def _take_host_buffers(arg: Any) -> Any:
    """arg with each pointer spec (in tuples and lists) replaced by its buffer spec: the bytes taken now."""
    if isinstance(arg, tuple) and len(arg) == 5 and arg[0] == _NPUGRAPH_TENSOR_PTR_SPEC_MARKER:
        return _npugraph_tensor_buffer_spec(arg)
    if isinstance(arg, (tuple, list)):
        return type(arg)(_take_host_buffers(a) for a in arg)
    return arg


# ------------------------------------------------------------------------------------------------ the ops' kernels

_save_counters: dict[str, int] = {}  # the next index of each save path, for saves that do not overwrite
_save_counters_lock = threading.Lock()
_dump_streams: dict[int, torch.Stream] = {}  # per device: the side stream of the host copies


def _save_file(save_path: str | None, device_index: int | None, overwrite: bool) -> str:
    """The file a save writes, as torch_npu names it: <stem>[_device_<i>][_<n>]<suffix> (suffix .pt by default);
    without overwrite, n counts the saves to that name in this process from 0. No save_path: tensor_<time>.pt.
    (The schema has checked the types.)"""
    if save_path is None:
        save_path = f"tensor_{datetime.now().strftime('%Y%m%d_%H%M%S_%f')}.pt"
    directory, filename = os.path.split(save_path)
    stem, suffix = os.path.splitext(filename)
    if not stem:
        raise ValueError("save_path must include a file name")
    suffix = suffix or ".pt"
    if device_index is not None:
        stem = f"{stem}_device_{device_index}"
    if not overwrite:
        key = os.path.join(directory, stem + suffix)
        with _save_counters_lock:
            index = _save_counters.get(key, 0)
            _save_counters[key] = index + 1
        stem = f"{stem}_{index}"
    return os.path.join(directory, stem + suffix)


def _print_host(tensor_name: str | None, tensor_arg: Any) -> None:
    tensor = _materialize_npugraph_tensor_arg(tensor_arg)
    text = str(tensor) if tensor_name is None else f"{tensor_name}={tensor}"
    print(f"{text}, shape={tuple(tensor.shape)}, dtype={tensor.dtype}", flush=True)


def _save_host(tensor_arg: Any, path: str) -> None:
    torch.save(_materialize_npugraph_tensor_arg(tensor_arg), path)


def _on_side_stream(tensors: list, device: torch.device, fn, make_args) -> None:
    """Copies the tensors to host memory on the device's side stream, after the current stream's work, and launches
    fn(*make_args(pointer specs)) there; the current stream's later work waits for it."""
    from .host_func import _launch_host_func_pending

    index = device.index if device.index is not None else torch.npu.current_device()
    if index not in _dump_streams:
        _dump_streams[index] = torch.npu.Stream(device=index, priority=-1)
    side = _dump_streams[index]
    current = torch.npu.current_stream(index)
    side.wait_stream(current)
    with torch.npu.stream(side):
        host = [t.to("cpu", non_blocking=True, memory_format=torch.contiguous_format) for t in tensors]
        _launch_host_func_pending(side, fn, make_args([_make_npugraph_tensor_ptr_spec(h) for h in host]),
                                  keep_alive=host)
    current.wait_stream(side)


def _print_npugraph_tensor(input: torch.Tensor, *, tensor_name: str | None = None) -> None:
    if input.device.type == "cpu":
        _print_host(tensor_name, input)
    else:
        _on_side_stream([input], input.device, _print_host, lambda specs: (tensor_name, specs[0]))


def _save_npugraph_tensor(input: torch.Tensor, *, save_path: str | None = None, overwrite: bool = False) -> None:
    if input.device.type == "cpu":
        torch.save(input, _save_file(save_path, None, overwrite))
    else:
        path = _save_file(save_path, input.device.index, overwrite)
        _on_side_stream([input], input.device, _save_host, lambda specs: (specs[0], path))


def _save_npugraph_tensor_list(input: list, *, save_path: str | None = None, overwrite: bool = False) -> None:
    # An empty list never gets here: with no tensor the dispatcher has no kernel to pick (NotImplementedError).
    device = input[0].device
    if any(t.device != device for t in input):
        raise ValueError("all tensors in input tensor list must be on the same device")
    if device.type == "cpu":
        torch.save(list(input), _save_file(save_path, None, overwrite))
    else:
        path = _save_file(save_path, device.index, overwrite)
        _on_side_stream(list(input), device, _save_host, lambda specs: (specs, path))


_IMPLS = torch.library.Library("npu", "IMPL")  # held: the registrations last as long as the library object
for _key in ("CPU", "PrivateUse1"):
    _IMPLS.impl("print_npugraph_tensor", _print_npugraph_tensor, _key)
    _IMPLS.impl("save_npugraph_tensor", _save_npugraph_tensor, _key)
    _IMPLS.impl("save_npugraph_tensor.tensor_list", _save_npugraph_tensor_list, _key)
# Their only effect is the output: a traced graph (torch.compile) keeps them although they return nothing.
for _op in (torch.ops.npu.print_npugraph_tensor.default, torch.ops.npu.save_npugraph_tensor.default,
            torch.ops.npu.save_npugraph_tensor.tensor_list):
    has_side_effect(_op)
