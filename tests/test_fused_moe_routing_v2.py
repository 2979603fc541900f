"""npu_moe_init_routing_v2 (csrc/fused/moe/init_routing_v2.cpp) against a reference written here from torch_npu's
documented equivalent (the stable sort of the experts in active_expert_range, gather / scatter row indices, per-expert
counts, drop/pad slots, static and dynamic int8 quantization), vLLM-Ascend's call forms, the routing then finalizing
identity, and torch.compile tracing it without a graph break.
"""

import pytest
import torch
import torch_npu


def ref_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1, expert_num=-1,
                        drop_pad_mode=0, expert_tokens_num_type=0, quant_mode=-1, active_expert_range=(),
                        row_idx_type=0):
    """(expanded_x, expanded_row_idx, counts, expanded_scale, routed rows): the rows torch_npu defines."""
    n, k = expert_idx.shape
    start, end = active_expert_range or (0, expert_num)
    flat = expert_idx.reshape(-1).long()
    inside = (flat >= start) & (flat < end)
    order = torch.argsort(torch.where(inside, flat, end + 1), stable=True)  # experts of the range first, stably
    available = int(inside.sum())
    experts = flat[order[:available]]
    counts = torch.bincount(experts - start, minlength=end - start)
    if expert_tokens_num_type == 0:
        counts = counts.cumsum(0)
    elif expert_tokens_num_type == 2:
        ids = torch.nonzero(counts).flatten()
        counts = torch.zeros(expert_num, 2, dtype=torch.long)
        counts[:ids.numel(), 0] = ids + start
        counts[:ids.numel(), 1] = torch.bincount(experts - start, minlength=end - start)[ids]
    tokens = order[:available] // k
    if drop_pad_mode == 1:
        slot = torch.cat([torch.arange(int(c)) for c in torch.bincount(experts, minlength=expert_num)])
        keep = slot < expert_capacity
        dest = torch.where(keep, experts * expert_capacity + slot, -1)
        rows = expert_num * expert_capacity
    else:
        rows = n * k if active_num <= 0 else min(active_num, n * k)
        dest = torch.arange(available)
        dest[min(rows, available):] = -1
    row_idx = torch.full((n * k,), -1, dtype=torch.int32)
    if row_idx_type == 1:
        row_idx[:available] = order[:available].int()
    else:
        row_idx[order[:available]] = (dest if drop_pad_mode == 1 else torch.arange(available)).int()
    routed = dest[dest >= 0]
    src = x[tokens[dest >= 0]]
    out_scale = torch.zeros(rows)
    if quant_mode == -1:
        out = torch.zeros(rows, x.shape[1], dtype=x.dtype)
        out[routed] = src
        if scale is not None:
            out_scale[routed] = scale[tokens[dest >= 0]]
    elif quant_mode == 0:  # the documented reference: float16 steps
        q = torch.round(src.half() * scale.half()[0] + offset.half()[0]).clamp(-128, 127)
        out = torch.zeros(rows, x.shape[1], dtype=torch.int8)
        out[routed] = q.to(torch.int8)
    else:
        v = src.float()
        if scale is not None:
            v = v * (scale[0] if scale.shape[0] == 1 else scale[experts[dest >= 0] - start])
        s = v.abs().amax(-1, keepdim=True) / 127
        out = torch.zeros(rows, x.shape[1], dtype=torch.int8)
        out[routed] = torch.round(v / s).to(torch.int8)
        out_scale[routed] = s.flatten()
    if drop_pad_mode == 1:
        out = out.view(expert_num, expert_capacity, -1)
    return out, row_idx, counts, out_scale, routed


