"""torch_npu's inference attention (csrc/fused/attention/infer_attention.cpp): npu_prompt_flash_attention,
npu_incre_flash_attention, npu_fused_infer_attention_score and its v2 (the same op under torch_npu's new argument
names), with their NPU graph handlers (lengths updated before a replay).

Each call is checked against a float64 reference written here (softmax(scale * q k^T + pse_shift, masked) @ v, per
batch with its actual lengths, grouped key/value heads repeated) and, on npu, against the CPU path of the same op;
with the call forms of vLLM-Ascend (paged decode, TND prefill with sparse_mode 3) and MLA's rope inputs, errors at
the call, and torch.compile tracing the ops through their Meta kernels.
"""

import math

import pytest
import torch
import torch_npu

TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}
COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def reference(q, k, v, scale, pse=None, mask=None, qlen=None, kvlen=None):
    """q [B, N, Sq, D], k/v [B, N2, Skv, D]; mask True = masked, broadcast to [B, N, Sq, Skv]; rows past qlen zero."""
    b, n, sq, _ = q.shape
    g = n // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = scale * (q.double() @ k.transpose(-1, -2))
    if pse is not None:
        s = s + pse.double()
    full = torch.zeros(b, 1, sq, k.shape[2], dtype=torch.bool)
    if mask is not None:
        full = full | mask
    for i in range(b):
        if kvlen is not None:
            full[i, :, :, kvlen[i]:] = True
        if qlen is not None:
            full[i, :, qlen[i]:, :] = True
    p = torch.softmax(s.masked_fill(full, -math.inf), -1).nan_to_num(0.0)
    return p @ v, torch.logsumexp(s.masked_fill(full, -math.inf), -1, keepdim=True)


def bsh(t):  # [B, N, S, D] -> [B, S, N * D]
    return t.permute(0, 2, 1, 3).flatten(2)


def bsnd(t):
    return t.permute(0, 2, 1, 3)


def on_npu(fn, *args, **kwargs):
    move = lambda a: a.npu() if isinstance(a, torch.Tensor) else a  # noqa: E731
    out = fn(*[move(a) for a in args], **{k: move(v) for k, v in kwargs.items()})
    return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()


def qkv(b=2, n=4, n2=2, sq=5, skv=7, d=16, dtype=torch.float16, dv=None):
    g = torch.Generator().manual_seed(b * 100 + sq * 10 + skv)
    q = torch.randn(b, n, sq, d, generator=g).to(dtype)
    k = torch.randn(b, n2, skv, d, generator=g).to(dtype)
    v = torch.randn(b, n2, skv, dv or d, generator=g).to(dtype)
    return q, k, v


# ------------------------------------------------------------------------------------------------ prompt


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_prompt_flash_attention_bsh_gqa_causal(dtype):
    q, k, v = qkv(sq=6, skv=6, dtype=dtype)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    scale = 1 / math.sqrt(16)
    # The documented call: a causal atten_mask with next_tokens=0 (its default).
    got = on_npu(torch_npu.npu_prompt_flash_attention, bsh(q), bsh(k), bsh(v), atten_mask=causal, num_heads=4,
                 num_key_value_heads=2, scale_value=scale, input_layout="BSH")
    want, _ = reference(q, k, v, scale, mask=causal)
    assert got.dtype == dtype and got.shape == (2, 6, 64)
    torch.testing.assert_close(got.double(), bsh(want), **TOL[dtype])
    cpu = torch_npu.npu_prompt_flash_attention(bsh(q), bsh(k), bsh(v), atten_mask=causal, num_heads=4,
                                               num_key_value_heads=2, scale_value=scale, input_layout="BSH")
    assert torch.equal(got, cpu)


def test_prompt_flash_attention_actual_lengths_pse_and_layouts():
    q, k, v = qkv(b=3, sq=5, skv=8, dtype=torch.float16)
    pse = torch.randn(1, 4, 5, 8).half()
    qlen, kvlen = [5, 3, 4], [8, 6, 2]
    got = on_npu(torch_npu.npu_prompt_flash_attention, q, k, v, pse_shift=pse, actual_seq_lengths=qlen,
                 actual_seq_lengths_kv=kvlen, num_heads=4, num_key_value_heads=2, scale_value=0.3,
                 input_layout="BNSD")
    want, _ = reference(q, k, v, 0.3, pse=pse, qlen=qlen, kvlen=kvlen)
    torch.testing.assert_close(got.double(), want, **TOL[torch.float16])
    assert got[1, :, 3:].eq(0).all()  # rows past the query's actual length are zeros
    # BNSD in, BSND out; and BSND in
    got = on_npu(torch_npu.npu_prompt_flash_attention, q, k, v, num_heads=4, num_key_value_heads=2,
                 scale_value=0.3, input_layout="BNSD_BSND")
    want, _ = reference(q, k, v, 0.3)
    torch.testing.assert_close(got.double(), bsnd(want), **TOL[torch.float16])
    got = on_npu(torch_npu.npu_prompt_flash_attention, bsnd(q).contiguous(), bsnd(k).contiguous(),
                 bsnd(v).contiguous(), num_heads=4, num_key_value_heads=2, scale_value=0.3, input_layout="BSND")
    torch.testing.assert_close(got.double(), bsnd(want), **TOL[torch.float16])


