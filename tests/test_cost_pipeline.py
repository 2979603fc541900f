"""Pipeline parallelism in the estimator (softnpu.cost.estimate(pp=, micro_batches=), softnpu estimate --pp): a step
of one micro-batch becomes one device's iteration of the 1F1B schedule, as docs/cost_model.md gives it:
    iteration = (m + pp - 1) x (stage + p2p) + optimizer / pp + gradient reduction / pp,
    stage = the micro-batch's forward and backward / pp, p2p = the activation's send/recv forward and its gradient's
    backward, bubble = (pp - 1) / (m + pp - 1)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import softnpu.cost as cost

ROOT = Path(__file__).resolve().parent.parent
SOC = "Ascend910B3"
BATCH, SEQ, HIDDEN, LAYERS = 4, 256, 512, 8


def _train(model, optimizer):
    x = torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.bfloat16)
    for layer in model:
        x = cost.pipeline_boundary(torch.relu(layer(x)))
    x.float().sum().backward()
    optimizer.step()


def _estimate(**layout):
    with cost.estimate(SOC, **layout) as est:
        model = [torch.nn.Linear(HIDDEN, HIDDEN).bfloat16() for _ in range(LAYERS)]
        optimizer = torch.optim.SGD([p for layer in model for p in layer.parameters()], lr=0.1)
        with cost.step():
            _train(model, optimizer)
    return est.result


def test_the_estimate_follows_the_1f1b_formula():
    single = _estimate()
    assert single.pipeline is None
    pp, m = 4, 8
    result = _estimate(pp=pp, micro_batches=m)
    p = result.pipeline
    optimizer = [k for k in result.kernels if k.optimizer]
    forward_backward = [k for k in result.kernels if not k.optimizer]
    assert optimizer and forward_backward
    # Eager: the host's launches bound these small kernels where they are longer than the device's.
    def time(kernels):
        return max(sum(k.estimate.us for k in kernels), len(kernels) * single.launch_us)
    assert p.stage_us == pytest.approx(time(forward_backward) / pp)
    assert p.optimizer_us == pytest.approx(time(optimizer) / pp)
    boundary = BATCH * SEQ * HIDDEN * 2  # a layer's bfloat16 output
    assert p.activation_bytes == boundary
    assert p.p2p_us == pytest.approx(2 * cost.estimate_collective("send_recv", boundary, 2, "hccs", SOC).us)
    assert p.bubble == pytest.approx((pp - 1) / (m + pp - 1))
    assert p.iteration_us == pytest.approx((m + pp - 1) * (p.stage_us + p.p2p_us) + p.optimizer_us)
    # More micro-batches amortize the bubble: the time a micro-batch tends to the stage's and its p2p.
    many = _estimate(pp=pp, micro_batches=64).pipeline
    assert many.bubble < p.bubble and many.iteration_us / 64 < p.iteration_us / m
    # With data parallelism too, each stage reduces its share of the gradients once an iteration.
    both = _estimate(pp=pp, micro_batches=m, dp=2).pipeline
    reduce = sum(k.estimate.us for k in _estimate(dp=2).kernels if not k.launched)
    assert reduce > 0 and both.grad_reduce_us == pytest.approx(reduce / pp)
    assert "1F1B" in result.table() and "bubble" in result.table()


def test_a_pipeline_needs_its_boundary():
    with pytest.raises(RuntimeError, match="pipeline_boundary"):
        with cost.estimate(SOC, pp=2):
            torch.randn(8, 8) @ torch.randn(8, 8)
    with cost.estimate(SOC, pp=2, micro_batches=4, activation_bytes=1e6) as est:
        torch.randn(8, 8) @ torch.randn(8, 8)
    assert est.result.pipeline.activation_bytes == 1e6
    with pytest.raises(ValueError, match="micro_batches"):
        cost.estimate(pp=2, micro_batches=0)


def test_softnpu_estimate_takes_a_pipeline_layout():
    out = subprocess.run([str(Path(sys.executable).parent / "softnpu"), "estimate", "--soc", SOC, "--pp", "2",
                          "--micro-batches", "16", str(ROOT / "examples/estimate/llama.py"), "--size", "tiny",
                          "--phase", "micro-batch"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pp=2" in out.stdout and "2 stages x 16 micro-batches (1F1B)" in out.stdout
