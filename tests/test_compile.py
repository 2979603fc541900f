"""torch.compile on npu: Dynamo's device interface, Inductor's C++ kernels on the npu stream, models against eager npu.

Compilation is slow on a small host, so the models are tiny and Inductor's cache lives in a directory of this test
session (a second compilation of the same graph is a cache hit, as it is for users).
"""

import contextlib
import copy

import pytest
import torch

import softnpu.inductor.cpu_assumptions as cpu_assumptions
from conftest import run_python
from softnpu.inductor.device_interface import NpuInterface


from compile_fixtures import fresh_dynamo, inductor_cache  # noqa: F401 (autouse fixtures)


# ------------------------------------------------------------------------------------------------ Dynamo's view


def test_registered_when_dynamo_and_inductor_load_not_before():
    # `import torch` loads softnpu but not Dynamo or Inductor (seconds to import); they find npu once loaded, or at
    # once when softnpu is imported after them.
    lazy = run_python(
        "import sys, torch\n"
        "assert 'torch._dynamo' not in sys.modules and 'torch._inductor' not in sys.modules\n"
        "from torch._dynamo.device_interface import get_interface_for_device\n"
        "import torch._inductor.graph\n"
        "from torch._inductor.codegen.common import get_scheduling_for_device\n"
        "print(get_interface_for_device('npu').__name__, get_scheduling_for_device('npu').__name__)\n")
    assert lazy.stdout.split() == ["NpuInterface", "NpuCppScheduling"]
    late = run_python(
        "import torch, torch._inductor.graph\n"
        "from torch._dynamo.device_interface import get_interface_for_device\n"
        "from torch._inductor.codegen.common import get_scheduling_for_device\n"
        "import torch_npu\n"
        "print(get_interface_for_device('npu').__name__, get_scheduling_for_device('npu').__name__)\n",
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert late.stdout.split() == ["NpuInterface", "NpuCppScheduling"]


def test_device_interface_is_npus():
    from torch._dynamo.device_interface import get_interface_for_device

    assert get_interface_for_device("npu") is NpuInterface
    assert get_interface_for_device(torch.device("npu", 1)) is NpuInterface
    props = NpuInterface.get_device_properties(0)
    assert props.multi_processor_count == torch.npu.get_device_properties(0).multi_processor_count > 0
    assert props.total_memory == torch.npu.get_device_properties(0).total_memory
    assert NpuInterface.Worker.get_device_properties("npu:1").name == torch.npu.get_device_name(1)
    assert issubclass(NpuInterface.Stream, torch.Stream) and issubclass(NpuInterface.Event, torch.Event)
    assert NpuInterface.device_count() == torch.npu.device_count()
    s = torch.npu.Stream()
    with NpuInterface.stream(s):
        assert NpuInterface.current_stream() == s
        assert NpuInterface.get_raw_stream(0) == s.npu_stream


def test_stream_context_compiles_into_one_graph_on_its_stream():
    # As `with torch.cuda.stream(s):`: Dynamo keeps the block in the graph (it inlined torch.npu.stream and broke the
    # graph at `builtin isinstance()`), and Inductor's wrapper declares the stream it switches to (cpu_assumptions:
    # device_need_guard; without it, NameError: stream1). The matmul runs on `side`, behind the sleep queued there.
    side = torch.npu.Stream()
    done = torch.npu.Event()

    def f(x):
        with torch.npu.stream(side):
            y = x @ x
            done.record()
        done.wait()
        return y.relu() + 1

    x = torch.randn(256, 256, device="npu")
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x).cpu(), f(x).cpu(), rtol=1e-4, atol=1e-3)
    torch.npu.synchronize()
    with torch.npu.stream(side):
        torch.npu._sleep(300_000_000)
    out = compiled(x)
    assert not done.query()  # recorded on `side` after the matmul, which waits behind the sleep
    torch.testing.assert_close(out.cpu(), f(x).cpu(), rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------------------------------------ kernels on the stream


def _slow(x):
    # One fused C++ kernel of 60 chained sines over 4M elements: about a second on one core.
    for _ in range(60):
        x = torch.sin(x) + 0.5
    return x


def test_compiled_kernels_are_asynchronous_on_the_current_stream():
    x = torch.randn(4_000_000).npu()
    compiled = torch.compile(_slow, fullgraph=True)
    compiled(x)
    torch.npu.synchronize()
    side = torch.npu.Stream()
    side.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(side):
        out = compiled(x)
        done_on_side = torch.npu.Event()
        done_on_side.record()
    idle_default = torch.npu.Event()
    idle_default.record()
    assert not done_on_side.query()  # the host is back while the kernel runs on `side`
    idle_default.synchronize()
    assert not done_on_side.query()  # the default stream has nothing of it
    torch.npu.synchronize()
    torch.testing.assert_close(out.cpu(), _slow(x.cpu()))


def test_compiled_kernels_ordered_with_eager_ops_and_copies():
    def f(a, b):
        return (a @ b).relu() * 3 + a.sum()

    a = torch.randn(64, 64).npu()
    b = torch.randn(64, 64).npu()
    compiled = torch.compile(f, fullgraph=True)
    for _ in range(3):
        a.add_(1)  # eager op queued before the compiled kernels that read a
        out = compiled(a, b)
        out.mul_(0.5)  # eager op queued after them, on their output
        torch.testing.assert_close(out.cpu(), f(a.cpu(), b.cpu()) * 0.5, rtol=1e-4, atol=1e-3)


def test_kernel_for_second_device_runs_on_its_stream():
    x = torch.randn(4_000_000, device="npu:1")
    compiled = torch.compile(_slow, fullgraph=True)
    compiled(x)
    torch.npu.synchronize(1)
    out = compiled(x)  # current device is npu:0; the kernel belongs to npu:1
    on_device1 = torch.npu.Event()
    with torch.npu.device(1):
        on_device1.record()
    assert not on_device1.query()
    torch.testing.assert_close(out.cpu(), _slow(x.cpu()))


def test_kernels_read_cpu_scalars_as_they_were_at_the_call():
    # The float64 CPU scalar is converted into a CPU buffer of the wrapper, freed when the call returns, while the
    # npu kernel that reads it waits behind the sleep; the next call's buffer takes the same host memory. (GPT-2's
    # backward reads such a saved constant: its gradients were garbage with dynamic shapes.)
    f = torch.compile(lambda x, s: x * s.float(), fullgraph=True)
    x = torch.ones(1000, device="npu")
    f(x, torch.tensor(1.0, dtype=torch.float64))
    torch.npu.synchronize()
    torch.npu._sleep(100_000_000)
    outs = [f(x, torch.tensor(float(k), dtype=torch.float64)) for k in range(8)]
    for k, out in enumerate(outs):
        torch.testing.assert_close(out.cpu(), torch.full((1000,), float(k)))


# ------------------------------------------------------------------------------------------------ models


class Block(torch.nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 4)), torch.randn(8, 16)


