"""torch_npu's training-path fused ops outside MoE: npu_rotary_position_embedding, npu_apply_rotary_pos_emb
(csrc/fused/rotary/), npu_add_rms_norm (normalization/), npu_apply_adam_w (optimizers/), npu_fast_gelu
npu_scaled_masked_softmax and npu_cross_entropy_loss (activations/).

One reference per op, written here with ATen ops in float64 on the CPU; the op on npu (and its CPU kernel) against
it, forward and backward, float32 and half dtypes; bad arguments raise at the call; torch.compile traces each op
(fullgraph=True). Client call forms cite their file.
"""

import pytest
import torch
import torch_npu

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=4e-3, rtol=4e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}
HALF = [torch.float16, torch.bfloat16]


def leaf(t, device="npu"):
    return t.detach().to(device).requires_grad_()


# ------------------------------------------------------------------------------------------------ references


def rotate(x, mode):
    """rotate_half (0), interleaved pairs (1), rotate_half within each half (2): (a, b) -> (-b, a)."""
    if mode == 1:
        return torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
    if mode == 2:
        return torch.cat([rotate(p, 0) for p in x.chunk(2, -1)], -1)
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


def ref_rope(x, cos, sin, mode=0):
    return x * cos + rotate(x, mode) * sin


def ref_add_rms_norm(x1, x2, gamma, eps=1e-6):
    x = x1 + x2
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rstd * gamma, rstd, x


def ref_adam_w(var, m, v, grad, lr, wd, beta1, beta2, eps, step, powers=None):
    beta1_power, beta2_power = powers or (beta1 ** step, beta2 ** step)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    var = var - lr * (m / (1 - beta1_power)) / ((v / (1 - beta2_power)).sqrt() + eps) - lr * wd * var
    return var, m, v


def ref_fast_gelu(x):
    return x * torch.sigmoid(1.702 * x)


# ------------------------------------------------------------------------------------------------ rotary


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("table", ["1S1D", "BS1D", "BSND"])
def test_rotary_position_embedding_forward_backward(mode, table):
    torch.manual_seed(mode)
    x = torch.randn(2, 6, 3, 16)
    shape = {"1S1D": (1, 6, 1, 16), "BS1D": (2, 6, 1, 16), "BSND": (2, 6, 3, 16)}[table]
    cos, sin = torch.randn(shape), torch.randn(shape)
    rx, rc, rs = (leaf(t.double(), "cpu") for t in (x, cos, sin))
    ref = ref_rope(rx, rc, rs, mode)
    dy = torch.randn(ref.shape)
    ref.backward(dy.double())
    for device in ("cpu", "npu"):
        xs, cs, ss = (leaf(t, device) for t in (x, cos, sin))
        y = torch_npu.npu_rotary_position_embedding(xs, cs, ss, mode)
        y.backward(dy.to(device))
        torch.testing.assert_close(y.detach().cpu().double(), ref.detach(), **TOL[torch.float32])
        for got, want in ((xs, rx), (cs, rc), (ss, rs)):
            torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", HALF)
def test_rotary_position_embedding_half(dtype):
    x, cos, sin = (torch.randn(s).to(dtype) for s in ((2, 4, 8, 32), (1, 4, 1, 32), (1, 4, 1, 32)))
    y = torch_npu.npu_rotary_position_embedding(x.npu(), cos.npu(), sin.npu(), 0)
    assert y.dtype == dtype
    torch.testing.assert_close(y.cpu().double(), ref_rope(x.double(), cos.double(), sin.double()), **TOL[dtype])


