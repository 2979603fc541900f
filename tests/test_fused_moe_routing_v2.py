"""npu_moe_init_routing_v2 (csrc/fused/moe/init_routing_v2.cpp) against a reference written here from torch_npu's
documented equivalent (the stable sort of the experts in active_expert_range, gather / scatter row indices, per-expert
counts, drop/pad slots, static and dynamic int8 quantization; the MXFP8, MXFP4 and int4 modes from op-plugin's reference
formulas, written here again; x_dtype's byte routing), vLLM-Ascend's call forms, the routing then finalizing identity,
and torch.compile tracing it without a graph break.
"""

import importlib
import subprocess
import sys

import numpy as np
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
    for mode in (11, 12):  # FP8 PerBlock: refused with the reason
        with pytest.raises(NotImplementedError, match=f"quant_mode {mode}"):
            torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=mode)
    with pytest.raises(RuntimeError, match="quant_mode must be in"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=10)
    with pytest.raises(RuntimeError, match="uses quant_mode=13"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=1, x_dtype=torch_npu.int4)
    with pytest.raises(RuntimeError, match="only supports drop_pad_mode=0"):
        torch_npu.npu_moe_init_routing_v2(xn, idn, expert_num=8, quant_mode=3, drop_pad_mode=1, expert_capacity=2,
                                          expert_tokens_num_type=1)
    with pytest.raises(RuntimeError, match="INT4 dynamic quantization only supports float32 or bfloat16 x"):
        torch_npu.npu_moe_init_routing_v2(xn.half(), idn, expert_num=8, quant_mode=13)


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


# The quant modes beyond int8, each from the formula of op-plugin's reference for the op
# (test/test_custom_ops/test_npu_moe_init_routing_v2.py), written here in another form: exponents from frexp, the fp4
# grid by nearest value. Rows are routed as the unquantized reference routes them, then quantized.
def round_up_exponent(ratio):
    """The smallest e with 2^e >= ratio (ratio > 0), at least -126."""
    m, e = torch.frexp(ratio)
    return torch.where(m == 0.5, e - 1, e).clamp_min(-126)