def _cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10)), \
        torch.randn(4, 3, 8, 8)


def _block():
    return Block(), torch.randn(2, 8, 32)


def _train_step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    return loss


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("make", [_mlp, _cnn, _block], ids=["mlp", "cnn_batchnorm", "transformer_block"])
def test_model_forward_and_backward_match_eager(make, dynamic):
    torch.manual_seed(0)
    model, x = make()
    eager = model.npu()
    compiled_model = copy.deepcopy(eager)
    x = x.npu()
    compiled = torch.compile(compiled_model, dynamic=dynamic, fullgraph=True)
    loss = _train_step(compiled, x)
    expected = _train_step(eager, x)
    torch.testing.assert_close(loss.cpu(), expected.cpu(), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)
    for (name, b), c in zip(eager.named_buffers(), compiled_model.buffers()):  # batch norm's running statistics
        torch.testing.assert_close(c.cpu(), b.cpu(), msg=name)
    # Another batch size: a new graph (static) or the same one (dynamic), still right.
    x2 = torch.cat([x, x])
    torch.testing.assert_close(compiled(x2).cpu(), eager(x2).cpu(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------ CPU-only assumptions
# Each worked around in softnpu/inductor/cpu_assumptions.py: undone, the graph that needs it fails to compile.


def _uncached():
    """So the graph compiles again instead of coming from the caches the applied case filled."""
    return torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(
        enable_autograd_cache=False)


def _batchnorm_train(x, w, b):
    return torch.nn.functional.batch_norm(x, None, None, w, b, training=True).relu().sum()


def _attention_train(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v).sum()


def _math_attention_grad(*shapes):
    """The math composite's backward (bmm, softmax), whose C++ casts need the "cpp" backend; sdpa itself runs the
    CPU's flash kernel on npu."""
    _compile_grad(lambda q, k, v: torch.ops.aten._scaled_dot_product_attention_math(q, k, v)[0].sum(), *shapes)


def _compile_grad(fn, *shapes):
    args = [torch.randn(*s).npu().requires_grad_() for s in shapes]
    torch.compile(fn, fullgraph=True)(*args).backward()
    grads = [a.grad.cpu() for a in args]
    ref = [a.detach().cpu().requires_grad_() for a in args]
    fn(*ref).backward()
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("undo", [False, True], ids=["applied", "undone"])
def test_scheduler_nodes_on_npu_are_cpu_nodes(monkeypatch, undo):
    from torch._inductor.scheduler import BaseSchedulerNode

    if undo:
        monkeypatch.setattr(BaseSchedulerNode, "is_cpu", lambda self: getattr(self.get_device(), "type", None) == "cpu")
        no_fx_cache, no_autograd_cache = _uncached()
        with no_fx_cache, no_autograd_cache, pytest.raises(Exception, match="can't multiply sequence"):
            _compile_grad(_batchnorm_train, (4, 8, 6, 6), (8,), (8,))
    else:
        _compile_grad(_batchnorm_train, (4, 8, 6, 6), (8,), (8,))


@pytest.mark.parametrize("undo", [False, True], ids=["applied", "undone"])
def test_npu_kernels_are_generated_as_cpp(monkeypatch, undo):
    import torch._inductor.codegen.common as codegen_common
    import torch._inductor.scheduler as scheduler
    import torch._inductor.utils as utils

    if undo:
        for module in (utils, codegen_common, scheduler):
            monkeypatch.setattr(module, "get_current_backend", cpu_assumptions._get_current_backend)
        no_fx_cache, no_autograd_cache = _uncached()
        with no_fx_cache, no_autograd_cache, pytest.raises(Exception, match="KeyError"):
            _math_attention_grad((2, 4, 8, 16), (2, 4, 8, 16), (2, 4, 8, 16))
    else:
        _math_attention_grad((2, 4, 8, 16), (2, 4, 8, 16), (2, 4, 8, 16))


CACHED_COMPILE = """
import sys, torch
from torch._dynamo.utils import counters
import softnpu.inductor.cache_key as cache_key
if sys.argv[-1] == "other-softnpu":
    cache_key.CodegenFingerprint.uuid = lambda self: b"another softnpu's code generation"
f = torch.compile(lambda x: (x * 2).relu() + 1)
x = torch.randn(64, device="npu")
assert torch.equal(f(x).cpu(), (x.cpu() * 2).relu() + 1)
print(counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"])
"""


def test_fx_graph_cache_hits_in_a_second_process_and_misses_under_other_codegen(tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    first, second = (run_python(CACHED_COMPILE, env=env, timeout=300) for _ in range(2))
    assert first.lines[-1] == "0 1" and second.lines[-1] == "1 0", (first.describe(), second.describe())
    # Wrapper code cached under another softnpu calls that softnpu's kernel bindings: its key must differ.
    other = run_python(CACHED_COMPILE.replace("sys.argv[-1]", '"other-softnpu"'), env=env, timeout=300)
    assert other.lines[-1] == "0 1", other.describe()


def _masks(x, keep, y):
    return x <= 0, torch.where(keep, y * 1.25, 0.0)


def test_bool_masks_in_npu_kernels_match_cpu(monkeypatch):
    """A float comparison stored as bool and a bool mask loaded as a float mask (relu's saved mask, dropout's) are
    computed by softnpu's AVX-512 conversions (vec_mask.py) where Inductor compiles for AVX-512; 111 elements leave a
    tail of 15 lanes."""
    import softnpu.inductor.launch as launch
    from torch._inductor import cpu_vec_isa

    sources, with_vec_mask = [], launch.with_vec_mask
    monkeypatch.setattr(launch, "with_vec_mask", lambda source: sources.append(with_vec_mask(source)) or sources[-1])
    x, y = torch.randn(3, 37), torch.randn(3, 37)
    keep = torch.rand(3, 37) > 0.3
    no_fx_cache, no_autograd_cache = _uncached()
    with no_fx_cache, no_autograd_cache:
        got = torch.compile(_masks, fullgraph=True)(x.npu(), keep.npu(), y.npu())
    for g, r in zip(got, _masks(x, keep, y)):
        assert torch.equal(g.cpu(), r)
    if str(cpu_vec_isa.pick_vec_isa()) == "avx512":
        assert sources and all("VecMaskTo<bool, 1, float, 1>" in s for s in sources)

def test_compiled_attention_runs_the_kernel_eager_npu_runs():
    # npu's choice of attention kernel (csrc/backend/ops/attention.cpp) is asked while AOTAutograd traces sdpa's
    # composite on fake tensors: it must answer as for real ones, without tracing ops of its own into the graph.
    from torch._inductor.utils import run_and_get_code

    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    assert torch._fused_sdp_choice(q.npu(), k.npu(), v.npu()) == torch._fused_sdp_choice(q, k, v) != 0  # not math
    out, codes = run_and_get_code(torch.compile(sdpa, fullgraph=True), q.npu(), k.npu(), v.npu())
    torch.testing.assert_close(out.cpu(), sdpa(q, k, v), rtol=1e-4, atol=1e-5)
    assert any("_scaled_dot_product_flash_attention_for_cpu" in code for code in codes), codes
    assert not any("_fused_sdp_choice" in code or "bmm" in code for code in codes), codes


@pytest.mark.parametrize("undo", [False, True], ids=["applied", "undone"])
def test_fake_convolutions_are_laid_out_as_npu_runs_them(monkeypatch, undo):
    import torch._inductor.graph  # noqa: F401 (registers npu's Inductor backend, which applies the workarounds)
    import torch._subclasses.fake_impls as fake_impls
    from torch._subclasses.fake_tensor import FakeTensorMode

    if undo:
        for op in cpu_assumptions._CONVOLUTIONS:
            monkeypatch.setitem(fake_impls.op_implementations_dict, op, cpu_assumptions._fake_convolution)

    def backward(mode=None):
        with mode or contextlib.nullcontext():
            x = torch.randn(2, 8, 6, 6, device="npu").to(memory_format=torch.channels_last)
            w = torch.randn(16, 8, 3, 3, device="npu")
            grad = torch.randn(2, 16, 6, 6, device="npu").to(memory_format=torch.channels_last)
            out = torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
            grads = torch.ops.aten.convolution_backward(grad, x, w, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                        [True, True, False])
            return [out.stride(), grads[0].stride(), grads[1].stride()]

    real = backward()
    assert real[1] == (288, 1, 48, 8)  # channels last in, channels last out, as on the CPU
    FakeTensorMode.cache_clear()  # fake results are cached across modes: no entry of the other case
    try:
        fake = backward(FakeTensorMode())
    finally:
        FakeTensorMode.cache_clear()
    assert (fake != real) if undo else (fake == real), (fake, real)
    # What it is for: Inductor lays a ResNet's convolutions out channels last, and checks the gradients' strides.
    if not undo:
        _compile_grad(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1).relu().sum(), (2, 8, 6, 6),
                      (16, 8, 3, 3))


def test_dropout_in_npu_graphs_draws_from_aten_and_fuses_the_rest():
    """Dropout in an npu graph is rand_like from ATen (the npu generator) with the comparison and scaling fused into
    Inductor's kernels, not native_dropout as an extern op: right values and gradient, same seed same mask."""
    from torch._inductor.utils import run_and_get_code

    def f(x, w):
        return torch.nn.functional.dropout(x * w, p=0.3, training=True)

    x = torch.randn(64, 33).npu()
    w = torch.randn(33).npu().requires_grad_()
    compiled = torch.compile(f, fullgraph=True)
    torch.npu.manual_seed(7)
    no_fx_cache, no_autograd_cache = _uncached()
    with no_fx_cache, no_autograd_cache:
        out, code = run_and_get_code(compiled, x, w)
    assert "aten.rand_like" in code[0] and "native_dropout.default" not in code[0]
    out.sum().backward()
    kept = out.detach().cpu() != 0
    assert 0.6 < kept.float().mean().item() < 0.8
    expected = (x * w).detach().cpu() / 0.7
    torch.testing.assert_close(out.detach().cpu()[kept], expected[kept])
    torch.testing.assert_close(w.grad.cpu(), (kept * x.cpu()).sum(0) / 0.7)
    torch.npu.manual_seed(7)
    assert torch.equal(compiled(x, w).detach().cpu(), out.detach().cpu())