def test_rotary_position_embedding_mindspeed_megatron_call_form():
    # MindSpeed's fused RoPE (mindspeed/ops/npu_rotary_position_embedding.py, used for Megatron's
    # apply_rotary_pos_emb_bshd with --use-fused-rotary-pos-emb): x [S, B, N, D], freqs [S, 1, 1, D] -> cos/sin,
    # mode 1 for rotary_interleaved.
    s, b, n, d = 5, 2, 3, 8
    x = torch.randn(s, b, n, d)
    freqs = torch.outer(torch.arange(s).float(), 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.cat((freqs, freqs), -1)[:, None, None, :]
    for mode in (0, 1):
        got = torch_npu.npu_rotary_position_embedding(x.npu(), freqs.cos().npu(), freqs.sin().npu(), mode)
        torch.testing.assert_close(got.cpu(), ref_rope(x, freqs.cos(), freqs.sin(), mode), **TOL[torch.float32])


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_apply_rotary_pos_emb_in_place(layout):
    torch.manual_seed(7)
    if layout == "BSND":
        q, k, cos, sin = (torch.randn(s) for s in ((2, 5, 4, 16), (2, 5, 2, 16), (2, 5, 1, 16), (2, 5, 1, 16)))
    else:
        q, k, cos, sin = (torch.randn(s) for s in ((7, 4, 16), (7, 2, 16), (7, 1, 16), (7, 1, 16)))
    qn, kn = q.npu(), k.npu()
    q_out, k_out = torch_npu.npu_apply_rotary_pos_emb(qn, kn, cos.npu(), sin.npu(), layout=layout)
    assert q_out.data_ptr() == qn.data_ptr() and k_out.data_ptr() == kn.data_ptr()
    torch.testing.assert_close(qn.cpu(), ref_rope(q, cos, sin), **TOL[torch.float32])
    torch.testing.assert_close(kn.cpu(), ref_rope(k, cos, sin), **TOL[torch.float32])


def test_rotary_errors_at_the_call():
    x, c = torch.randn(2, 4, 3, 16).npu(), torch.randn(1, 4, 1, 16).npu()
    with pytest.raises(RuntimeError, match="npu_rotary_position_embedding: mode must be 0"):
        torch_npu.npu_rotary_position_embedding(x, c, c, 5)
    with pytest.raises(RuntimeError, match="must be 4-D and broadcast to x"):
        torch_npu.npu_rotary_position_embedding(x, c[..., :8], c[..., :8])
    with pytest.raises(RuntimeError, match="npu_apply_rotary_pos_emb: layout must be"):
        torch_npu.npu_apply_rotary_pos_emb(x, x.clone(), c, c, layout="NSD")
    with pytest.raises(RuntimeError, match="cos and sin must have N = 1"):
        torch_npu.npu_apply_rotary_pos_emb(x, x.clone(), x, x)


# ------------------------------------------------------------------------------------------------ add_rms_norm


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_add_rms_norm_forward_backward(dtype):
    torch.manual_seed(8)
    x1, x2, gamma = torch.randn(3, 5, 32).to(dtype), torch.randn(3, 5, 32).to(dtype), torch.randn(32).to(dtype)
    r1, r2, rg = (leaf(t.double(), "cpu") for t in (x1, x2, gamma))
    ry, rrstd, rx = ref_add_rms_norm(r1, r2, rg)
    dy, dx = torch.randn(ry.shape), torch.randn(rx.shape)
    ((ry * dy.double()).sum() + (rx * dx.double()).sum()).backward()
    for device in ("cpu", "npu"):
        a, b, g = (leaf(t, device) for t in (x1, x2, gamma))
        y, rstd, x = torch_npu.npu_add_rms_norm(a, b, g)
        assert y.dtype == dtype and x.dtype == dtype and rstd.dtype == torch.float32 and rstd.shape == (3, 5, 1)
        ((y * dy.to(device, dtype)).sum() + (x * dx.to(device, dtype)).sum()).backward()
        torch.testing.assert_close(y.detach().cpu().double(), ry.detach(), **TOL[dtype])
        torch.testing.assert_close(rstd.cpu().double(), rrstd.detach(), **TOL[dtype])
        torch.testing.assert_close(x.detach().cpu().double(), rx.detach(), **TOL[dtype])
        for got, want in ((a, r1), (b, r2), (g, rg)):
            torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=max(1e-4, 4 * TOL[dtype]["atol"]),
                                       rtol=max(1e-4, 4 * TOL[dtype]["rtol"]))


def test_add_rms_norm_errors_at_the_call():
    x = torch.randn(4, 8).npu()
    with pytest.raises(RuntimeError, match="npu_add_rms_norm: x1 .* and x2 .* must have one shape"):
        torch_npu.npu_add_rms_norm(x, x[:2], torch.ones(8).npu())
    with pytest.raises(RuntimeError, match="npu_add_rms_norm: gamma's shape"):
        torch_npu.npu_add_rms_norm(x, x, torch.ones(4).npu())


