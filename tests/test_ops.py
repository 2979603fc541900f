"""ATen ops on npu tensors, compared with the CPU path of the same op: views, in-place and out= variants, layouts,
dtypes, autograd, sync points, host<->device copies (pinned and pageable) and the second device."""

import json
import time

import pytest
import softnpu
import torch
from conftest import run_python

SLEEP = 0.5
SLEEP_CYCLES = 500_000_000  # SLEEP seconds of the device clock (1 GHz)


def _launches(device=0):
    # Kernels the runtime has been asked to run on the device (its own counter, also shown by npu-smi).
    return softnpu._C._runtime_stats(device)["kernels_launched"]


def _same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ------------------------------------------------------------------------------------------------ views


def test_views_share_storage_and_launch_nothing():
    x = torch.arange(24.0, device="npu").reshape(4, 6)
    torch.npu.synchronize()
    item = x.element_size()
    before = _launches()
    views = {
        "transpose": x.t(),
        "slice": x[1:3, ::2],
        "expand": x[:1].expand(5, 6),
        "select": x[2],
        "view": x.view(6, 4),
        "permute": x.view(2, 2, 6).permute(2, 0, 1),
        "narrow": x.narrow(1, 2, 3),
        "unsqueeze": x.unsqueeze(0),
        "diagonal": x.diagonal(),
        "as_strided": x.as_strided((2, 2), (1, 6), 3),
        "unflatten": x.unflatten(1, (2, 3)),
    }
    assert _launches() == before, "a view launched a kernel: views must be metadata-only"
    for name, v in views.items():
        assert _same_storage(v, x), name
    assert views["slice"].data_ptr() == x.data_ptr() + 1 * 6 * item
    assert views["select"].data_ptr() == x.data_ptr() + 2 * 6 * item
    assert views["narrow"].data_ptr() == x.data_ptr() + 2 * item
    assert views["as_strided"].data_ptr() == x.data_ptr() + 3 * item
    assert views["expand"].stride() == (0, 1)
    cpu = torch.arange(24.0).reshape(4, 6)
    for name, v in views.items():
        assert torch.equal(v.cpu(), {
            "transpose": cpu.t(), "slice": cpu[1:3, ::2], "expand": cpu[:1].expand(5, 6), "select": cpu[2],
            "view": cpu.view(6, 4), "permute": cpu.view(2, 2, 6).permute(2, 0, 1), "narrow": cpu.narrow(1, 2, 3),
            "unsqueeze": cpu.unsqueeze(0), "diagonal": cpu.diagonal(), "as_strided": cpu.as_strided((2, 2), (1, 6), 3),
            "unflatten": cpu.unflatten(1, (2, 3)),
        }[name]), name


def test_writes_through_views_reach_the_base():
    x = torch.zeros(4, 6, device="npu")
    x.t()[1].fill_(1.0)  # column 1
    x[2:, ::3].copy_(torch.full((2, 2), 5.0, device="npu"))
    x.diagonal().add_(torch.ones(4, device="npu"))
    expected = torch.zeros(4, 6)
    expected.t()[1].fill_(1.0)
    expected[2:, ::3].copy_(torch.full((2, 2), 5.0))
    expected.diagonal().add_(torch.ones(4))
    assert torch.equal(x.cpu(), expected)


# ------------------------------------------------------------------------------------------------ in-place, out=


def test_in_place_ops_match_cpu():
    torch.manual_seed(0)
    c = torch.randn(5, 7)
    n = c.npu()
    other_c = torch.randn(5, 7)
    other = other_c.npu()
    mask_c = other_c > 0
    mask = mask_c.npu()
    for fn in (
        lambda t, o, m: t.add_(o, alpha=0.5),
        lambda t, o, m: t.mul_(o),
        lambda t, o, m: t.clamp_(-0.5, 0.5),
        lambda t, o, m: t.masked_fill_(m, 3.0),
        lambda t, o, m: t.t().sub_(o.t()),  # in place on a non-contiguous view
        lambda t, o, m: t[1:4, ::2].addcmul_(o[1:4, ::2], o[1:4, ::2], value=2.0),
        lambda t, o, m: t.index_put_((torch.tensor([0, 3], device=t.device),), o[:2]),
        lambda t, o, m: t.exp_(),
        lambda t, o, m: t.copy_(o.t().contiguous().t()),
    ):
        ret = fn(n, other, mask)
        fn(c, other_c, mask_c)
        assert _same_storage(ret, n)  # in-place ops return (a view of) their input
        torch.testing.assert_close(n.cpu(), c)