@pytest.mark.parametrize("sparse_mode", [2, 3, 4])
def test_prompt_flash_attention_sparse_modes(sparse_mode):
    q, k, v = qkv(b=1, sq=4, skv=9, dtype=torch.bfloat16)
    got = on_npu(torch_npu.npu_prompt_flash_attention, q, k, v, atten_mask=COMPRESSED, sparse_mode=sparse_mode,
                 pre_tokens=3, next_tokens=1, num_heads=4, num_key_value_heads=2, input_layout="BNSD")
    i, j = torch.arange(4)[:, None], torch.arange(9)[None, :]
    shift = 9 - 4
    mask = {2: j > i, 3: j - i > shift, 4: (j - i - shift > 1) | (j - i - shift < -3)}[sparse_mode]
    want, _ = reference(q, k, v, 1.0, mask=mask)
    torch.testing.assert_close(got.double(), want, **TOL[torch.bfloat16])


def test_prompt_flash_attention_tnd_and_int8_output():
    torch.manual_seed(0)
    lens, n, d = [3, 5], 2, 16
    q, k, v = (torch.randn(8, n, d).half() for _ in range(3))
    got = on_npu(torch_npu.npu_prompt_flash_attention, q, k, v, atten_mask=COMPRESSED, sparse_mode=3,
                 actual_seq_lengths=[3, 8], actual_seq_lengths_kv=[3, 8], num_heads=n, scale_value=0.25,
                 input_layout="TND")
    start = 0
    for length in lens:
        seq = lambda t: t[start:start + length].permute(1, 0, 2)[None]  # noqa: E731
        want, _ = reference(seq(q), seq(k), seq(v), 0.25, mask=torch.triu(torch.ones(length, length, dtype=torch.bool), 1))
        torch.testing.assert_close(got[start:start + length].double(), want[0].permute(1, 0, 2), **TOL[torch.float16])
        start += length
    # quant_scale2 / quant_offset2: the output quantized to int8
    qb, kb, vb = qkv(b=1, sq=3, skv=3)
    qs, qo = torch.tensor([20.0]), torch.tensor([1.0])
    got = on_npu(torch_npu.npu_prompt_flash_attention, qb, kb, vb, quant_scale2=qs, quant_offset2=qo, num_heads=4,
                 num_key_value_heads=2, input_layout="BNSD", next_tokens=2147483647)
    want, _ = reference(qb, kb, vb, 1.0)
    assert got.dtype == torch.int8
    assert (got.double() - torch.round(want.half().double() * 20 + 1).clamp(-128, 127)).abs().max() <= 1


# ------------------------------------------------------------------------------------------------ incre / fused


