"""The cost model of the SoC (softnpu.cost, csrc/backend/cost): its estimates of single kernels, the profiler's
estimated durations beside the measured ones, the fake-tensor estimator and `softnpu estimate`, and the validation
against the chips' peaks and published end-to-end results (benchmarks/cost_validation.py)."""

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import softnpu.cost as cost

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import cost_validation  # noqa: E402

sys.path.insert(0, str(ROOT / "examples" / "estimate"))



def _socs():
    from softnpu import _C

    return [p["name"] for p in _C._soc_profiles()]


# ---------------------------------------------------------------------------------------------------- single kernels


@pytest.mark.parametrize("soc", _socs())
def test_a_large_float16_matmul_runs_near_the_cube_peak_and_a_large_copy_near_hbm_bandwidth(soc):
    assert 0.7 <= cost_validation.matmul_fraction_of_peak(soc) <= 0.9
    assert 0.7 <= cost_validation.copy_fraction_of_hbm(soc) <= 0.95


def test_cube_flops_follow_the_ops_shapes():
    meta = dict(device="meta", dtype=torch.float16)
    a, b = torch.empty(64, 128, 256, **meta), torch.empty(64, 256, 512, **meta)
    assert cost.estimate_op("aten::bmm", (a, b), {}, [torch.empty(64, 128, 512, **meta)]).flops == 2 * 64 * 128 * 256 * 512
    x, w = torch.empty(8, 64, 56, 56, **meta), torch.empty(128, 64, 3, 3, **meta)
    out = torch.empty(8, 128, 56, 56, **meta)
    e = cost.estimate_op("aten::convolution", (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}, [out])
    assert e.unit == "cube" and e.flops == 2 * out.numel() * 64 * 9
    q = torch.empty(2, 8, 1024, 64, **meta)
    causal = cost.estimate_op("aten::_scaled_dot_product_flash_attention_for_cpu", (q, q, q), {"is_causal": True}, [q])
    full = cost.estimate_op("aten::_scaled_dot_product_flash_attention_for_cpu", (q, q, q), {}, [q])
    assert full.flops == 4 * 2 * 8 * 1024 * 1024 * 64 and causal.flops == full.flops / 2


def test_vector_ops_are_bounded_by_memory_and_tiny_ones_by_the_launch_floor():
    big = torch.empty(2**26, device="meta", dtype=torch.float16)
    e = cost.estimate_op("aten::add.Tensor", (big, big), {}, [big], "Ascend910B3")
    assert e.bound == "memory" and e.bytes == 3 * big.numel() * 2
    small = torch.empty(16, device="meta")
    assert cost.estimate_op("aten::add.Tensor", (small, small), {}, [small]).bound == "launch"
    assert cost.estimate_op("aten::view", (big, [-1]), {}, []) is None  # views launch nothing


def test_collectives_follow_the_ring_algorithm_and_refuse_missing_links():
    one = cost.estimate_collective("all_reduce", 1e9, 8, "hccs", "Ascend910B3")
    half = cost.estimate_collective("all_gather", 1e9, 8, "hccs", "Ascend910B3")
    assert one.bytes == pytest.approx(2 * 7 / 8 * 1e9) and half.bytes == pytest.approx(7 / 8 * 1e9)
    assert cost.estimate_collective("all_reduce", 1e9, 1).us == 0
    with pytest.raises(RuntimeError, match="no HCCS links"):
        cost.estimate_collective("all_reduce", 1e6, 2, "hccs", "Ascend310P3")
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        cost.estimate_collective("allreduce", 1e6, 2)


def test_the_soc_table_and_factors_print_with_their_sources():
    text = cost.soc_table()
    assert "Ascend910B3" in text and "HAMi" in text and "cube_efficiency" in text and "assumption" in text


# ---------------------------------------------------------------------------------------------------------- profiler


