"""Host functions on a stream (torch_npu's _launch_host_func, _subscribe_report, _unsubscribe_report): called in
stream order with their user data, at every replay when captured into an NPU graph; the stream must be subscribed;
an exception in one is the stream's kernel error."""

import pytest
import torch


@pytest.fixture
def stream():
    s = torch.npu.Stream()
    torch.npu._subscribe_report(s)
    yield s
    torch.npu._unsubscribe_report(s)


def test_a_host_function_runs_in_stream_order(stream):
    seen = []
    x = torch.zeros(4, device="npu")
    with torch.npu.stream(stream):
        torch.npu._sleep(1_000_000)  # the host function must wait for the work queued before it
        x.fill_(3.0)
        torch.npu._launch_host_func(stream, lambda data: seen.append(data), "called")
    stream.synchronize()
    assert seen == ["called"]
    assert x.cpu().tolist() == [3.0] * 4


def test_a_captured_host_function_runs_at_every_replay(stream):
    calls = []
    result = torch.zeros(3, device="npu")
    side = torch.npu.Stream()

    def add(params):
        a, b, out = params
        with torch.npu.stream(side):  # npu work of its own, as torch_npu's callbacks launch
            out.copy_(a + b)
        calls.append(1)

    a, b = torch.ones(3, device="npu"), torch.full((3,), 2.0, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g, stream=stream):
        torch.npu._launch_host_func(stream, add, [a, b, result])
    assert calls == []
    for n in (1, 2):
        g.replay()
        torch.npu.synchronize()
        assert len(calls) == n
    torch.npu.synchronize()
    assert result.cpu().tolist() == [3.0] * 3


def test_an_unsubscribed_stream_refuses_host_functions():
    with pytest.raises(RuntimeError, match="not subscribed to report"):
        torch.npu._launch_host_func(torch.npu.Stream(), print, None)


def test_an_exception_in_a_host_function_is_the_streams_error(stream):
    def fail(_):
        raise ValueError("from the host function")

    torch.npu._launch_host_func(stream, fail, None)
    with pytest.raises(RuntimeError, match="from the host function"):
        stream.synchronize()
    torch.npu._launch_host_func(stream, lambda _: None, None)  # the stream stays usable
    stream.synchronize()
