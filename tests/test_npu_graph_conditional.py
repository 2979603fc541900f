"""torch.cond captured into an NPU graph as conditional nodes (torch.npu._npugraph_conditional_nodes): each replay
runs the branch the npu predicate's value selects at that replay, nested conds included; a CPU predicate is refused."""

import pytest
import torch

from torch_npu.npu._npugraph_conditional_nodes import (
    ControlFlowOpWarmupDispatchMode,
    NPUGraphCaptureControlFlowOpDispatchMode,
)


def capture(fn, *args):
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g), NPUGraphCaptureControlFlowOpDispatchMode():
        out = fn(*args)
    return g, out


def test_a_replay_takes_the_branch_the_predicate_holds_at_replay():
    x = torch.randn(8, device="npu")
    pred = torch.tensor(True, device="npu")

    def fn(x, pred):
        y0, y1 = torch.cond(pred, lambda t: (t.sin(), t + 1), lambda t: (t.cos(), t - 1), (x,))
        return y0 * y1

    g, out = capture(fn, x, pred)
    for value in (True, False, True):
        pred.fill_(value)
        g.replay()
        expected = (x.sin() * (x + 1)) if value else (x.cos() * (x - 1))
        torch.testing.assert_close(out.cpu(), expected.cpu())


def test_nested_conds_and_a_predicate_computed_in_the_graph():
    x = torch.randn(8, device="npu")
    p2 = torch.tensor(False, device="npu")

    def fn(x, p2):
        inner = lambda t: torch.cond(p2, lambda u: u * 2, lambda u: u * 3, (t,))  # noqa: E731
        return torch.cond(x.sum() > 0, inner, lambda t: t - 5, (x,))

    g, out = capture(fn, x, p2)
    for sign, p in ((1, False), (1, True), (-1, True)):
        x.copy_(x.abs() * sign)
        p2.fill_(p)
        g.replay()
        expected = (x * (2 if p else 3)) if sign > 0 else x - 5
        torch.testing.assert_close(out.cpu(), expected.cpu())


def test_warmup_runs_the_cond_eagerly():
    x = torch.ones(4, device="npu")
    with ControlFlowOpWarmupDispatchMode():
        out = torch.cond(torch.tensor(False, device="npu"), lambda t: t + 1, lambda t: t - 1, (x,))
    assert out.cpu().tolist() == [0.0] * 4


def test_a_cpu_predicate_is_refused():
    x = torch.ones(4, device="npu")
    with pytest.raises(ValueError, match="Conditions must be on an npu device"):
        capture(lambda x: torch.cond(torch.tensor(True), lambda t: t + 1, lambda t: t - 1, (x,)), x)


def test_a_predicate_that_is_not_bool_is_refused():
    x = torch.ones(4, device="npu")
    pred = torch.tensor(1, device="npu", dtype=torch.int32)
    with pytest.raises(RuntimeError, match="Conditions must be bool tensors"):
        capture(lambda x: torch.cond(pred, lambda t: t + 1, lambda t: t - 1, (x,)), x)
