"""Streams and events: launching is asynchronous, and torch.npu.Stream / Event keep torch.cuda's promises.

No test depends on how fast the machine is: torch.npu._sleep(cycles) keeps a stream busy for a known time (its
clock is 1 GHz), and the
checks are "not complete yet" right after launching and "complete" after a synchronizing call. The few timing
bounds are loose fractions of that known time. Arithmetic here uses tensors, not Python scalars: whether a
tensor-scalar op runs asynchronously is test_ops.py's concern.
"""

import time

import pytest
import torch
import torch_npu
from conftest import run_python

SLEEP = 0.5
SLEEP_CYCLES = 500_000_000  # SLEEP seconds of the device clock (1 GHz)


def test_launch_returns_at_once_and_synchronize_waits():
    start = time.perf_counter()
    torch.npu._sleep(SLEEP_CYCLES)
    event = torch.npu.Event()
    event.record()
    launched = time.perf_counter() - start
    assert launched < SLEEP / 2, f"launching took {launched:.3f} s: the host waited for the kernel"
    assert not event.query()
    assert not torch.npu.current_stream().query()
    torch.npu.synchronize()
    assert time.perf_counter() - start >= SLEEP * 0.95
    assert event.query()
    assert torch.npu.current_stream().query()


def test_ops_run_ahead_of_the_host():
    # A chain of matmuls queued behind a sleeping kernel: the host has queued them all and recorded an event after
    # them in a small fraction of the sleep, and the results are right once the event completes.
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    x, y = a.npu(), b.npu()
    scale = torch.tensor(1 / 16, device="npu")
    torch.matmul(x, y) * scale  # warm-up: an op's first launch infers and caches its meta kernel (slow once)
    torch.npu._sleep(SLEEP_CYCLES)  # so the device cannot have caught up whatever the machine's speed
    start = time.perf_counter()
    out = x
    for _ in range(20):
        out = torch.matmul(out, y) * scale
    done = torch.npu.Event()
    done.record()
    launched = time.perf_counter() - start
    assert not done.query()
    assert launched < SLEEP / 2
    done.synchronize()
    assert done.query()
    expected = a
    for _ in range(20):
        expected = torch.matmul(expected, b) / 16
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_elapsed_time_measures_the_work_between_events():
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    torch.npu._sleep(300_000_000)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 0.3 * 1000 * 0.95 <= ms < 0.3 * 1000 * 10, ms


def test_elapsed_and_recorded_time_wait_for_the_events_as_torch_npus():
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    torch.npu._sleep(100_000_000)  # 0.1 s
    end.record()
    ms = start.elapsed_time(end)  # not synchronized first: torch_npu's waits for both events
    assert ms >= 95, ms
    t0, t1 = start.recorded_time(), end.recorded_time()  # microseconds, as ACL's aclrtEventGetTimestamp
    assert isinstance(t0, int) and 0 < t0 < t1
    assert abs((t1 - t0) / 1000 - ms) < 0.01, (t0, t1, ms)
    with pytest.raises(RuntimeError, match="must be recorded"):
        torch.npu.Event(enable_timing=True).recorded_time()


def test_stream_and_event_repr_are_torch_npus():
    s = torch.npu.current_stream()
    assert repr(s).startswith("<torch_npu.npu.Stream device=npu:0 npu_stream=0x"), repr(s)
    e = torch.npu.Event()
    assert repr(e) == "<torch_npu.npu.Event uninitialized>"
    s.record_event(e)
    assert repr(e).startswith("<torch_npu.npu.Event 0x"), repr(e)


def test_elapsed_time_needs_timing_events():
    # CUDA raises when either event was created without enable_timing=True.
    start, end = torch.npu.Event(), torch.npu.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(RuntimeError):
        start.elapsed_time(end)
    timed = torch.npu.Event(enable_timing=True)
    timed.record()
    timed.synchronize()
    with pytest.raises(RuntimeError):
        timed.elapsed_time(end)


def test_event_query_and_synchronize():
    fresh = torch.npu.Event()
    assert fresh.query()  # an event never recorded has nothing to wait for
    fresh.synchronize()
    torch.npu._sleep(SLEEP_CYCLES)
    event = torch.npu.current_stream().record_event()
    assert isinstance(event, torch.npu.Event)
    assert not event.query()
    start = time.perf_counter()
    event.synchronize()
    assert event.query()
    assert time.perf_counter() - start > SLEEP / 4  # it waited for the sleeping kernel


def test_event_wait_orders_another_stream_on_the_device():
    # s2 reads what s1 writes after a long kernel: without the device-side wait s2 would read zeros.
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    x = torch.zeros(1000, device="npu")
    one = torch.ones(1000, device="npu")
    torch.npu.synchronize()
    with torch.npu.stream(s1):
        torch.npu._sleep(SLEEP_CYCLES)
        x.add_(one)
        written = torch.npu.Event()
        written.record()
    start = time.perf_counter()
    with torch.npu.stream(s2):
        written.wait()  # on the current stream, s2
        y = x + one
    assert time.perf_counter() - start < SLEEP / 2  # the host does not wait
    assert not s2.query()  # s2 waits on the device
    torch.npu.synchronize()
    assert torch.equal(y.cpu(), torch.full((1000,), 2.0))


