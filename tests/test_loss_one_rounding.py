"""Losses Ascend computes as one kernel (float16/bfloat16 in float32, rounded once) where ATen's composite rounds
each step: binary_cross_entropy_with_logits on npu equals the float32 CPU result rounded once to the input dtype."""

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("weights", [False, True])
def test_bce_with_logits_rounds_once(dtype, weights):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(10, 64, generator=g) * 10).to(dtype)
    t = torch.randint(0, 2, (10, 64), generator=g).to(dtype)
    w = (torch.rand(10, 1, generator=g) * 10).to(dtype) if weights else None
    p = (torch.rand(64, generator=g) * 10).to(dtype) if weights else None
    f = torch.nn.functional.binary_cross_entropy_with_logits
    for reduction in ("none", "mean", "sum"):
        expected = f(x.float(), t.float(), weight=None if w is None else w.float(),
                     pos_weight=None if p is None else p.float(), reduction=reduction).to(dtype)
        got = f(x.npu(), t.npu(), weight=None if w is None else w.npu(), pos_weight=None if p is None else p.npu(),
                reduction=reduction)
        assert got.dtype == dtype
        assert torch.equal(got.cpu(), expected), reduction


def test_bce_with_logits_gradients_match_cpu():
    x = torch.randn(6, 5, requires_grad=True)
    t = torch.rand(6, 5, requires_grad=True)
    xn = x.detach().npu().requires_grad_()
    tn = t.detach().npu().requires_grad_()
    pos = torch.rand(5) + 0.5
    loss = torch.nn.functional.binary_cross_entropy_with_logits(x, t, pos_weight=pos)
    loss_npu = torch.nn.functional.binary_cross_entropy_with_logits(xn, tn, pos_weight=pos.npu())
    loss.backward()
    loss_npu.backward()
    torch.testing.assert_close(loss_npu.detach().cpu(), loss.detach())
    torch.testing.assert_close(xn.grad.cpu(), x.grad)
    torch.testing.assert_close(tn.grad.cpu(), t.grad)
