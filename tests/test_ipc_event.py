"""Events shared between processes (csrc/backend/ipc_event.h): torch.npu.Event(interprocess=True), ipc_handle(),
Event.from_ipc_handle() and torch.multiprocessing queues, as CUDA's interprocess events. A spawned child waits on the
parent's event; the parent waits on a record the child made. The child runs the function below (spawn imports this
module by name)."""

import pytest
import torch
import torch.multiprocessing as mp
import torch_npu  # noqa: F401

TIMEOUT = 120


def _child(inbox, outbox):
    # 1. The parent's event, recorded after a long kernel: waiting on it on a stream orders the stream after it.
    ev = inbox.get()
    outbox.put(("device", str(ev.device)))
    s = torch.npu.Stream()
    ev.wait(s)
    with torch.npu.stream(s):
        done = torch.ones(4, device="npu") * 2
    s.synchronize()
    outbox.put(("waited", ev.query(), done.sum().item()))
    # 2. An event opened from a handle, recorded here: the parent's synchronize waits for this process's stream.
    handle = inbox.get()
    mine = torch.npu.Event.from_ipc_handle(0, handle)
    with torch.npu.stream(s):
        torch.npu._sleep(200_000)
        mine.record()
    outbox.put("recorded")
    assert inbox.get() == "done"


def test_event_shared_with_a_spawned_process():
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_child, args=(inbox, outbox))
    child.start()
    try:
        ev = torch.npu.Event(interprocess=True)
        assert ev.query() and ev.device == torch.device("npu", 0)  # never recorded: complete, as CUDA's
        s = torch.npu.Stream()
        with torch.npu.stream(s):
            torch.npu._sleep(200_000)
            ev.record(s)
        assert not ev.query()  # the kernel before it is still running
        inbox.put(ev)
        assert outbox.get(timeout=TIMEOUT) == ("device", "npu:0")
        assert outbox.get(timeout=TIMEOUT) == ("waited", True, 8.0)

        other = torch.npu.Event(interprocess=True)
        assert len(other.ipc_handle()) == 64
        inbox.put(other.ipc_handle())
        assert outbox.get(timeout=TIMEOUT) == "recorded"
        other.synchronize()  # returns once the child's stream ran its sleep
        assert other.query()
        inbox.put("done")
        child.join(TIMEOUT)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()


def test_interprocess_event_arguments():
    with pytest.raises(RuntimeError, match="interprocess"):
        torch.npu.Event(enable_timing=True, interprocess=True)
    with pytest.raises(RuntimeError, match="interprocess=True"):
        torch.npu.Event().ipc_handle()
    with pytest.raises(RuntimeError, match="64 bytes"):
        torch.npu.Event.from_ipc_handle(0, b"short")
    with pytest.raises(RuntimeError, match="not the handle"):
        torch.npu.Event.from_ipc_handle(0, bytes(64))
    # In the process that made it, a handle opens the same event.
    ev = torch.npu.Event(interprocess=True)
    same = torch.npu.Event.from_ipc_handle(0, ev.ipc_handle())
    ev.record()
    same.synchronize()
    assert same.query() and ev.query()