def ref_mxfp8(v, x_dtype, fp8, fp8_max, clamp, block):
    r, h = v.shape
    blocks = -(-h // block)
    padded = torch.nn.functional.pad(v, (0, blocks * block - h)).view(r, blocks, block)
    mag = padded
    if block == 32 and x_dtype == torch.float16:  # RoundScale's amax of float16 rows: their bfloat16 truncation
        mag = (padded.view(torch.int32) & -65536).view(torch.float32)
    amax = mag.abs().amax(-1)
    if clamp:
        amax = amax.clamp_min(1e-4)
    e = round_up_exponent(amax / fp8_max)
    scale = torch.where(amax == 0, 0.0, torch.exp2(e.float()))
    y = padded / torch.where(amax == 0, 1.0, scale).unsqueeze(-1)
    y = y.clamp(-fp8_max, fp8_max).view(r, -1)[:, :h].to(fp8)
    if block == 128:
        return y, scale
    code = torch.where(amax == 0, 255, e + 127).to(torch.uint8)
    if blocks % 2:
        code = torch.nn.functional.pad(code, (0, 1), value=255)
    return y, code


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def ref_mxfp4(v):
    r, h = v.shape
    blocks = -(-h // 32)
    padded = torch.nn.functional.pad(v, (0, blocks * 32 - h)).view(r, blocks, 32)
    amax = padded.abs().amax(-1)
    _, e = torch.frexp(amax)  # floor(log2 amax) = e - 1
    shared = torch.where(amax == 0, -127, e - 1 - 2).clamp(-127, 127)
    q = (padded / torch.exp2(shared.float()).unsqueeze(-1)).view(r, -1)[:, :h]
    dist = (q.abs().clamp_max(6).unsqueeze(-1) - E2M1).abs()
    best = dist.min(-1, keepdim=True).values
    ties = dist == best  # nearest grid value, a tie going to the even code
    code = torch.where(ties[..., ::2].any(-1), (ties[..., ::2].int().argmax(-1) * 2), ties.int().argmax(-1))
    code = code | (q < 0).int() << 3
    byte = (code[:, 0::2] | code[:, 1::2] << 4).to(torch.uint8)
    if blocks % 2:
        shared = torch.nn.functional.pad(shared, (0, 1), value=-127)
    return byte, (shared + 127).to(torch.uint8).view(r, -1, 2)


def ref_int4(v, smooth):
    if smooth is not None:
        v = v * smooth
    s = v.abs().amax(-1, keepdim=True) / 7
    q = torch.where(s == 0, 0.0, v / s).round().clamp(-8, 7).to(torch.int8).view(torch.uint8) & 0xF
    return (q[:, 0::2] | q[:, 1::2] << 4), s.flatten()


FP8 = {2: (torch.float8_e5m2, 57344.0), 3: (torch.float8_e4m3fn, 448.0)}


def quant_case(mode, x, idx, smooth=None, **kw):
    kw = dict(active_num=30, expert_num=8, expert_tokens_num_type=1, active_expert_range=[1, 7], **kw)
    rows, row_idx, counts, _, routed = ref_init_routing_v2(x, idx, quant_mode=-1, **kw)
    v = rows[:routed.numel()].float()
    if mode in (2, 3, 16, 17, 4, 5, 14, 15):
        fp8, fp8_max = FP8[3 - (mode % 2 == 0)]  # even modes float8_e5m2, odd float8_e4m3fn
        want_x, want_scale = ref_mxfp8(v, x.dtype, fp8, fp8_max, mode >= 14, 32 if mode in (2, 3, 16, 17) else 128)
    elif mode == 9:
        want_x, want_scale = ref_mxfp4(v)
    else:
        want_x, want_scale = ref_int4(v, smooth)
    args = {"scale": smooth.npu()} if smooth is not None else {}
    if mode == 13:
        args["x_dtype"] = torch_npu.int4
    got = [t.cpu() for t in torch_npu.npu_moe_init_routing_v2(x.npu(), idx.npu(), quant_mode=mode, **args, **kw)]
    n = routed.numel()
    assert got[0].shape[0] == rows.shape[0] and got[0].dtype == want_x.dtype
    assert torch.equal(got[0][:n].view(torch.uint8), want_x.view(torch.uint8)), mode
    assert torch.equal(got[0][n:].view(torch.uint8), torch.zeros_like(got[0][n:].view(torch.uint8)))
    assert torch.equal(got[1], row_idx) and torch.equal(got[2], counts)
    if got[3].dtype == torch.float32:
        torch.testing.assert_close(got[3][:n], want_scale, atol=0, rtol=0)
    else:
        assert torch.equal(got[3][:n].view(torch.uint8), want_scale.view(torch.uint8)), mode
    return got


@pytest.mark.parametrize("mode", [2, 3, 16, 17])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_mxfp8_roundscale(mode, dtype):
    x, idx = routing_case(h=200, dtype=dtype, seed=8)  # 7 blocks of 32: the scales' padding column
    x[3, :64] = 0  # all-zero blocks: scale 0xFF (16 / 17: the clamped amax gives a real scale)
    got = quant_case(mode, x, idx)
    assert got[3].dtype == torch.float8_e8m0fnu and got[3].shape == (30, 8)
    assert got[0].dtype == (torch.float8_e5m2 if mode % 2 == 0 else torch.float8_e4m3fn)


@pytest.mark.parametrize("mode", [4, 5, 14, 15])
def test_mxfp8_group(mode):
    x, idx = routing_case(h=300, dtype=torch.bfloat16, seed=9)
    x[2, 128:256] = 0
    got = quant_case(mode, x, idx)
    assert got[3].dtype == torch.float32 and got[3].shape == (30, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mxfp4(dtype):
    x, idx = routing_case(h=96, dtype=dtype, seed=10)
    got = quant_case(9, x * 3, idx)
    assert got[0].shape == (30, 48) and got[3].shape == (30, 2, 2) and got[3].dtype == torch.uint8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_dynamic(dtype):
    x, idx = routing_case(h=16, dtype=dtype, seed=11)
    got = quant_case(13, x, idx)
    assert got[0].shape == (30, 8) and got[0].dtype == torch.uint8 and got[3].shape == (30,)
    quant_case(13, x, idx, smooth=torch.rand(1, 16) + 0.5)
    # Unpacked and scaled back, the rows are the routed tokens within half a step of the int4 grid.
    rows = ref_init_routing_v2(x, idx, quant_mode=-1, active_num=30, expert_num=8, active_expert_range=[1, 7])[0]
    q = torch.stack([got[0] & 0xF, got[0] >> 4], -1).flatten(1).to(torch.int8)
    q = torch.where(q > 7, q - 16, q).float() * got[3].unsqueeze(-1)
    n = int(((idx >= 1) & (idx < 7)).sum())
    assert ((q[:n] - rows[:n].float()).abs() <= got[3][:n].unsqueeze(-1) / 2 + 1e-6).all()


@pytest.mark.parametrize("x_dtype", ["hifloat8", "float4_e2m1fn_x2", "float8_e4m3fn"])
@pytest.mark.parametrize("drop_pad_mode", [0, 1])
def test_x_dtype_routed_as_bytes(x_dtype, drop_pad_mode):
    # quant_mode -1 routes what x holds untouched; float8 / float4 x carry their MX scales ([N, ceil(H / 64), 2]
    # float8_e8m0 bytes) with their rows, as torch_npu's adapter sizes expanded_scale.
    torch.manual_seed(12)
    n, h = 12, 128
    x = torch.randint(0, 256, (n, h // 2 if x_dtype == "float4_e2m1fn_x2" else h), dtype=torch.uint8)
    idx = torch.randint(0, 8, (n, 3), dtype=torch.int32)
    kw = dict(expert_num=8, expert_tokens_num_type=1, expert_tokens_num_flag=True, drop_pad_mode=drop_pad_mode,
              active_expert_range=[0, 8])
    if drop_pad_mode:
        kw["expert_capacity"] = 4
    scale = None
    if x_dtype == "float8_e4m3fn":
        xs, args = x.view(torch.float8_e4m3fn), {}
    else:
        xs, args = x, {"x_dtype": getattr(torch_npu, x_dtype)}
    if x_dtype != "hifloat8":
        scale = torch.randint(0, 256, (n, 2, 2), dtype=torch.uint8)
        args["scale"] = scale.npu()
    got = [t.cpu() for t in torch_npu.npu_moe_init_routing_v2(xs.npu(), idx.npu(), **args, **kw)]
    want = ref_init_routing_v2(x, idx, **{k: v for k, v in kw.items() if k != "expert_tokens_num_flag"})
    assert got[0].dtype == xs.dtype and torch.equal(got[0].view(torch.uint8), want[0])
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    if scale is not None:
        rows = want[0].shape[0] if not drop_pad_mode else 8 * 4
        want_scale = torch.zeros(rows, 2, 2, dtype=torch.uint8)
        tokens = torch.full((rows,), -1)
        pair = torch.arange(n * 3)
        tokens[want[1][want[1] >= 0].long()] = pair[want[1] >= 0] // 3
        want_scale[tokens >= 0] = scale[tokens[tokens >= 0]]
        assert got[3].shape == (rows, 2, 2) and torch.equal(got[3], want_scale)


def test_quant_modes_meta_shapes():
    x, idx = routing_case(h=200, dtype=torch.bfloat16)
    for mode, x_shape, scale_shape in [(3, (30, 200), (30, 8)), (4, (30, 200), (30, 2)), (9, (30, 100), (30, 4, 2)),
                                       (13, (30, 100), (30,))]:
        meta = torch_npu.npu_moe_init_routing_v2(x.to("meta"), idx.to("meta"), active_num=30, expert_num=8,
                                                 quant_mode=mode)
        real = torch_npu.npu_moe_init_routing_v2(x.npu(), idx.npu(), active_num=30, expert_num=8, quant_mode=mode)
        for m, r in zip(meta, real):
            assert m.shape == r.shape and m.dtype == r.dtype
        assert meta[0].shape == x_shape and meta[3].shape == scale_shape


EN_DTYPES = "en-dtypes==0.0.4"  # numpy dtypes with hifloat8, the format's reference op-plugin's goldens use


@pytest.fixture(scope="module")
def en_dtypes():
    try:
        return importlib.import_module("en_dtypes")
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", EN_DTYPES], check=True)
        importlib.invalidate_caches()
        return importlib.import_module("en_dtypes")


@pytest.mark.parametrize("mode", [6, 7, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hifloat8(mode, dtype, en_dtypes):
    # op-plugin's reference: 6 casts the rows, 7 multiplies by a per-tensor scale and clips to +-32768, 8 divides each
    # row by max|row| / 32768 (its expanded_scale); the cast is en_dtypes' float -> hifloat8.
    x, idx = routing_case(h=40, dtype=dtype, seed=13)
    x[0] *= 3e4  # large values: the clip and the top binade
    kw = dict(active_num=30, expert_num=8, expert_tokens_num_type=1, active_expert_range=[1, 7])
    rows, row_idx, counts, _, routed = ref_init_routing_v2(x, idx, quant_mode=-1, **kw)
    v = rows[:routed.numel()].float()
    scale = torch.tensor([1.7]) if mode == 7 else None
    want_scale = torch.zeros(v.shape[0])
    if mode == 7:
        v = (v * scale).clamp(-32768, 32768)
    elif mode == 8:
        want_scale = v.abs().amax(-1) / 32768
        v = (v / torch.where(want_scale == 0, 1.0, want_scale).unsqueeze(-1)).clamp(-32768, 32768)
    want = torch.from_numpy(v.numpy().astype(en_dtypes.hifloat8).view(np.uint8))
    args = {"scale": scale.npu()} if scale is not None else {}
    got = [t.cpu() for t in torch_npu.npu_moe_init_routing_v2(x.npu(), idx.npu(), quant_mode=mode, **args, **kw)]
    n = routed.numel()
    assert got[0].dtype == torch.uint8 and got[0].shape == rows.shape
    assert torch.equal(got[0][:n], want) and not got[0][n:].any()
    assert torch.equal(got[1], row_idx) and torch.equal(got[2], counts)
    torch.testing.assert_close(got[3][:n], want_scale, atol=0, rtol=0)