def test_copy_into_an_empty_tensor_checks_broadcasting_as_the_cpu_does():
    for src_device in ("cpu", "npu"):
        with pytest.raises(RuntimeError, match="must match the size"):
            torch.zeros(0, device="npu").copy_(torch.zeros(2, device=src_device))
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.zeros(0).copy_(torch.zeros(2, device="npu"))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.zeros(1, device="npu").copy_(torch.zeros(3, device="npu"))


def test_out_variants_match_cpu_and_resize_empty_outputs():
    torch.manual_seed(0)
    a_c, b_c = torch.randn(4, 5), torch.randn(4, 5)
    a, b = a_c.npu(), b_c.npu()
    out = torch.empty(4, 5, device="npu")
    ptr = out.data_ptr()
    r = torch.add(a, b, out=out)
    assert r is out and out.data_ptr() == ptr  # written in place
    torch.testing.assert_close(out.cpu(), a_c + b_c)
    # An empty out= tensor is resized, as on CPU and CUDA.
    empty = torch.empty(0, device="npu")
    torch.matmul(a, b.t(), out=empty)
    assert empty.shape == (4, 4)
    torch.testing.assert_close(empty.cpu(), a_c @ b_c.t())
    # Ops with several outputs and overload names not following one pattern (max.dim -> max.dim_max).
    values, indices = torch.empty(0, device="npu"), torch.empty(0, dtype=torch.long, device="npu")
    torch.max(a, dim=1, out=(values, indices))
    ref = torch.max(a_c, dim=1)
    assert torch.equal(values.cpu(), ref.values) and torch.equal(indices.cpu(), ref.indices)
    s = torch.empty(0, device="npu")
    torch.sum(a, dim=0, out=s)
    torch.testing.assert_close(s.cpu(), a_c.sum(0))
    # A non-contiguous out= view is written through to its base.
    base = torch.zeros(5, 4, device="npu")
    torch.mul(a, b, out=base.t())
    torch.testing.assert_close(base.t().cpu(), a_c * b_c)


# ------------------------------------------------------------------------------------------------ layouts


def test_non_contiguous_inputs_match_cpu():
    torch.manual_seed(0)
    c = torch.randn(6, 8, 4)
    n = c.npu()
    cases = [
        lambda t: t.transpose(0, 2) + t.transpose(0, 2),
        lambda t: t[::2, 1::3] * t[::2, 1::3],
        lambda t: t[:, :1].expand(6, 5, 4).sum(1),
        lambda t: torch.matmul(t.transpose(1, 2), t),
        lambda t: t.permute(2, 0, 1).softmax(-1),
        lambda t: t.transpose(0, 1).reshape(8, 24),
        lambda t: torch.cat([t[:, ::2], t[:, 1::2]], dim=2),
        lambda t: t.transpose(0, 1).contiguous(),
    ]
    for fn in cases:
        torch.testing.assert_close(fn(n).cpu(), fn(c))


def test_channels_last_matches_cpu_and_keeps_its_layout():
    torch.manual_seed(0)
    conv_c = torch.nn.Conv2d(3, 8, 3, padding=1)
    conv_n = torch.nn.Conv2d(3, 8, 3, padding=1).npu()
    conv_n.load_state_dict(conv_c.state_dict())
    c = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    n = c.npu()
    assert n.is_contiguous(memory_format=torch.channels_last)  # copies keep the layout
    torch.testing.assert_close(conv_n(n).cpu(), conv_c(c), rtol=1e-4, atol=1e-4)
    act = torch.relu(n)
    assert act.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(torch.nn.functional.max_pool2d(n, 2).cpu(), torch.nn.functional.max_pool2d(c, 2))


