"""Host functions on a stream, torch_npu's private names: _launch_host_func(stream, fn, user_data) enqueues a call of
fn(user_data) on the stream, run in stream order (the stream's later work waits for it) and, launched during an NPU
graph capture, at every replay of the graph. As on Ascend the stream must be subscribed first (_subscribe_report);
_unsubscribe_report waits for the stream, so its host functions have run.

_launch_host_func_pending(stream, fn, args) is torch_npu's variant for host copies of device tensors (the aclgraph
print/save ops): no subscription is needed, and when it runs, each pointer spec in args (a host copy's address, see
graph_tensor_dump.py) is replaced by a buffer spec of the bytes there, then fn(*args) is called. torch_npu hands the
call to the interpreter's pending calls; softnpu calls it in stream order, so it is done by the next synchronize."""

import torch

from .. import _C


def _stream_args(stream: torch.Stream) -> tuple[int, int]:
    return stream.stream_id, stream.device_index


def _launch_host_func(op_stream: torch.Stream, fn, user_data) -> None:
    _C._launch_host_func(*_stream_args(op_stream), fn, user_data)


def _launch_host_func_pending(op_stream: torch.Stream, fn, user_data, keep_alive=()) -> None:
    """keep_alive: objects (the host copies) the pointer specs point into, held as long as the launch (and a graph
    that captured it) may run."""
    from .graph_tensor_dump import _take_host_buffers

    def run(_payload):
        fn(*_take_host_buffers(user_data))

    _C._launch_host_func_pending(*_stream_args(op_stream), run, tuple(keep_alive))


def _subscribe_report(op_stream: torch.Stream) -> None:
    _C._subscribe_report(*_stream_args(op_stream))


def _unsubscribe_report(op_stream: torch.Stream) -> None:
    _C._unsubscribe_report(*_stream_args(op_stream))
