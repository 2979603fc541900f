"""The half-precision cases of test_half_precision.py, importable by a child process that runs them under another
SOFTNPU_HALF_COMPUTE (this module does not import conftest, which would reset the variable).

Each case computes something from operands made on the CPU with a fixed seed: on npu in float16 or bfloat16, on the
CPU in that dtype (ATen's kernel), and on the CPU in float64 (the truth). softnpu must be as close to the truth as the
CPU's own half-precision kernel, or closer.
"""

import torch
import torch.nn.functional as F


def _operands(dtype, device, *shapes, requires_grad=False):
    g = torch.Generator().manual_seed(sum(sum(s) for s in shapes))
    out = []
    for s in shapes:
        t = torch.randn(*s, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
        out.append(t.requires_grad_() if requires_grad else t)
    return out


def _grads(fn, dtype, device, *shapes):
    xs = _operands(dtype, device, *shapes, requires_grad=True)
    out = fn(*xs)
    out.backward(torch.ones_like(out))
    return [x.grad for x in xs]


def _in_place_addmm(dtype, device):
    c, a, b = _operands(dtype, device, (48, 40), (48, 64), (64, 40))
    c.addmm_(a, b, beta=0.5, alpha=2.0)
    return c


def _mm_out(dtype, device):
    a, b = _operands(dtype, device, (48, 64), (64, 40))
    out = torch.empty(48, 40, dtype=dtype, device=device)
    torch.mm(a, b, out=out)
    return out


def _addmm_ignoring_nan(dtype, device):
    # beta=0: the bias is not read, so its NaNs do not reach the result (ATen's documented addmm semantics).
    c, a, b = _operands(dtype, device, (48, 40), (48, 64), (64, 40))
    return torch.addmm(c.fill_(float("nan")), a, b, beta=0)


def _chain(dtype, device):
    # Several float32-route kernels queued back to back, of different shapes, so each thread's scratch memory is
    # reused and grown while earlier results are still to be read.
    x, *ws = _operands(dtype, device, (32, 64), (64, 128), (128, 16), (16, 256), (256, 64))
    for w in ws:
        x = torch.tanh(x @ w / w.shape[0] ** 0.5)
    return x


def _batch_norm_with_running_stats(dtype, device):
    # Training mode updates the running statistics in place: they are results too.
    x, w, b = _operands(dtype, device, (8, 6, 5, 5), (6,), (6,), requires_grad=True)
    mean, var = torch.zeros(6, dtype=dtype, device=device), torch.ones(6, dtype=dtype, device=device)
    out = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.3)
    out.backward(torch.ones_like(out) + out.detach())
    return [out, mean, var, x.grad, w.grad, b.grad]


def _batch_norm_module(dtype, device):
    # The module reaches native_batch_norm, whose schema does not declare that it writes the running statistics.
    x, = _operands(dtype, device, (8, 6, 5, 5))
    bn = torch.nn.BatchNorm2d(6, momentum=0.5).to(dtype=dtype, device=device)
    bn(x + 3)
    return [bn.running_mean, bn.running_var]


def _saved_statistics(dtype, device):
    # npu keeps them in float32 for half inputs, as CUDA's kernel (and the Meta kernel) does; the CPU in the input
    # dtype. Compared as values: npu's are float32 numbers, so at least as close to the truth.
    x, w, b = _operands(dtype, device, (8, 64), (64,), (64,))
    _, mean, rstd = torch.native_layer_norm(x, (64,), w, b, 1e-5)
    if device == "npu" and dtype != torch.float64:
        assert mean.dtype == rstd.dtype == torch.float32, (mean.dtype, rstd.dtype)
    return [mean, rstd]


