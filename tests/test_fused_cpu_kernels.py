"""The vectorized CPU kernels of csrc/fused (RMSNorm, RoPE, FastGelu, ScaledMaskedSoftmax: csrc/fused/cpu_kernels.h), compiled once per CPU capability:
every build the host can run (torch's choice, and DEFAULT and AVX2 forced through ATEN_CPU_CAPABILITY in a child
process, as the build is chosen once per process) against float64 references, on rows with and without vector tails,
broadcast tables, in place on a strided view, forward and backward."""

import os
import subprocess
import sys

import pytest
import torch

CHECK = r"""
import torch, torch_npu

def rotate(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)

torch.manual_seed(0)
tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    t = tol[dtype]
    for n in (4096, 100):  # whole vectors, and a tail
        x1, x2, g = torch.randn(7, n).to(dtype), torch.randn(7, n).to(dtype), torch.randn(n).to(dtype)
        y, rstd, x = torch.ops.npu.npu_add_rms_norm(x1.npu(), x2.npu(), g.npu())
        xs = (x1.double() + x2.double()).to(dtype).double()
        want_rstd = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6)
        torch.testing.assert_close(x.cpu().double(), xs, atol=t, rtol=t)
        torch.testing.assert_close(rstd.cpu().double(), want_rstd, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(y.cpu().double(), xs * want_rstd * g.double(), atol=t, rtol=t)
        xr = x1.double().requires_grad_()
        gr = g.double().requires_grad_()
        ref = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * gr
        dy = torch.randn(ref.shape).to(dtype)
        ref.backward(dy.double())
        xn, gn = x1.npu().requires_grad_(), g.npu().requires_grad_()
        yn = torch.ops.npu.npu_rms_norm(xn, gn)[0]
        yn.backward(dy.npu())
        torch.testing.assert_close(yn.detach().cpu().double(), ref.detach(), atol=t, rtol=t)
        torch.testing.assert_close(xn.grad.cpu().double(), xr.grad, atol=4 * t, rtol=4 * t)
        torch.testing.assert_close(gn.grad.cpu().double(), gr.grad, atol=40 * t, rtol=4 * t)
    for d in (128, 40):  # LLaMA's head dim, and halves with a tail
        x = torch.randn(2, 6, 3, d).to(dtype)
        cos, sin = torch.randn(1, 6, 1, d).to(dtype), torch.randn(1, 6, 1, d).to(dtype)
        xr, cr, sr = (v.double().requires_grad_() for v in (x, cos, sin))
        ref = xr * cr + rotate(xr) * sr
        dy = torch.randn(ref.shape).to(dtype)
        ref.backward(dy.double())
        xn, cn, sn = (v.npu().requires_grad_() for v in (x, cos, sin))
        yn = torch_npu.npu_rotary_mul(xn, cn, sn)
        yn.backward(dy.npu())
        torch.testing.assert_close(yn.detach().cpu().double(), ref.detach(), atol=t, rtol=t)
        for got, want in ((xn, xr), (cn, cr), (sn, sr)):
            torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=40 * t, rtol=4 * t)
        # in place on a strided view (query as a slice of a fused qkv projection)
        qkv = torch.randn(2, 6, 9, d).to(dtype)
        q, k = qkv.npu()[:, :, :3], qkv.npu()[:, :, 3:5].contiguous()
        torch_npu.npu_apply_rotary_pos_emb(q, k, cos.npu(), sin.npu())
        want = qkv[:, :, :3].double() * cos.double() + rotate(qkv[:, :, :3].double()) * sin.double()
        torch.testing.assert_close(q.cpu().double(), want, atol=t, rtol=t)
    for n in (1 << 16, 100003):  # whole vectors in parallel chunks, and a tail
        x = (torch.randn(n) * 4).to(dtype)
        x[:4] = torch.tensor([-1e4, -100.0, 100.0, 1e4])  # no overflowing exponential
        xr = x.double().requires_grad_()
        ref = xr * torch.sigmoid(1.702 * xr)
        dy = torch.randn(n).to(dtype)
        ref.backward(dy.double())
        xn = x.npu().requires_grad_()
        yn = torch_npu.npu_fast_gelu(xn)
        yn.backward(dy.npu())
        torch.testing.assert_close(yn.detach().cpu().double(), ref.detach(), atol=t, rtol=t)
        torch.testing.assert_close(xn.grad.cpu().double(), xr.grad, atol=4 * t, rtol=4 * t)
    for n in (256, 100):  # whole vectors, and a tail
        x = (torch.randn(2, 3, 5, n) * 4).to(dtype)
        mask = torch.rand(2, 1, 5, n) > 0.8
        mask[1, 0, 2] = True  # a fully masked row: uniform
        x[0, 0, 1] = -1e5  # a row wholly below the fill value
        for m, triu in ((mask, False), (torch.zeros(5, n, dtype=torch.bool), True)):
            want = m if not triu else torch.ones(5, n).triu(1).bool()
            ref = torch.softmax((x.double() * 0.125).masked_fill(want, -10000.0), -1)
            got = torch_npu.npu_scaled_masked_softmax(x.npu(), m.npu(), 0.125, triu)
            torch.testing.assert_close(got.cpu().double(), ref, atol=t, rtol=t)
            dy = torch.randn(x.shape).to(dtype)
            yd = got.cpu().double()
            want_dx = (0.125 * yd * (dy.double() - (dy.double() * yd).sum(-1, keepdim=True))).masked_fill(want, 0)
            dx = torch_npu.npu_scaled_masked_softmax_backward(dy.npu(), got, m.npu(), 0.125, triu)
            torch.testing.assert_close(dx.cpu().double(), want_dx, atol=4 * t, rtol=4 * t)
print("ok", torch.backends.cpu.get_cpu_capability())
"""


def capabilities():
    """torch's choice on this host, and the builds below it (x86-64)."""
    best = torch.backends.cpu.get_cpu_capability()
    order = ["DEFAULT", "AVX2", "AVX512"]
    return order[:order.index(best) + 1] if best in order else [best]


@pytest.mark.parametrize("capability", capabilities())
def test_every_capability_build_matches_the_reference(capability):
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability.lower())
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", capability]
