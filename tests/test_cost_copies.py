"""Copies in the profiler carry the cost model's estimate, as kernels do: the runtime's copy records give their bytes,
direction and host pinning (csrc/runtime's snpuActivityRecord), the profiler estimates them on the SoC's host link
(H2D, D2H) or HBM (D2D), and the estimate reaches the Chrome trace, kernel_details.csv and softnpu.cost's summaries."""

import csv
import json

import pytest
import torch
import torch_npu

import softnpu.cost as cost

ACTIVITIES = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
N = 1 << 20  # float32 elements: 4 MiB a copy


def _step():
    """A step with a copy each way and one on the device: .to("npu") from pageable memory, .cpu() back."""
    x = torch.randn(N).to("npu")
    y = (x * 2).clone()
    return y.cpu()


def _copies(trace_path) -> list[dict]:
    return [e for e in json.loads(trace_path.read_text())["traceEvents"] if e.get("cat") == "gpu_memcpy"]


def test_each_copy_in_the_trace_carries_its_bytes_and_the_models_estimate(tmp_path):
    _step()  # warm up: the caching allocator and the staging buffers
    with torch.profiler.profile(activities=ACTIVITIES) as prof:
        _step()
        torch.npu.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    by_name = {}
    for e in _copies(trace):
        by_name.setdefault(e["name"], []).append(e["args"])
    assert {"Memcpy HtoD", "Memcpy DtoH"} <= by_name.keys()
    (h2d,) = [a for a in by_name["Memcpy HtoD"] if a["bytes"] == 4 * N]
    (d2h,) = [a for a in by_name["Memcpy DtoH"] if a["bytes"] == 4 * N]
    # A CPU tensor from torch.randn is pageable: the model adds the host's staging copy to the link's time.
    assert h2d["host memory"] == "pageable" and d2h["host memory"] == "pageable"
    expected = cost.estimate_copy(4 * N, "HtoD", pageable=True)
    assert h2d[cost.ESTIMATE_ARG] == pytest.approx(expected.us) and h2d["Estimated Bound"] == "memory"
    assert d2h[cost.ESTIMATE_ARG] == pytest.approx(cost.estimate_copy(4 * N, "DtoH", pageable=True).us)
    # On a 910B (PCIe 4.0 x16, 80% sustained) 4 MiB crosses in ~164 us, plus ~419 us of staging at 10 GB/s.
    link = cost.chip()["host_link_bytes_per_s"]
    assert expected.us > 4 * N / link * 1e6

    # The summaries see the copies: key_averages sorts them with the kernels, the step counts them.
    keys = {r.key for r in cost.key_averages(prof)}
    assert keys & {"aten::_to_copy", "aten::copy_", "aten::_copy_from"}
    step = cost.step_summary(prof)
    assert sum(k.estimate.us for k in step.kernels if k.estimate.unit == "copy") >= 2 * expected.us * 0.99


def test_pinned_copies_are_estimated_at_the_links_rate_and_device_copies_on_hbm(tmp_path):
    host = torch.randn(N).pin_memory()
    dev = torch.empty(N, device="npu")
    torch.npu.synchronize()
    with torch.profiler.profile(activities=ACTIVITIES) as prof:
        dev.copy_(host, non_blocking=True)
        other = torch.empty_like(dev)
        other.copy_(dev)
        torch.npu.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    copies = {e["name"]: e["args"] for e in _copies(trace) if e["args"].get("bytes") == 4 * N}
    assert copies["Memcpy HtoD"]["host memory"] == "pinned"
    assert copies["Memcpy HtoD"][cost.ESTIMATE_ARG] == pytest.approx(cost.estimate_copy(4 * N, "HtoD").us)
    assert "host memory" not in copies["Memcpy DtoD"]
    assert copies["Memcpy DtoD"][cost.ESTIMATE_ARG] == pytest.approx(cost.estimate_copy(4 * N, "DtoD").us)
    # HBM (1.6 TB/s on a 910B) is far faster than the host link.
    assert copies["Memcpy DtoD"][cost.ESTIMATE_ARG] < copies["Memcpy HtoD"][cost.ESTIMATE_ARG] / 10


def test_kernel_details_carries_the_copies_estimates(tmp_path):
    _step()
    with torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(tmp_path), worker_name="copies")):
        _step()
        torch.npu.synchronize()
    (result,) = tmp_path.glob("copies_*_ascend_pt")
    with open(result / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # torch_npu lists copies among the kernels, as MEMCPY_ASYNC tasks.
    copies = [r for r in rows if r["Accelerator Core"] == "MEMCPY_ASYNC"]
    assert {"Memcpy HtoD", "Memcpy DtoH"} <= {r["Name"] for r in copies}
    assert all(float(r[cost.ESTIMATE_ARG]) > 0 for r in copies)
    assert all(float(r[cost.ESTIMATE_ARG]) > 0 for r in rows if r["Accelerator Core"] == "AI_CORE")


def test_a_memset_is_estimated_as_its_bytes_written_on_hbm(tmp_path):
    import acl  # pyACL: torch's ops issue no memsets, aclrtMemset does

    ret = acl.init()
    assert ret in (0, 100002)  # ACL_ERROR_REPEAT_INITIALIZE: initialized earlier in this process
    assert acl.rt.set_device(0) == 0
    size = 64 << 20
    ptr, err = acl.rt.malloc(size, 0)
    assert err == 0
    try:
        with torch.profiler.profile(activities=ACTIVITIES) as prof:
            assert acl.rt.memset(ptr, size, 0, size) == 0
            torch.npu.synchronize()
    finally:
        acl.rt.free(ptr)
        if ret == 0:
            acl.finalize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    (memset,) = [e["args"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "gpu_memset"]
    # Written once: as much HBM traffic as a device copy of half its size (read and written).
    assert memset["bytes"] == size
    assert memset[cost.ESTIMATE_ARG] == pytest.approx(cost.estimate_copy(size / 2, "DtoD").us)


def test_the_soc_table_gives_each_chip_its_host_link_with_a_source():
    from softnpu import _C

    links = {p["name"]: p["host_link_gbps"] for p in _C._soc_profiles()}
    assert links["Ascend910B3"] == 32 and links["Ascend310P3"] == 32 and links["Ascend910_9391"] == 40
    assert "host GB/s" in cost.soc_table() and "host_link_efficiency" in cost.soc_table()
    # A chip given as a dict of figures needs its host link too.
    figures = dict(cost.chip("Ascend910B3"))
    with pytest.raises(ValueError, match="host_link_gbps"):
        cost.estimate_copy(1e6, "HtoD", soc=dict(name="x", ai_cores=1, cube_fp16_tflops=1, cube_fp32_tflops=0,
                                                 cube_int8_tops=1, vector_fp16_tflops=1, hbm_gbps=1, l2_bytes=1,
                                                 hccs_gbps=0, roce_gbps=0))
    assert figures["host_link_bytes_per_s"] == 32e9
