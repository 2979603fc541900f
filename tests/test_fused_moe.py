"""torch_npu's MoE fused ops (csrc/fused/moe/): npu_grouped_matmul, npu_moe_token_permute / unpermute and
npu_moe_token_permute_with_routing_map.

One reference per op, written here with ATen ops in float64 on the CPU (for the backward, autograd of that
reference); the op on npu (and on the CPU, its kernel) is compared with it, forward and backward, in float32 and the
half dtypes; bad arguments raise at the call; torch.compile traces every op with fullgraph=True. The client call
forms are the libraries' own (file cited at each).
"""

import pytest
import torch
import torch_npu

TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=1e-2, rtol=1e-2),
       torch.bfloat16: dict(atol=6e-2, rtol=6e-2)}
HALF = [torch.float16, torch.bfloat16]


def leaf(t, device="npu"):
    return t.detach().to(device).requires_grad_()


# ------------------------------------------------------------------------------------------------ references


def ref_grouped_matmul(x, w, counts, bias=None):
    """Rows of x in consecutive groups of counts, group g times w[g] (+ bias[g]); rows past the groups are zero."""
    out = x.new_zeros(x.shape[0], w.shape[-1])
    row = 0
    for g, c in enumerate(counts):
        out[row:row + c] = x[row:row + c] @ w[g] + (bias[g] if bias is not None else 0)
        row += c
    return out


def ref_permute(tokens, indices, num_out_tokens=None):
    topk = 1 if indices.dim() == 1 else indices.shape[1]
    order = torch.argsort(indices.reshape(-1), stable=True)
    rows = order.numel() if not num_out_tokens else min(num_out_tokens, order.numel())
    return tokens.index_select(0, order[:rows] // topk), torch.argsort(order, stable=True).int()


def ref_unpermute(permuted, sorted_indices, probs=None):
    topk = 1 if probs is None else probs.shape[1]
    pad = permuted.new_zeros(sorted_indices.numel() - permuted.shape[0], permuted.shape[1])
    rows = torch.cat([permuted, pad]).index_select(0, sorted_indices.long()).view(-1, topk, permuted.shape[1])
    return (rows * probs.unsqueeze(-1) if probs is not None else rows).sum(1)


def ref_permute_routing_map(tokens, routing_map, probs):
    """Megatron's permute by routing map (experts in order, tokens in order within an expert)."""
    num_tokens, num_experts = routing_map.shape
    rmap = routing_map.T.contiguous()
    sorted_indices = torch.arange(num_tokens).expand(num_experts, -1).masked_select(rmap)
    return tokens.index_select(0, sorted_indices), probs.T.contiguous().masked_select(rmap), sorted_indices


def moe_case(tokens=24, hidden=16, ffn=12, experts=4, seed=0):
    torch.manual_seed(seed)
    counts = torch.tensor([5, 0, 11, 6])[:experts]
    return torch.randn(tokens, hidden), torch.randn(experts, hidden, ffn), counts


# ------------------------------------------------------------------------------------------------ grouped matmul


@pytest.mark.parametrize("form", ["cumsum tensor", "counts tensor", "int list", "weight list"])
def test_grouped_matmul_m_axis_forms_forward_and_backward(form):
    x, w, counts = moe_case()
    bias = torch.randn(w.shape[0], w.shape[-1])
    ref_x, ref_w, ref_b = leaf(x.double(), "cpu"), leaf(w.double(), "cpu"), leaf(bias.double(), "cpu")
    ref = ref_grouped_matmul(ref_x, ref_w, counts.tolist(), ref_b)
    dy = torch.randn(ref.shape)
    ref.backward(dy.double())
    xs, ws, bs = leaf(x), leaf(w), leaf(bias)
    if form == "cumsum tensor":
        y = torch_npu.npu_grouped_matmul([xs], [ws], bias=[bs], group_list=counts.cumsum(0).npu(), split_item=2,
                                         group_type=0, group_list_type=0)[0]
    elif form == "counts tensor":
        y = torch_npu.npu_grouped_matmul([xs], [ws], bias=[bs], group_list=counts.npu(), split_item=3,
                                         group_type=0, group_list_type=1)[0]
    elif form == "int list":  # the .List overload: cumulative ints, group_type None
        y = torch_npu.npu_grouped_matmul([xs], [ws], bias=[bs], group_list=counts.cumsum(0).tolist(), split_item=3)[0]
    else:  # one [K, N] weight and one [N] bias per group
        y = torch_npu.npu_grouped_matmul([xs], list(ws.unbind(0)), bias=list(bs.unbind(0)),
                                         group_list=counts.cumsum(0).npu(), split_item=2, group_type=0)[0]
    y.backward(dy.npu())
    torch.testing.assert_close(y.cpu().double(), ref.detach(), **TOL[torch.float32])
    for got, want in ((xs, ref_x), (ws, ref_w), (bs, ref_b)):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, **TOL[torch.float32])


