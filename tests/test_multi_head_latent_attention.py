"""torch_npu.atb.npu_multi_head_latent_attention (ATB's MLA paged decode attention, vLLM-Ascend's MLA backend):
against a composite reference in float64 over the gathered cache (read back), its overloads (.out, the return_lse
form, .lse_out, the workspace query), its refusals, torch.compile, and an NPU graph captured with one list of context
lengths and replayed with another (the built-in handler of npu_multi_head_latent_attention.out)."""

import pytest
import torch
import torch_npu

HEADS, BLOCK, DN, DR = 8, 4, 32, 8


def reference(q_nope, q_rope, ctkv, k_rope, table, lens, scale, kv_heads=1):
    """Per token: softmax(scale * (q_nope ctkv^T + q_rope k_rope^T)) ctkv over its first lens[i] cached tokens,
    float64, the probabilities rounded to the query's dtype as ATB does; and each row's log-sum-exp."""
    outs, lses = [], []
    for i, n in enumerate(lens):
        pos = torch.arange(n)
        blocks, slots = table[i].long()[pos // ctkv.shape[1]], pos % ctkv.shape[1]
        c, kr = ctkv[blocks, slots].double(), k_rope[blocks, slots].double()  # [n, KV_N, D]
        qn = q_nope[i].double().view(kv_heads, -1, q_nope.shape[-1])
        qr = q_rope[i].double().view(kv_heads, -1, q_rope.shape[-1])
        s = (torch.einsum("kgd,lkd->kgl", qn, c) + torch.einsum("kgd,lkd->kgl", qr, kr)) * scale
        p = torch.softmax(s, -1).to(q_nope.dtype).double()
        outs.append(torch.einsum("kgl,lkd->kgd", p, c).reshape(q_nope.shape[1], -1))
        lses.append(torch.logsumexp(s, -1).reshape(-1, 1))
    return torch.stack(outs), torch.stack(lses)


def inputs(dtype=torch.float16, tokens=3, blocks=12, kv_heads=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    q_nope = torch.randn(tokens, HEADS, DN, generator=g).to(dtype)
    q_rope = torch.randn(tokens, HEADS, DR, generator=g).to(dtype)
    ctkv = torch.randn(blocks, BLOCK, kv_heads, DN, generator=g).to(dtype)
    k_rope = torch.randn(blocks, BLOCK, kv_heads, DR, generator=g).to(dtype)
    table = torch.randperm(blocks, generator=g)[: tokens * 4].view(tokens, 4).int()  # blocks out of order
    return q_nope, q_rope, ctkv, k_rope, table


def npu(*tensors):
    return [t.npu() for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_against_the_composite(dtype):
    q_nope, q_rope, ctkv, k_rope, table = inputs(dtype)
    lens, scale = [13, 1, 16], 0.17
    expected, expected_lse = reference(q_nope, q_rope, ctkv, k_rope, table, lens, scale)
    out = torch_npu.atb.npu_multi_head_latent_attention(*npu(q_nope, q_rope, ctkv, k_rope, table), lens, HEADS,
                                                         scale, 1)
    assert out.dtype == dtype and out.shape == q_nope.shape and out.device.type == "npu"
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(out.cpu().double(), expected, atol=tol, rtol=tol)

    # output=: .out, written in place; return_lse: the row log-sum-exps, [T, N, 1] in q_rope's dtype
    given = torch.zeros(q_nope.shape, dtype=dtype).npu()
    result = torch_npu.atb.npu_multi_head_latent_attention(*npu(q_nope, q_rope, ctkv, k_rope, table), lens, HEADS,
                                                            scale, 1, output=given, cache_mode="krope_ctkv")
    assert result.data_ptr() == given.data_ptr()
    torch.testing.assert_close(given.cpu(), out.cpu(), atol=0, rtol=0)
    out2, lse = torch_npu.atb.npu_multi_head_latent_attention(*npu(q_nope, q_rope, ctkv, k_rope, table), lens, HEADS,
                                                               scale, 1, True, calc_type="calc_type_ring")
    assert lse.shape == (3, HEADS, 1) and lse.dtype == dtype
    torch.testing.assert_close(out2.cpu(), out.cpu(), atol=0, rtol=0)
    torch.testing.assert_close(lse.cpu().double(), expected_lse, atol=5e-2, rtol=1e-2)
    _, no_lse = torch_npu.atb.npu_multi_head_latent_attention(*npu(q_nope, q_rope, ctkv, k_rope, table), lens, HEADS,
                                                               scale, 1, False)
    assert no_lse is None


def test_grouped_heads_lse_out_and_empty_context():
    q_nope, q_rope, ctkv, k_rope, table = inputs(kv_heads=2, seed=1)
    lens, scale = [0, 9, 16], 0.2
    expected, expected_lse = reference(q_nope[1:], q_rope[1:], ctkv, k_rope, table[1:], lens[1:], scale, kv_heads=2)
    out, lse = torch.empty(q_nope.shape, dtype=torch.half).npu(), torch.empty(3, HEADS, 1).npu()
    workspace = torch_npu.atb._npu_multi_head_latent_attention_get_workspace(
        *npu(q_nope, q_rope, ctkv, k_rope, table), lens, HEADS, scale, 2, True)
    assert workspace.dtype == torch.uint8 and workspace.device.type == "npu"
    torch.ops.atb.npu_multi_head_latent_attention.lse_out(*npu(q_nope, q_rope, ctkv, k_rope, table), lens, HEADS,
                                                          scale, 2, True, workspace=workspace, output=out, lse=lse)
    torch.testing.assert_close(out[1:].cpu().double(), expected, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse[1:].cpu().double(), expected_lse, atol=1e-4, rtol=1e-4)
    assert out[0].cpu().eq(0).all() and lse[0].cpu().eq(float("-inf")).all()  # no context: zeros, no weight


@pytest.mark.parametrize("kwargs, message", [
    ({"cache_mode": "int8_nzcache"}, "cache_mode 'int8_nzcache'.*not supported by softnpu"),
    ({"cache_mode": "nz"}, "Unsupported cache_mode value: 'nz'"),
    ({"mask_type": "mask_type_spec"}, "mask_type 'mask_type_spec'"),
    ({"calc_type": "calc_type_spec", "qseqlen": [1, 1, 1]}, "calc_type 'calc_type_spec'"),
    ({"lens": [13, 1, 17]}, r"context_lens\[2\] = 17 must be in \[0, 16\]"),
    ({"lens": [1, 1]}, "context_lens must hold batch = 3 lengths"),
    ({"heads": 6}, "q_nope must be"),
])
def test_refusals_at_the_call(kwargs, message):
    q_nope, q_rope, ctkv, k_rope, table = inputs()
    lens, heads = kwargs.pop("lens", [1, 1, 1]), kwargs.pop("heads", HEADS)
    for device in ("npu", "meta"):
        args = [t.to(device) for t in (q_nope, q_rope, ctkv, k_rope, table)]
        with pytest.raises(RuntimeError, match=message):
            torch_npu.atb.npu_multi_head_latent_attention(*args, lens, heads, 0.1, 1, **kwargs)


def test_compiles_through_its_meta_kernel():
    q_nope, q_rope, ctkv, k_rope, table = npu(*inputs(seed=2))

    def step(q_nope, q_rope):
        return torch_npu.atb.npu_multi_head_latent_attention(q_nope * 2, q_rope, ctkv, k_rope, table, [5, 16, 2],
                                                             HEADS, 0.1, 1) + 1

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(q_nope, q_rope).cpu(), step(q_nope, q_rope).cpu(), atol=0, rtol=0)


def test_graph_replay_with_new_context_lens():
    q_nope, q_rope, ctkv, k_rope, table = inputs(seed=3)
    args = npu(q_nope, q_rope, ctkv, k_rope, table)
    out = torch.zeros(q_nope.shape, dtype=torch.half).npu()
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, stream=torch.npu.Stream(), auto_dispatch_capture=True):
        torch_npu.atb.npu_multi_head_latent_attention(*args, [4, 4, 4], HEADS, 0.3, 1, output=out)
    graph.replay()
    torch.testing.assert_close(out.cpu().double(), reference(q_nope, q_rope, ctkv, k_rope, table, [4, 4, 4], 0.3)[0],
                               atol=2e-3, rtol=2e-3)
    graph.update(cpu_update_input=[{"context_lens": [11, 2, 16]}])
    graph.replay()
    torch.testing.assert_close(out.cpu().double(),
                               reference(q_nope, q_rope, ctkv, k_rope, table, [11, 2, 16], 0.3)[0],
                               atol=2e-3, rtol=2e-3)


def test_vllm_ascend_task_group_update_with_lse():
    """vLLM-Ascend's MLA decode under an NPU graph: captured in a task group with the ring calc type (output and lse
    given, the workspace from the query op, lengths as an int32 host tensor), then the group re-recorded with the
    next step's lengths on an update stream."""
    q_nope, q_rope, ctkv, k_rope, table = inputs(torch.bfloat16, seed=5)
    args = npu(q_nope, q_rope, ctkv, k_rope, table)
    out, lse = torch.zeros(q_nope.shape, dtype=torch.bfloat16).npu(), torch.zeros(3, HEADS, 1).npu()
    kwargs = dict(return_lse=True, calc_type="calc_type_ring")
    lens = torch.tensor([4, 4, 4], dtype=torch.int32)
    workspace = torch_npu.atb._npu_multi_head_latent_attention_get_workspace(*args, lens, HEADS, 0.3, 1, **kwargs)
    graph, stream = torch.npu.NPUGraph(), torch.npu.Stream()
    with torch.npu.graph(graph, stream=stream):
        torch.npu.graph_task_group_begin(stream)
        torch_npu.atb.npu_multi_head_latent_attention(*args, lens, HEADS, 0.3, 1, **kwargs, workspace=workspace,
                                                      output=out, lse=lse)
        handle = torch.npu.graph_task_group_end(stream)
    update = torch.npu.Stream()
    with torch.npu.stream(update):
        torch.npu.graph_task_update_begin(update, handle)
        torch_npu.atb.npu_multi_head_latent_attention(*args, torch.tensor([16, 7, 1], dtype=torch.int32), HEADS, 0.3,
                                                      1, **kwargs, workspace=workspace, output=out, lse=lse)
        torch.npu.graph_task_update_end(update)
    graph.replay()
    want, want_lse = reference(q_nope, q_rope, ctkv, k_rope, table, [16, 7, 1], 0.3)
    torch.testing.assert_close(out.cpu().double(), want, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse.cpu().double(), want_lse, atol=1e-4, rtol=1e-4)
