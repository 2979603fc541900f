"""torch_npu's fused ops (torch.ops.npu.*, csrc/fused/) and optimizers (torch_npu.optim).

Each op is checked against a reference composite written here in float64 on the CPU (for the backward, autograd of
that composite), and on npu against the CPU path of the same op. Also: Meta shapes, errors at the call, the op path
being asynchronous (no host fallback, the host returns before the kernel runs), formats through torch.save/load, and
the fused optimizers against torch.optim on the CPU.
"""

import io
import math

import pytest
import torch
import torch_npu
from torch_npu import (get_npu_format, npu_format_cast, npu_fusion_attention, npu_geglu, npu_rms_norm,
                       npu_rotary_mul, npu_swiglu)

BIG = 2147483647
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2), torch.float64: dict(atol=1e-10, rtol=1e-10)}
# Gradients of half inputs: the reference is float64, the op rounds its inputs' products once more.
GRAD_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=5e-3, rtol=5e-3),
            torch.bfloat16: dict(atol=4e-2, rtol=4e-2)}


def npu(*tensors):
    return [t.npu() if t is not None else None for t in tensors]


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


# ------------------------------------------------------------------------------------------------ reference


def to_bnsd(t, layout, heads):
    if layout == "BSH":
        return t.unflatten(2, (heads, -1)).permute(0, 2, 1, 3)
    if layout == "SBH":
        return t.unflatten(2, (heads, -1)).permute(1, 2, 0, 3)
    if layout == "BSND":
        return t.permute(0, 2, 1, 3)
    return t


def from_bnsd(t, layout):
    if layout == "BSH":
        return t.permute(0, 2, 1, 3).flatten(2)
    if layout == "SBH":
        return t.permute(2, 0, 1, 3).flatten(2)
    if layout == "BSND":
        return t.permute(0, 2, 1, 3)
    return t


def structure_mask(sq, skv, sparse_mode, pre, nxt):
    """True where sparse_mode's structure masks a score out (torch_npu's documented modes)."""
    ones = torch.ones(sq, skv, dtype=torch.bool)
    shift = skv - sq
    if sparse_mode == 2:  # left-up causal
        return torch.triu(ones, 1)
    if sparse_mode == 3:  # right-down causal
        return torch.triu(ones, shift + 1)
    if sparse_mode == 4:  # band around the right-down diagonal
        return torch.triu(ones, shift + nxt + 1) | torch.tril(ones, shift - pre - 1)
    if pre < sq or nxt < skv:  # mode 0's band, from the left-up corner
        return torch.triu(ones, nxt + 1) | torch.tril(ones, -pre - 1)
    return None