def test_grouped_matmul_per_tensor_groups_and_split_items():
    torch.manual_seed(1)
    xs = [torch.randn(3, 8), torch.randn(5, 8)]
    ws = [torch.randn(8, 4), torch.randn(8, 6)]
    want = [a @ b for a, b in zip(xs, ws)]
    for device in ("cpu", "npu"):
        got = torch_npu.npu_grouped_matmul([t.to(device) for t in xs], [t.to(device) for t in ws], split_item=0)
        assert [g.shape for g in got] == [(3, 4), (5, 6)]
        for g, r in zip(got, want):
            torch.testing.assert_close(g.cpu(), r)
    # split_item 1 with a list group_list: one output per group.
    x, w, counts = moe_case()
    outs = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=counts.cumsum(0).tolist(), split_item=1)
    assert [o.shape[0] for o in outs] == counts.tolist()
    torch.testing.assert_close(torch.cat([o.cpu() for o in outs]), ref_grouped_matmul(x, w, counts.tolist())[:22])


def test_grouped_matmul_k_axis_is_the_weight_gradient():
    # torchtitan-npu's grouped_mm for dw: x = activations^T [IN, SEQ], weight = grad [SEQ, OUT], offs splitting SEQ.
    x, w, counts = moe_case()
    dy = torch.randn(x.shape[0], w.shape[-1])
    got = torch_npu.npu_grouped_matmul([x.t().npu()], [dy.npu()], group_list=counts.cumsum(0).npu(),
                                       group_list_type=0, split_item=2, group_type=2)[0]
    want = torch.stack([x[a:b].t() @ dy[a:b] for a, b in zip([0, *counts.cumsum(0)[:-1].tolist()],
                                                             counts.cumsum(0).tolist())])
    assert got.shape == (4, 16, 12)
    torch.testing.assert_close(got.cpu(), want, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", HALF)
def test_grouped_matmul_half(dtype):
    x, w, counts = moe_case()
    x, w = x.to(dtype), w.to(dtype)
    got = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=counts.npu(), split_item=3, group_type=0,
                                       group_list_type=1)[0]
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu().double(), ref_grouped_matmul(x.double(), w.double(), counts.tolist()),
                               **TOL[dtype])
    wide = torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=counts.npu(), split_item=3, group_type=0,
                                        group_list_type=1, output_dtype=torch.float32)[0]
    assert wide.dtype == torch.float32


def test_grouped_matmul_float32_gemm_shapes_forward_and_backward():
    # Products large enough for oneDNN's float32 GEMM (csrc/fused/gemm.h), groups cut into several row tiles, the
    # backward's transposed weights (dx) and row ranges of transposed activations (the k-axis dw tiles); rows past
    # the last group stay zero.
    torch.manual_seed(3)
    counts = [300, 0, 700, 137]
    x, w = torch.randn(1200, 320), torch.randn(4, 320, 96)
    rx, rw = leaf(x.double(), "cpu"), leaf(w.double(), "cpu")
    ref = ref_grouped_matmul(rx, rw, counts)
    dy = torch.randn(ref.shape)
    ref.backward(dy.double())
    xs, ws = leaf(x), leaf(w)
    y = torch_npu.npu_grouped_matmul([xs], [ws], group_list=torch.tensor(counts).npu(), split_item=3, group_type=0,
                                     group_list_type=1)[0]
    y.backward(dy.npu())
    torch.testing.assert_close(y.detach().cpu().double(), ref.detach(), atol=1e-3, rtol=1e-4)
    assert torch.count_nonzero(y[sum(counts):]).item() == 0
    for got, want in ((xs, rx), (ws, rw)):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=1e-3, rtol=1e-4)


