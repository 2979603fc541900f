"""npu_fusion_attention's dropout in NPU graphs: the mask comes from the generator's (seed, offset) like every random
op's, graph-safe (CUDA's model, which torch_npu copies), so a forward with keep_prob < 1 captures, each replay draws
a new mask, the one eager draws at the same seed and offset, and the backward regenerates the replay's mask."""

import pytest
import torch
import torch_npu

KEEP = 0.7


def inputs(requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=gen) for _ in range(3))
    return [t.to("npu").requires_grad_(requires_grad) for t in (q, k, v)]


def attention(q, k, v):
    return torch_npu.npu_fusion_attention(q, k, v, 4, "BNSD", scale=0.35, keep_prob=KEEP)


def test_forward_replays_draw_new_masks_equal_to_eager():
    q, k, v = inputs()
    torch.npu.manual_seed(5)
    eager = [attention(q, k, v)[0].cpu() for _ in range(2)]
    assert not torch.equal(eager[0], eager[1])
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        out = attention(q, k, v)[0]
    torch.npu.manual_seed(5)
    for expected in eager:  # each replay takes the offset one eager call takes
        g.replay()
        assert torch.equal(out.cpu(), expected)


def eager_step(q, k, v, dy):
    out = attention(q, k, v)[0]
    grads = torch.autograd.grad(out, (q, k, v), dy)
    return [t.detach().cpu() for t in (out, *grads)]


def test_captured_forward_and_backward_match_eager():
    q, k, v = inputs(requires_grad=True)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to("npu")
    torch.npu.manual_seed(9)
    eager = [eager_step(q, k, v, dy) for _ in range(2)]
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        out = attention(q, k, v)[0]
        grads = torch.autograd.grad(out, (q, k, v), dy)
    torch.npu.manual_seed(9)
    for expected in eager:
        g.replay()
        got = [t.cpu() for t in (out, *grads)]
        for a, b in zip(got, expected):
            assert torch.equal(a, b)
    assert not torch.equal(eager[0][1], eager[1][1])


def test_eager_backward_after_a_replay_uses_the_replays_mask():
    q, k, v = inputs(requires_grad=True)
    dy = torch.ones(q.shape, device="npu")
    torch.npu.manual_seed(2)
    attention(q, k, v)  # the first replay's offset
    expected = eager_step(q, k, v, dy)
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        out = attention(q, k, v)[0]
    torch.npu.manual_seed(2)
    g.replay()
    g.replay()
    grads = torch.autograd.grad(out, (q, k, v), dy)
    assert torch.equal(out.detach().cpu(), expected[0])
    for a, b in zip(grads, expected[1:]):
        assert torch.equal(a.cpu(), b)


def test_grad_op_matches_the_cpu_path():
    # The mask is a function of (seed, offset): npu_fusion_attention_grad with the forward's ints equals the same
    # op on CPU tensors, and the autograd gradients equal both.
    q, k, v = inputs(requires_grad=True)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to("npu")
    out, smax, ssum, _, seed, offset, numels = attention(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), dy)
    kwargs = dict(softmax_max=smax, softmax_sum=ssum, scale_value=0.35, keep_prob=KEEP, seed=seed, offset=offset,
                  numels=numels)
    on_npu = torch_npu.npu_fusion_attention_grad(q.detach(), k.detach(), v.detach(), dy, 4, "BNSD", **kwargs)
    cpu_kwargs = {n: t.cpu() if torch.is_tensor(t) else t for n, t in kwargs.items()}
    on_cpu = torch.ops.npu.npu_fusion_attention_grad(q.detach().cpu(), k.detach().cpu(), v.detach().cpu(), dy.cpu(),
                                                     4, "BNSD", **cpu_kwargs)
    for a, b, c in zip(grads, on_npu[:3], on_cpu[:3]):
        assert torch.equal(a.cpu(), b.cpu())
        torch.testing.assert_close(b.cpu(), c, rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def _restore_rng():
    state = torch.npu.get_rng_state()
    yield
    torch.npu.set_rng_state(state)