def paged(kv_bnsd, lengths, block_size, layout="BnBsH", shuffle=True):
    """A paged cache of per-batch [N2, S, D] sequences, and its block table (blocks allocated out of order)."""
    b, n2, s, d = kv_bnsd.shape
    per = -(-s // block_size)
    order = torch.randperm(b * per, generator=torch.Generator().manual_seed(1)) if shuffle else torch.arange(b * per)
    table = order.view(b, per).to(torch.int32)
    cache = torch.zeros(b * per + 1, n2, block_size, d, dtype=kv_bnsd.dtype)
    padded = torch.nn.functional.pad(kv_bnsd, (0, 0, 0, per * block_size - s))
    for i in range(b):
        for blk in range(per):
            cache[table[i, blk]] = padded[i, :, blk * block_size:(blk + 1) * block_size]
    if layout == "BnBsH":
        cache = cache.permute(0, 2, 1, 3).flatten(2)  # [blocks, block_size, N2 * D]
    return cache, table


def test_incre_flash_attention_paged_and_antiquant():
    q, k, v = qkv(b=3, sq=1, skv=40, dtype=torch.float16)
    kvlen = [40, 17, 1]
    kc, table = paged(k, kvlen, 16)
    vc, _ = paged(v, kvlen, 16)
    got = on_npu(torch_npu.npu_incre_flash_attention, bsh(q), kc, vc, actual_seq_lengths=kvlen, block_table=table,
                 block_size=16, num_heads=4, num_key_value_heads=2, scale_value=0.25, input_layout="BSH")
    want, _ = reference(q, k, v, 0.25, kvlen=kvlen)
    torch.testing.assert_close(got.double(), bsh(want), **TOL[torch.float16])
    # an int8 cache, per channel: (k + offset) * scale, row 0 of antiquant_scale for the key, row 1 for the value
    k8, v8 = (torch.randint(-100, 100, t.shape, dtype=torch.int8) for t in (k, v))
    scale = (torch.rand(2, 2 * 16) * 0.02).half()
    offset = torch.randn(2, 2 * 16).half()
    got = on_npu(torch_npu.npu_incre_flash_attention, q, k8, v8, antiquant_scale=scale, antiquant_offset=offset,
                 num_heads=4, num_key_value_heads=2, input_layout="BNSD")
    deq = lambda t, r: ((t.float() + offset[r].float().view(1, 2, 1, 16)) * scale[r].float().view(1, 2, 1, 16)).half()  # noqa: E731,E501
    want, _ = reference(q, deq(k8, 0), deq(v8, 1), 1.0)
    torch.testing.assert_close(got.double(), want, **TOL[torch.float16])


def test_fused_infer_attention_vllm_ascend_paged_decode():
    # vLLM-Ascend's decode (attention_v1.py): BSH query [B, 1, N * D], caches flattened to [blocks, block_size, H],
    # block_table, actual_seq_lengths=[1] * B, actual_seq_lengths_kv=seq_lens.
    q, k, v = qkv(b=2, n=8, n2=2, sq=1, skv=300, d=32, dtype=torch.bfloat16)
    seq_lens = [300, 129]
    kc, table = paged(k, seq_lens, 128)
    vc, _ = paged(v, seq_lens, 128)
    out, lse = on_npu(torch_npu.npu_fused_infer_attention_score, bsh(q), kc, vc, num_heads=8,
                      num_key_value_heads=2, input_layout="BSH", block_size=128, scale=1 / math.sqrt(32),
                      block_table=table, actual_seq_lengths=[1] * 2, actual_seq_lengths_kv=seq_lens)
    want, _ = reference(q, k, v, 1 / math.sqrt(32), kvlen=seq_lens)
    torch.testing.assert_close(out.double(), bsh(want), **TOL[torch.bfloat16])
    assert lse.shape == (1,) and lse.eq(0).all()  # softmax_lse_flag=False
    # the BnNBsD cache layout with the BNSD query gives the same
    kc4, table4 = paged(k, seq_lens, 128, layout="BnNBsD")
    vc4, _ = paged(v, seq_lens, 128, layout="BnNBsD")
    out4, _ = on_npu(torch_npu.npu_fused_infer_attention_score, q, kc4, vc4, num_heads=8, num_key_value_heads=2,
                     input_layout="BNSD", block_size=128, scale=1 / math.sqrt(32), block_table=table4,
                     actual_seq_lengths_kv=seq_lens)
    torch.testing.assert_close(out4, out.view(2, 1, 8, 32).permute(0, 2, 1, 3), atol=0, rtol=0)


def test_fused_infer_attention_tnd_prefill_with_lse():
    # vLLM-Ascend's chunked prefill: TND, cumulative lengths, sparse_mode=3 with the compressed mask, lse returned.
    torch.manual_seed(2)
    n, d = 4, 16
    q = torch.randn(7, n, d).half()
    k, v = torch.randn(12, 2, d).half(), torch.randn(12, 2, d).half()
    out, lse = on_npu(torch_npu.npu_fused_infer_attention_score, q, k, v, num_heads=n, num_key_value_heads=2,
                      input_layout="TND", atten_mask=COMPRESSED, sparse_mode=3, scale=0.25, softmax_lse_flag=True,
                      actual_seq_lengths=[3, 7], actual_seq_lengths_kv=[5, 12])
    assert out.shape == (7, n, d) and lse.shape == (7, n, 1) and lse.dtype == torch.float32
    for (q0, q1), (k0, k1) in zip([(0, 3), (3, 7)], [(0, 5), (5, 12)]):
        seq = lambda t, a, b: t[a:b].permute(1, 0, 2)[None]  # noqa: E731
        lq, lk = q1 - q0, k1 - k0
        mask = torch.arange(lk)[None, :] - torch.arange(lq)[:, None] > lk - lq  # right-down causal
        want, want_lse = reference(seq(q, q0, q1), seq(k, k0, k1), seq(v, k0, k1), 0.25, mask=mask)
        torch.testing.assert_close(out[q0:q1].double(), want[0].permute(1, 0, 2), **TOL[torch.float16])
        torch.testing.assert_close(lse[q0:q1].double(), want_lse[0].permute(1, 0, 2), atol=1e-3, rtol=1e-3)


def test_fused_infer_attention_mla_rope_and_masks():
    # MLA: the scores are q k^T + q_rope k_rope^T; value keeps its own head size.
    q, k, v = qkv(b=2, n=4, n2=1, sq=3, skv=6, d=32, dv=16, dtype=torch.float16)
    qr, kr = torch.randn(2, 4, 3, 64).half(), torch.randn(2, 1, 6, 64).half()
    mask = torch.rand(2, 1, 3, 6) > 0.7
    out, _ = on_npu(torch_npu.npu_fused_infer_attention_score, q, k, v, query_rope=qr, key_rope=kr, atten_mask=mask,
                    num_heads=4, num_key_value_heads=1, input_layout="BNSD", scale=0.1)
    want, _ = reference(torch.cat([q, qr], -1), torch.cat([k, kr], -1), v, 0.1, mask=mask)
    assert out.shape == (2, 4, 3, 16)
    torch.testing.assert_close(out.double(), want, **TOL[torch.float16])
    # BSH_NBSD: the output's heads first
    out, _ = on_npu(torch_npu.npu_fused_infer_attention_score, bsh(q[:, :, :, :16]), bsh(k[:, :, :, :16]), bsh(v),
                    num_heads=4, num_key_value_heads=1, input_layout="BSH_NBSD", scale=0.1)
    want, _ = reference(q[..., :16], k[..., :16], v, 0.1)
    torch.testing.assert_close(out.double(), want.permute(1, 0, 2, 3), **TOL[torch.float16])


def test_infer_attention_errors_at_the_call():
    q, k, v = qkv()
    for device in ("npu", "meta"):
        qd, kd, vd = q.to(device), k.to(device), v.to(device)
        cases = [
            (lambda: torch_npu.npu_fused_infer_attention_score(qd, kd, vd, num_heads=4, input_layout="BHS"),
             "input_layout 'BHS' is not supported"),
            (lambda: torch_npu.npu_fused_infer_attention_score(qd, kd, vd, num_heads=3, num_key_value_heads=2,
                                                               input_layout="BNSD"), "head count"),
            (lambda: torch_npu.npu_fused_infer_attention_score(qd, kd, vd, num_heads=4, num_key_value_heads=2,
                                                               input_layout="BNSD", sparse_mode=5),
             "sparse_mode 5 is not supported"),
            (lambda: torch_npu.npu_fused_infer_attention_score(qd, kd, vd, num_heads=4, num_key_value_heads=2,
                                                               input_layout="BNSD", sparse_mode=3),
             "compressed atten_mask"),
            (lambda: torch_npu.npu_fused_infer_attention_score(qd, kd, vd, num_heads=4, num_key_value_heads=2,
                                                               input_layout="BNSD",
                                                               dequant_scale1=torch.ones(1, device=device)),
             "dequant_scale1"),
            (lambda: torch_npu.npu_fused_infer_attention_score(
                qd, kd, vd, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                block_table=torch.zeros(2, 1, dtype=torch.int32, device=device), block_size=16),
             "needs actual_seq_lengths_kv"),
        ]
        for call, message in cases:
            with pytest.raises(RuntimeError, match=f"npu_fused_infer_attention_score: .*{message}"):
                call()
        with pytest.raises(RuntimeError, match="npu_incre_flash_attention: the query must have one token"):
            torch_npu.npu_incre_flash_attention(qd, kd, vd, num_heads=4, num_key_value_heads=2, input_layout="BNSD")
        with pytest.raises(RuntimeError, match="npu_prompt_flash_attention: .*actual_seq_lengths_kv\\[0\\] = 9"):
            torch_npu.npu_prompt_flash_attention(qd, kd, vd, num_heads=4, num_key_value_heads=2,
                                                 input_layout="BNSD", actual_seq_lengths_kv=[9, 2])


def test_infer_attention_compiles_without_graph_breaks():
    q, k, v = (t.npu() for t in qkv(sq=1, skv=7))
    qp, kp, vp = (t.npu() for t in qkv(sq=4, skv=4))

    def f(q, k, v, qp, kp, vp):
        a, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2,
                                                         input_layout="BNSD", actual_seq_lengths_kv=[7, 3])
        b = torch_npu.npu_incre_flash_attention(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD")
        c = torch_npu.npu_prompt_flash_attention(qp, kp, vp, num_heads=4, num_key_value_heads=2,
                                                 input_layout="BNSD", atten_mask=COMPRESSED.npu(), sparse_mode=2)
        return a, b, c

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    for got, want in zip(compiled(q, k, v, qp, kp, vp), f(q, k, v, qp, kp, vp)):
        torch.testing.assert_close(got.cpu(), want.cpu())


# ------------------------------------------------------------------------------------------------ fusion_attention_v2


def test_fusion_attention_v2_pse_types_rope_and_backward():
    # MindSpeed's npu_fusion_attention_v2: pse_type 1 is npu_fusion_attention's formula, 0 adds pse after the scale.
    q, k, v = (t.float().requires_grad_() for t in qkv(b=1, n=2, n2=2, sq=4, skv=6, d=8, dtype=torch.float32))
    pse = torch.randn(1, 2, 4, 6, requires_grad=True)
    leaves = [t.detach().npu().requires_grad_() for t in (q, k, v, pse)]
    out = torch_npu.npu_fusion_attention_v2(*leaves[:3], 2, "BNSD", pse=leaves[3], scale=0.5, pse_type=0)
    assert len(out) == 7 and out[0].shape == (1, 2, 4, 8)
    s = 0.5 * (q.double() @ k.double().transpose(-1, -2)) + pse.double()
    want = torch.softmax(s, -1) @ v.double()
    torch.testing.assert_close(out[0].cpu().double(), want, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(want)
    out[0].backward(grad.float().npu())
    want.backward(grad)
    for got, ref in zip(leaves, (q, k, v, pse)):
        torch.testing.assert_close(got.grad.cpu().double(), ref.grad.double(), atol=1e-4, rtol=1e-4)
    same = torch_npu.npu_fusion_attention_v2(*[t.detach() for t in leaves[:3]], 2, "BNSD", pse=leaves[3].detach(),
                                             scale=0.5, pse_type=1)[0]
    base = torch_npu.npu_fusion_attention(*[t.detach() for t in leaves[:3]], 2, "BNSD", pse=leaves[3].detach(),
                                          scale=0.5)[0]
    assert torch.equal(same.cpu(), base.cpu())
    # rope: the scores gain q_rope k_rope^T; gradients reach the rope inputs
    qr, kr = torch.randn(1, 2, 4, 4, requires_grad=True), torch.randn(1, 2, 6, 4, requires_grad=True)
    rope = [t.detach().npu().requires_grad_() for t in (qr, kr)]
    out = torch_npu.npu_fusion_attention_v2(*[t.detach().npu() for t in (q, k, v)], 2, "BNSD", query_rope=rope[0],
                                            key_rope=rope[1], scale=0.5)[0]
    s = 0.5 * (torch.cat([q, qr], -1).double() @ torch.cat([k, kr], -1).double().transpose(-1, -2))
    want = torch.softmax(s, -1) @ v.double()
    torch.testing.assert_close(out.cpu().double(), want, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(rope[0].grad.cpu().double(), qr.grad.double(), atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="npu_fusion_attention_v2: pse_type 2"):
        torch_npu.npu_fusion_attention_v2(*leaves[:3], 2, "BNSD", pse=leaves[3], pse_type=2)
    with pytest.raises(RuntimeError, match="npu_fusion_attention_v2: sink is not supported"):
        torch_npu.npu_fusion_attention_v2(*leaves[:3], 2, "BNSD", sink=torch.zeros(2).npu())


def test_fusion_attention_v2_compiles():
    q, k, v = (t.npu() for t in qkv(b=1, n=2, n2=2, sq=4, skv=4, d=8, dtype=torch.float16))

    def f(q, k, v):
        return torch_npu.npu_fusion_attention_v2(q, k, v, 2, "BNSD", scale=0.3, pse_type=1)[0]

    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v).cpu(), f(q, k, v).cpu())


def test_fused_infer_attention_out_overload_and_workspace():
    # vLLM-Ascend's graph capture: the workspace queried, the outputs allocated, then the .out overload.
    q, k, v = qkv(b=2, n=4, n2=2, sq=1, skv=9)
    kwargs = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.3, actual_seq_lengths_kv=[9, 4],
                  softmax_lse_flag=True)
    workspace = torch.ops.npu._npu_fused_infer_attention_score_get_max_workspace(q.npu(), k.npu(), v.npu(), **kwargs)
    assert workspace.device.type == "npu" and workspace.dtype == torch.uint8
    out, lse = torch.empty(2, 4, 1, 16, dtype=torch.float16).npu(), torch.empty(2, 4, 1, 1).npu()
    got = torch_npu.npu_fused_infer_attention_score.out(q.npu(), k.npu(), v.npu(), workspace=workspace,
                                                         out=[out, lse], **kwargs)
    assert got[0] is out and got[1] is lse
    want_out, want_lse = torch_npu.npu_fused_infer_attention_score(q, k, v, **kwargs)
    torch.testing.assert_close(out.cpu(), want_out)
    torch.testing.assert_close(lse.cpu(), want_lse)
    with pytest.raises(RuntimeError, match="attention_out must be"):
        torch.ops.npu.npu_fused_infer_attention_score.out(q.npu(), k.npu(), v.npu(), out=[out[:1], lse], **kwargs)


