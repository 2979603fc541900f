"""One FLOP count: torch_npu.utils.FlopsCounter reads the cost model's model FLOPs (csrc/backend/cost), the figure the
profiler's and the estimator's MFU divide by; both agree with torch.utils.flop_counter's formulas."""

import pytest
import torch
import torch.nn.functional as F
import torch_npu
from torch.utils import flop_counter

import softnpu.cost as cost


def _torch_count(fn, *tensors) -> int:
    """torch.utils.flop_counter's count of fn on CPU copies of the tensors."""
    cpu = [t.detach().cpu().requires_grad_(t.requires_grad) for t in tensors]
    with flop_counter.FlopCounterMode(display=False) as mode:
        fn(*cpu)
    return mode.get_total_flops()


def _npu_count(fn, *tensors) -> int:
    counter = torch_npu.utils.FlopsCounter()
    counter.start()
    try:
        fn(*tensors)
        torch.npu.synchronize()
        return counter.get_flops()[0]
    finally:
        counter.stop()


def _linear_step(x, w, b):
    F.linear(torch.relu(x), w, b).sum().backward()


def _bmm_step(a, b):
    torch.baddbmm(torch.zeros(1, device=a.device), a, b).sum().backward()


def _conv_step(x, w):
    F.conv2d(x, w, stride=2, padding=1).sum().backward()


@pytest.mark.parametrize("step, shapes", [
    (_linear_step, [(64, 96), (48, 96), (48,)]),
    (_bmm_step, [(4, 32, 24), (4, 24, 40)]),
    (_conv_step, [(2, 8, 17, 17), (16, 8, 3, 3)]),
], ids=["linear", "baddbmm", "conv2d"])
def test_flops_counter_matches_torchs_flop_counter_forward_and_backward(step, shapes):
    tensors = [torch.randn(s, device="npu", requires_grad=True) for s in shapes]
    expected = _torch_count(step, *tensors)
    assert expected > 0 and _npu_count(step, *tensors) == expected


def test_attention_counts_torchs_formula_whatever_the_kernel_skips():
    q = torch.randn(2, 4, 64, 32, device="npu", requires_grad=True)
    k = torch.randn(2, 4, 48, 32, device="npu", requires_grad=True)
    v = torch.randn(2, 4, 48, 32, device="npu", requires_grad=True)
    forward = flop_counter.sdpa_flop_count(q.shape, k.shape, v.shape)
    backward = flop_counter.sdpa_backward_flop_count(q.shape, q.shape, k.shape, v.shape)
    assert _npu_count(lambda *t: F.scaled_dot_product_attention(*t), q, k, v) == forward
    # Causal attention: the chip's kernel skips the masked blocks (the model's time counts half the work), but the
    # FLOP count is torch's, which counts them all.
    assert _npu_count(lambda *t: F.scaled_dot_product_attention(*t, is_causal=True), q, k, v) == forward
    assert _npu_count(lambda *t: F.scaled_dot_product_attention(*t).sum().backward(), q, k, v) == forward + backward
    # torch_npu's fused kernel, in its layouts, counts as scaled_dot_product_attention of the same shapes.
    bsh = [t.detach().transpose(1, 2).reshape(2, t.shape[2], 128) for t in (q, k, v)]
    assert _npu_count(lambda *t: torch_npu.npu_fusion_attention(*t, 4, "BSH", scale=0.2), *bsh) == forward


def test_the_estimators_mfu_and_flops_counter_count_the_same_flops():
    counter = torch_npu.utils.FlopsCounter()
    counter.start()
    try:
        x = torch.randn(64, 128, device="npu")
        w = torch.randn(256, 128, device="npu", requires_grad=True)
        F.linear(x, w).sum().backward()
        counted = counter.get_flops()[0]
    finally:
        counter.stop()
    with cost.estimate() as est:
        F.linear(torch.randn(64, 128), torch.randn(256, 128, requires_grad=True)).sum().backward()
    assert est.result.model_flops == counted == 2 * (2 * 64 * 128 * 256)
    assert est.result.mfu == pytest.approx(counted / (est.result.step_us * 1e-6 * cost.chip()["cube_fp16_flops"]))