def test_grouped_matmul_verl_moe_expert_forward_and_backward():
    # verl/models/transformers/npu_patch.py (Qwen3-MoE experts on npu): an autograd.Function whose forward is
    # npu_grouped_matmul([x], [w], group_list=counts, split_item=2, group_type=0, group_list_type=1) and whose
    # backward calls it again with the transposed weight (dx) and the k-axis form (dw).
    class GmmFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, group_list):
            ctx.save_for_backward(x, weight, group_list)
            return torch_npu.npu_grouped_matmul([x], [weight], bias=None, group_list=group_list, split_item=2,
                                                group_type=0, group_list_type=1)[0]

        @staticmethod
        def backward(ctx, grad):
            x, weight, group_list = ctx.saved_tensors
            dx = torch_npu.npu_grouped_matmul([grad], [weight.transpose(1, 2)], bias=None, group_list=group_list,
                                              split_item=2, group_type=0, group_list_type=1)[0]
            dw = torch_npu.npu_grouped_matmul([x.t()], [grad], bias=None, group_list=group_list, split_item=3,
                                              group_type=2, group_list_type=1)[0]
            return dx, dw, None

    x, w, counts = moe_case()
    down = torch.randn(w.shape[0], w.shape[-1] // 2, w.shape[1])
    xs, ws, ds = leaf(x), leaf(w), leaf(down)
    out = GmmFunction.apply(torch_npu.npu_swiglu(GmmFunction.apply(xs, ws, counts.npu())), ds, counts.npu())
    out.sum().backward()
    rx, rw, rd = (leaf(t.double(), "cpu") for t in (x, w, down))
    up = ref_grouped_matmul(rx, rw, counts.tolist())
    a, b = up.chunk(2, -1)
    ref = ref_grouped_matmul(torch.nn.functional.silu(a) * b, rd, counts.tolist())
    ref.sum().backward()
    torch.testing.assert_close(out.detach().cpu().double(), ref.detach(), atol=1e-3, rtol=1e-3)
    for got, want in ((xs, rx), (ws, rw), (ds, rd)):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=1e-3, rtol=1e-3)


def test_grouped_matmul_errors_at_the_call():
    x, w, counts = moe_case()
    xn, wn, gl = x.npu(), w.npu(), counts.npu()
    with pytest.raises(RuntimeError, match="Requires manual passing group_type"):
        torch_npu.npu_grouped_matmul([xn], [wn], group_list=gl, split_item=2)
    with pytest.raises(RuntimeError, match="group_type only supports -1, 0 and 2"):
        torch_npu.npu_grouped_matmul([xn], [wn], group_list=gl, split_item=2, group_type=1)
    with pytest.raises(RuntimeError, match="split_item must be 0, 1, 2 or 3"):
        torch_npu.npu_grouped_matmul([xn], [wn], group_list=gl, split_item=4, group_type=0)
    with pytest.raises(RuntimeError, match="x's last dim 12 must equal weight's K 16"):
        torch_npu.npu_grouped_matmul([torch.randn(24, 12).npu()], [wn], group_list=gl, split_item=2, group_type=0)
    with pytest.raises(RuntimeError, match="need a quantized x or weight"):
        torch_npu.npu_grouped_matmul([xn], [wn], scale=[torch.ones(12).npu()], group_list=gl, split_item=2,
                                     group_type=0)
    # A Tensor group_list's values are the kernel's to check: an error at the next synchronizing call.
    bad = torch_npu.npu_grouped_matmul([xn], [wn], group_list=torch.tensor([5, 3, 30, 40]).npu(), split_item=2,
                                       group_type=0)[0]
    with pytest.raises(RuntimeError, match="npu_grouped_matmul: group_list must be non-negative and non-decreasing"):
        bad.cpu()


# ------------------------------------------------------------------------------------------------ permute