def test_fused_infer_attention_out_without_lse_takes_a_placeholder():
    # torch_npu's graph-capture callers pass a [1] softmax_lse of the query's dtype when softmax_lse_flag is off.
    q, k, v = qkv(b=1, n=2, n2=2, sq=1, skv=6)
    kwargs = dict(num_heads=2, input_layout="BNSD", scale=0.5)
    out, lse = torch.empty(1, 2, 1, 16, dtype=torch.float16).npu(), torch.full((1,), 7.0, dtype=torch.float16).npu()
    torch_npu.npu_fused_infer_attention_score.out(q.npu(), k.npu(), v.npu(), out=[out, lse], **kwargs)
    want_out, want_lse = torch_npu.npu_fused_infer_attention_score(q, k, v, **kwargs)
    torch.testing.assert_close(out.cpu(), want_out)
    assert lse.cpu().tolist() == [0.0] and want_lse.tolist() == [0.0]


def test_fused_infer_attention_decode_ignores_actual_seq_lengths():
    # torch_npu: in decode (Q_S = 1) outside TND actual_seq_lengths has no effect, whatever its values.
    q, k, v = qkv(b=2, n=4, n2=2, sq=1, skv=9)
    kwargs = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.3, actual_seq_lengths_kv=[9, 4])
    want = torch_npu.npu_fused_infer_attention_score(q, k, v, **kwargs)[0]
    got = torch_npu.npu_fused_infer_attention_score(q.npu(), k.npu(), v.npu(), actual_seq_lengths=[100, 0], **kwargs)
    torch.testing.assert_close(got[0].cpu(), want)
    with pytest.raises(RuntimeError, match="actual_seq_lengths"):
        q2 = torch.randn(2, 4, 3, 16, dtype=q.dtype)
        torch_npu.npu_fused_infer_attention_score(q2.npu(), k.npu(), v.npu(), actual_seq_lengths=[4], **kwargs)


