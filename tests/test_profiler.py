"""torch.profiler on npu: host ops and the device work they launch, on one timeline; and the legacy profiler
(torch.autograd.profiler.profile(use_device="npu")), which times each op between two events on the current stream.

One profile of a small workload (module fixture) is inspected from several sides: the events torch builds (device
time attributed to the launching op), key_averages, and the Chrome trace Kineto writes (kernels on per-stream tracks
of each device's process, flow arrows from the launch on the host thread to the kernel).
"""

import json
import threading

import pytest
import torch
import torch_npu
from conftest import run_python
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

N = 128


def is_device(event) -> bool:
    return event.device_type == DeviceType.PrivateUse1


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    a = torch.randn(N, N, device="npu")
    b = torch.randn(N, N, device="npu")
    a1 = torch.randn(N, N, device="npu:1")
    side = torch.npu.Stream()

    def work():
        c = torch.mm(a, b)
        d = c + a
        with torch.npu.stream(side):
            e = b * 2
        f = a1 * 3
        torch.npu.synchronize(1)  # the profiler's exit synchronizes the current device only, as for CUDA
        return d.cpu(), e, f

    work()  # warm-up: the first launch of an op infers its output shapes
    torch.npu.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        work()
    path = tmp_path_factory.mktemp("profile") / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof, json.loads(path.read_text())


def test_kernels_are_named_after_their_op_and_have_device_time(profiled):
    prof, _ = profiled
    kernels = [e for e in prof.events() if is_device(e)]
    names = {e.name for e in kernels}
    for op in ("aten::mm", "aten::add", "aten::mul"):
        assert any(n.startswith(op) for n in names), f"no {op} kernel among {sorted(names)}"
    assert "Memcpy DtoH" in names
    assert all(e.time_range.elapsed_us() > 0 for e in kernels)


def test_device_time_is_attributed_to_the_launching_op(profiled):
    prof, _ = profiled
    hosts = {e.name: e for e in prof.events() if e.device_type == DeviceType.CPU and e.kernels}
    for op, kernel in (("aten::mm", "aten::mm"), ("aten::add", "aten::add"), ("aten::mul", "aten::mul"),
                       ("aten::_copy_from", "Memcpy DtoH")):
        assert op in hosts, f"{op} has no device work attached; ops with some: {sorted(hosts)}"
        assert any(k.name.startswith(kernel) for k in hosts[op].kernels)
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].device_time_total > 0
    assert averages["aten::mm"].self_device_time_total > 0
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "Self NPU" in table and "NPU total" in table


def test_kernels_run_on_the_stream_and_device_they_were_launched_on(profiled):
    prof, _ = profiled
    kernels = [e for e in prof.events() if is_device(e)]
    (mm,) = [e for e in kernels if e.name.startswith("aten::mm")]
    assert mm.device_index == 0
    # b * 2 on npu:0's side stream, a1 * 3 on npu:1.
    muls = sorted((e.device_index, e.device_resource_id) for e in kernels if e.name.startswith("aten::mul"))
    assert [device for device, _ in muls] == [0, 1]
    assert muls[0][1] != mm.device_resource_id, "the side stream's kernel is on the default stream's track"


def test_chrome_trace_has_a_track_per_stream_of_each_device(profiled):
    _, trace = profiled
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    tracks = {(e["pid"], e["tid"]) for e in kernels}
    assert {pid for pid, _ in tracks} == {0, 1}
    assert len({tid for pid, tid in tracks if pid == 0}) == 2  # default and side stream of npu:0
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    for pid, tid in tracks:
        assert names[(pid, tid)] == f"stream {tid}"
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert processes[0] == "NPU 0" and processes[1] == "NPU 1"