# ------------------------------------------------------------------------------------------------ apply_adam_w


@pytest.mark.parametrize("powers", ["of a step", "arbitrary"])
@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_apply_adam_w_step(dtype, powers):
    torch.manual_seed(9)
    var, grad = torch.randn(300).to(dtype), torch.randn(300).to(dtype)
    m, v = (torch.randn(300).abs() * 0.1).to(dtype), (torch.randn(300).abs() * 0.1).to(dtype)
    lr, wd, beta1, beta2, eps, step = 1e-2, 0.05, 0.9, 0.999, 1e-8, 4
    # Powers of one step count take ATen's fused AdamW kernel, others the op's own loop.
    pw = (beta1 ** step, beta2 ** step) if powers == "of a step" else (0.5, 0.7)
    want = ref_adam_w(var.double(), m.double(), v.double(), grad.double(), lr, wd, beta1, beta2, eps, step, pw)
    for device in ("cpu", "npu"):
        out = tuple(t.to(device, copy=True) for t in (var, m, v))
        got = torch_npu.npu_apply_adam_w(*pw, lr, wd, beta1, beta2, eps, grad.to(device), None, False, False, out=out)
        assert all(g is o for g, o in zip(got, out))
        for g, w in zip(out, want):
            torch.testing.assert_close(g.cpu().double(), w, **TOL[dtype])


def test_apply_adam_w_deepspeed_fused_adam_matches_torch_adamw():
    # deepspeed/ops/op_builder/npu/fused_adam.py (NPUFusedAdam.multi_tensor_adam, DeepSpeed's FusedAdam on npu):
    # bias_correction1 = beta1 ** step, ...; param_flat.data, m_flat, v_flat = torch_npu.npu_apply_adam_w(
    # bias_correction1, bias_correction2, lr, weight_decay, beta1, beta2, epsilon, grad_flat, None, False, False,
    # out=(param_flat.data, m_flat, v_flat)).
    torch.manual_seed(10)
    param = torch.randn(64)
    reference = param.clone().requires_grad_()
    opt = torch.optim.AdamW([reference], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    param_flat, m_flat, v_flat = param.npu(), torch.zeros(64).npu(), torch.zeros(64).npu()
    for step in range(1, 5):
        grad = torch.randn(64)
        reference.grad = grad
        opt.step()
        param_flat.data, m_flat, v_flat = torch_npu.npu_apply_adam_w(
            0.9 ** step, 0.99 ** step, 1e-2, 0.1, 0.9, 0.99, 1e-8, grad.npu(), None, False, False,
            out=(param_flat.data, m_flat, v_flat))
    torch.testing.assert_close(param_flat.cpu(), reference.detach(), atol=1e-5, rtol=1e-5)


class _AdamW(torch.nn.Module):
    def forward(self, grad, var, m, v):
        return torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-2, 0.1, 0.9, 0.999, 1e-8, grad, None, False, False,
                                          out=(var, m, v))


@pytest.mark.parametrize("how", ["trace", "script"])
def test_apply_adam_w_out_under_torchscript(how):
    # The .out overload has torch_npu's '*, Tensor[] out' schema, so out=(var, m, v) binds on the dispatcher op
    # itself, which TorchScript compiles (named var=, m=, v= outputs it could not take as out=).
    torch.manual_seed(12)
    var, g = torch.randn(64), torch.randn(64)
    eager = [t.npu() for t in (var, torch.zeros(64), torch.zeros(64))]
    returned = _AdamW()(g.npu(), *eager)
    assert all(r is e for r, e in zip(returned, eager))
    model = _AdamW()
    example = (g.npu(), var.npu(), torch.zeros(64).npu(), torch.zeros(64).npu())
    # torch.jit.trace read at the call: another test's import may have wrapped it since collection.
    compiled = torch.jit.trace(model, example) if how == "trace" else torch.jit.script(model)
    state = [var.npu(), torch.zeros(64).npu(), torch.zeros(64).npu()]
    compiled(g.npu(), *state)
    for a, b in zip(state, eager):
        torch.testing.assert_close(a.cpu(), b.cpu())
    assert not torch.equal(state[0].cpu(), var)