# ------------------------------------------------------------------------------------------------ dtypes


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool,
              torch.complex64],
    ids=str,
)
def test_dtypes_match_cpu(dtype):
    torch.manual_seed(0)
    if dtype.is_floating_point or dtype.is_complex:
        a_c, b_c = torch.randn(6, 6, dtype=dtype), torch.randn(6, 6, dtype=dtype)
    elif dtype == torch.bool:
        a_c, b_c = torch.rand(6, 6) > 0.5, torch.rand(6, 6) > 0.5
    else:
        a_c, b_c = torch.randint(0, 50, (6, 6), dtype=dtype), torch.randint(1, 50, (6, 6), dtype=dtype)
    a, b = a_c.npu(), b_c.npu()
    assert a.dtype == dtype and torch.equal(a.cpu(), a_c)  # round trip is exact
    ops = [lambda x, y: x == y, lambda x, y: torch.where(x == y, x, y), lambda x, y: x.flip(0),
           lambda x, y: torch.stack([x, y]), lambda x, y: x.t().contiguous()]
    if dtype != torch.bool:
        ops += [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x.sum(dim=1),
                lambda x, y: x.to(torch.complex128 if dtype.is_complex else torch.float32)]
    if dtype.is_floating_point or dtype.is_complex:
        ops += [lambda x, y: x @ y, lambda x, y: torch.exp(x), lambda x, y: x / y, lambda x, y: x.mean()]
    if dtype.is_floating_point:
        ops += [lambda x, y: torch.sort(x, dim=1).values, lambda x, y: torch.maximum(x, y)]
    if dtype == torch.bool:
        ops += [lambda x, y: x & y, lambda x, y: ~x, lambda x, y: x.any(), lambda x, y: x.sum()]
    if not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        ops += [lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x.max()]
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)
    for op in ops:
        expected = op(a_c, b_c)
        got = op(a, b)
        assert got.device.type == "npu" and got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected, rtol=tol, atol=tol)


def test_zero_dim_cpu_tensors_and_python_scalars_match_cpu():
    torch.manual_seed(0)
    c = torch.randn(3, 4)
    n = c.npu()
    two = torch.tensor(2.0)  # 0-dim CPU tensor
    for fn in (lambda t: t * two, lambda t: two - t, lambda t: torch.add(t, two, alpha=3), lambda t: t / two,
               lambda t: t.masked_fill(t > 0, two), lambda t: t * 2, lambda t: 1 - t, lambda t: t / 3, lambda t: t ** 2, lambda t: t + True):
        out = fn(n)
        assert out.device.type == "npu"
        torch.testing.assert_close(out.cpu(), fn(c))
    # The value is taken when the op is called, not when the queued kernel runs.
    s = torch.tensor(1.0)
    torch.npu._sleep(200_000_000)
    out = n + s
    s.fill_(100.0)
    torch.testing.assert_close(out.cpu(), c + 1.0)


# ------------------------------------------------------------------------------------------------ autograd


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(6,), (3, 6)])
def test_outputs_shaped_as_the_cpu_kernel_shapes_them_where_meta_differs(shape, reduction):
    # multilabel_margin_loss of one sample: the Meta kernel (a decomposition) says (1,) under reduction="none", CPU and
    # CUDA give a 0-dim loss (ops/meta_fixes.cpp).
    x = torch.randn(shape, requires_grad=True)
    targets = torch.tensor([[3, 0, -1, 1, 2, 4], [1, 2, 5, -1, 0, 0], [0, -1, 2, 3, 4, 5]])
    target = targets[: x.numel() // 6].reshape(shape)
    loss_fn = torch.nn.MultiLabelMarginLoss(reduction=reduction)
    expected = loss_fn(x, target)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    xn = x.detach().npu().requires_grad_()
    got = loss_fn(xn, target.npu())
    (got_grad,) = torch.autograd.grad(got.sum(), xn)
    assert got.shape == expected.shape and got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), expected.detach())
    torch.testing.assert_close(got_grad.cpu(), expected_grad)