def test_fused_infer_attention_per_token_antiquant():
    # antiquant_mode=1: an int8 cache with a float32 scale and offset per (batch, token), [2, B, KV_S] (key, value),
    # or split (key per channel, value per token: the one mixed form torch_npu allows). The same attention as the
    # cache dequantized, (kv + offset) * scale rounded to the query's dtype, given as float16 key/value.
    torch.manual_seed(21)
    b, n, skv, d = 2, 2, 9, 16
    q = torch.randn(b, n, 1, d, dtype=torch.float16)
    k8 = torch.randint(-128, 128, (b, n, skv, d), dtype=torch.int8)
    v8 = torch.randint(-128, 128, (b, n, skv, d), dtype=torch.int8)
    scale, offset = torch.rand(2, b, skv) * 0.02, torch.randint(-3, 4, (2, b, skv)).float()

    def deq(x, s, o):
        return ((x.float() + o[:, None, :, None]) * s[:, None, :, None]).half()

    want, _ = torch_npu.npu_fused_infer_attention_score(
        q.npu(), deq(k8, scale[0], offset[0]).npu(), deq(v8, scale[1], offset[1]).npu(), num_heads=n,
        input_layout="BNSD", scale=0.25)
    got, _ = torch_npu.npu_fused_infer_attention_score(
        q.npu(), k8.npu(), v8.npu(), antiquant_scale=scale.npu(), antiquant_offset=offset.npu(), antiquant_mode=1,
        num_heads=n, input_layout="BNSD", scale=0.25)
    assert torch.equal(got.cpu(), want.cpu())
    k_scale = (torch.rand(n * d) * 0.02).half()
    want, _ = torch_npu.npu_fused_infer_attention_score(
        q.npu(), (k8.float() * k_scale.float().view(1, n, 1, d)).half().npu(), deq(v8, scale[1], offset[1]).npu(),
        num_heads=n, input_layout="BNSD", scale=0.25)
    got, _ = torch_npu.npu_fused_infer_attention_score(
        q.npu(), k8.npu(), v8.npu(), key_antiquant_scale=k_scale.npu(), value_antiquant_scale=scale[1].npu(),
        value_antiquant_offset=offset[1].npu(), key_antiquant_mode=0, value_antiquant_mode=1, num_heads=n,
        input_layout="BNSD", scale=0.25)
    assert torch.equal(got.cpu(), want.cpu())
    with pytest.raises(RuntimeError, match="npu_fused_infer_attention_score: antiquant_mode must be 0 .* or 1"):
        torch_npu.npu_fused_infer_attention_score(q.npu(), k8.npu(), v8.npu(), antiquant_scale=scale.npu(),
                                                  antiquant_mode=2, num_heads=n, input_layout="BNSD")