def test_kernels_are_on_the_streams_own_ids_never_0(profiled):
    # The runtime's stream id + 7 (csrc/backend/profiler/session.h): the default stream shows as 7, as CUDA's does in
    # Kineto's traces; trace readers (msprof-analyze compare) skip stream 0 as holding no kernels.
    _, trace = profiled
    device_work = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    assert all(e["tid"] != 0 and e["args"]["stream"] == e["tid"] for e in device_work)
    (mm,) = [e for e in device_work if e["name"].startswith("aten::mm")]
    assert mm["tid"] == 7  # launched on the default stream
    side = {e["tid"] for e in device_work if e["pid"] == 0} - {7}
    assert len(side) == 1 and side.pop() > 7


def test_profile_memory_shows_npu_memory(tmp_path):
    # The caching allocator reports each allocation and free to the profiler, as CUDA's does.
    x = torch.randn(N, N, device="npu")
    torch.npu.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True,
                 record_shapes=True, with_stack=True) as prof:  # what the memory timeline needs
        y = torch.mm(x, x)
        z = y + 1
        del y
        torch.npu.synchronize()
    memory_of = {}  # key_averages may list a kernel apart from its op under the same name
    for e in prof.key_averages():
        memory_of[e.key] = memory_of.get(e.key, 0) + e.device_memory_usage
    block = N * N * 4 + 512  # torch_npu's allocator pads by 32 bytes and rounds to 512: what its profiler reports
    assert memory_of["aten::mm"] == block and memory_of["aten::add"] == block
    assert "NPU Mem" in prof.key_averages().table(sort_by="self_device_memory_usage")
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    memory = [e["args"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "[memory]"
              and e["args"]["Device Type"] == int(DeviceType.PrivateUse1)]
    assert [m["Bytes"] for m in memory] == [block, block, -block]  # mm's output, add's, mm's freed
    assert memory[1]["Total Allocated"] == memory[0]["Total Allocated"] + block
    assert memory[2]["Addr"] == memory[0]["Addr"]
    assert all(m["Total Reserved"] >= m["Total Allocated"] for m in memory)
    timeline = tmp_path / "memory.json"
    with pytest.warns(FutureWarning):  # torch deprecates it for CUDA too
        prof.export_memory_timeline(str(timeline), device="npu:0")
    times, sizes = json.loads(timeline.read_text())
    assert max(sum(s) for s in sizes) >= 2 * block
    del z


def test_memory_is_not_reported_without_profile_memory():
    x = torch.randn(N, N, device="npu")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        torch.mm(x, x)
        torch.npu.synchronize()
    assert all(e.device_memory_usage == 0 for e in prof.key_averages())


def test_chrome_trace_links_each_kernel_to_its_op(profiled):
    _, trace = profiled
    events = trace["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    flow_starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    flow_ends = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    host_thread = threading.main_thread().native_id
    for kernel in kernels:
        op = ops[kernel["args"]["External id"]]
        assert kernel["name"].startswith(op["name"]), (kernel["name"], op["name"])
        # The arrow: from the launch, inside the op on the host thread, to the kernel.
        end = flow_ends[(kernel["pid"], kernel["tid"], kernel["ts"])]
        start = flow_starts[end["id"]]
        assert start["tid"] == op["tid"] == host_thread
        assert op["ts"] <= start["ts"] <= op["ts"] + op["dur"]
        assert start["ts"] <= kernel["ts"]


def test_torch_npu_profiler_spelling(tmp_path):
    import torch_npu.profiler as npu_profiler

    assert npu_profiler.ProfilerActivity.NPU == ProfilerActivity.PrivateUse1
    assert npu_profiler.ProfilerActivity.NPU in npu_profiler.supported_activities()
    x = torch.randn(N, N, device="npu")
    with npu_profiler.profile(
        activities=[npu_profiler.ProfilerActivity.CPU, npu_profiler.ProfilerActivity.NPU],
        schedule=npu_profiler.schedule(wait=1, active=1, warmup=1),  # torch_npu's order: active before warmup
        on_trace_ready=npu_profiler.tensorboard_trace_handler(str(tmp_path), worker_name="w", analyse_flag=False),
    ) as prof:
        for _ in range(3):
            torch.mm(x, x)
            prof.step()
    # torch_npu's result directory; analyse_flag=False keeps only the raw data: the trace torch.profiler recorded.
    (path,) = tmp_path.glob("w_*_ascend_pt/FRAMEWORK/torch.trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" and e["name"].startswith("aten::mm") for e in events)
    assert torch_npu.profiler is npu_profiler


def test_nothing_is_recorded_unless_the_device_is_profiled():
    # In a fresh process: the runtime's records are process-wide, and this asks the runtime directly what it holds.
    out = run_python("""
        import ctypes, pathlib
        import torch, torch_npu, softnpu
        from torch.profiler import ProfilerActivity, profile

        class Record(ctypes.Structure):
            _fields_ = [("name", ctypes.c_char_p), ("device", ctypes.c_int), ("stream_id", ctypes.c_uint64),
                        ("correlation_id", ctypes.c_uint64), ("start_ns", ctypes.c_int64),
                        ("end_ns", ctypes.c_int64), ("failed", ctypes.c_int)]

        runtime = ctypes.CDLL(str(pathlib.Path(softnpu.__file__).parent / "lib" / "libsoftnpu_runtime.so"))

        def recorded():
            records, count = (Record * 64)(), ctypes.c_size_t()
            assert runtime.snpuActivityDrain(records, 64, ctypes.byref(count)) == 0
            return count.value

        def work():
            x = torch.randn(64, 64, device="npu")
            (x @ x).cpu()
            torch.npu.synchronize()

        work()
        print("off", recorded())
        with profile(activities=[ProfilerActivity.CPU]):
            work()
        print("cpu only", recorded())
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            work()
        print("profiled", sum(e.device_type == torch.autograd.DeviceType.PrivateUse1 for e in prof.events()) > 0)
        work()
        print("after", recorded())
    """)
    assert out.lines == ["off 0", "cpu only 0", "profiled True", "after 0"]


def legacy_profile(work):
    work()  # warm-up: the first launch of an op infers its output shapes
    torch.npu.synchronize()
    with torch.autograd.profiler.profile(use_device="npu") as prof:
        work()
    return prof


def test_legacy_profiler_gives_ops_their_device_time():
    a = torch.randn(N, N, device="npu")
    side = torch.npu.Stream()

    def work():
        c = torch.mm(a, a)
        d = c + a
        with torch.npu.stream(side):
            e = a * 2
        return d.cpu(), e.t()

    prof = legacy_profile(work)
    averages = {e.key: e for e in prof.key_averages()}
    for op in ("aten::mm", "aten::add", "aten::mul", "aten::_to_copy"):
        assert averages[op].device_time_total > 0, f"{op} has no device time: {averages[op]}"
    assert averages["aten::mm"].self_device_time_total > 0
    for e in list(prof.function_events) + list(averages.values()):
        assert e.device_time_total >= 0 and e.self_device_time_total >= 0, e
        assert e.cpu_time_total >= 0 and e.self_cpu_time_total >= 0, e
    table = prof.key_averages().table(sort_by="device_time_total")
    assert "NPU total" in table and "aten::mm" in table


def test_legacy_profiler_charges_more_device_time_to_longer_kernels():
    big = torch.randn(512, 512, device="npu")
    tiny = torch.randn(4, device="npu")

    prof = legacy_profile(lambda: (torch.mm(big, big), tiny + tiny))
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].device_time_total > averages["aten::add"].device_time_total


def test_legacy_profiler_leaves_kineto_profiling_as_it_was():
    x = torch.randn(N, N, device="npu")
    legacy_profile(lambda: torch.mm(x, x))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        torch.mm(x, x)
        torch.npu.synchronize()
    kernels = [e for e in prof.events() if is_device(e)]
    assert any(e.name.startswith("aten::mm") and e.time_range.elapsed_us() > 0 for e in kernels)