META_DIFFERS_CASES = {
    # name: (op, arguments) for which the Meta kernel infers other dtypes (mixed dtypes) than the CPU and CUDA
    "huber_loss": (torch.nn.functional.huber_loss, (torch.randn(5), torch.randn(5, dtype=torch.float64))),
    "huber_loss half": (lambda a, b: torch.nn.functional.huber_loss(a, b, reduction="none"),
                        (torch.randn(5).half(), torch.randn(5))),
    "addr 0-dim self": (torch.addr, (torch.tensor(2), torch.arange(5, dtype=torch.int32),
                                     torch.arange(4, dtype=torch.int32))),
    "native_group_norm": (lambda x, w, b: torch.native_group_norm(x, w, b, 2, 6, 3, 3, 1e-5),
                          (torch.randn(2, 6, 3).half(), torch.rand(6), torch.rand(6))),
    "native_group_norm bfloat16": (lambda x, w, b: torch.native_group_norm(x, w, b, 2, 6, 3, 3, 1e-5),
                                   (torch.randn(2, 6, 3).bfloat16(), torch.rand(6), torch.rand(6))),
    "grid_sampler_2d empty input": (lambda x, g: torch.grid_sampler_2d(x, g, 0, 0, False),
                                    (torch.randn(2, 0, 5, 5).half(), torch.rand(2, 5, 5, 2))),
    # Not dtypes but shapes:
    "nansum dim=()": (lambda x: torch.nansum(x, dim=()), (torch.tensor([[1.0, float("nan")], [2.0, 3.0]]),)),
    "nansum dim=() keepdim": (lambda x: torch.nansum(x, dim=(), keepdim=True), (torch.randn(3, 2),)),
    # weight and statistics of another size than the input's channels (only the composite batch_norm checks them); the Meta kernel broadcasts, the CPU kernel normalizes the input's channel.
    "_batch_norm_with_update one channel": (
        lambda x, w, b, m, v: torch.ops.aten._batch_norm_with_update(x, w, b, m, v, 0.5, 1e-5)[:3],
        (torch.randn(5, 1, 5, 5), torch.rand(5), torch.rand(5), torch.zeros(5), torch.ones(5))),
}


@pytest.mark.parametrize("name", sorted(META_DIFFERS_CASES))
def test_outputs_have_the_cpu_kernels_dtypes_and_shapes_where_meta_differs(name):
    # ops/meta_fixes.cpp corrects the Meta kernel's dtypes and shapes before the outputs are allocated.
    fn, args = META_DIFFERS_CASES[name]
    expected = fn(*args)
    got = fn(*(a.npu() for a in args))
    expected, got = (expected, got) if isinstance(expected, tuple) else ((expected,), (got,))
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape and g.device.type == "npu"
        torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("layout", ["transposed", "permuted", "channels_last", "sliced"])
def test_batch_norm_of_non_contiguous_inputs_matches_cpu(layout, training):
    # ATen's native_batch_norm.out kernel normalizes a transposed input wrongly (op_info.cpp: avoids_out_variant).
    x = {"transposed": torch.randn(5, 5, 5).transpose(0, 1),
         "permuted": torch.randn(4, 6, 3, 5).permute(1, 0, 2, 3),
         "channels_last": torch.randn(4, 6, 3, 5).to(memory_format=torch.channels_last),
         "sliced": torch.randn(4, 6, 3, 10)[..., ::2]}[layout]
    c = x.shape[1]
    weight, bias = torch.rand(c), torch.rand(c)
    stats = {d: (torch.zeros(c, device=d), torch.ones(c, device=d)) for d in ("cpu", "npu")}
    expected = torch.nn.functional.batch_norm(x, *stats["cpu"], weight, bias, training=training)
    got = torch.nn.functional.batch_norm(x.npu(), *stats["npu"], weight.npu(), bias.npu(), training=training)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected)
    for e, g in zip(stats["cpu"], stats["npu"]):
        torch.testing.assert_close(g.cpu(), e)
    if training:  # the op torch.compile's graphs call
        expected = torch.ops.aten._batch_norm_with_update(x, weight, bias, *stats["cpu"], 0.5, 0.6)
        got = torch.ops.aten._batch_norm_with_update(x.npu(), weight.npu(), bias.npu(), *stats["npu"], 0.5, 0.6)
        for e, g in zip(expected[:3], got[:3]):
            torch.testing.assert_close(g.cpu(), e)


