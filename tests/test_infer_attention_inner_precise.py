"""The precision modes of torch_npu's inference attention (inner_precise, csrc/fused/attention/infer_attention.cpp):
on float16 the high-performance mode carries the scores q k^T in float16 (rounded, then scaled in float16) before the
softmax, the high-precision mode in float32. npu_prompt_flash_attention runs in the high-performance mode as torch_npu
calls it (sparse_mode 10 to 14: modes 0 to 4 in high precision), npu_incre_flash_attention's inner_precise defaults
to 1 (high performance), npu_fused_infer_attention_score's to 0; pse_shift with float16 forces high precision, and
bfloat16 has one mode. Each is compared, read back, with a float64 reference that rounds where its mode does.

The scale of 128 (torch_npu's own PFA test's) makes near-tied softmax maxima decide rows, so which scores are rounded
shows: the share of elements off by more than 1e-3 (assertRtolEqual's limit, which allows 0.1%) tells the modes
apart."""

import pytest
import torch
import torch_npu

SCALE = 128.0


def qkv(dtype=torch.float16, b=1, n=4, sq=128, skv=512, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, n, s, d, generator=g).to(dtype) for s in (sq, skv, skv)]


def reference(q, k, v, scale, fp16_scores, pse=None):
    """softmax(scale * q k^T + pse) v in float64; with fp16_scores, q k^T rounded to float16 and scaled in float16
    first (the high-performance mode)."""
    s = q.float() @ k.float().transpose(-1, -2)
    s = (s.half().float() * scale).half().double() if fp16_scores else s.double() * scale
    if pse is not None:
        s = s + pse.double()
    return torch.softmax(s, -1) @ v.double()


def off_share(got, want):
    """The share of elements off by more than 1e-3 (relative above 1), as torch_npu's assertRtolEqual counts."""
    diff = (got.double() - want).abs()
    return (diff > 1e-3 * want.abs().clamp(min=1)).double().mean().item()


def prompt(q, k, v, **kwargs):
    return torch_npu.npu_prompt_flash_attention(q.npu(), k.npu(), v.npu(), num_heads=q.shape[1], input_layout="BNSD",
                                                scale_value=SCALE, pre_tokens=65535, next_tokens=65535,
                                                **kwargs).cpu()


def test_prompt_float16_runs_the_high_performance_mode_and_sparse_mode_10_the_high_precision_one():
    q, k, v = qkv()
    fast, precise = prompt(q, k, v), prompt(q, k, v, sparse_mode=10)
    rounded, exact = reference(q, k, v, SCALE, True), reference(q, k, v, SCALE, False)
    assert off_share(fast, rounded) <= 1e-3 and off_share(precise, exact) <= 1e-3
    assert off_share(fast, exact) > 3e-3 and off_share(precise, rounded) > 3e-3  # the modes differ here
    # sparse_mode 10 + m is mode m: 13 is 3's right-down causal mask, in high precision
    compressed = torch.triu(torch.ones(2048, 2048), 1).bool()
    causal = prompt(q, k, v, sparse_mode=13, atten_mask=compressed.npu())
    mask = torch.ones(128, 512, dtype=torch.bool).triu(512 - 128 + 1)
    want = reference(q, k, v, SCALE, False, pse=torch.zeros(128, 512).masked_fill(mask, float("-inf")))
    assert off_share(causal, want) <= 1e-3


def test_prompt_float16_with_pse_shift_and_bfloat16_have_one_mode():
    q, k, v = qkv(sq=64, skv=256, seed=1)
    pse = torch.randn(1, 4, 64, 256, generator=torch.Generator().manual_seed(2)).half()
    got = prompt(q, k, v, pse_shift=pse.npu())
    assert off_share(got, reference(q, k, v, SCALE, False, pse=pse)) <= 1e-3
    qb, kb, vb = qkv(torch.bfloat16, sq=64, skv=256, seed=1)
    assert torch.equal(prompt(qb, kb, vb), prompt(qb, kb, vb, sparse_mode=10))


@pytest.mark.parametrize("inner_precise, fp16_scores", [(None, True), (1, True), (0, False), (2, False), (3, True)])
def test_incre_flash_attention_inner_precise(inner_precise, fp16_scores):
    q, k, v = qkv(b=64, sq=1, skv=512, seed=3)  # 64 decode rows per head
    kwargs = {} if inner_precise is None else {"inner_precise": inner_precise}
    got = torch_npu.npu_incre_flash_attention(q.npu(), k.npu(), v.npu(), num_heads=4, input_layout="BNSD",
                                              scale_value=SCALE, **kwargs).cpu()
    assert off_share(got, reference(q, k, v, SCALE, fp16_scores)) <= 1e-3
    assert off_share(got, reference(q, k, v, SCALE, not fp16_scores)) > 3e-3


@pytest.mark.parametrize("inner_precise, fp16_scores", [(None, False), (1, True)])
def test_fused_infer_attention_score_inner_precise(inner_precise, fp16_scores):
    q, k, v = qkv(seed=4)
    kwargs = {} if inner_precise is None else {"inner_precise": inner_precise}
    got, _ = torch_npu.npu_fused_infer_attention_score(q.npu(), k.npu(), v.npu(), num_heads=4, input_layout="BNSD",
                                                       scale=SCALE, **kwargs)
    assert off_share(got.cpu(), reference(q, k, v, SCALE, fp16_scores)) <= 1e-3
    assert off_share(got.cpu(), reference(q, k, v, SCALE, not fp16_scores)) > 3e-3


def test_inner_precise_out_of_range_is_refused_at_the_call():
    q, k, v = qkv(sq=1, skv=8)
    for device in ("npu", "meta"):
        with pytest.raises(RuntimeError, match="inner_precise must be 0 .* got 4"):
            torch_npu.npu_incre_flash_attention(q.to(device), k.to(device), v.to(device), num_heads=4,
                                                input_layout="BNSD", inner_precise=4)


def test_high_performance_mode_fully_masked_row_and_lse():
    q, k, v = qkv(sq=8, skv=16, seed=5)
    mask = torch.zeros(1, 1, 8, 16, dtype=torch.bool)
    mask[..., 3, :] = True  # row 3 sees no key
    mask[..., 5, 4:] = True
    got, lse = torch_npu.npu_fused_infer_attention_score(q.npu(), k.npu(), v.npu(), num_heads=4, input_layout="BNSD",
                                                         scale=0.125, atten_mask=mask.npu(), inner_precise=1,
                                                         softmax_lse_flag=True)
    got, lse = got.cpu(), lse.cpu()
    additive = torch.zeros(8, 16).masked_fill(mask[0, 0], float("-inf"))
    want = reference(q, k, v, 0.125, True, pse=additive).nan_to_num(0.)
    assert got[:, :, 3].eq(0).all() and lse[:, :, 3].isneginf().all()
    torch.testing.assert_close(got.double(), want, atol=2e-3, rtol=2e-3)
    s = ((q.float() @ k.float().transpose(-1, -2)).half().float() * 0.125).half().double() + additive.double()
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1, keepdim=True), atol=1e-5, rtol=1e-5)