def test_fused_infer_attention_left_padding():
    # Left padding: batch b's tokens are rows [S - padding - length, S - padding) of query and key/value; the same
    # attention as those rows moved to the start (right padding), the output back in place, zeros elsewhere.
    torch.manual_seed(22)
    b, n, sq, skv, d = 2, 2, 6, 8, 16
    q, k, v = (torch.randn(b, n, s, d, dtype=torch.float16) for s in (sq, skv, skv))
    qlen, kvlen, qpad, kvpad = [3, 4], [5, 6], 1, 2
    got, lse = torch_npu.npu_fused_infer_attention_score(
        q.npu(), k.npu(), v.npu(), num_heads=n, input_layout="BNSD", scale=0.25, actual_seq_lengths=qlen,
        actual_seq_lengths_kv=kvlen, query_padding_size=torch.tensor([qpad]).npu(),
        kv_padding_size=torch.tensor([kvpad]).npu(), softmax_lse_flag=True)
    got, lse = got.cpu(), lse.cpu()
    for i in range(b):
        qs, ks = sq - qpad - qlen[i], skv - kvpad - kvlen[i]
        want, want_lse = torch_npu.npu_fused_infer_attention_score(
            q[i:i + 1, :, qs:qs + qlen[i]].npu(), k[i:i + 1, :, ks:ks + kvlen[i]].npu(),
            v[i:i + 1, :, ks:ks + kvlen[i]].npu(), num_heads=n, input_layout="BNSD", scale=0.25,
            softmax_lse_flag=True)
        assert torch.equal(got[i, :, qs:qs + qlen[i]], want.cpu()[0])
        torch.testing.assert_close(lse[i, :, qs:qs + qlen[i]], want_lse.cpu()[0])
        assert got[i, :, :qs].eq(0).all() and got[i, :, qs + qlen[i]:].eq(0).all()
    with pytest.raises(RuntimeError, match="needs actual_seq_lengths_kv"):
        torch_npu.npu_fused_infer_attention_score(q.npu(), k.npu(), v.npu(), num_heads=n, input_layout="BNSD",
                                                  kv_padding_size=torch.tensor([1]).npu())


