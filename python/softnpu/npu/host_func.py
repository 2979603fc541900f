"""Host functions on a stream, torch_npu's private names: _launch_host_func(stream, fn, user_data) enqueues a call of
fn(user_data) on the stream, run in stream order (the stream's later work waits for it) and, launched during an NPU
graph capture, at every replay of the graph. As on Ascend the stream must be subscribed first (_subscribe_report);
_unsubscribe_report waits for the stream, so its host functions have run."""

import torch

from .. import _C


def _stream_args(stream: torch.Stream) -> tuple[int, int]:
    return stream.stream_id, stream.device_index


def _launch_host_func(op_stream: torch.Stream, fn, user_data) -> None:
    _C._launch_host_func(*_stream_args(op_stream), fn, user_data)


def _subscribe_report(op_stream: torch.Stream) -> None:
    _C._subscribe_report(*_stream_args(op_stream))


def _unsubscribe_report(op_stream: torch.Stream) -> None:
    _C._unsubscribe_report(*_stream_args(op_stream))