def attention_bnsd(q, k, v, pse, mask, scale, keep=None, keep_prob=1.0):
    """softmax(scale * (q k^T + pse), masked) v in float64; fully masked rows give zeros."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q.double() @ k.double().transpose(-1, -2)
    if pse is not None:
        s = s + pse.double()
    s = s * scale
    if mask is not None:
        s = s.masked_fill(mask, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    if keep is not None:
        p = p * keep / keep_prob
    return p @ v.double()


def reference(q, k, v, head_num, layout, pse=None, atten_mask=None, scale=1.0, sparse_mode=0, pre=BIG, nxt=BIG,
              qlen=None, kvlen=None):
    if layout == "TND":
        outs, q0, k0 = [], 0, 0
        for q1, k1 in zip(qlen, kvlen):
            qi, ki, vi = (t.permute(1, 0, 2).unsqueeze(0) for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
            mask = structure_mask(q1 - q0, k1 - k0, sparse_mode, pre, nxt)
            if atten_mask is not None and sparse_mode <= 1:
                m = atten_mask[: q1 - q0, : k1 - k0].bool()
                mask = m if mask is None else mask | m
            outs.append(attention_bnsd(qi, ki, vi, None, mask, scale).squeeze(0).permute(1, 0, 2))
            q0, k0 = q1, k1
        return torch.cat(outs)
    qb = to_bnsd(q, layout, head_num)
    kv_heads = k.shape[-1] // qb.shape[-1] if layout in ("BSH", "SBH") else None
    kb, vb = to_bnsd(k, layout, kv_heads), to_bnsd(v, layout, kv_heads)
    mask = structure_mask(qb.shape[2], kb.shape[2], sparse_mode, pre, nxt)
    if atten_mask is not None and sparse_mode <= 1:
        mask = atten_mask.bool() if mask is None else mask | atten_mask.bool()
    return from_bnsd(attention_bnsd(qb, kb, vb, pse, mask, scale), layout)


def qkv(layout, b=2, n1=4, n2=2, sq=5, skv=7, d=8, dtype=torch.float32):
    shapes = {"BSH": ((b, sq, n1 * d), (b, skv, n2 * d)), "SBH": ((sq, b, n1 * d), (skv, b, n2 * d)),
              "BSND": ((b, sq, n1, d), (b, skv, n2, d)), "BNSD": ((b, n1, sq, d), (b, n2, skv, d))}
    qs, ks = shapes[layout]
    return torch.randn(qs).to(dtype), torch.randn(ks).to(dtype), torch.randn(ks).to(dtype)


def check_attention(q, k, v, head_num, layout, *, pse=None, atten_mask=None, scale=0.35, sparse_mode=0, pre=BIG,
                    nxt=BIG, qlen=None, kvlen=None):
    """Forward and backward of npu_fusion_attention on npu against the reference, and against the op on the CPU."""
    dtype = q.dtype
    kwargs = dict(scale=scale, sparse_mode=sparse_mode, pre_tockens=pre, next_tockens=nxt, actual_seq_qlen=qlen,
                  actual_seq_kvlen=kvlen)
    inputs = [q, k, v] + ([pse] if pse is not None else [])
    ref_in = leaves(*[t.double() for t in inputs])
    ref = reference(*ref_in[:3], head_num, layout, ref_in[3] if pse is not None else None, atten_mask, scale,
                    sparse_mode, pre, nxt, qlen, kvlen)
    dy = torch.randn(ref.shape).to(dtype)
    ref.backward(dy.double())

    dev_in = leaves(*npu(*inputs))
    out = npu_fusion_attention(*dev_in[:3], head_num, layout, pse=dev_in[3] if pse is not None else None,
                               atten_mask=atten_mask.npu() if atten_mask is not None else None, **kwargs)
    out[0].backward(dy.npu())
    assert out[0].dtype == dtype and out[0].shape == q.shape
    torch.testing.assert_close(out[0].cpu().double(), ref.detach(), **TOL[dtype])
    for got, want in zip(dev_in, ref_in):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, **GRAD_TOL[dtype])

    cpu_in = leaves(*inputs)
    cpu_out = npu_fusion_attention(*cpu_in[:3], head_num, layout, pse=cpu_in[3] if pse is not None else None,
                                   atten_mask=atten_mask, **kwargs)
    cpu_out[0].backward(dy)
    torch.testing.assert_close(out[0].cpu(), cpu_out[0], atol=0, rtol=0)
    for got, want in zip(dev_in, cpu_in):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-6, rtol=1e-6)
    return out


# ------------------------------------------------------------------------------------------------ imports


def test_torch_npu_names():
    from torch_npu.optim import NpuFusedAdam, NpuFusedAdamW, NpuFusedSGD  # noqa: F401

    assert torch_npu.npu_fusion_attention is torch.ops.npu.npu_fusion_attention
    for name in ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_rms_norm", "npu_rms_norm_backward",
                 "npu_rotary_mul", "npu_rotary_mul_backward", "npu_swiglu", "npu_swiglu_backward", "npu_geglu",
                 "npu_geglu_grad", "npu_format_cast", "get_npu_format", "empty_with_format", "get_storage_size"):
        assert hasattr(torch.ops.npu, name) and hasattr(torch_npu, name)
        # A Meta kernel, so tracing and torch.compile see the op.
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"npu::{name}", "Meta") or name in (
            "npu_format_cast", "get_npu_format", "empty_with_format", "get_storage_size")


def test_schemas_have_torch_npu_defaults():
    schema = torch.ops.npu.npu_fusion_attention.default._schema
    defaults = {a.name: a.default_value for a in schema.arguments}
    assert defaults["scale"] == 1.0 and defaults["keep_prob"] == 1.0 and defaults["pre_tockens"] == BIG
    assert defaults["next_tockens"] == BIG and defaults["sparse_mode"] == 0 and defaults["inner_precise"] == 0
    assert defaults["gen_mask_parallel"] is True and defaults["sync"] is False
    assert [str(r.type) for r in schema.returns] == ["Tensor"] * 4 + ["int"] * 3
    assert {a.name: a.default_value for a in torch.ops.npu.npu_rms_norm.default._schema.arguments}["epsilon"] == 1e-6


# ------------------------------------------------------------------------------------------------ fusion attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_fusion_attention_layouts(layout, dtype):
    torch.manual_seed(0)
    q, k, v = qkv(layout, dtype=dtype)
    out = check_attention(q, k, v, 4, layout)
    b, n1, sq = 2, 4, 5
    assert out[1].shape == (b, n1, sq, 8) and out[1].dtype == torch.float32
    assert out[2].shape == (b, n1, sq, 8) and out[3].numel() == 0
    assert out[4:] == (0, 0, b * n1 * sq * 7)  # no dropout: no seed drawn; numels = B * N * Sq * Skv


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_fusion_attention_tnd_varlen(dtype):
    torch.manual_seed(1)
    qlen, kvlen = [3, 7, 8], [4, 7, 12]  # cumulative: sequences of 3, 4, 1 queries over 4, 3, 5 keys
    q = torch.randn(8, 4, 8).to(dtype)
    k, v = torch.randn(12, 2, 8).to(dtype), torch.randn(12, 2, 8).to(dtype)
    for sparse_mode in (0, 3):
        mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1) if sparse_mode == 3 else None
        out = check_attention(q, k, v, 4, "TND", atten_mask=mask, sparse_mode=sparse_mode, qlen=qlen, kvlen=kvlen)
        assert out[1].shape == (8, 4, 8)
        assert out[6] == 4 * (3 * 4 + 4 * 3 + 1 * 5)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8], ids=str)
@pytest.mark.parametrize("shape", ["SS", "11SS", "B1SS", "BNSS"])
def test_fusion_attention_explicit_mask(shape, mask_dtype):
    torch.manual_seed(2)
    q, k, v = qkv("BNSD")
    sizes = {"SS": (5, 7), "11SS": (1, 1, 5, 7), "B1SS": (2, 1, 5, 7), "BNSS": (2, 4, 5, 7)}[shape]
    mask = (torch.rand(sizes) < 0.4).to(mask_dtype)
    mask[..., 0, :] = 1  # a fully masked row: zeros, not NaN
    out = check_attention(q, k, v, 4, "BNSD", atten_mask=mask)
    assert not out[0].cpu().isnan().any()
    for sparse_mode in (0, 1):  # allMask reads the mask as given
        check_attention(q, k, v, 4, "BNSD", atten_mask=mask, sparse_mode=sparse_mode)


@pytest.mark.parametrize("sq,skv", [(5, 7), (7, 5), (6, 6)])
@pytest.mark.parametrize("sparse_mode,pre,nxt", [(0, 2, 1), (0, BIG, 0), (2, BIG, BIG), (3, BIG, BIG), (4, 2, 0),
                                                 (4, 3, 1)])
def test_fusion_attention_sparse_modes(sparse_mode, pre, nxt, sq, skv):
    torch.manual_seed(3)
    q, k, v = qkv("BSND", sq=sq, skv=skv)
    # Modes 2 to 4 take torch_npu's compressed 2048 x 2048 triangle; their structure comes from the mode.
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1) if sparse_mode >= 2 else None
    check_attention(q, k, v, 4, "BSND", atten_mask=mask, sparse_mode=sparse_mode, pre=pre, nxt=nxt)


@pytest.mark.parametrize("pse_shape", ["BNSS", "BN1S", "1NSS"])
def test_fusion_attention_pse(pse_shape):
    torch.manual_seed(4)
    q, k, v = qkv("BSH")
    sizes = {"BNSS": (2, 4, 5, 7), "BN1S": (2, 4, 1, 7), "1NSS": (1, 4, 5, 7)}[pse_shape]
    pse = torch.randn(sizes)
    check_attention(q, k, v, 4, "BSH", pse=pse, atten_mask=torch.rand(5, 7) < 0.3)


def test_fusion_attention_dropout():
    torch.manual_seed(5)
    # value = identity reads the dropped, rescaled probabilities straight out of the output.
    q = torch.randn(2, 4, 64, 16)
    k = torch.randn(2, 4, 16, 16)
    v = torch.eye(16).expand(2, 4, 16, 16).contiguous()
    torch.npu.manual_seed(123)
    qn, kn, vn = leaves(*npu(q, k, v))
    out, _, _, _, seed, offset, numels = npu_fusion_attention(qn, kn, vn, 4, "BNSD", scale=0.25, keep_prob=0.8)
    assert numels == 2 * 4 * 64 * 16
    assert seed == torch.npu.initial_seed() == 123
    dropped = out.detach().cpu()
    keep = dropped != 0
    assert 0.75 < keep.double().mean().item() < 0.85
    ref_in = leaves(q.double(), k.double(), v.double())
    ref = attention_bnsd(*ref_in, None, None, 0.25, keep=keep.double(), keep_prob=0.8)
    torch.testing.assert_close(dropped.double(), ref.detach(), atol=1e-5, rtol=1e-5)
    # The backward regenerates the same mask from (seed, offset).
    dy = torch.randn(out.shape)
    out.backward(dy.npu())
    ref.backward(dy.double())
    for got, want in zip((qn, kn, vn), ref_in):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=1e-4, rtol=1e-4)
    # The next call draws the next offset: another mask. Reseeding replays both.
    out2, *_, seed2, offset2, _ = npu_fusion_attention(qn, kn, vn, 4, "BNSD", scale=0.25, keep_prob=0.8)
    assert (seed2, offset2) != (seed, offset) and not torch.equal(out2.detach().cpu(), dropped)
    torch.npu.manual_seed(123)
    again = npu_fusion_attention(qn, kn, vn, 4, "BNSD", scale=0.25, keep_prob=0.8)
    assert again[4:6] == (seed, offset)
    assert torch.equal(again[0].detach().cpu(), dropped)


def test_fusion_attention_grad_op_matches_autograd():
    torch.manual_seed(6)
    q, k, v = npu(*qkv("BSH"))
    dy = torch.randn(q.shape).npu()
    pse = torch.randn(2, 4, 5, 7).npu()
    out, smax, ssum, _, seed, offset, numels = npu_fusion_attention(q, k, v, 4, "BSH", pse=pse, scale=0.3)
    grads = torch_npu.npu_fusion_attention_grad(q, k, v, dy, 4, "BSH", pse=pse, softmax_max=smax, softmax_sum=ssum,
                                                attention_in=out, scale_value=0.3, seed=seed, offset=offset,
                                                numels=numels)
    ql, kl, vl, pl = leaves(q, k, v, pse)
    npu_fusion_attention(ql, kl, vl, 4, "BSH", pse=pl, scale=0.3)[0].backward(dy)
    for got, want in zip(grads, (ql, kl, vl, pl)):
        torch.testing.assert_close(got.cpu(), want.grad.cpu())
    # Without the saved statistics the op recomputes them.
    recomputed = torch_npu.npu_fusion_attention_grad(q, k, v, dy, 4, "BSH", pse=pse, scale_value=0.3)
    for got, want in zip(recomputed, grads):
        torch.testing.assert_close(got.cpu(), want.cpu())


def test_fusion_attention_gradcheck_float64_on_npu():
    torch.manual_seed(7)
    q, k, v = (t.double().npu().requires_grad_() for t in qkv("BNSD", b=1, n1=2, n2=1, sq=3, skv=4, d=4))
    pse = torch.randn(1, 2, 3, 4, dtype=torch.float64).npu().requires_grad_()
    mask = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.bool).npu()

    def f(q, k, v, pse):
        return npu_fusion_attention(q, k, v, 2, "BNSD", pse=pse, atten_mask=mask, scale=0.5)[0]

    assert torch.autograd.gradcheck(f, (q, k, v, pse))


def test_fused_ops_compile_through_their_meta_kernels():
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(13)

    def f(q, k, v, gamma):
        out = npu_fusion_attention(q, k, v, 4, "BSH", scale=0.3)[0]
        return npu_swiglu(npu_rms_norm(out, gamma)[0]).sum()

    q, k, v, gamma = npu(*qkv("BSH"), torch.randn(32))
    (q1,), (q2,) = leaves(q), leaves(q)
    torch._dynamo.reset()
    # One graph (every op traced by its Meta kernel), compiled by Inductor, which calls the fused ops as extern
    # kernels on the npu op path.
    compiled = torch.compile(f, fullgraph=True)
    got, code = run_and_get_code(compiled, q1, k, v, gamma)
    assert "torch.ops.npu.npu_fusion_attention.default(" in code[0]
    want = f(q2, k, v, gamma)
    got.backward()
    want.backward()
    torch.testing.assert_close(got.cpu(), want.cpu())
    torch.testing.assert_close(q1.grad.cpu(), q2.grad.cpu())


def test_fusion_attention_meta_shapes():
    q, k, v = (t.to("meta") for t in qkv("SBH"))
    out, smax, ssum, sout, seed, offset, numels = torch.ops.npu.npu_fusion_attention(q, k, v, 4, "SBH")
    assert out.device.type == "meta" and out.shape == q.shape and smax.shape == (2, 4, 5, 8)
    assert sout.shape == (0,) and numels == 2 * 4 * 5 * 7
    grads = torch.ops.npu.npu_fusion_attention_grad(q, k, v, out, 4, "SBH")
    assert [g.shape for g in grads[:3]] == [q.shape, k.shape, v.shape]
    tq = torch.empty(8, 4, 8, device="meta")
    tk = torch.empty(12, 2, 8, device="meta")
    out = torch.ops.npu.npu_fusion_attention(tq, tk, tk, 4, "TND", actual_seq_qlen=[3, 8], actual_seq_kvlen=[4, 12])
    assert out[0].shape == (8, 4, 8) and out[1].shape == (8, 4, 8)


@pytest.mark.parametrize("device", ["cpu", "npu", "meta"])
def test_fusion_attention_bad_arguments_raise_at_the_call(device):
    q, k, v = (t.to(device) for t in qkv("BSH"))
    cases = [
        (dict(input_layout="BHS"), "input_layout must be one of"),
        (dict(head_num=3), "multiple of head_num"),
        (dict(input_layout="BNSD"), "4-D query"),
        (dict(sparse_mode=6), "sparse_mode 6 is not supported"),
        (dict(keep_prob=0.0), "keep_prob"),
        (dict(sparse_mode=1), "needs atten_mask"),
        (dict(atten_mask=torch.zeros(5, 6, dtype=torch.bool, device=device)), "atten_mask of shape"),
        (dict(atten_mask=torch.zeros(5, 7, device=device)), "bool or uint8"),
        (dict(pse=torch.zeros(2, 4, 5, 6, device=device)), "pse of shape"),
        (dict(input_layout="TND"), "needs actual_seq_qlen"),
    ]
    before = torch_npu.npu.sync_points()["total"]
    for overrides, message in cases:
        args = dict(query=q, key=k, value=v, head_num=4, input_layout="BSH") | overrides
        if args["input_layout"] == "TND":
            args |= dict(query=q[0].unflatten(-1, (4, 8)), key=k[0].unflatten(-1, (2, 8)),
                         value=v[0].unflatten(-1, (2, 8)))
        with pytest.raises(RuntimeError, match=f"npu_fusion_attention: .*{message}"):
            npu_fusion_attention(**args)
    with pytest.raises(RuntimeError, match="npu_fusion_attention: query and key have different batch sizes"):
        npu_fusion_attention(q, k[:1], v[:1], 4, "BSH")
    with pytest.raises(RuntimeError, match="must divide the number of query heads"):
        three_heads = torch.zeros(2, 7, 24, device=device)
        npu_fusion_attention(q, three_heads, three_heads, 4, "BSH")
    assert torch_npu.npu.sync_points()["total"] == before  # errors raised on the host, without waiting
    if device == "npu":
        torch.testing.assert_close(npu_fusion_attention(q, k, v, 4, "BSH")[0].cpu(),
                                   npu_fusion_attention(q.cpu(), k.cpu(), v.cpu(), 4, "BSH")[0])


# ------------------------------------------------------------------------------------------------ async


def test_fusion_attention_kernel_error_names_the_op_at_the_next_synchronize():
    # Modes 2 to 4 take the compressed mask: its shape is checked at the call, its content (data) by the kernel.
    q, k, v = npu(*qkv("BNSD"))
    with pytest.raises(RuntimeError, match="npu_fusion_attention: sparse_mode 2 takes the compressed atten_mask"):
        npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=torch.ones(5, 7, dtype=torch.bool).npu(), sparse_mode=2)
    wrong = torch.tril(torch.ones(2048, 2048, dtype=torch.bool), -1).npu()  # the lower triangle
    npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=wrong, sparse_mode=2)  # returns: the kernel has not run
    with pytest.raises(RuntimeError) as info:
        torch.npu.synchronize()
    message = str(info.value)
    assert "npu::_npu_fusion_attention" in message and "ASCEND_LAUNCH_BLOCKING=1" in message
    assert "takes the compressed atten_mask" in message
    torch.npu.synchronize()  # reported once; the device works after it
    right = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1).npu()
    out = npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=right, sparse_mode=2)[0]
    torch.testing.assert_close(out.cpu(), npu_fusion_attention(q.cpu(), k.cpu(), v.cpu(), 4, "BNSD",
                                                               atten_mask=right.cpu(), sparse_mode=2)[0])



def test_fused_ops_launch_on_the_stream_without_waiting():
    torch.manual_seed(8)
    q, k, v = npu(*qkv("BSND"))
    x, gamma = torch.randn(4, 16).npu(), torch.randn(16).npu()
    r1, r2 = torch.randn(1, 16).npu(), torch.randn(1, 16).npu()
    # Warm-up: an op's first launch infers and caches its Meta kernel.
    ops = lambda: (npu_fusion_attention(q, k, v, 4, "BSND")[0], npu_rms_norm(x, gamma)[0],  # noqa: E731
                   npu_rotary_mul(x, r1, r2), npu_swiglu(x))
    ops()
    torch.npu.synchronize()
    before = torch_npu.npu.sync_points()["total"]
    torch.npu._sleep(500_000_000)  # the device cannot have caught up with the launches below when they return
    results = ops()
    done = torch.npu.Event()
    done.record()
    assert not done.query()  # the host returned before the kernels ran
    assert torch_npu.npu.sync_points()["total"] == before  # no op waited for the device
    done.synchronize()
    want = (npu_fusion_attention(q.cpu(), k.cpu(), v.cpu(), 4, "BSND")[0], npu_rms_norm(x.cpu(), gamma.cpu())[0],
            npu_rotary_mul(x.cpu(), r1.cpu(), r2.cpu()), npu_swiglu(x.cpu()))
    for got, ref in zip(results, want):
        torch.testing.assert_close(got.cpu(), ref)


def test_fused_kernels_run_on_the_current_stream():
    x, gamma = torch.randn(64, 32).npu(), torch.randn(32).npu()
    side = torch.npu.Stream()
    side.wait_stream(torch.npu.current_stream())  # x and gamma are copied in on the current stream
    with torch.npu.stream(side):
        torch.npu._sleep(300_000_000)
        y, _ = npu_rms_norm(x, gamma)
    assert not side.query()  # queued behind the sleep on the side stream
    side.synchronize()
    torch.testing.assert_close(y.cpu(), npu_rms_norm(x.cpu(), gamma.cpu())[0])


# ------------------------------------------------------------------------------------------------ rms_norm


def rms_norm_reference(x, gamma, eps, dims):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * gamma.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("gamma_dims", [1, 2])
def test_rms_norm(dtype, gamma_dims):
    torch.manual_seed(9)
    x = torch.randn(3, 4, 6, 8).to(dtype)
    gamma = torch.randn(x.shape[-gamma_dims:]).to(dtype)
    dims = tuple(range(-gamma_dims, 0))
    xr, gr = leaves(x.double(), gamma.double())
    ref = rms_norm_reference(xr, gr, 1e-5, dims)
    dy = torch.randn(x.shape).to(dtype)
    ref.backward(dy.double())
    xn, gn = leaves(*npu(x, gamma))
    y, rstd = npu_rms_norm(xn, gn, epsilon=1e-5)
    y.backward(dy.npu())
    assert y.dtype == dtype and rstd.dtype == torch.float32
    assert rstd.shape == x.shape[:-gamma_dims] + (1,) * gamma_dims
    torch.testing.assert_close(y.cpu().double(), ref.detach(), **TOL[dtype])
    want_rstd = torch.rsqrt(x.double().pow(2).mean(dims, keepdim=True) + 1e-5)
    torch.testing.assert_close(rstd.cpu().double(), want_rstd, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xn.grad.cpu().double(), xr.grad, **GRAD_TOL[dtype])
    torch.testing.assert_close(gn.grad.cpu().double(), gr.grad, atol=GRAD_TOL[dtype]["atol"] * 10,
                               rtol=GRAD_TOL[dtype]["rtol"] * 10)
    yc, _ = npu_rms_norm(x, gamma, 1e-5)
    torch.testing.assert_close(y.detach().cpu(), yc, atol=0, rtol=0)


def test_rms_norm_gradcheck_and_errors():
    x = torch.randn(3, 5, dtype=torch.float64).npu().requires_grad_()
    gamma = torch.randn(5, dtype=torch.float64).npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, g: npu_rms_norm(x, g)[0], (x, gamma))
    with pytest.raises(RuntimeError, match="npu_rms_norm: gamma's shape"):
        npu_rms_norm(x, gamma[:4])
    meta = npu_rms_norm(torch.empty(2, 3, 5, device="meta"), torch.empty(5, device="meta"))
    assert meta[0].shape == (2, 3, 5) and meta[1].shape == (2, 3, 1)


# ------------------------------------------------------------------------------------------------ rotary_mul


def rotate_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


def rotate_interleave(x):
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_mul(mode, dtype):
    torch.manual_seed(10)
    x = torch.randn(2, 5, 3, 8).to(dtype)  # BSND, cos/sin broadcast over batch and heads
    r1, r2 = torch.randn(1, 5, 1, 8).to(dtype), torch.randn(1, 5, 1, 8).to(dtype)
    rotate = rotate_half if mode == "half" else rotate_interleave
    xr, r1r, r2r = leaves(x.double(), r1.double(), r2.double())
    ref = xr * r1r + rotate(xr) * r2r
    dy = torch.randn(x.shape).to(dtype)
    ref.backward(dy.double())
    xn, r1n, r2n = leaves(*npu(x, r1, r2))
    out = npu_rotary_mul(xn, r1n, r2n, rotary_mode=mode)
    out.backward(dy.npu())
    torch.testing.assert_close(out.cpu().double(), ref.detach(), **TOL[dtype])
    for got, want in zip((xn, r1n, r2n), (xr, r1r, r2r)):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=GRAD_TOL[dtype]["atol"] * 10,
                                   rtol=GRAD_TOL[dtype]["rtol"] * 10)
    torch.testing.assert_close(out.detach().cpu(), npu_rotary_mul(x, r1, r2, mode), atol=0, rtol=0)


def test_rotary_mul_gradcheck_and_errors():
    x = torch.randn(2, 3, 4, dtype=torch.float64).npu().requires_grad_()
    r1 = torch.randn(3, 4, dtype=torch.float64).npu().requires_grad_()
    r2 = torch.randn(1, 4, dtype=torch.float64).npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: npu_rotary_mul(*a), (x, r1, r2))
    with pytest.raises(RuntimeError, match="npu_rotary_mul: rotary_mode must be"):
        npu_rotary_mul(x, r1, r2, "full")
    with pytest.raises(RuntimeError, match="npu_rotary_mul: the last dim of x must be even"):
        npu_rotary_mul(x[..., :3], r1[..., :3], r2[..., :3])
    assert npu_rotary_mul(*(t.detach().to("meta") for t in (x, r1, r2))).shape == (2, 3, 4)


# ------------------------------------------------------------------------------------------------ swiglu


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [-1, 1])
def test_swiglu(dim, dtype):
    torch.manual_seed(11)
    x = torch.randn(3, 6, 10).to(dtype)
    (xr,) = leaves(x.double())
    a, b = xr.chunk(2, dim)
    ref = torch.nn.functional.silu(a) * b
    dy = torch.randn(ref.shape).to(dtype)
    ref.backward(dy.double())
    (xn,) = leaves(x.npu())
    out = npu_swiglu(xn, dim=dim)
    out.backward(dy.npu())
    torch.testing.assert_close(out.cpu().double(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(xn.grad.cpu().double(), xr.grad, **GRAD_TOL[dtype])
    torch.testing.assert_close(out.detach().cpu(), npu_swiglu(x, dim), atol=0, rtol=0)


def test_swiglu_gradcheck_and_errors():
    x = torch.randn(3, 4, dtype=torch.float64).npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: npu_swiglu(x), (x,))
    with pytest.raises(RuntimeError, match="npu_swiglu: x's size along dim 0 must be even"):
        npu_swiglu(x, 0)
    assert npu_swiglu(torch.empty(2, 8, device="meta")).shape == (2, 4)


# ------------------------------------------------------------------------------------------------ geglu


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim, approximate, activate_left", [(-1, 1, False), (-1, 0, True), (1, 0, False)])
def test_geglu(dim, approximate, activate_left, dtype):
    # torch_npu's GeGluV2: the right half is activated unless activate_left (diffusers' GEGLU: hidden * gelu(gate)).
    torch.manual_seed(12)
    x = torch.randn(3, 6, 10).to(dtype)
    (xr,) = leaves(x.double())
    left, right = xr.chunk(2, dim)
    act, other = (left, right) if activate_left else (right, left)
    gelu = torch.nn.functional.gelu(act, approximate="tanh" if approximate else "none")
    ref = gelu * other
    dy = torch.randn(ref.shape).to(dtype)
    ref.backward(dy.double())
    (xn,) = leaves(x.npu())
    out, out_gelu = npu_geglu(xn, dim, approximate, activate_left)
    out.backward(dy.npu())
    torch.testing.assert_close(out.cpu().double(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(out_gelu.cpu().double(), gelu.detach(), **TOL[dtype])
    torch.testing.assert_close(xn.grad.cpu().double(), xr.grad, **GRAD_TOL[dtype])
    torch.testing.assert_close(out.detach().cpu(), npu_geglu(x, dim, approximate, activate_left)[0], atol=0, rtol=0)


def test_geglu_gradcheck_errors_and_diffusers():
    x = torch.randn(3, 4, dtype=torch.float64).npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: npu_geglu(x, -1, 0)[0], (x,))
    x = torch.randn(4, 3, dtype=torch.float64).npu().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: npu_geglu(x, 0, 1, True)[0], (x,))
    with pytest.raises(RuntimeError, match="npu_geglu: self's size along dim 0 must be even"):
        npu_geglu(torch.randn(3, 4, device="npu"), 0)
    with pytest.raises(RuntimeError, match="npu_geglu: approximate must be 0"):
        npu_geglu(torch.randn(3, 4, device="npu"), -1, 2)
    assert [t.shape for t in npu_geglu(torch.empty(2, 8, device="meta"))] == [(2, 4), (2, 4)]
    # diffusers' GEGLU calls npu_geglu(x, dim=-1, approximate=1)[0] whenever torch_npu is importable: the tanh form
    # of what it computes on the CPU.
    from diffusers.models.activations import GEGLU

    torch.manual_seed(0)
    module = GEGLU(8, 16)
    h = torch.randn(2, 5, 8)
    hidden, gate = module.proj(h).chunk(2, dim=-1)
    expected = hidden * torch.nn.functional.gelu(gate, approximate="tanh")
    torch.testing.assert_close(module.npu()(h.npu()).cpu(), expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ formats


def test_format_cast_is_metadata_and_survives_save_load():
    x = torch.randn(4, 16, 16)
    xn = x.npu()
    assert get_npu_format(xn) == 2  # ND
    nhwc = npu_format_cast(xn, 1)
    assert get_npu_format(nhwc) == 1 and get_npu_format(xn) == 2  # a new tensor; the input keeps its format
    assert torch.equal(nhwc.cpu(), x)  # the data stays ND
    assert torch_npu.get_storage_size(nhwc) == x.numel()  # no padding
    assert get_npu_format(nhwc.detach()) == 1 and get_npu_format(torch.nn.Parameter(nhwc)) == 1
    assert get_npu_format(xn.npu_format_cast(0)) == 0  # torch_npu's tensor method
    assert get_npu_format(npu_format_cast(nhwc, 2)) == 2  # back to ND
    y = torch.randn(3, 3).npu()
    assert torch_npu.npu_format_cast_(y, 0) is y and get_npu_format(y) == 0

    buffer = io.BytesIO()
    torch.save({"nhwc": nhwc, "nd": xn, "y": y}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["nhwc"].device.type == "npu"
    assert [get_npu_format(loaded[k]) for k in ("nhwc", "nd", "y")] == [1, 2, 0]
    assert torch.equal(loaded["nhwc"].cpu(), x)


def test_empty_with_format_and_storage_size():
    e = torch_npu.empty_with_format((2, 3, 4, 5), dtype=torch.float16, acl_format=0)
    assert e.device == torch.device("npu", torch.npu.current_device()) and e.dtype == torch.float16
    assert e.shape == (2, 3, 4, 5) and get_npu_format(e) == 0
    assert get_npu_format(torch_npu.empty_with_format((3,), device="npu:1")) == 2  # ND by default
    assert torch_npu.get_storage_size(e) == 120
    assert torch_npu.get_storage_size(e[1:, :2]) == 120  # a view's storage is its base's


def test_format_cast_errors_and_autograd():
    x = torch.randn(2, 3).npu().requires_grad_()
    with pytest.raises(RuntimeError, match="npu_format_cast: unknown acl_format 7"):
        npu_format_cast(x, 7)
    out = npu_format_cast(x, 0)
    (out * 2).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.full((2, 3), 2.0))


# ------------------------------------------------------------------------------------------------ optimizers


@pytest.mark.parametrize("name,reference,kwargs", [
    ("NpuFusedAdamW", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    ("NpuFusedAdamW", torch.optim.AdamW, dict(lr=1e-2, amsgrad=True)),
    ("NpuFusedAdam", torch.optim.Adam, dict(lr=1e-2, weight_decay=0.05)),
    ("NpuFusedSGD", torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("NpuFusedSGD", torch.optim.SGD, dict(lr=0.1, weight_decay=0.01)),
])
def test_fused_optimizers_match_torch_optim(name, reference, kwargs):
    import torch_npu.optim

    torch.manual_seed(12)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    device_model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    device_model.load_state_dict(model.state_dict())
    device_model.npu()
    opt = getattr(torch_npu.optim, name)(device_model.parameters(), **kwargs)
    ref_opt = reference(model.parameters(), **kwargs)
    before = None
    for step in range(5):
        x = torch.randn(8, 6)
        for m, o, inp in ((device_model, opt, x.npu()), (model, ref_opt, x)):
            o.zero_grad()
            m(inp).pow(2).sum().backward()
            o.step()
        if step == 0:
            before = torch_npu.npu.sync_points()["total"]
    assert torch_npu.npu.sync_points()["total"] == before  # the fused steps launch without waiting
    for got, want in zip(device_model.parameters(), model.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-6, rtol=1e-5)


def test_fused_optimizer_signatures():
    from torch_npu.optim import NpuFusedAdamW, NpuFusedSGD

    p = [torch.nn.Parameter(torch.randn(3).npu())]
    opt = NpuFusedAdamW(p)
    assert opt.defaults["weight_decay"] == 1e-2 and opt.defaults["lr"] == 1e-3 and opt.defaults["fused"]
    with pytest.raises(TypeError, match="lr"):
        NpuFusedSGD(p)


def test_fused_adamw_with_grad_scaler_matches_the_cpu():
    from torch_npu.optim import NpuFusedAdamW

    torch.manual_seed(14)
    model = torch.nn.Linear(8, 4)
    device_model = torch.nn.Linear(8, 4)
    device_model.load_state_dict(model.state_dict())
    device_model.npu()
    opt, ref_opt = NpuFusedAdamW(device_model.parameters(), lr=1e-2), torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler, ref_scaler = torch.npu.amp.GradScaler(init_scale=1024.0), torch.amp.GradScaler("cpu", init_scale=1024.0)
    before = torch_npu.npu.sync_points()["total"]
    for _ in range(4):
        x = torch.randn(16, 8)
        for m, o, s, inp in ((device_model, opt, scaler, x.npu()), (model, ref_opt, ref_scaler, x)):
            o.zero_grad()
            s.scale(m(inp).pow(2).sum()).backward()
            s.step(o)  # the fused step unscales and skips on inf on the device: no host check
            s.update()
    assert torch_npu.npu.sync_points()["total"] == before
    for got, want in zip(device_model.parameters(), model.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-6, rtol=1e-5)


def test_non_contiguous_inputs_and_the_second_device():
    torch.manual_seed(15)
    q, k, v = (torch.randn(s, 2, h).transpose(0, 1) for s, h in ((5, 32), (7, 16), (7, 16)))  # BSH views of SBH
    want = npu_fusion_attention(q.contiguous(), k.contiguous(), v.contiguous(), 4, "BSH")[0]
    torch.testing.assert_close(npu_fusion_attention(*npu(q, k, v), 4, "BSH")[0].cpu(), want)
    x, gamma = torch.randn(8, 6).t(), torch.randn(8)
    torch.testing.assert_close(npu_rms_norm(x.npu(), gamma.npu())[0].cpu(), npu_rms_norm(x.contiguous(), gamma)[0])
    with torch.npu.device(1):
        torch.npu.manual_seed(77)  # npu:1's generator draws the dropout seed of ops on npu:1
    torch.npu.manual_seed(5)
    on_1 = npu_fusion_attention(q.to("npu:1"), k.to("npu:1"), v.to("npu:1"), 4, "BSH", keep_prob=0.9)
    assert on_1[0].device == torch.device("npu:1") and on_1[4] == 77
    torch.npu.synchronize(1)
    assert not on_1[0].cpu().isnan().any()