def test_mlp_gradients_match_cpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                    torch.nn.GELU(), torch.nn.Linear(32, 3))
    npu_model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                    torch.nn.GELU(), torch.nn.Linear(32, 3)).npu()
    npu_model.load_state_dict(cpu_model.state_dict())
    data, target = torch.randn(16, 10), torch.randint(0, 3, (16,))
    for model, d, t in ((cpu_model, data, target), (npu_model, data.npu(), target.npu())):
        loss = torch.nn.functional.cross_entropy(model(d), t)
        loss.backward()
    for (name, pc), pn in zip(cpu_model.named_parameters(), npu_model.parameters()):
        assert pn.grad.device.type == "npu"
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5, msg=name)
    # And an optimizer step keeps them equal.
    for model in (cpu_model, npu_model):
        torch.optim.Adam(model.parameters(), lr=0.01).step()
    for pc, pn in zip(cpu_model.parameters(), npu_model.parameters()):
        torch.testing.assert_close(pn.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-5)


def test_reduced_losses_match_cpu_without_warnings():
    # Their out= CPU kernels resize the 0-dim result (a deprecation warning per call); the kernel must not use them.
    code = """
        import torch, torch_npu
        import torch.nn.functional as F
        torch.manual_seed(0)
        a, b = torch.rand(4, 3, requires_grad=True), torch.rand(4, 3)
        losses = [F.mse_loss, F.smooth_l1_loss, F.huber_loss, F.soft_margin_loss, F.binary_cross_entropy]
        for reduction in ("mean", "sum"):
            for loss in losses:
                cpu = loss(a, b, reduction=reduction)
                npu = loss(a.detach().npu().requires_grad_(), b.npu(), reduction=reduction)
                npu.backward()
                torch.testing.assert_close(npu.cpu(), cpu)
        torch.npu.synchronize()
        print("ok")
        """
    result = run_python(code)
    assert result.lines == ["ok"]
    assert "resized" not in result.stderr, result.stderr


@pytest.mark.parametrize("flash", [True, False])
def test_sdpa_takes_the_kernel_the_cpu_takes(flash):
    from torch.profiler import profile

    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    previous = torch.backends.cuda.flash_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(flash)
    try:
        out = {}
        for device in ("cpu", "npu"):
            x = q.detach().to(device).requires_grad_()
            with profile() as p:
                y = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
                y.sum().backward()
                torch.npu.synchronize()
            ran = {e.key for e in p.key_averages() if e.key.startswith("aten::_scaled_dot_product")}
            out[device] = (y.detach().cpu(), x.grad.cpu(), ran)
    finally:
        torch.backends.cuda.enable_flash_sdp(previous)
    assert out["npu"][2] == out["cpu"][2]
    assert ("aten::_scaled_dot_product_flash_attention_for_cpu" in out["npu"][2]) == flash
    torch.testing.assert_close(out["npu"][0], out["cpu"][0])
    torch.testing.assert_close(out["npu"][1], out["cpu"][1])