def test_wait_stream_and_wait_event_on_streams():
    s1, s2, s3 = torch.npu.Stream(), torch.npu.Stream(), torch.npu.Stream()
    x = torch.zeros(1000, device="npu")
    one = torch.ones(1000, device="npu")
    torch.npu.synchronize()
    with torch.npu.stream(s1):
        torch.npu._sleep(SLEEP_CYCLES)
        x.fill_(3)
    s2.wait_stream(s1)
    with torch.npu.stream(s2):
        y = x + one
    s3.wait_event(s1.record_event())
    with torch.npu.stream(s3):
        z = x + x
    assert not s2.query() and not s3.query()
    s2.synchronize()
    s3.synchronize()
    assert torch.equal(y.cpu(), torch.full((1000,), 4.0))
    assert torch.equal(z.cpu(), torch.full((1000,), 6.0))


def test_stream_synchronize_waits_for_its_own_stream_only():
    busy, idle = torch.npu.Stream(), torch.npu.Stream()
    with torch.npu.stream(busy):
        torch.npu._sleep(SLEEP_CYCLES)
    idle.synchronize()
    assert not busy.query()
    busy.synchronize()
    assert busy.query()


def test_synchronize_waits_for_every_stream_of_the_device_only():
    s = torch.npu.Stream()
    with torch.npu.stream(s):
        torch.npu._sleep(SLEEP_CYCLES)
    with torch.npu.device(1):
        torch.npu._sleep(3 * SLEEP_CYCLES)
    torch.npu.synchronize(0)
    assert s.query()  # a non-current stream of device 0 was waited for
    assert not torch.npu.current_stream(1).query()  # device 1 was not
    torch.npu.synchronize(1)
    assert torch.npu.current_stream(1).query()


def test_streams_are_context_managers_and_compare_by_identity():
    s = torch.npu.Stream()
    assert s != torch.npu.current_stream()
    with s:
        assert torch.npu.current_stream() == s
    assert torch.npu.current_stream() == torch.npu.default_stream()
    assert torch.npu.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type) == s
    assert len({torch.npu.default_stream(), torch.npu.default_stream(), s}) == 2


def test_stream_device_and_priority():
    assert torch.npu.Stream().device == torch.device("npu:0")
    assert torch.npu.Stream(device=1).device == torch.device("npu:1")
    assert torch.npu.Stream(device="npu:1").device_index == 1
    # CUDA: "If device is None (default) or a negative integer, this will use the current device."
    with torch.npu.device(1):
        assert torch.npu.Stream(device=-1).device_index == 1
        assert torch.npu.Stream().device_index == 1
    assert torch.npu.Stream().priority == 0
    assert torch.npu.default_stream().priority == 0
    assert torch.npu.Stream(priority=-1).priority == -1
    # Out-of-range priorities map to the nearest valid one: lowest (0) for large positive numbers, the highest for
    # large negative numbers.
    assert torch.npu.Stream(priority=5).priority == 0
    highest = torch.npu.Stream(priority=-100).priority
    assert highest < 0 and torch.npu.Stream(priority=highest - 1).priority == highest


def test_default_and_current_stream():
    default = torch.npu.default_stream()
    assert torch.npu.current_stream() == default
    assert torch.npu.default_stream(1).device_index == 1
    assert torch.npu.current_stream(1) == torch.npu.default_stream(1)
    assert torch.npu.default_stream(1) != default


def test_set_stream():
    s = torch.npu.Stream()
    torch.npu.set_stream(s)
    assert torch.npu.current_stream() == s
    torch.npu._sleep(SLEEP_CYCLES)  # runs on s, not the default stream
    assert not s.query() and torch.npu.default_stream().query()
    torch.npu.set_stream(None)  # no-op
    assert torch.npu.current_stream() == s
    torch.npu.set_stream(torch.npu.default_stream())
    assert torch.npu.current_stream() == torch.npu.default_stream()


def test_stream_context_restores_the_previous_stream():
    outer, inner = torch.npu.Stream(), torch.npu.Stream()
    with torch.npu.stream(outer):
        assert torch.npu.current_stream() == outer
        with torch.npu.stream(inner):
            assert torch.npu.current_stream() == inner
        assert torch.npu.current_stream() == outer
        with torch.npu.stream(None):  # no-op
            assert torch.npu.current_stream() == outer
    assert torch.npu.current_stream() == torch.npu.default_stream()
    with pytest.raises(ValueError):
        with torch.npu.stream(outer):
            raise ValueError
    assert torch.npu.current_stream() == torch.npu.default_stream()