@pytest.mark.parametrize("topk", [1, 2])
def test_permute_unpermute_forward_backward_and_identity(topk):
    torch.manual_seed(2)
    tokens, experts = torch.randn(12, 8), 4
    indices = torch.randint(0, experts, (12, topk)) if topk > 1 else torch.randint(0, experts, (12,))
    probs = torch.softmax(torch.randn(12, topk), -1)
    rt, rp = leaf(tokens.double(), "cpu"), leaf(probs.double(), "cpu")
    permuted, sorted_indices = ref_permute(rt, indices)
    ref = ref_unpermute(permuted, sorted_indices, rp)
    dy = torch.randn(ref.shape)
    ref.backward(dy.double())
    for device in ("cpu", "npu"):
        t, p = leaf(tokens, device), leaf(probs, device)
        got_p, got_s = torch_npu.npu_moe_token_permute(t, indices.to(device))
        assert got_s.dtype == torch.int32
        torch.testing.assert_close(got_s.cpu(), sorted_indices)
        torch.testing.assert_close(got_p.detach().cpu().double(), permuted.detach())
        out = torch_npu.npu_moe_token_unpermute(got_p, got_s, p)
        out.backward(dy.to(device))
        torch.testing.assert_close(out.detach().cpu().double(), ref.detach(), **TOL[torch.float32])
        torch.testing.assert_close(t.grad.cpu().double(), rt.grad, **TOL[torch.float32])
        torch.testing.assert_close(p.grad.cpu().double(), rp.grad, **TOL[torch.float32])
    # Probabilities summing to one per token: unpermute inverts permute.
    back = torch_npu.npu_moe_token_unpermute(*torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu()),
                                             probs.npu())
    torch.testing.assert_close(back.cpu(), tokens)


def test_permute_num_out_tokens_drops_the_last_rows():
    torch.manual_seed(3)
    tokens, indices = torch.randn(10, 4), torch.randint(0, 3, (10, 2))
    got, _ = torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu(), num_out_tokens=15)
    assert got.shape == (15, 4)
    torch.testing.assert_close(got.cpu(), ref_permute(tokens, indices, 15)[0])
    assert torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu(), num_out_tokens=-4)[0].shape == (16, 4)


@pytest.mark.parametrize("dtype", HALF)
def test_permute_unpermute_half(dtype):
    torch.manual_seed(4)
    tokens, indices, probs = torch.randn(16, 32).to(dtype), torch.randint(0, 8, (16, 2)), torch.rand(16, 2)
    p, s = torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu())
    assert p.dtype == dtype
    torch.testing.assert_close(p.cpu(), ref_permute(tokens, indices)[0])
    out = torch_npu.npu_moe_token_unpermute(p, s, probs.npu())
    want = ref_unpermute(*ref_permute(tokens.double(), indices), probs.double())
    torch.testing.assert_close(out.cpu().double(), want, **TOL[dtype])


