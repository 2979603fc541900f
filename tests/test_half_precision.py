"""Half precision at NPU speed (csrc/backend/ops/cube.h): matrix, convolution and attention ops in float16 and
bfloat16 compute as a cube unit does (float32 accumulation) on every host, through ATen's kernel in that dtype where
the host has native units for it and float32 compute on converted operands elsewhere. Both routes must be as close to
the float64 truth as the CPU's own half-precision kernel (tests/half_cases.py); this process runs the host's choice,
children run each route forced. Speed is `make bench`'s (benchmarks/README.md), never a test's."""

import pytest
import torch

import half_cases
import softnpu.host
from conftest import MKL_HALF_GEMM, REPO, run_many


@pytest.mark.parametrize("dtype", list(half_cases.DTYPES))
@pytest.mark.parametrize("case", list(half_cases.CASES))
def test_as_accurate_as_the_cpu_kernel(case, dtype):
    half_cases.check(case, dtype)


RUN_ALL = f"""
import sys
sys.path.insert(0, {str(REPO / "tests")!r})
import torch, torch_npu, half_cases
half_cases.run_all()
"""


def test_both_routes_forced():
    modes = ["float32", "native"]
    results = run_many([(RUN_ALL, {"SOFTNPU_HALF_COMPUTE": mode}) for mode in modes], timeout=300)
    for mode, result in zip(modes, results):
        assert result.lines[-1:] == ["all passed"], f"SOFTNPU_HALF_COMPUTE={mode}\n{result.describe()}"


def test_the_choice_follows_the_host():
    features = softnpu.host.features()
    compute = softnpu.host.half_compute()
    for dtype, units in (("float16", ("avx512_fp16", "amx_fp16")), ("bfloat16", ("avx512_bf16", "amx_bf16"))):
        present = [u for u in units if features[u]]
        if present:
            expected = f"ATen's kernel in {dtype} (the host has {present[-1]})"
            if dtype == "float16":  # oneDNN has no fast float16 convolution backward, even with native units
                expected += "; convolution_backward in float32 compute"
            assert compute[dtype] == expected, compute
        else:
            expected = f"float32 compute (the host has no {units[0]} or {units[1]})"
            if dtype == "float16":
                expected += MKL_HALF_GEMM
            assert compute[dtype] == expected, compute


def test_amp_training_step_matches_the_cpu():
    # The seed's loop (autocast in float16, GradScaler) on npu against the same loop in float32 on the CPU: the
    # float16 compute must not drift from what the model learns.
    def train(device, amp):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(approximate="tanh"),
                                    torch.nn.Linear(64, 4)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        scaler = torch.amp.GradScaler(device, enabled=amp)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(128, 32, generator=g).to(device), torch.randint(0, 4, (128,), generator=g).to(device)
        losses = []
        for _ in range(20):
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16, enabled=amp):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        return losses

    npu, cpu = train("npu", True), train("cpu", False)
    assert npu[-1] < 0.8 * npu[0], npu
    torch.testing.assert_close(npu, cpu, rtol=2e-2, atol=2e-3)