def test_input_gradients_through_views_and_broadcasting():
    torch.manual_seed(0)
    c = torch.randn(4, 5, requires_grad=True)
    n = c.detach().npu().requires_grad_()
    bias_c = torch.randn(4, requires_grad=True)
    bias_n = bias_c.detach().npu().requires_grad_()
    for x, b in ((c, bias_c), (n, bias_n)):
        ((x.t()[1:] * 2).t() + b).pow(2).sum().backward()
    torch.testing.assert_close(n.grad.cpu(), c.grad)
    torch.testing.assert_close(bias_n.grad.cpu(), bias_c.grad)


# ------------------------------------------------------------------------------------------------ sync points


@pytest.mark.parametrize("args", [(7,), (8, False), (9, True, 5.0)])
def test_factories_whose_composite_is_cpu_only_run_on_npu(args):
    # kaiser_window's composite kernels call a CPU/CUDA kernel stub themselves: npu runs the CPU's, asynchronously.
    before = torch.npu.sync_points()["total"]
    for dtype in (torch.float32, torch.float64):
        w = torch.kaiser_window(*args, dtype=dtype, device="npu")
        assert w.device.type == "npu" and w.dtype == dtype
        torch.testing.assert_close(w.cpu(), torch.kaiser_window(*args, dtype=dtype))
    assert torch.npu.sync_points()["total"] == before


def test_data_dependent_ops_are_counted_sync_points():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0, 2.0], device="npu")
    before = torch.npu.sync_points()
    nz = torch.nonzero(x)
    ms = torch.masked_select(x, x > 0)
    un = torch.unique(x)
    after = torch.npu.sync_points()
    assert after["total"] - before["total"] == 3
    for op in ("nonzero", "masked_select", "unique"):
        count = lambda d: sum(n for name, n in d["by_op"].items() if op in name)  # noqa: E731
        assert count(after) == count(before) + 1, op
    assert nz.cpu().flatten().tolist() == [1, 3, 4]
    assert ms.cpu().tolist() == [1.0, 2.0, 2.0]
    assert un.cpu().tolist() == [0.0, 1.0, 2.0]


def _warm_up(fn):
    # An op's first launch in a process runs its Meta kernel (slow once, then cached): time only later launches.
    fn()
    torch.npu.synchronize()


def test_tensor_ops_are_not_sync_points_and_do_not_wait():
    x = torch.randn(64, 64, device="npu")
    y = torch.randn(64, 64, device="npu")

    def ops():
        out = torch.relu(x @ y + x).sum(0).softmax(0)
        return torch.where(out > 0.5, out, x[0]).clamp(0, 1)

    _warm_up(ops)
    before = torch.npu.sync_points()["total"]
    torch.npu._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    ops()
    elapsed = time.perf_counter() - start
    assert torch.npu.sync_points()["total"] == before
    assert elapsed < SLEEP / 2 and not torch.npu.current_stream().query()


def test_python_scalar_ops_are_not_sync_points_and_do_not_wait():
    # Python scalars become wrapped-number CPU tensors, which Meta kernels must see as CPU scalars.
    x = torch.randn(64, device="npu")
    _warm_up(lambda: (x * 2 + 1) / 3 - 0.5)
    before = torch.npu.sync_points()["total"]
    torch.npu._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    out = (x * 2 + 1) / 3 - 0.5
    elapsed = time.perf_counter() - start
    assert torch.npu.sync_points()["total"] == before, torch.npu.sync_points()
    assert elapsed < SLEEP / 2 and not torch.npu.current_stream().query()
    torch.testing.assert_close(out.cpu(), (x.cpu() * 2 + 1) / 3 - 0.5)