CASES = {
    "mm": lambda d, dev: torch.mm(*_operands(d, dev, (64, 96), (96, 80))),
    "mm, transposed operands": lambda d, dev: (lambda a, b: a.t() @ b.t())(*_operands(d, dev, (96, 64), (80, 96))),
    "addmm, broadcast bias": lambda d, dev: (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=1.5))(
        *_operands(d, dev, (80,), (64, 96), (96, 80))),
    "linear, 3-d input": lambda d, dev: F.linear(*_operands(d, dev, (4, 16, 96), (80, 96), (80,))),
    "matmul, broadcast batch": lambda d, dev: torch.matmul(*_operands(d, dev, (2, 3, 32, 48), (48, 40))),
    "mm, row slices (leading dimension > columns)": lambda d, dev: (lambda a, b: a[:, :64] @ b[:64, 8:])(
        *_operands(d, dev, (48, 96), (96, 72))),
    "mm, strided columns (no BLAS layout)": lambda d, dev: (lambda a, b: a[:, ::2] @ b)(
        *_operands(d, dev, (48, 128), (64, 40))),
    "mm, one row": lambda d, dev: torch.mm(*_operands(d, dev, (1, 96), (96, 80))),
    "addmm, beta=0 ignores a NaN bias": _addmm_ignoring_nan,
    "bmm": lambda d, dev: torch.bmm(*_operands(d, dev, (6, 32, 48), (6, 48, 40))),
    "baddbmm": lambda d, dev: torch.baddbmm(*_operands(d, dev, (6, 32, 40), (6, 32, 48), (6, 48, 40)), alpha=0.5),
    "bmm, transposed batches": lambda d, dev: (lambda a, b: torch.bmm(a.transpose(1, 2), b.transpose(1, 2)))(
        *_operands(d, dev, (6, 48, 32), (6, 40, 48))),
    "baddbmm, broadcast bias": lambda d, dev: torch.baddbmm(*_operands(d, dev, (40,), (6, 32, 48), (6, 48, 40)),
                                                            beta=2.0),
    "addbmm": lambda d, dev: torch.addbmm(*_operands(d, dev, (32, 40), (6, 32, 48), (6, 48, 40))),
    "addmv": lambda d, dev: torch.addmv(*_operands(d, dev, (64,), (64, 96), (96,))),
    "mv": lambda d, dev: torch.mv(*_operands(d, dev, (64, 96), (96,))),
    "dot": lambda d, dev: torch.dot(*_operands(d, dev, (500,), (500,))),
    "addmm_ (in place)": _in_place_addmm,
    "mm out=": _mm_out,
    "conv2d": lambda d, dev: F.conv2d(*_operands(d, dev, (2, 8, 12, 12), (16, 8, 3, 3), (16,)), padding=1),
    "conv2d, grouped and strided": lambda d, dev: F.conv2d(*_operands(d, dev, (2, 8, 13, 13), (8, 2, 3, 3)),
                                                           stride=2, groups=4),
    "conv_transpose2d": lambda d, dev: F.conv_transpose2d(*_operands(d, dev, (2, 8, 7, 7), (8, 4, 3, 3)), stride=2),
    "conv1d": lambda d, dev: F.conv1d(*_operands(d, dev, (2, 8, 30), (12, 8, 5))),
    "conv2d backward": lambda d, dev: _grads(lambda x, w, b: F.conv2d(x, w, b, padding=1), d, dev,
                                             (2, 8, 10, 10), (16, 8, 3, 3), (16,)),
    "linear backward": lambda d, dev: _grads(F.linear, d, dev, (24, 96), (80, 96), (80,)),
    "attention": lambda d, dev: F.scaled_dot_product_attention(*_operands(d, dev, *[(2, 4, 32, 16)] * 3)),
    "attention backward": lambda d, dev: _grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                                d, dev, *[(2, 4, 32, 16)] * 3),
    "tanh": lambda d, dev: torch.tanh(*_operands(d, dev, (4096,))),
    "pow": lambda d, dev: torch.pow(*_operands(d, dev, (4096,)), 2),
    "norm": lambda d, dev: torch.norm(*_operands(d, dev, (4096,))),
    "vector_norm over a dim": lambda d, dev: torch.linalg.vector_norm(*_operands(d, dev, (64, 128)), ord=3, dim=1),
    "vector_norm with dtype=": lambda d, dev: torch.linalg.vector_norm(*_operands(d, dev, (64, 128)), dtype=d),
    "queued chain": _chain,
    # The normalizations whose statistics are float32 (ops/cube.cpp's float32 contract): forward and backward
    # with half weights, as in training a model loaded in bfloat16.
    "layer_norm backward": lambda d, dev: _grads(lambda x, w, b: F.layer_norm(x, (64,), w, b) * x, d, dev,
                                                 (8, 64), (64,), (64,)),
    "layer_norm saved statistics": _saved_statistics,
    "batch_norm backward": lambda d, dev: _grads(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True) * x,
                                                 d, dev, (8, 6, 5, 5), (6,), (6,)),
    "batch_norm, running statistics": _batch_norm_with_running_stats,
    "BatchNorm2d, running statistics": _batch_norm_module,
    "batch_norm eval backward": lambda d, dev: _grads(
        lambda x, w, b: F.batch_norm(x, torch.zeros_like(w).detach(), torch.ones_like(w).detach(), w, b) * x, d, dev,
        (8, 6, 5), (6,), (6,)),
    "instance_norm backward": lambda d, dev: _grads(lambda x, w, b: F.instance_norm(x, weight=w, bias=b) * x, d, dev,
                                                    (4, 6, 7, 7), (6,), (6,)),
}

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _flat(result):
    return [t.detach().cpu().double() for t in (result if isinstance(result, (list, tuple)) else [result])]


def _error(result, truth):
    """Largest error over the largest magnitude of the truth, over all the tensors of a result."""
    return max(((r - t).abs().max() / t.abs().max().clamp_min(1e-30)).item() for r, t in zip(result, truth))


def check(case: str, dtype_name: str) -> str:
    """Raises AssertionError unless npu's result is as close to the float64 truth as the CPU kernel's; returns a
    description of both errors."""
    fn, dtype = CASES[case], DTYPES[dtype_name]
    npu = _flat(fn(dtype, "npu"))  # .cpu() synchronizes: a kernel error is charged to this case
    cpu = _flat(fn(dtype, "cpu"))
    truth = _flat(fn(torch.float64, "cpu"))
    assert [t.shape for t in npu] == [t.shape for t in truth], (case, [t.shape for t in npu])
    e_npu, e_cpu = _error(npu, truth), _error(cpu, truth)
    eps = torch.finfo(dtype).eps
    # One rounding of a float32 accumulation; the CPU's kernel rounds at least once too. The margin covers a
    # different but equally accurate summation order (a unit in the last place of a few results).
    assert e_npu <= 1.25 * e_cpu + eps, f"{case} in {dtype_name}: npu error {e_npu:.3g} > CPU kernel's {e_cpu:.3g}"
    return f"{case} {dtype_name}: npu {e_npu:.3g}, cpu {e_cpu:.3g}"


def run_all() -> None:
    """Every case in both dtypes, for a child process: one line per case, then 'all passed'."""
    for case in CASES:
        for dtype_name in DTYPES:
            print(check(case, dtype_name), flush=True)
    print("all passed")