def test_stream_context_across_devices():
    # A stream of another device: that device is current inside, and both devices' current streams come back.
    on_one = torch.npu.Stream(device=1)
    before_one = torch.npu.current_stream(1)
    with torch.npu.stream(on_one):
        assert torch.npu.current_device() == 1
        assert torch.npu.current_stream() == on_one
        x = torch.full((4,), 2.0, device="npu")
    assert torch.npu.current_device() == 0
    assert torch.npu.current_stream(0) == torch.npu.default_stream(0)
    assert torch.npu.current_stream(1) == before_one
    assert x.device == torch.device("npu:1")
    on_one.synchronize()
    assert x.cpu().tolist() == [2.0] * 4


def test_events_and_streams_of_the_second_device():
    s = torch.npu.Stream(device=1)
    event = s.record_event()  # recorded while npu:0 is current
    event.synchronize()
    timed_start = torch.npu.Event(enable_timing=True)
    timed_end = torch.npu.Event(enable_timing=True)
    timed_start.record(s)
    with torch.npu.stream(s):
        torch.npu._sleep(200_000_000)
    timed_end.record(s)
    timed_end.synchronize()
    assert timed_start.elapsed_time(timed_end) >= 0.2 * 1000 * 0.95


def test_multiple_streams_compute_correct_results():
    # Producer/consumer over several streams, each ordered with wait_stream, compared with the CPU.
    torch.manual_seed(0)
    a = torch.randn(256, 256)
    x = a.npu()
    streams = [torch.npu.Stream() for _ in range(3)]
    main = torch.npu.current_stream()
    results = []
    for i, s in enumerate(streams):
        s.wait_stream(main)
        with torch.npu.stream(s):
            results.append(torch.matmul(x, x) * torch.tensor(float(i + 1), device="npu"))
    for s in streams:
        main.wait_stream(s)
    total = results[0] + results[1] + results[2]
    torch.testing.assert_close(total.cpu(), torch.matmul(a, a) * 6, rtol=1e-4, atol=1e-3)


def test_cross_stream_waits_and_priorities_on_a_single_compute_thread():
    # With one compute thread per device, a stream waiting for another must not hold the thread (it would deadlock),
    # and a high-priority stream's work goes before the rest of a long low-priority queue.
    result = run_python(
        """
        import torch, torch_npu
        low = torch.npu.Stream(priority=0)
        high = torch.npu.Stream(priority=-1)
        other = torch.npu.Stream()
        x = torch.zeros(8, device="npu")
        one = torch.ones(8, device="npu")
        x.add_(one + one)  # warm-up: the first launch of an op infers its meta kernel on the host (slow once)
        x.zero_()
        torch.npu.synchronize()
        with torch.npu.stream(low):
            for _ in range(20):
                torch.npu._sleep(50_000_000)
            x.add_(one)
        other.wait_stream(low)
        with torch.npu.stream(other):
            y = x + one
        with torch.npu.stream(high):
            urgent = one + one + one + one + one
            done = torch.npu.Event()
            done.record()
        done.synchronize()
        print("low finished before high:", low.query())
        torch.npu.synchronize()
        print(y.cpu().tolist() == [2.0] * 8, urgent.cpu().tolist() == [5.0] * 8)
        """,
        env={"SOFTNPU_CORES": 1},
        timeout=60,
    )
    assert result.lines == ["low finished before high: False", "True True"]


def test_record_stream_keeps_memory_from_reuse_until_the_other_stream_is_done():
    # A tensor used on a side stream and freed on the host: with record_stream its block is not handed out again
    # before the side stream's work completes, so the side stream's result is intact.
    side = torch.npu.Stream()
    src = torch.full((1 << 16,), 7.0, device="npu")
    torch.npu.synchronize()
    side.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(side):
        torch.npu._sleep(SLEEP_CYCLES)
        result = src.clone()  # reads src after the sleep
    src.record_stream(side)
    ptr = src.data_ptr()
    del src
    # Same size, current stream: without record_stream this would reuse src's block and overwrite it now.
    other = torch.zeros(1 << 16, device="npu")
    assert other.data_ptr() != ptr
    torch.npu.synchronize()
    assert torch.equal(result.cpu(), torch.full((1 << 16,), 7.0))
    assert other.cpu().sum().item() == 0


def test_erase_stream_undoes_record_stream():
    # torch_npu.erase_stream: after an event wait orders the side stream's work, the block returns to its own stream's
    # pool at once when freed, as if record_stream had not been called.
    side = torch.npu.Stream()
    src = torch.full((1 << 16,), 7.0, device="npu")
    side.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(side):
        result = src.clone()
    src.record_stream(side)
    torch.npu.current_stream().wait_stream(side)  # the order erase_stream relies on
    torch_npu.erase_stream(src, side)
    ptr = src.data_ptr()
    del src
    reused = torch.zeros(1 << 16, device="npu")
    assert reused.data_ptr() == ptr
    assert torch.equal(result.cpu(), torch.full((1 << 16,), 7.0)) and reused.cpu().sum().item() == 0
    with pytest.raises(TypeError, match="stream should be torch_npu.npu.Stream"):
        torch_npu.erase_stream(reused, "side")