def test_apply_adam_w_errors_at_the_call():
    t = torch.zeros(4).npu()
    with pytest.raises(RuntimeError, match="npu_apply_adam_w is not implemented for Tensor"):
        torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.0, 0.9, 0.999, 1e-8, t, None, False, False)
    with pytest.raises(RuntimeError, match="npu_apply_adam_w: var, m, v and grad must have one shape"):
        torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.0, 0.9, 0.999, 1e-8, torch.zeros(3).npu(), None, False, False,
                                   out=(t, t.clone(), t.clone()))
    with pytest.raises(RuntimeError, match="amsgrad=True needs max_grad_norm"):
        torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.0, 0.9, 0.999, 1e-8, t, None, True, False,
                                   out=(t, t.clone(), t.clone()))


# ------------------------------------------------------------------------------------------------ fast_gelu


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_fast_gelu(dtype):
    x = (torch.randn(257) * 4).to(dtype)
    rx = leaf(x.double(), "cpu")
    ref_fast_gelu(rx).sum().backward()
    for device in ("cpu", "npu"):
        xs = leaf(x, device)
        y = torch_npu.npu_fast_gelu(xs)
        y.sum().backward()
        assert y.dtype == dtype
        torch.testing.assert_close(y.detach().cpu().double(), ref_fast_gelu(x.double()), **TOL[dtype])
        torch.testing.assert_close(xs.grad.cpu().double(), rx.grad, **TOL[dtype])
    # no exponential overflows: large |x| give x and 0 (and a finite gradient), never nan
    big = torch.tensor([-1e4, -100.0, -30.0, 30.0, 100.0, 1e4]).to(dtype)
    got = torch_npu.npu_fast_gelu(big.npu()).cpu()
    torch.testing.assert_close(got.double(), ref_fast_gelu(big.double()), **TOL[dtype])
    dbig = torch_npu.npu_fast_gelu_backward(torch.ones_like(big).npu(), big.npu()).cpu()
    torch.testing.assert_close(dbig.double(), torch.tensor([0.0, 0, 0, 1, 1, 1], dtype=torch.float64), **TOL[dtype])
    # a strided input and a strided out=
    xt = (torch.randn(33, 40) * 4).to(dtype)
    out = torch.empty(40, 33, dtype=dtype).npu().t()
    torch.ops.npu.npu_fast_gelu.out(xt.npu().t().contiguous().t(), out=out)
    torch.testing.assert_close(out.cpu().double(), ref_fast_gelu(xt.double()), **TOL[dtype])
    with pytest.raises(RuntimeError, match="npu_fast_gelu: self must be float32"):
        torch_npu.npu_fast_gelu(torch.ones(3, dtype=torch.int32).npu())


# ------------------------------------------------------------------------------------------------ scaled_masked_softmax


def ref_scaled_masked_softmax(x, mask, scale):
    return torch.softmax((x * scale).masked_fill(mask, -10000.0), -1)


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_scaled_masked_softmax(dtype):
    torch.manual_seed(12)
    x = torch.randn(2, 3, 32, 32).to(dtype)
    mask = torch.rand(2, 1, 32, 32) > 0.7
    mask[0, 0, 3] = True  # a fully masked row: uniform, as Megatron's kernel gives
    rx = leaf(x.double(), "cpu")
    ref = ref_scaled_masked_softmax(rx, mask, 0.5)
    dy = torch.randn(ref.shape)
    ref.backward(dy.double())
    for device in ("cpu", "npu"):
        xs = leaf(x, device)
        y = torch_npu.npu_scaled_masked_softmax(xs, mask.to(device), 0.5, False)
        y.backward(dy.to(device, dtype))
        assert y.dtype == dtype
        torch.testing.assert_close(y.detach().cpu().double(), ref.detach(), **TOL[dtype])
        torch.testing.assert_close(xs.grad.cpu().double(), rx.grad, atol=4 * TOL[dtype]["atol"] + 1e-5,
                                   rtol=4 * TOL[dtype]["rtol"] + 1e-5)
    causal = torch_npu.npu_scaled_masked_softmax(x.npu(), torch.zeros(32, 32, dtype=torch.bool).npu(), 1.0, True)
    torch.testing.assert_close(causal.cpu().double(),
                               ref_scaled_masked_softmax(x.double(), torch.ones(32, 32).triu(1).bool(), 1.0),
                               **TOL[dtype])
    with pytest.raises(RuntimeError, match="npu_scaled_masked_softmax: mask must be bool"):
        torch_npu.npu_scaled_masked_softmax(x.npu(), mask.float().npu())


