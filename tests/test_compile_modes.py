"""torch.compile's modes on npu besides the default: `mode="max-autotune-no-cudagraphs"` against eager npu, its
kernels on the npu stream.

(`mode="reduce-overhead"` is tested with NPU graphs, in test_npu_graphs.py.) With max-autotune, Inductor 2.13 offers
npu's matrix multiplications only ATen's kernels (its C++ GEMM templates are for the "cpu" device, Triton's for GPUs),
so nothing is benchmarked: the mode compiles as the default does, with max-autotune's other settings.
"""

import copy

import torch


from compile_fixtures import fresh_dynamo, inductor_cache  # noqa: F401 (autouse fixtures)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 4))


def test_max_autotune_training_step_matches_eager_on_the_npu_stream():
    torch.manual_seed(0)
    eager = _mlp().npu()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, mode="max-autotune-no-cudagraphs", fullgraph=True)
    x = torch.randn(8, 16).npu()
    loss = compiled(x).square().mean()
    loss.backward()
    expected = eager(x).square().mean()
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected.cpu(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")

    # The compiled kernels are queued on the current stream: behind 0.3 s of device time, the input they read is
    # not yet written when the call returns, and an event recorded after the call has not completed.
    torch.npu.synchronize()
    torch.npu._sleep(300_000_000)
    y = torch.full_like(x, 0.25)
    out = compiled(y)  # with grad, as above: the same graph
    done = torch.npu.Event()
    done.record()
    assert not done.query()
    torch.npu.synchronize()
    assert done.query()
    torch.testing.assert_close(out.detach().cpu(), eager(y).detach().cpu(), rtol=1e-5, atol=1e-6)