@pytest.fixture(scope="module")
def strict_mode():
    # One child with TORCH_NPU_FALLBACK_CPU_DISABLE=1 runs every case and reports each.
    result = run_python(
        """
        import json, torch, torch_npu
        x = torch.tensor([0.0, 1.0, 2.0], device="npu")
        cases = {
            "nonzero": lambda: torch.nonzero(x),
            "masked_select": lambda: torch.masked_select(x, x > 0),
            "unique": lambda: torch.unique(x),
            "tensor_ops": lambda: torch.relu(x @ x + x).sum(),
            "python_scalar_ops": lambda: (x * 2 + 1) / 3,
        }
        out = {}
        for name, fn in cases.items():
            try:
                fn()
                torch.npu.synchronize()
                out[name] = ["ok", ""]
            except RuntimeError as e:
                out[name] = ["RuntimeError", str(e)]
            except Exception as e:
                out[name] = [type(e).__name__, str(e)]
        print(json.dumps(out))
        """,
        env={"TORCH_NPU_FALLBACK_CPU_DISABLE": 1},
    )
    return json.loads(result.lines[-1])


@pytest.mark.parametrize(
    "op",
    ["masked_select", "unique", "nonzero"],
)
def test_strict_mode_makes_sync_points_errors_naming_the_op(strict_mode, op):
    kind, message = strict_mode[op]
    assert kind == "RuntimeError", (kind, message)  # or a subclass
    assert "TORCH_NPU_FALLBACK_CPU_DISABLE" in message, message  # says why it is an error
    assert f"aten::{op}" in message or f"aten::_{op}" in message, message


def test_strict_mode_allows_ordinary_ops(strict_mode):
    assert strict_mode["tensor_ops"] == ["ok", ""]


def test_strict_mode_allows_python_scalar_ops(strict_mode):
    assert strict_mode["python_scalar_ops"] == ["ok", ""]


# ------------------------------------------------------------------------------------------------ copies


def test_pin_memory():
    x = torch.randn(100)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    assert torch.empty(10, pin_memory=True).is_pinned()


def test_non_blocking_copy_from_pinned_memory_is_asynchronous():
    host = torch.randn(1 << 18).pin_memory()
    torch.npu._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    dev = host.to("npu", non_blocking=True)  # queued behind the sleep
    elapsed = time.perf_counter() - start
    event = torch.npu.current_stream().record_event()
    assert elapsed < SLEEP / 2 and not event.query()
    torch.npu.synchronize()
    assert torch.equal(dev.cpu(), host)


def test_copy_from_pageable_memory_takes_the_data_at_the_call():
    # CUDA's rule: from pageable memory, even with non_blocking=True, the host buffer is free for reuse when the call
    # returns (the data was copied, or staged), whether or not the stream has reached the copy.
    for non_blocking in (True, False):
        values = torch.randn(1 << 18)
        host = values.clone()
        torch.npu._sleep(SLEEP_CYCLES)
        dev = host.to("npu", non_blocking=non_blocking)
        host.fill_(0)
        assert torch.equal(dev.cpu(), values)
    # Several copies in flight at once each keep their own data, with their sources overwritten and freed.
    torch.npu._sleep(SLEEP_CYCLES)
    sources = [torch.full((1 << 16,), float(i)) for i in range(8)]
    copies = [src.to("npu", non_blocking=True) for src in sources]
    for src in sources:
        src.fill_(-1)
    del sources, src
    for i, c in enumerate(copies):
        assert torch.equal(c.cpu(), torch.full((1 << 16,), float(i))), i


def test_pinned_blocks_are_not_reused_before_their_copies_complete():
    values = torch.randn(1 << 18)
    host = values.pin_memory()
    torch.npu._sleep(SLEEP_CYCLES)
    dev = host.to("npu", non_blocking=True)
    del host
    reuse = torch.empty(1 << 18).pin_memory()  # same size: would get host's block if it were free
    reuse.fill_(0)
    torch.npu.synchronize()
    assert torch.equal(dev.cpu(), values)


def test_non_blocking_copy_to_pinned_memory():
    x = torch.randn(1 << 18, device="npu")
    expected = x.cpu()
    dst = torch.empty(1 << 18).pin_memory()
    torch.npu._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    dst.copy_(x, non_blocking=True)
    assert time.perf_counter() - start < SLEEP / 2
    assert not torch.npu.current_stream().query()
    torch.npu.synchronize()
    assert torch.equal(dst, expected)
    # .to("cpu", non_blocking=True) gives a pinned tensor, filled once the stream is synchronized.
    out = x.to("cpu", non_blocking=True)
    assert out.is_pinned()
    torch.npu.current_stream().synchronize()
    assert torch.equal(out, expected)


