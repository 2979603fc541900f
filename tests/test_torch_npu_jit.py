"""torch_npu.jit.optimize: gelu in a TorchScript graph becomes torch_npu's npu::fast_gelu (torch_npu.fast_gelu)."""

import torch
import torch_npu
import torch_npu.jit


def _fast_gelu_cpu(x):
    return x * torch.sigmoid(1.702 * x)


def _gelu_of_square(x):
    return torch.nn.functional.gelu(x ** 2)


def test_optimize_rewrites_gelu_and_runs_fast_gelu(tmp_path):
    x = torch.randn(4, 5)
    # check_trace=False: the trace check would run the graph, and TorchScript keeps the plan of a graph it has run
    # (the rewrite then shows after torch.jit.save/load, as on torch_npu).
    jit_model = torch.jit.trace(_gelu_of_square, x.npu(), check_trace=False)
    torch_npu.jit.optimize(jit_model)
    kinds = [node.kind() for node in jit_model.graph.nodes()]
    assert "npu::fast_gelu" in kinds and "aten::gelu" not in kinds
    torch.testing.assert_close(jit_model(x.npu()).cpu(), _fast_gelu_cpu(x ** 2), rtol=1e-5, atol=1e-6)
    # A tanh-approximated gelu is not FastGelu's pattern: left as it is.
    tanh = torch.jit.trace(lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x.npu())
    torch_npu.jit.optimize(tanh)
    assert "npu::fast_gelu" not in [node.kind() for node in tanh.graph.nodes()]


def test_optimized_module_saves_and_loads(tmp_path):
    module = torch.jit.trace(torch.nn.GELU(), torch.randn(3).npu())
    torch_npu.jit.optimize(module)
    path = tmp_path / "fast_gelu.pt"
    torch.jit.save(module, str(path))
    loaded = torch.jit.load(str(path))
    x = torch.randn(3, 3)
    torch.testing.assert_close(loaded(x.npu()).cpu(), _fast_gelu_cpu(x), rtol=1e-5, atol=1e-6)


def test_fast_gelu_is_npu_fast_gelu_with_its_gradient():
    x = torch.randn(8, dtype=torch.float32, requires_grad=True)
    xn = x.detach().npu().requires_grad_()
    y = torch_npu.fast_gelu(xn)
    assert torch.equal(y.detach().cpu(), torch_npu.npu_fast_gelu(xn).detach().cpu())
    y.sum().backward()
    _fast_gelu_cpu(x).sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)
