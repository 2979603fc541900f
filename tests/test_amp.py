"""Automatic mixed precision on npu: torch.autocast("npu"), torch.npu.amp.autocast and GradScaler, with CUDA's
casting policy (float16 by default, as on Ascend)."""

import warnings

import pytest
import torch


@pytest.fixture
def mats():
    torch.manual_seed(0)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    return a, b, a.npu(), b.npu()


def test_autocast_runs_matmul_in_float16_inside_and_float32_outside(mats):
    a, b, x, y = mats
    with torch.autocast("npu"):
        assert torch.is_autocast_enabled("npu")
        assert torch.get_autocast_dtype("npu") == torch.float16
        inside = torch.matmul(x, y)
    outside = torch.matmul(x, y)
    assert inside.dtype == torch.float16 and inside.device.type == "npu"
    assert outside.dtype == torch.float32
    assert not torch.is_autocast_enabled("npu")
    torch.testing.assert_close(inside.cpu(), (a.half().float() @ b.half().float()).half(), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(outside.cpu(), a @ b)


def test_autocast_bfloat16(mats):
    a, b, x, y = mats
    with torch.autocast("npu", dtype=torch.bfloat16):
        out = torch.nn.functional.linear(x, y)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu().float(), torch.nn.functional.linear(a, b), rtol=3e-2, atol=5e-2)


def test_npu_amp_autocast_is_float16_and_can_be_disabled(mats):
    _, _, x, y = mats
    with torch.npu.amp.autocast():
        assert (x @ y).dtype == torch.float16
        with torch.npu.amp.autocast(enabled=False):
            assert (x @ y).dtype == torch.float32
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert (x @ y).dtype == torch.bfloat16


def test_autocast_policy_follows_cuda(mats):
    # CUDA's lists: float32 ops stay float32, mixed inputs promote, CPU autocast is unaffected.
    _, _, x, y = mats
    with torch.autocast("npu"):
        half = x @ y
        assert torch.softmax(half, dim=1).dtype == torch.float32  # autocast to float32
        assert torch.exp(half).dtype == torch.float32  # on the float32 list too
        assert torch.relu(half).dtype == torch.float16  # on no list: runs in the input's dtype
        assert (half + x).dtype == torch.float32  # type promotion as usual
        assert torch.cat([half, x]).dtype == torch.float32  # promote list
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32  # the CPU is not npu
        with pytest.raises(RuntimeError, match="binary_cross_entropy"):
            torch.nn.functional.binary_cross_entropy(torch.sigmoid(half), torch.ones_like(half))


def test_autocast_with_an_unsupported_dtype_warns_and_disables(mats):
    _, _, x, y = mats
    assert torch.float64 not in torch.npu.get_amp_supported_dtype()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("npu", dtype=torch.float64):
            assert (x @ y).dtype == torch.float32
    assert any("not supported" in str(w.message) for w in caught)


def test_autocast_backward_gives_float32_grads():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).npu()
    data = torch.randn(16, 8).npu()
    with torch.autocast("npu"):
        loss = model(data).float().pow(2).mean()
    loss.backward()
    assert model.weight.grad.dtype == torch.float32 and model.weight.grad.device.type == "npu"
    assert torch.isfinite(model.weight.grad.cpu()).all()


def test_grad_scaler_scales_and_unscales():
    model = torch.nn.Linear(4, 1).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler(init_scale=1024.0)
    loss = model(torch.ones(2, 4, device="npu")).sum()
    scaled = scaler.scale(loss)
    assert scaled.device.type == "npu"
    torch.testing.assert_close(scaled.cpu(), loss.detach().cpu() * 1024)
    scaled.backward()
    scaler.unscale_(opt)
    # Unscaled gradient of sum(w.x + b) over 2 rows of ones: 2 for every weight.
    torch.testing.assert_close(model.weight.grad.cpu(), torch.full((1, 4), 2.0))
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0


def test_grad_scaler_skips_steps_with_inf_grads_and_backs_off():
    model = torch.nn.Linear(4, 1).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("npu", init_scale=2.0**16, growth_interval=1)
    before = model.weight.detach().cpu().clone()
    loss = model(torch.full((2, 4), float("inf"), device="npu")).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(model.weight.detach().cpu(), before)  # the step was skipped
    assert scaler.get_scale() == 2.0**15  # and the scale backed off
    opt.zero_grad()
    scaler.scale(model(torch.ones(2, 4, device="npu")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before)  # a finite step is taken
    assert scaler.get_scale() == 2.0**16  # and grows back after growth_interval good steps


def test_torch_npu_grad_scaler_skips_every_optimizer_after_an_overflow(capsys):
    # torch_npu's GradScaler: one optimizer's overflow skips the others' steps too, until update(); torch's
    # (torch.amp.GradScaler("npu")) skips only the optimizer that overflowed.
    import torch_npu

    for scaler_class, second_steps in ((torch_npu.npu.amp.GradScaler, False),
                                       (lambda **kw: torch.amp.GradScaler("npu", **kw), True)):
        models = [torch.nn.Linear(4, 1).npu() for _ in range(2)]
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
        scaler = scaler_class(init_scale=4.0, growth_interval=1)
        before = [m.weight.detach().cpu().clone() for m in models]
        for m in models:
            scaler.scale(m(torch.ones(2, 4, device="npu")).sum()).backward()
        models[0].weight.grad.fill_(float("inf"))
        scaler.unscale_(opts[0])
        for opt in opts:
            scaler.step(opt)
        scaler.update()
        assert torch.equal(models[0].weight.detach().cpu(), before[0])
        assert torch.equal(models[1].weight.detach().cpu(), before[1]) != second_steps
        assert scaler.get_scale() == 2.0
    assert "Gradient overflow. Skipping step" in capsys.readouterr().out


def test_custom_fwd_and_bwd():
    class Square(torch.autograd.Function):
        @staticmethod
        @torch.npu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @torch.npu.amp.custom_bwd
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2 * x

    x = torch.ones(3, device="npu", dtype=torch.float16, requires_grad=True)
    with torch.autocast("npu"):
        y = Square.apply(x)
    assert y.dtype == torch.float32  # inputs were cast to float32 inside autocast
    y.sum().backward()
    assert x.grad.cpu().tolist() == [2.0, 2.0, 2.0]