def test_copies_convert_dtypes_and_layouts():
    torch.manual_seed(0)
    c = torch.randn(5, 6)
    n = c.npu()
    assert torch.equal(n.to(torch.float64).cpu(), c.double())
    assert torch.equal(n.t().cpu(), c.t())
    assert torch.equal(c.t().npu().cpu(), c.t())
    assert torch.equal(n.half().cpu(), c.half())
    assert torch.equal(c.to("npu", dtype=torch.int32).cpu(), c.int())
    target = torch.empty(6, 5, dtype=torch.float64)
    target.copy_(n.t())
    assert torch.equal(target, c.t().double())
    dst = torch.zeros(5, 6, device="npu")
    dst[:, ::2].copy_(c[:, ::2])
    expected = torch.zeros(5, 6)
    expected[:, ::2] = c[:, ::2]
    assert torch.equal(dst.cpu(), expected)


# ------------------------------------------------------------------------------------------------ second device


def test_second_device_works_independently():
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    with torch.npu.device(0):
        torch.npu._sleep(3 * SLEEP_CYCLES)  # device 0 busy
    x, y = a.to("npu:1"), b.to("npu:1")
    out = torch.matmul(x, y) + x
    assert out.device == torch.device("npu:1")
    torch.testing.assert_close(out.cpu(), a @ b + a)  # done while device 0 still sleeps
    assert not torch.npu.current_stream(0).query()


def test_cross_device_copies():
    torch.manual_seed(0)
    c = torch.randn(32, 16)
    x0 = c.npu(0)
    # The copy is ordered after the producer on the source device, however long it takes.
    torch.npu._sleep(SLEEP_CYCLES)
    x0.add_(x0)
    x1 = x0.to("npu:1")
    assert x1.device == torch.device("npu:1")
    assert torch.equal(x1.cpu(), c * 2)
    assert torch.equal(x1.to("npu:0").cpu(), c * 2)
    assert torch.equal(x0.t().to("npu:1").cpu(), (c * 2).t())  # non-contiguous
    assert torch.equal(x0.to("npu:1", dtype=torch.float64).cpu(), (c * 2).double())
    dst = torch.zeros(16, 32, device="npu:1")
    dst.copy_(x0.t())
    assert torch.equal(dst.cpu(), (c * 2).t())
    # And the destination device's later work sees the copied values.
    with torch.npu.device(1):
        assert torch.equal((x1 + x1).cpu(), c * 4)


# ------------------------------------------------------------------------------------------------ overlapping writes


def _overlap_cases(x):
    # (op, what the CPU raises): the written tensor shares memory with an input, not as the same view.
    return [
        (lambda: torch.cat([x[:2], x[2:4]], out=x[1:5]), "written-to tensor refer to a single memory location"),
        (lambda: torch.add(x[:4], 1, out=x[1:5]), "written-to tensor refer to a single memory location"),
        (lambda: x[1:5].add_(x[:4]), "written-to tensor refer to a single memory location"),
    ]


def test_out_tensor_overlapping_an_input_raises_at_the_call_as_on_the_cpu():
    cpu = torch.arange(10.0)
    for (cpu_op, message), (npu_op, _) in zip(_overlap_cases(cpu), _overlap_cases(npu := cpu.npu())):
        with pytest.raises(RuntimeError, match=message):
            cpu_op()
        # At the call (not at the next synchronizing one), and nothing is written.
        with pytest.raises(RuntimeError, match=message):
            npu_op()
        torch.npu.synchronize()
        assert torch.equal(npu.cpu(), cpu)
    # The same op writing over exactly its input stays allowed, as on the CPU.
    y = torch.arange(4.0).npu()
    torch.add(y, 1, out=y)
    assert y.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
