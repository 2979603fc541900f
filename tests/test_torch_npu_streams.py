"""torch_npu's side of streams: its stream ids, raw stream handles, torch.npu.npurt() (raw runtime streams and host
memory registration), ExternalStream over a raw stream, and torch.npu.mstx through torch_npu._C._mstx.

Asynchrony is shown with torch.npu._sleep(cycles) (1 GHz device clock): "not complete yet" right after launching,
right results after a synchronizing call.
"""

import ctypes
import time

import pytest
import torch
import torch_npu

SLEEP_CYCLES = 300_000_000  # 0.3 s of the device clock
ACL_HOST_REG_MAPPED = 0x2
ACL_HOST_REG_PINNED = 0x10000000
ACL_ERROR_INVALID_PARAM = 100000


@pytest.fixture
def raw_stream():
    """A runtime stream made through npurt (as torch_npu's tests make one), destroyed after the test."""
    rt = torch.npu.npurt()
    handle = ctypes.c_void_p(0)
    assert rt.npuStreamCreate(ctypes.addressof(handle)) == 0 and handle.value
    yield handle.value
    torch.npu.synchronize()
    assert rt.npuStreamDestroy(handle.value) == 0


def test_stream_ids_are_torch_npus():
    # The kind of stream in bits 5 and up: 0 default, 2 sync-launch (a pool of 4), 3 normal, 4 high priority.
    assert torch.npu.default_stream().stream_id == 0
    assert {torch.npu.Stream().stream_id >> 5 for _ in range(40)} == {3}
    assert {torch.npu.Stream(priority=p).stream_id >> 5 for p in (-1, -2, -100)} == {4}
    assert torch.npu.Stream(priority=-1).priority == -1 and torch.npu.Stream(priority=3).priority == 0
    sync_ids = {torch.npu.Stream(is_sync_launch=True).stream_id for _ in range(8)}
    assert sync_ids == {64, 65, 66, 67}
    assert torch_npu.npu.SyncLaunchStream().stream_id in sync_ids
    s = torch.npu.Stream(is_sync_launch=True)
    with pytest.raises(RuntimeError, match="sync launch stream index"):
        torch.npu.Stream(stream_id=s.stream_id + 4, device_index=s.device_index, device_type=s.device_type)
    for bad in (32, 5 << 5, 1):  # no secondary stream, no kind 5, the default stream has index 0 only
        with pytest.raises(RuntimeError):
            torch.npu.Stream(stream_id=bad, device_index=0, device_type=s.device_type)
    with torch.npu.stream(s):
        x = torch.arange(6.0, device="npu") * 2
    torch.npu.current_stream().wait_stream(s)  # x is s's: the default stream's copy must wait for it
    assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_raw_stream_is_the_runtime_handle_everywhere():
    from torch._dynamo.device_interface import get_interface_for_device
    from torch_npu._C import _npu_getCurrentRawStream, _npu_getCurrentRawStreamNoWait

    s = torch.npu.Stream(device=1)
    assert s.npu_stream != torch.npu.default_stream(1).npu_stream
    with torch.npu.stream(s):
        assert _npu_getCurrentRawStream(1) == _npu_getCurrentRawStreamNoWait(1) == s.npu_stream
        assert get_interface_for_device("npu").get_raw_stream(1) == s.npu_stream
    # The handle is what ACL and npurt take: wrapping it gives the same runtime stream.
    assert torch.npu.ExternalStream(s.npu_stream, device=1).npu_stream == s.npu_stream


def test_external_stream_runs_ops_in_its_order(raw_stream):
    ext = torch.npu.ExternalStream(raw_stream)
    assert isinstance(ext, torch.npu.Stream) and ext.device == torch.device("npu", torch.npu.current_device())
    assert ext.npu_stream == raw_stream and ext.stream_id == 1 << 30 | (ext.stream_id & ((1 << 30) - 1))
    assert torch.npu.ExternalStream(raw_stream) == ext  # the same handle is the same stream
    a = torch.randn(64, 64)
    with torch.npu.stream(ext):
        assert torch.npu.current_stream() == ext
        start = time.perf_counter()
        torch.npu._sleep(SLEEP_CYCLES)
        x = a.npu()
        y = x @ x + 1
        done = torch.npu.Event()
        done.record()  # events order an external stream too (torch_npu's task queue refuses them)
        assert time.perf_counter() - start < 0.15, "launching onto the external stream waited for it"
    assert not done.query()
    torch.npu.current_stream().wait_event(done)
    torch.testing.assert_close(y.cpu(), a @ a + 1, rtol=1e-4, atol=1e-4)
    # As torch_npu's: the program, not torch, synchronizes and queries its stream.
    with pytest.raises(RuntimeError, match="NPUStream::synchronize"):
        ext.synchronize()
    with pytest.raises(RuntimeError, match="Cannot query external NPU stream"):
        ext.query()
    with pytest.raises(RuntimeError, match="must keep their defaults"):
        torch.npu.ExternalStream(raw_stream, priority=-1)