def paged_reference(q, kc, vc, table, lens, scale, kv_heads):
    out = []
    for i, n in enumerate(lens.tolist()):
        pos = torch.arange(n)
        blocks, slots = table[i].long()[pos // kc.shape[1]], pos % kc.shape[1]
        k, v = kc[blocks, slots].double(), vc[blocks, slots].double()  # [n, KV_N, D]
        qi = q[i].double().view(kv_heads, -1, q.shape[-1])
        p = torch.softmax(torch.einsum("kgd,lkd->kgl", qi, k) * scale, -1)
        out.append(torch.einsum("kgl,lkd->kgd", p, v).reshape(q.shape[1], -1))
    return torch.stack(out)


def test_paged_attention_and_its_graph_update():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(3, 8, 32, generator=g).half()
    kc, vc = torch.randn(16, 4, 2, 32, generator=g).half(), torch.randn(16, 4, 2, 16, generator=g).half()
    table = torch.randint(0, 16, (3, 5), generator=g, dtype=torch.int32)
    lens = torch.tensor([20, 1, 9], dtype=torch.int32)
    args = [t.npu() for t in (q, kc, vc)]
    out = torch.zeros(3, 8, 16, dtype=torch.half).npu()
    torch_npu._npu_paged_attention(*args, 2, 8, 0.2, table.npu(), lens, out)
    torch.testing.assert_close(out.cpu().double(), paged_reference(q, kc, vc, table, lens, 0.2, 2), atol=3e-3, rtol=3e-3)
    with pytest.raises(RuntimeError, match="context_lens"):
        torch_npu._npu_paged_attention(*args, 2, 8, 0.2, table.npu(), torch.tensor([21, 1, 1]), out)

    graph_out, device_table = torch.zeros_like(out), table.npu()
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, stream=torch.npu.Stream(), auto_dispatch_capture=True):
        torch_npu._npu_paged_attention(*args, 2, 8, 0.2, device_table, lens, graph_out)
    new_lens = torch.tensor([3, 17, 5], dtype=torch.int32)
    graph.update(cpu_update_input=[{"context_lens": new_lens}])
    graph.replay()
    torch.testing.assert_close(graph_out.cpu().double(), paged_reference(q, kc, vc, table, new_lens, 0.2, 2),
                               atol=3e-3, rtol=3e-3)


# ------------------------------------------------------------------------------------------------ v2 and graph updates


def test_fused_infer_attention_v2_is_v1_with_torch_npus_new_names():
    q, k, v = qkv(b=2, n=4, n2=2, sq=3, skv=9)
    mask = torch.rand(2, 1, 3, 9, generator=torch.Generator().manual_seed(5)) < 0.2
    v1 = dict(num_heads=4, num_key_value_heads=2, input_layout="BSH", scale=0.3, actual_seq_lengths=[3, 2],
              actual_seq_lengths_kv=[9, 5], softmax_lse_flag=True)
    v2 = dict(num_query_heads=4, num_key_value_heads=2, input_layout="BSH", softmax_scale=0.3, actual_seq_qlen=[3, 2],
              actual_seq_kvlen=[9, 5], return_softmax_lse=True)
    args = [bsh(q), bsh(k), bsh(v)]
    out, lse = on_npu(torch_npu.npu_fused_infer_attention_score_v2, *args, atten_mask=mask, **v2)
    want_out, want_lse = reference(q, k, v, 0.3, mask=mask, qlen=[3, 2], kvlen=[9, 5])
    torch.testing.assert_close(out.double(), bsh(want_out), **TOL[torch.float16])
    torch.testing.assert_close(lse[0].double(), want_lse[0], atol=1e-4, rtol=1e-4)
    v1_out, v1_lse = on_npu(torch_npu.npu_fused_infer_attention_score, *args, atten_mask=mask, **v1)
    assert torch.equal(out, v1_out) and torch.equal(lse, v1_lse)
    cpu_out, _ = torch_npu.npu_fused_infer_attention_score_v2(*args, atten_mask=mask, **v2)
    torch.testing.assert_close(out, cpu_out)

    dev = [a.npu() for a in args]
    workspace = torch_npu._npu_fused_infer_attention_score_v2_get_max_workspace(*dev, **v2)
    assert workspace.device.type == "npu" and workspace.dtype == torch.uint8
    outs = [torch.empty_like(dev[0]), torch.empty(2, 4, 3, 1).npu()]
    got = torch_npu.npu_fused_infer_attention_score_v2.out(*dev, atten_mask=mask.npu(), workspace=workspace, out=outs,
                                                           **v2)
    assert got[0] is outs[0] and torch.equal(outs[0].cpu(), out) and torch.equal(outs[1].cpu(), lse)
    for bad, match in [(dict(learnable_sink=torch.zeros(4).npu()), "learnable_sink"),
                       (dict(out_dtype=27), "out_dtype"), (dict(query_quant_mode=1), "query_quant_mode")]:
        with pytest.raises(RuntimeError, match=f"npu_fused_infer_attention_score_v2: {match}"):
            torch_npu.npu_fused_infer_attention_score_v2(*dev, **v2, **bad)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("form", ["functional", "out"])