# ------------------------------------------------------------------------------------------------ cross_entropy_loss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_loss(reduction, dtype):
    # With class weights, ignore_index and label smoothing, against torch's cross_entropy.
    torch.manual_seed(13)
    x, target, weight = torch.randn(9, 7).to(dtype), torch.randint(0, 7, (9,)), torch.rand(7) + 0.1
    target[2] = -100
    rx = leaf(x.double(), "cpu")
    want = torch.nn.functional.cross_entropy(rx, target, weight.double(), reduction=reduction, label_smoothing=0.1)
    dy = torch.randn(want.shape)
    want.backward(dy.double())
    xs = leaf(x)
    loss, log_prob, zloss, lse = torch_npu.npu_cross_entropy_loss(xs, target.npu(), weight.npu(), reduction=reduction,
                                                                 label_smoothing=0.1)
    assert loss.shape == ((9,) if reduction == "none" else (1,)) and loss.dtype == dtype
    assert zloss.shape == loss.shape and lse.shape == (9,)
    loss.backward(dy.reshape(loss.shape).to("npu", dtype))
    tol = TOL[dtype] if dtype == torch.float32 else dict(atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(loss.detach().cpu().double().reshape(want.shape), want.detach(), **tol)
    torch.testing.assert_close(log_prob.cpu().double(), torch.log_softmax(x.double(), -1), **tol)
    torch.testing.assert_close(xs.grad.cpu().double(), rx.grad, **tol)
    with pytest.raises(RuntimeError, match="npu_cross_entropy_loss: reduction must be"):
        torch_npu.npu_cross_entropy_loss(xs, target.npu(), reduction="avg")


def test_cross_entropy_loss_verl_logprobs():
    # verl/utils/torch_functional.py, logprobs_from_logits_torch_npu: loss, _, _, _ =
    # torch_npu.npu_cross_entropy_loss(logits, labels.reshape(-1), reduction="none"); return -loss.view(*batch_dim).
    torch.manual_seed(14)
    logits, labels = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    loss, _, _, _ = torch_npu.npu_cross_entropy_loss(logits.npu().reshape(-1, 11), labels.npu().reshape(-1),
                                                     reduction="none")
    want = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(-loss.view(2, 5).cpu(), want, **TOL[torch.float32])


# ------------------------------------------------------------------------------------------------ compile


def test_training_ops_compile_fullgraph():
    torch._dynamo.reset()

    def f(x, cos, sin, gamma, q, k, var, m, v):
        y = torch_npu.npu_rotary_position_embedding(x, cos, sin, 0)
        y = torch_npu.npu_add_rms_norm(y, x, gamma)[0]
        q, k = q.clone(), k.clone()
        torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin)
        var = var.clone()
        torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.0, 0.9, 0.999, 1e-8, var, None, False, False,
                                   out=(var, m.clone(), v.clone()))
        p = torch_npu.npu_scaled_masked_softmax(x, cos > 0, 0.5)
        p = p + torch_npu.npu_cross_entropy_loss(x.flatten(0, 2), torch.zeros(24, dtype=torch.long, device=x.device))[0]
        return torch_npu.npu_fast_gelu(y), q, k, var, p

    torch.manual_seed(11)
    args = [torch.randn(s).npu() for s in ((2, 4, 3, 16), (1, 4, 1, 16), (1, 4, 1, 16), (16,), (2, 4, 3, 16),
                                           (2, 4, 2, 16), (10,), (10,), (10,))]
    args[-1] = args[-1].abs()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    want = f(*args)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.cpu(), r.cpu())