def test_each_kernel_in_the_trace_carries_its_estimate_beside_its_duration(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).npu()
    x = torch.randn(32, 64, device="npu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        model(x).sum().backward()
        torch.npu.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    kernels = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    missing = [(e["name"], e["args"]) for e in kernels if not (e["args"].get(cost.ESTIMATE_ARG, 0) > 0 and e["dur"] > 0)]
    assert kernels and not missing, missing
    rows = cost.key_averages(prof)
    assert [r.estimated_device_time_total for r in rows] == sorted((r.estimated_device_time_total for r in rows),
                                                                  reverse=True)
    assert {"aten::addmm", "aten::mm"} <= {r.key for r in rows}
    assert "Estimated total (SoC)" in cost.table(prof)
    step = cost.step_summary(prof)
    assert step.step_us > 0 and step.bound in ("compute", "memory", "launch") and 0 < step.mfu < 1


def test_the_profiler_and_the_estimator_give_a_kernel_the_same_estimate():
    a = torch.randn(256, 512, device="npu", dtype=torch.float16)
    b = torch.randn(512, 384, device="npu", dtype=torch.float16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        torch.mm(a, b)
        torch.npu.synchronize()
    (row,) = [r for r in cost.key_averages(prof) if r.key == "aten::mm"]
    with cost.estimate() as est:
        torch.mm(torch.empty(256, 512, dtype=torch.float16), torch.empty(512, 384, dtype=torch.float16))
    (kernel,) = est.result.kernels
    assert row.estimated_device_time_total == pytest.approx(kernel.estimate.us)


# --------------------------------------------------------------------------------------------------------- estimator


def test_the_estimator_runs_on_fake_tensors_without_device_memory():
    # Earlier tests' garbage, collected during the estimate, would free device memory the estimate did not take.
    gc.collect()
    torch.npu.synchronize()
    before = torch.npu.memory_allocated()
    with cost.estimate("Ascend910B3") as est:
        layer = torch.nn.Linear(8192, 8192).half()  # created on npu, fake: no memory
        with cost.step():
            x = torch.randn(16384, 8192, dtype=torch.float16)
            layer(x).float().sum().backward()
            assert x.device.type == "npu" and x.sum().item() == 0  # .item(): unknowable, read as 0
    assert torch.npu.memory_allocated() == before
    kernels = {k.op: k for k in est.result.kernels}
    assert kernels["aten::addmm"].estimate.flops == 2 * 16384 * 8192 * 8192
    assert est.result.bound == "compute" and 0.5 < est.result.mfu < 0.9
    assert est.sync_points == 1


def test_the_layout_adds_gradient_all_reduce_and_the_scripts_collectives():
    def step(tp):
        import llama

        llama.main(["--size", "tiny", "--tp", str(tp), "--phase", "micro-batch"])

    with cost.estimate("Ascend910B3", dp=4) as dp:
        step(1)
    assert [k for k in dp.result.kernels if k.op == "hccl:all_reduce (gradients)"]
    with cost.estimate("Ascend910B3", tp=2) as tp:
        step(2)
    assert len([k for k in tp.result.kernels if k.op == "hccl:all_reduce"]) == 4 * 2  # 2 forward + 2 backward a layer
    assert tp.result.exposed_comm_us > 0


def test_softnpu_estimate_runs_a_script():
    out = subprocess.run([str(Path(sys.executable).parent / "softnpu"), "estimate", "--soc", "Ascend910B3",
                          str(ROOT / "examples/estimate/resnet50.py"), "--batch", "4", "--image", "64"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "estimated step on Ascend910B3" in out.stdout and "aten::convolution" in out.stdout


# ------------------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("published", cost_validation.PUBLISHED, ids=lambda p: p.name.split(",")[0])
def test_published_end_to_end_results_are_within_their_band(published):
    ratio = published.estimate() / published.figure
    assert 1 / published.band <= ratio <= published.band, f"{published.name}: ratio {ratio:.2f}"