def test_fused_infer_attention_graph_update_of_lengths(version, form):
    # vLLM-Ascend's decode graphs: captured with auto_dispatch_capture, each step's key/value lengths given by
    # NPUGraph.update before the replay (the built-in handlers of _npugraph_handlers/ifa_handler.py).
    q, k, v = qkv(b=2, n=4, n2=2, sq=1, skv=9)
    if version == "v1":
        op, key = torch_npu.npu_fused_infer_attention_score, "actual_seq_lengths_kv"
        kwargs = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.3, softmax_lse_flag=True)
    else:
        op, key = torch_npu.npu_fused_infer_attention_score_v2, "actual_seq_kvlen"
        kwargs = dict(num_query_heads=4, num_key_value_heads=2, input_layout="BNSD", softmax_scale=0.3,
                      return_softmax_lse=True)
    dev = [t.npu() for t in (q, k, v)]
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, auto_dispatch_capture=True):
        if form == "functional":
            out, lse = op(*dev, **kwargs, **{key: [2, 3]})
        else:
            out, lse = torch.empty_like(dev[0]), torch.empty(2, 4, 1, 1, device="npu")
            op.out(*dev, **kwargs, **{key: [2, 3]}, out=[out, lse])
    for lengths in ([9, 4], [1, 7]):
        graph.update(cpu_update_input=[{key: lengths}])
        graph.replay()
        want_out, want_lse = reference(q, k, v, 0.3, kvlen=lengths)
        torch.testing.assert_close(out.cpu().double(), want_out, **TOL[torch.float16])
        torch.testing.assert_close(lse.cpu().double(), want_lse, atol=1e-4, rtol=1e-4)


def test_built_in_graph_handlers_of_infer_attention():
    from torch_npu.npu._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS as handlers

    for names, keys in [(["npu_fused_infer_attention_score", "npu_fused_infer_attention_score.default",
                          "npu_fused_infer_attention_score.out", "_npu_fused_infer_attention_score_out_.default"],
                         ["actual_seq_lengths", "actual_seq_lengths_kv"]),
                        (["npu_fused_infer_attention_score_v2", "npu_fused_infer_attention_score_v2.default",
                          "npu_fused_infer_attention_score_v2.out", "_npu_fused_infer_attention_score_v2_out_.default"],
                         ["actual_seq_qlen", "actual_seq_kvlen"])]:
        for name in names:
            specs = handlers[name].get_update_specs(name)
            assert [s for s in specs if s[0] == "kwarg"] == [("kwarg", key, key) for key in keys], name


def test_fused_infer_attention_out_graph_updates_a_task_group():
    # torch_npu._C._npu_fused_infer_attention_score_out_graph: the manual form of the update above (task group,
    # replacement on an update stream, ExternalEvent).
    q, k, v = qkv(b=2, n=4, n2=2, sq=1, skv=9)
    kwargs = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.3, softmax_lse_flag=True)
    dev = [t.npu() for t in (q, k, v)]
    graph, event, update_stream = torch.npu.NPUGraph(), torch.npu.ExternalEvent(), torch.npu.Stream()
    with torch.npu.graph(graph):
        stream = torch.npu.current_stream()
        out, lse = torch.empty_like(dev[0]), torch.empty(2, 4, 1, 1, device="npu")
        event.wait(stream)
        event.reset(stream)
        torch.npu.graph_task_group_begin(stream)
        torch_npu.npu_fused_infer_attention_score.out(*dev, actual_seq_lengths_kv=[2, 3], out=[out, lse], **kwargs)
        handle = torch.npu.graph_task_group_end(stream)
    with torch.npu.stream(update_stream):
        got = torch_npu._C._npu_fused_infer_attention_score_out_graph(
            update_stream, handle, event, *dev, actual_seq_lengths_kv=[9, 4], out=[out, lse], **kwargs)
    assert got[0] is out and got[1] is lse
    graph.replay()
    want_out, want_lse = reference(q, k, v, 0.3, kvlen=[9, 4])
    torch.testing.assert_close(out.cpu().double(), want_out, **TOL[torch.float16])
    torch.testing.assert_close(lse.cpu().double(), want_lse, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="out must have 2 tensors"):
        torch_npu._C._npu_fused_infer_attention_score_out_graph(update_stream, handle, event, *dev, out=[out],
                                                                **kwargs)