def test_external_stream_checks_its_handle(raw_stream):
    with pytest.raises(RuntimeError, match="belongs to npu:0"):
        torch.npu.ExternalStream(raw_stream, device=1)
    with pytest.raises(RuntimeError, match="not a live runtime stream"):
        torch.npu.ExternalStream(0x7)
    rt = torch.npu.npurt()
    assert rt is torch_npu._C._npurt
    assert rt.npuStreamCreate(0) == rt.npuStreamDestroy(0) == ACL_ERROR_INVALID_PARAM


def test_registered_host_memory_is_pinned_for_copies():
    rt = torch.npu.npurt()
    host = torch.randn(1 << 20)  # the CPU allocator's memory: not page-aligned, registered as pinned only
    nbytes = host.numel() * host.element_size()
    assert not host.is_pinned()
    assert rt.npuHostRegister(host.data_ptr(), nbytes, ACL_HOST_REG_PINNED) == 0
    try:
        assert host.is_pinned()
        assert rt.npuHostRegister(host.data_ptr(), nbytes, ACL_HOST_REG_PINNED) != 0  # registered already
        torch.npu._sleep(SLEEP_CYCLES)
        start = time.perf_counter()
        dev = host.to("npu", non_blocking=True)  # from pinned memory: queued behind the sleep, not waited for
        assert time.perf_counter() - start < 0.15
        assert not torch.npu.current_stream().query()
        assert torch.equal(dev.cpu(), host)
    finally:
        assert rt.npuHostUnregister(host.data_ptr()) == 0
    assert not host.is_pinned()
    assert rt.npuHostUnregister(host.data_ptr()) != 0
    assert rt.npuHostRegister(host.data_ptr(), 0, ACL_HOST_REG_PINNED) != 0


def test_mapped_registration_needs_whole_pages():
    rt = torch.npu.npurt()
    shared = torch.empty(8192, dtype=torch.uint8).share_memory_()  # page-aligned
    assert rt.npuHostRegister(shared.data_ptr() + 8, 4096, ACL_HOST_REG_MAPPED) != 0
    assert rt.npuHostRegister(shared.data_ptr(), 8192, ACL_HOST_REG_MAPPED | ACL_HOST_REG_PINNED) == 0
    assert shared.is_pinned()
    assert rt.npuHostUnregister(shared.data_ptr()) == 0


def test_mstx_ranges_and_pushes_reach_the_profiler():
    mstx = torch_npu.npu.mstx
    assert mstx.range_push("idle") == -1 and mstx.range_pop() == -1  # nothing records without a profiler
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert mstx.range_push("outer") == 0
        assert mstx.range_push("inner", torch.npu.current_stream()) == 1
        assert mstx.range_push("other domain", domain="d2") == 0  # a stack per domain
        assert mstx.range_pop("d2") == 0
        assert mstx.range_pop() == 1
        assert mstx.range_pop() == 0
        assert mstx.range_pop() == -1
        rid = mstx.range_start("by id", torch.npu.current_stream())
        assert rid > 0
        mstx.mark("here")
        mstx.range_end(rid)
        with pytest.warns(UserWarning, match="Invalid stream"):
            assert mstx.range_start("bad", stream=1) == 0
        with pytest.warns(UserWarning, match="Invalid domain"):
            assert mstx.range_push("bad", domain="") == -1
    names = [e.name for e in prof.events()]
    for name in ("mstx::range::outer", "mstx::range::inner", "mstx::range::other domain", "mstx::range::by id",
                 "mstx::mark::here"):
        assert name in names, name
    outer = next(e for e in prof.events() if e.name == "mstx::range::outer")
    inner = next(e for e in prof.events() if e.name == "mstx::range::inner")
    assert outer.time_range.start <= inner.time_range.start <= inner.time_range.end <= outer.time_range.end
