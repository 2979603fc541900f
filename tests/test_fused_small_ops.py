"""torch_npu's small fused ops: npu_max / npu_min (int32 indices) and their backward, npu_silu / npu_silu_ and
npu_silu_backward, npu_slice (and its out form), npu_bert_apply_adam (out=(var, m, v), eager, jit.trace and
jit.script). Each on npu against a CPU computation of the same values (ATen's reductions and silu, a float64 BERT
Adam step written here); every result is read back."""

import pytest
import torch
import torch_npu


def r(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op, ref", [(torch_npu.npu_max, torch.max), (torch_npu.npu_min, torch.min)])
def test_max_min_values_int32_indices_and_gradient(op, ref, keepdim):
    x = r(5, 7, 3)
    xn = x.npu().requires_grad_()
    values, indices = op(xn, dim=1, keepdim=keepdim)
    want_values, want_indices = ref(x, 1, keepdim)
    assert indices.dtype == torch.int32
    torch.testing.assert_close(values.detach().cpu(), want_values)
    assert torch.equal(indices.cpu().long(), want_indices)
    grad = r(*values.shape, seed=1)
    values.backward(grad.npu())
    xc = x.clone().requires_grad_()
    ref(xc, 1, keepdim)[0].backward(grad)
    torch.testing.assert_close(xn.grad.cpu(), xc.grad)


def test_max_checks_its_dimension():
    with pytest.raises(RuntimeError, match="npu_max"):
        torch_npu.npu_max(torch.zeros(3, 0).npu(), dim=1)
    with pytest.raises(IndexError):
        torch_npu.npu_max(torch.zeros(3, 4).npu(), dim=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_silu_in_place_and_gradient(dtype):
    x = r(6, 9, dtype=dtype)
    y = x.npu()
    assert torch_npu.npu_silu_(y) is y
    torch.testing.assert_close(y.cpu(), torch.nn.functional.silu(x))
    xn = x.npu().requires_grad_()
    out = torch_npu.npu_silu(xn)
    torch.testing.assert_close(out.detach().cpu(), torch.nn.functional.silu(x))
    grad = r(6, 9, seed=2, dtype=dtype)
    out.backward(grad.npu())
    xc = x.clone().requires_grad_()
    torch.nn.functional.silu(xc).backward(grad)
    torch.testing.assert_close(xn.grad.cpu(), xc.grad)
    with pytest.raises(RuntimeError, match="npu_silu_"):
        torch_npu.npu_silu_(torch.zeros(3, dtype=torch.int32).npu())


def test_slice_and_its_out_form():
    x = r(4, 6, 5)
    got = torch_npu.npu_slice(x.npu(), [1, 2, 0], [2, 3, 5])
    assert got.is_contiguous()
    torch.testing.assert_close(got.cpu(), x[1:3, 2:5, 0:5])
    out = torch.zeros(2, 3, 5).npu()
    assert torch_npu.npu_slice(x.npu(), [2, 0, 0], [2, 3, 5], out=out) is out
    torch.testing.assert_close(out.cpu(), x[2:4, 0:3])
    with pytest.raises(RuntimeError, match="npu_slice"):
        torch_npu.npu_slice(x.npu(), [3, 0, 0], [2, 6, 5])


def bert_adam_reference(var, m, v, grad, lr, beta1, beta2, eps, max_grad_norm, global_grad_norm, weight_decay,
                        step_size, adam_mode):
    var, m, v, grad = (t.double() for t in (var, m, v, grad))
    if 0 < max_grad_norm < global_grad_norm:
        grad = grad * max_grad_norm / global_grad_norm
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    update = m / (v.sqrt() + eps)
    step = lr if step_size is None else step_size
    if adam_mode == 0:
        var = var - step * (update + weight_decay * var)
    else:
        var = var - lr * weight_decay * var - step * update
    return var.float(), m.float(), v.float()


@pytest.mark.parametrize("max_grad_norm, step_size, adam_mode", [(-1.0, None, 0), (0.5, None, 0), (0.5, 2e-3, 1)])
def test_bert_apply_adam_steps_in_place(max_grad_norm, step_size, adam_mode):
    var, g = r(1000, seed=3), r(1000, seed=4)
    m, v = r(1000, seed=5) * 0.1, r(1000, seed=6).abs() * 0.1
    args = (1e-2, 0.9, 0.99, 1e-6, max_grad_norm, 2.0, 0.01, step_size, adam_mode)
    out = (var.npu(), m.npu(), v.npu())
    got = torch_npu.npu_bert_apply_adam(args[0], args[1], args[2], args[3], g.npu(), args[4], args[5], args[6],
                                        step_size, adam_mode, out=out)
    assert all(a is b for a, b in zip(got, out))
    want = bert_adam_reference(var, m, v, g, *args[:4], *args[4:])
    for a, b in zip(out, want):
        torch.testing.assert_close(a.cpu(), b, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="not implemented for Tensor"):
        torch_npu.npu_bert_apply_adam(1e-2, 0.9, 0.99, 1e-6, g.npu(), -1.0, 0.0, 0.0)


class _BertAdam(torch.nn.Module):
    def forward(self, grad, var, m, v):
        return torch_npu.npu_bert_apply_adam(1e-2, 0.9, 0.99, 1e-6, grad, -1.0, 0.0, 0.01, out=(var, m, v))


# By name: torch.jit.trace may be wrapped after collection (Dynamo's import does), so its identity is not stable.
@pytest.mark.parametrize("how", ["trace", "script"])
def test_bert_apply_adam_under_torchscript(how):
    var, g = r(64, seed=7), r(64, seed=8)
    eager = [t.npu() for t in (var, torch.zeros(64), torch.zeros(64))]
    _BertAdam()(g.npu(), *eager)
    model = _BertAdam()
    example = [g.npu(), var.npu(), torch.zeros(64).npu(), torch.zeros(64).npu()]
    scripted = torch.jit.trace(model, tuple(example)) if how == "trace" else torch.jit.script(model)
    state = [var.npu(), torch.zeros(64).npu(), torch.zeros(64).npu()]
    scripted(g.npu(), *state)
    for a, b in zip(state, eager):
        torch.testing.assert_close(a.cpu(), b.cpu())