def test_permute_mindspeed_mm_eager_equivalence():
    # mindspeed_mm/fsdp/ops/moe_ops/permute.py: fused_permute(tokens, indices) = npu_moe_token_permute(tokens,
    # indices) replaces eager_permute (argsort, index_select, argsort).
    torch.manual_seed(5)
    tokens, indices = torch.randn(20, 6), torch.randint(0, 5, (20, 2))
    order = torch.argsort(indices.float().view(-1), stable=True)
    want = tokens.index_select(0, order // 2), torch.argsort(order.float(), stable=True).to(indices.dtype)
    got = torch_npu.npu_moe_token_permute(tokens.npu(), indices.npu())
    torch.testing.assert_close(got[0].cpu(), want[0])
    assert torch.equal(got[1].cpu().long(), want[1])


def test_permute_errors_at_the_call():
    tokens, indices = torch.randn(4, 3).npu(), torch.zeros(4, 2, dtype=torch.long).npu()
    with pytest.raises(RuntimeError, match="The dims of input tokens should be 2 dimensional"):
        torch_npu.npu_moe_token_permute(tokens[None], indices)
    with pytest.raises(RuntimeError, match="indices must be int32 or int64"):
        torch_npu.npu_moe_token_permute(tokens, indices.float())
    with pytest.raises(NotImplementedError, match="padded_mode=True is not supported"):
        torch_npu.npu_moe_token_permute(tokens, indices, padded_mode=True)
    with pytest.raises(RuntimeError, match="The dims of input sorted_indices should be 1 dimensional"):
        torch_npu.npu_moe_token_unpermute(tokens, indices.int())


@pytest.mark.parametrize("drop_and_pad", [False, True])
def test_permute_with_routing_map(drop_and_pad):
    torch.manual_seed(6)
    num_tokens, experts, topk = 8, 4, 2
    tokens = torch.randn(num_tokens, 5)
    routing_map = torch.zeros(num_tokens, experts, dtype=torch.bool).scatter_(
        1, torch.rand(num_tokens, experts).topk(topk, -1).indices, True)
    probs = torch.rand(num_tokens, experts) * routing_map
    t, p = leaf(tokens), leaf(probs)
    if drop_and_pad:
        capacity = 3
        got = torch_npu.npu_moe_token_permute_with_routing_map(t, routing_map.npu(), probs=p,
                                                               num_out_tokens=capacity * experts, drop_and_pad=True)
        sorted_indices = routing_map.T.to(torch.int8).argsort(dim=-1, descending=True, stable=True)[:, :capacity]
        flat = sorted_indices.reshape(-1)
        want = (tokens.index_select(0, flat),
                probs.T.reshape(-1).index_select(0, (torch.arange(experts)[:, None] * num_tokens + sorted_indices)
                                                 .reshape(-1)), flat)
    else:
        got = torch_npu.npu_moe_token_permute_with_routing_map(t, routing_map.npu(), probs=p,
                                                               num_out_tokens=num_tokens * topk)
        want = ref_permute_routing_map(tokens, routing_map, probs)
    torch.testing.assert_close(got[0].detach().cpu(), want[0])
    torch.testing.assert_close(got[1].detach().cpu(), want[1])
    assert got[2].dtype == torch.int32 and torch.equal(got[2].cpu().long(), want[2])
    dy, dp = torch.randn(got[0].shape), torch.randn(got[1].shape)
    ((got[0] * dy.npu()).sum() + (got[1] * dp.npu()).sum()).backward()
    want_t = torch.zeros_like(tokens).index_add_(0, want[2], dy)
    torch.testing.assert_close(t.grad.cpu(), want_t)
    if not drop_and_pad:
        want_p = torch.zeros(experts, num_tokens).masked_scatter_(routing_map.T, dp).T
        torch.testing.assert_close(p.grad.cpu(), want_p)


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_gating_top_k_softmax(dtype):
    torch.manual_seed(7)
    x = torch.randn(6, 8).to(dtype)
    finished = torch.tensor([False, True, False, False, True, False])
    want_y, want_idx = torch.softmax(x.double(), -1).topk(2)
    for device in ("cpu", "npu"):
        y, expert_idx, row_idx = torch_npu.npu_moe_gating_top_k_softmax(x.to(device), finished.to(device), k=2)
        assert y.dtype == dtype and expert_idx.dtype == torch.int32 and row_idx.dtype == torch.int32
        torch.testing.assert_close(y.cpu().double(), want_y, **TOL[dtype])
        expected_idx = want_idx.int().masked_fill(finished[:, None], 8)
        if dtype == torch.float32:
            assert torch.equal(expert_idx.cpu(), expected_idx)
        assert torch.equal(row_idx.cpu(), torch.arange(12, dtype=torch.int32).view(2, 6).t())
    assert torch_npu.npu_moe_gating_top_k_softmax(torch.randn(2, 3, 8).npu(), k=3)[0].shape == (2, 3, 3)
    with pytest.raises(RuntimeError, match="npu_moe_gating_top_k_softmax: k must be in"):
        torch_npu.npu_moe_gating_top_k_softmax(x.npu(), k=9)


def test_init_routing_after_gating():
    # vLLM-Ascend's MoE token dispatcher (its init_routing): row_idx = arange(num_tokens * top_k).view(top_k,
    # -1).permute(1, 0), then npu_moe_init_routing(hidden_states, row_idx=row_idx, expert_idx=topk_ids,
    # active_num=num_tokens); npu_moe_gating_top_k_softmax returns the same row_idx.
    torch.manual_seed(8)
    x, logits = torch.randn(6, 4), torch.randn(6, 8)
    _, expert_idx, row_idx = torch_npu.npu_moe_gating_top_k_softmax(logits.npu(), k=2)
    assert torch.equal(row_idx.cpu(), torch.arange(12, dtype=torch.int32).view(2, -1).permute(1, 0))
    got = torch_npu.npu_moe_init_routing(x.npu(), row_idx=row_idx, expert_idx=expert_idx, active_num=6)
    perm = torch.argsort(expert_idx.cpu().reshape(-1).long(), stable=True)
    src = row_idx.cpu().reshape(-1)[perm].long()
    want_row = torch.empty(12, dtype=torch.int32)
    want_row[src] = torch.arange(12, dtype=torch.int32)
    torch.testing.assert_close(got[0].cpu(), x[src % 6])
    assert torch.equal(got[1].cpu(), want_row)
    assert torch.equal(got[2].cpu(), expert_idx.cpu().reshape(-1)[perm])
    assert torch_npu.npu_moe_init_routing(x.npu(), row_idx, expert_idx, active_num=2)[0].shape == (4, 4)
    with pytest.raises(RuntimeError, match="npu_moe_init_routing: row_idx and expert_idx must be int32"):
        torch_npu.npu_moe_init_routing(x.npu(), row_idx.long(), expert_idx, active_num=6)


def test_finalize_routing_inverts_init_routing():
    # vLLM-Ascend's MoE token dispatcher: token_unpermutation's npu_moe_finalize_routing(expert_output, skip1=None,
    # skip2=None, bias=None, scales=topk_weights, expanded_src_to_dst_row=expanded_row_idx,
    # export_for_source_row=topk_ids) after init_routing: each token back, weighted by its gate.
    torch.manual_seed(9)
    x, logits = torch.randn(6, 4), torch.randn(6, 8)
    weights, topk_ids, row_idx = torch_npu.npu_moe_gating_top_k_softmax(logits.npu(), k=2)
    expanded, expanded_row_idx, _ = torch_npu.npu_moe_init_routing(x.npu(), row_idx=row_idx, expert_idx=topk_ids,
                                                                   active_num=6)
    out = torch_npu.npu_moe_finalize_routing(expanded * 3, skip1=None, skip2=None, bias=None, scales=weights,
                                             expanded_src_to_dst_row=expanded_row_idx,
                                             export_for_source_row=topk_ids)
    torch.testing.assert_close(out.cpu(), 3 * x * weights.cpu().sum(-1, keepdim=True))


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_finalize_routing_reference(mode):
    torch.manual_seed(10)
    n, k, h, e = 5, 2, 3, 4
    rows = torch.randn(e, 4, h) if mode == 1 else torch.randn(n * k, h)
    src = torch.randperm(n * k).int()
    if mode == 1:
        src[3] = -1  # a dropped row
    skip1, skip2, bias, scales = torch.randn(n, h), torch.randn(n, h), torch.randn(e, h), torch.rand(n, k)
    expert = torch.randint(0, e, (n, k)).int()
    flat = rows.reshape(-1, h)
    want = skip1 + skip2
    for i in range(n):
        for j in range(k):
            r = int(src[j * n + i] if mode <= 1 else src[i * k + j])
            want[i] += scales[i, j] * ((flat[r] if r >= 0 else 0) + bias[expert[i, j]])
    got = torch_npu.npu_moe_finalize_routing(rows.npu(), skip1.npu(), skip2.npu(), bias.npu(), scales.npu(),
                                             src.npu(), expert.npu(), drop_pad_mode=mode)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="npu_moe_finalize_routing: drop_pad_mode must be in"):
        torch_npu.npu_moe_finalize_routing(rows.npu(), None, None, None, scales.npu(), src.npu(), None,
                                           drop_pad_mode=4)


def test_moe_ops_compile_fullgraph():
    torch._dynamo.reset()
    x, w, counts = moe_case()
    indices, probs = torch.randint(0, 4, (24, 2)), torch.rand(24, 2)

    def f(x, w, counts, indices, probs):
        permuted, sorted_indices = torch_npu.npu_moe_token_permute(x, indices)
        h = torch_npu.npu_grouped_matmul([permuted[:24]], [w], group_list=counts, split_item=2, group_type=0,
                                         group_list_type=1)[0]
        routed = torch_npu.npu_moe_token_permute_with_routing_map(x, indices[:, :1] == indices[:, :1], probs=None,
                                                                  num_out_tokens=24)[0]
        gate, ids, rows = torch_npu.npu_moe_gating_top_k_softmax(probs, k=1)
        routed = routed + torch_npu.npu_moe_finalize_routing(
            torch_npu.npu_moe_init_routing(x, rows, ids, 24)[0], None, None, None, gate, rows.view(-1), None).sum()
        return torch_npu.npu_moe_token_unpermute(torch.cat([h, h]), sorted_indices, probs), routed, gate

    args = [t.npu() for t in (x, w, counts, indices, probs)]
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    want = f(*args)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.cpu(), r.cpu())