def check(x, expert_idx, **kw):
    want = ref_init_routing_v2(x, expert_idx, **{k: v for k, v in kw.items() if k != "expert_tokens_num_flag"})
    npu_kw = {k: (v.npu() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    got = [t.cpu() for t in torch_npu.npu_moe_init_routing_v2(x.npu(), expert_idx.npu(), **npu_kw)]
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    start, end = kw.get("active_expert_range") or (0, kw["expert_num"])
    available = int(((expert_idx >= start) & (expert_idx < end)).sum())
    if kw.get("row_idx_type", 0) == 1:  # scatter indices: torch_npu defines the routed ones only
        assert torch.equal(got[1][:available], want[1][:available])
    else:
        assert torch.equal(got[1], want[1])
    assert got[2].dtype == torch.int64 and torch.equal(got[2], want[2])
    assert got[3].dtype == torch.float32 and got[3].shape == want[3].shape
    torch.testing.assert_close(got[3], want[3], atol=0, rtol=0)
    return got


def routing_case(n=12, k=3, h=16, experts=8, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.randn(n, h).to(dtype), torch.randint(0, experts, (n, k), dtype=torch.int32)


@pytest.mark.parametrize("row_idx_type", [0, 1])
@pytest.mark.parametrize("tokens_num_type", [0, 1, 2])
def test_dropless_routing(row_idx_type, tokens_num_type):
    x, idx = routing_case()
    check(x, idx, active_num=36, expert_num=8, expert_tokens_num_type=tokens_num_type, expert_tokens_num_flag=True,
          row_idx_type=row_idx_type)
    # An active expert range (expert parallelism: this rank's experts) and fewer active rows.
    check(x, idx, active_num=0, expert_num=8, expert_tokens_num_type=tokens_num_type, expert_tokens_num_flag=True,
          active_expert_range=[2, 6], row_idx_type=row_idx_type)
    check(x, idx, active_num=10, expert_num=8, expert_tokens_num_type=tokens_num_type, active_expert_range=[1, 8],
          row_idx_type=row_idx_type)


def test_documented_example_and_unquantized_scale():
    # torch_npu's example: 1 token, 475 experts chosen among 226 in range [23, 35), a (bs,) scale carried per row.
    torch.manual_seed(1)
    x, idx, scale = torch.randn(1, 613), torch.randint(0, 226, (1, 475), dtype=torch.int32), torch.randn(1)
    got = check(x, idx, scale=scale, active_num=475, expert_capacity=-1, expert_num=226, drop_pad_mode=0,
                expert_tokens_num_type=1, expert_tokens_num_flag=True, active_expert_range=[23, 35], quant_mode=-1,
                row_idx_type=0)
    assert got[0].shape == (475, 613) and got[2].shape == (12,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dynamic_quant(dtype):
    x, idx = routing_case(dtype=dtype, seed=2)
    check(x, idx, active_num=36, expert_num=8, expert_tokens_num_type=1, quant_mode=1)
    smooth = torch.rand(4, 16) + 0.5  # one smooth-scale row per expert of the range
    check(x, idx, scale=smooth, expert_num=8, expert_tokens_num_type=1, quant_mode=1, active_expert_range=[2, 6])
    check(x, idx, scale=smooth[:1], expert_num=8, expert_tokens_num_type=1, quant_mode=1)


def test_static_quant():
    x, idx = routing_case(seed=3)
    check(x * 40, idx, scale=torch.tensor([1.37]), offset=torch.tensor([-2.6]), expert_num=8, quant_mode=0)


def test_drop_pad():
    x, idx = routing_case(n=16, k=2, experts=4, seed=4)
    scale = torch.randn(16)
    got = check(x, idx, scale=scale, expert_capacity=3, expert_num=4, drop_pad_mode=1, expert_tokens_num_type=1,
                expert_tokens_num_flag=True)
    assert got[0].shape == (4, 3, 16) and (got[1] == -1).any()  # some tokens dropped, counts before the capacity
    check(x, idx, expert_capacity=5, expert_num=4, drop_pad_mode=1, expert_tokens_num_type=1, quant_mode=1)


def test_vllm_ascend_allgather_dispatch_grouped_matmul_and_combine():
    # vLLM-Ascend's TokenDispatcherWithAllGather (vllm_ascend/ops/moe/token_dispatcher.py): token_dispatch calls
    # npu_moe_init_routing_v2(hidden_states, topk_ids, active_num=num_tokens * top_k, expert_num=global_num_experts,
    # expert_tokens_num_type=1, expert_tokens_num_flag=True, active_expert_range=[first_expert_idx,
    # last_expert_idx], quant_mode=-1), the experts run as npu_grouped_matmul with the counts as group_list
    # (group_list_type=1), and token_combine calls npu_moe_token_unpermute(permuted_tokens=hidden_states,
    # sorted_indices=torch.abs(expanded_row_idx), probs=topk_weights), the weights of other ranks' experts masked.
    torch.manual_seed(5)
    num_tokens, top_k, hidden, ffn, experts, first, last = 10, 2, 8, 6, 8, 2, 6
    x = torch.randn(num_tokens, hidden)
    topk_weights, topk_ids, _ = torch_npu.npu_moe_gating_top_k_softmax(torch.randn(num_tokens, experts).npu(), k=top_k)
    local = (topk_ids >= first) & (topk_ids < last)
    topk_weights = topk_weights * local
    w = torch.randn(last - first, hidden, ffn)
    sorted_hidden, expanded_row_idx, expert_tokens, _ = torch_npu.npu_moe_init_routing_v2(
        x.npu(), topk_ids, active_num=num_tokens * top_k, expert_num=experts, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, active_expert_range=[first, last], quant_mode=-1)
    h = torch_npu.npu_grouped_matmul([sorted_hidden], [w.npu()], group_list=expert_tokens.to(torch.int64),
                                     split_item=2, group_type=0, group_list_type=1)[0]
    out = torch_npu.npu_moe_token_unpermute(permuted_tokens=h, sorted_indices=torch.abs(expanded_row_idx),
                                            probs=topk_weights)
    want = torch.zeros(num_tokens, ffn, dtype=torch.float64)
    ids, wts = topk_ids.cpu(), topk_weights.cpu().double()
    for t in range(num_tokens):
        for j in range(top_k):
            if first <= ids[t, j] < last:
                want[t] += wts[t, j] * (x[t].double() @ w[ids[t, j] - first].double())
    torch.testing.assert_close(out.cpu().double(), want, atol=1e-4, rtol=1e-4)


def test_routing_then_finalize_is_the_weighted_identity():
    # The token-major gather map (row_idx_type 0) is what npu_moe_finalize_routing(drop_pad_mode=2) reads: routing,
    # then finalizing with the gate's weights, gives each token times the sum of its weights.
    torch.manual_seed(6)
    x = torch.randn(9, 12, dtype=torch.bfloat16)
    weights, ids, _ = torch_npu.npu_moe_gating_top_k_softmax(torch.randn(9, 6).npu(), k=3)
    expanded, row_idx, _, _ = torch_npu.npu_moe_init_routing_v2(x.npu(), ids, active_num=27, expert_num=6,
                                                                 expert_tokens_num_type=1, row_idx_type=0)
    out = torch_npu.npu_moe_finalize_routing(expanded, None, None, None, weights, row_idx, None, drop_pad_mode=2)
    torch.testing.assert_close(out.cpu().float(), x.float() * weights.cpu().sum(-1, keepdim=True), atol=2e-2,
                               rtol=2e-2)


def test_errors_at_the_call():
    x, idx = routing_case()
    xn, idn = x.npu(), idx.npu()
    with pytest.raises(RuntimeError, match="expert_idx must be int32"):
        torch_npu.npu_moe_init_routing_v2(xn, idn.long(), expert_num=8)
    with pytest.raises(RuntimeError, match="The x should be 2-Dimension"):
        torch_npu.npu_moe_init_routing_v2(xn[0], idn, expert_num=8)
    with pytest.raises(RuntimeError, match="active_expert_range must be"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, active_expert_range=[4, 9])
    with pytest.raises(RuntimeError, match="drop_pad_mode must be in"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, drop_pad_mode=2)
    with pytest.raises(RuntimeError, match="expert_capacity must be in"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, drop_pad_mode=1, expert_tokens_num_type=1)
    with pytest.raises(RuntimeError, match="static quantization .* needs scale and offset"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=0)
    with pytest.raises(RuntimeError, match=r"dynamic quantization takes a float32 scale of shape \(1, H\)"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=1, scale=torch.ones(3, 16).npu())
    with pytest.raises(NotImplementedError, match="quant_mode 3"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=3)


def test_compile_fullgraph():
    torch._dynamo.reset()
    x, idx = routing_case(seed=7)

    def f(x, idx):
        expanded, row_idx, counts, scale = torch_npu.npu_moe_init_routing_v2(
            x, idx, active_num=36, expert_num=8, expert_tokens_num_type=1, expert_tokens_num_flag=True,
            active_expert_range=[0, 8], quant_mode=1)
        return expanded.float() * scale.unsqueeze(-1), row_idx, counts.cumsum(0)

    args = (x.npu(), idx.npu())
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    for g, r in zip(got, f(*args)):
        torch.testing.assert_close(g.cpu(), r.cpu())
