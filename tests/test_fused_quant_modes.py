"""The quantization modes of torch_npu's quantized ops beyond the basic ones (csrc/fused/quantization/README.md):
npu_quant_matmul's A8W4 (int8 activations, int4 weights per group of k) and T-CG (y_scale: float8 activations, float4
weights dequantized per group of k) and hifloat8 operands; npu_dynamic_quant to hifloat8; npu_dynamic_mx_quant's
scale_alg 1 and 2; npu_fused_infer_attention_score's
key_/value_antiquant_mode 2 to 5.

Each is checked against a reference written here from the documented computation (integer products exact, the
roundings the chip makes named), on npu and on the CPU path of the same op, with the call form of the library that
uses it, and one bad argument raising torch_npu's message at the call (on npu and on meta).
"""

import importlib
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch_npu

from test_fused_quant import FORMATS, both, decode_fp4, fp19, nearest_even


# ------------------------------------------------------------------------------------------------ A8W4


def pack_low_word(scale):
    """vllm-ascend's int64 A8W4 scale: the float32 bits in the low 32 bits, the high word zero."""
    return scale.float().contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def a8w4_reference(x1, w, scale, offset, pertoken, group):
    """op-plugin's A8W4 golden (test_npu_quant_matmul.py), in numpy: x1 as two int4 halves (x1 // 16, (x1 & 15) - 8),
    each group's integer product times its scale rounded to float16 and accumulated in float16; then in float32
    16 hi + lo + offset, times pertoken."""
    m, k = x1.shape
    x = x1.numpy().astype(np.int32)
    halves = np.concatenate([x // 16, (x & 15) - 8], 0)
    wv, s = w.numpy().astype(np.int32), scale.numpy()
    acc = np.zeros((2 * m, wv.shape[1]), dtype=np.float16)
    for j in range(k // group):
        part = halves[:, j * group:(j + 1) * group] @ wv[j * group:(j + 1) * group]
        acc = (acc + (part.astype(np.float32) * s[j]).astype(np.float16)).astype(np.float16)
    acc = acc.astype(np.float32)
    out = (acc[:m] * 16 + acc[m:] + offset.numpy()) * pertoken.numpy()
    return torch.from_numpy(out)


@pytest.mark.parametrize("out", [torch.bfloat16, torch.float16])
def test_quant_matmul_a8w4_vllm_ascend_call_form(out):
    # vllm-ascend's W4A8 dynamic linear (vllm_ascend/quantization/w4a8_dynamic.py, AscendW4A8DynamicLinearMethod):
    # process_scale_second packs scale * per-group scale (rounded through float16) into the low word of an int64 and
    # sets offset = 8 * sum_k(weight * per-group scale * scale); apply() calls
    # npu_quant_matmul(x1=qx, x2=weight, scale=..., pertoken_scale=dynamic_scale.unsqueeze(-1), offset=...,
    #                  group_sizes=[0, 0, 256], output_dtype=x.dtype).
    torch.manual_seed(41)
    m, k, n, group = 5, 512, 48, 256
    x = torch.randn(m, k).to(out)
    w = torch.randint(-8, 8, (k, n), dtype=torch.int32)
    channel = torch.rand(n) * 0.02 + 0.01
    per_group = torch.rand(k // group, n) + 0.5
    offset = 8 * (w.float().reshape(k // group, group, n) * per_group[:, None]).reshape(k, n).mul(channel).sum(0)
    scale = (channel * per_group).to(torch.float16).float()
    qx, dyn = torch_npu.npu_dynamic_quant(x.npu())
    qx, dyn = qx.cpu(), dyn.cpu()

    def call(qx, weight, scale, pertoken, offset):
        return torch_npu.npu_quant_matmul(x1=qx, x2=weight, scale=scale, pertoken_scale=pertoken, offset=offset,
                                          group_sizes=[0, 0, group], output_dtype=out)

    args = (qx, torch_npu.npu_convert_weight_to_int4pack(w.npu()).cpu(), pack_low_word(scale), dyn.unsqueeze(-1),
            offset)
    got, got_cpu = both(call, *args)
    want = a8w4_reference(qx, w, scale, offset, dyn.unsqueeze(-1), group).to(out)
    assert got.dtype == out and got.shape == (m, n)
    assert torch.equal(got, got_cpu) and torch.equal(got, want)
    # the offset restores the shifted activations: the result is the float product it quantizes
    exact = qx.double() * dyn.double()[:, None] @ (w.double() * scale.double().repeat_interleave(group, 0))
    assert ((got.double() - exact).norm() / exact.norm()).item() < 1e-2
    meta = call(*[a.to("meta") for a in args])
    assert meta.shape == (m, n) and meta.dtype == out


def test_quant_matmul_a8w4_trans_quant_param_scale():
    # op-plugin's A8W4 test form: the per-group scale packed by npu_trans_quant_param (FP19), offset (n,) float32.
    torch.manual_seed(42)
    m, k, n, group = 3, 768, 16, 256
    x1 = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    w = torch.randint(1, 8, (k, n), dtype=torch.int32)
    offset = torch.randn(n)
    pertoken = torch.randn(m, 1) * 0.01
    raw = torch.rand(k // group, n)
    packed = torch_npu.npu_trans_quant_param(raw.reshape(-1).npu()).cpu().reshape(k // group, n)
    x2 = torch_npu.npu_convert_weight_to_int4pack(w.npu()).cpu()
    got, got_cpu = both(torch_npu.npu_quant_matmul, x1, x2, packed, offset=offset, pertoken_scale=pertoken,
                        output_dtype=torch.float16, group_sizes=[0, 0, group])
    assert torch.equal(got, got_cpu)
    assert torch.equal(got, a8w4_reference(x1, w, fp19(raw), offset, pertoken, group).half())


def test_quant_matmul_a8w4_bad_scale_raises():
    for device in ("npu", "meta"):
        x1 = torch.zeros(2, 256, dtype=torch.int8, device=device)
        x2 = torch.zeros(256, 2, dtype=torch.int32, device=device)
        pertoken = torch.ones(2, 1, device=device)
        with pytest.raises(RuntimeError, match="npu_quant_matmul: scale's type should be torch.int64 in A8W4"):
            torch_npu.npu_quant_matmul(x1, x2, torch.ones(1, 16, device=device), pertoken_scale=pertoken,
                                       output_dtype=torch.float16)


# ------------------------------------------------------------------------------------------------ T-CG (y_scale)

E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


def pack_fp4(codes):
    """float4_e2m1 codes (.., 2n) -> (.., n) torch.float4_e2m1fn_x2, the first of each pair in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8).view(torch.float4_e2m1fn_x2)


@pytest.mark.parametrize("out", [torch.float32, torch.bfloat16])
def test_quant_matmul_t_cg_y_scale(out):
    # CANN's aclnnQuantMatmulV5 T-CG: out = (x1 @ (x2 * x2Scale)) * yScale + bias, x2's per-group product rounded to
    # bfloat16 and then to x1's float8 dtype before the cube (QuantBatchMatmulV4's golden), yScale read as FP19.
    torch.manual_seed(43)
    m, k, n, group = 4, 96, 16, 32
    x1 = (torch.randn(m, k) * 4).to(torch.float8_e4m3fn)
    codes = torch.randint(0, 16, (k, n), dtype=torch.int64)
    scale = (torch.rand(k // group, n) * 3 + 0.1).to(torch.bfloat16)
    y = torch.rand(n) + 0.5
    y_scale = torch_npu.npu_trans_quant_param(y.npu()).cpu().reshape(1, n)
    bias = torch.randn(n)
    got, got_cpu = both(torch_npu.npu_quant_matmul, x1, pack_fp4(codes), scale, y_scale=y_scale, bias=bias,
                        output_dtype=out, group_sizes=[0, 0, group])
    w = (E2M1[codes] * scale.double().repeat_interleave(group, 0)).to(torch.bfloat16).to(torch.float8_e4m3fn)
    want = x1.double() @ w.double() * fp19(y).double() + bias.double()
    assert got.dtype == out and torch.equal(got, got_cpu)
    tol = dict(rtol=1e-5, atol=1e-4) if out == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(got.double(), want, **tol)


def test_quant_matmul_t_cg_bad_y_scale_raises():
    for device in ("npu", "meta"):
        x1 = torch.zeros(2, 64, device=device).to(torch.float8_e4m3fn)
        x2 = torch.zeros(64, 4, dtype=torch.uint8, device=device).view(torch.float4_e2m1fn_x2)
        with pytest.raises(RuntimeError, match="npu_quant_matmul: y_scale's type supported for int64"):
            torch_npu.npu_quant_matmul(x1, x2, torch.ones(2, 8, dtype=torch.bfloat16, device=device),
                                       y_scale=torch.ones(1, 8, device=device), output_dtype=torch.bfloat16)


# ------------------------------------------------------------------------------------------------ hifloat8

EN_DTYPES = "en-dtypes==0.0.4"  # numpy dtypes with hifloat8, the format's reference the CANN goldens use


@pytest.fixture(scope="module")
def hifloat8_values():
    """The float64 value of each of the 256 HiFloat8 codes, read through en_dtypes (installed without deps)."""
    try:
        en_dtypes = importlib.import_module("en_dtypes")
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", EN_DTYPES], check=True)
        importlib.invalidate_caches()
        en_dtypes = importlib.import_module("en_dtypes")
    codes = np.arange(256, dtype=np.uint8).view(en_dtypes.hifloat8)
    return torch.from_numpy(codes.astype(np.float64))


def test_quant_matmul_hifloat8_operands(hifloat8_values):
    # x1_dtype = x2_dtype = torch_npu.hifloat8 on uint8 containers: every finite code decoded as the format defines
    # it (a diagonal of 1.0 picks each one), then a product accumulated in float32, times the FP19 scale.
    finite = torch.tensor([c for c in range(256) if math.isfinite(hifloat8_values[c])], dtype=torch.uint8)
    eye = torch.where(torch.eye(len(finite), dtype=torch.bool), 0x08, 0).to(torch.uint8)  # 0x08 is 1.0
    kwargs = dict(x1_dtype=torch_npu.hifloat8, x2_dtype=torch_npu.hifloat8, output_dtype=torch.float32)
    got, got_cpu = both(torch_npu.npu_quant_matmul, eye, finite[:, None], torch.ones(1), **kwargs)
    assert torch.equal(got[:, 0].double(), hifloat8_values[finite.long()]) and torch.equal(got, got_cpu)
    torch.manual_seed(46)
    x1 = finite[torch.randint(0, len(finite), (5, 64))]
    x2 = finite[torch.randint(0, len(finite), (64, 7))]
    scale = torch.rand(7) + 0.5
    got, _ = both(torch_npu.npu_quant_matmul, x1, x2, scale, **kwargs)
    want = hifloat8_values[x1.long()] @ hifloat8_values[x2.long()] * fp19(scale).double()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-3)
    for device in ("npu", "meta"):
        with pytest.raises(RuntimeError, match="npu_quant_matmul: x1_dtype and x2_dtype must both be"):
            torch_npu.npu_quant_matmul(x1.to(device), x2.to(device).view(torch.int8), scale.to(device),
                                       x1_dtype=torch_npu.hifloat8, output_dtype=torch.float32)


@pytest.mark.parametrize("quant_mode", ["pertoken", "pertensor"])
def test_dynamic_quant_to_hifloat8(hifloat8_values, quant_mode):
    # dst_type=torch_npu.hifloat8: scale = max|x| / 32768 (HiFloat8's largest finite value), y = x / scale rounded to
    # the nearest HiFloat8 value, ties away from zero, as uint8 codes (torch_npu's container for it).
    en_dtypes = importlib.import_module("en_dtypes")
    torch.manual_seed(47)
    x = (torch.randn(6, 64) * torch.logspace(-6, 2, 64)).half()
    x[0, :4] = 0
    (y, scale), (y_cpu, scale_cpu) = both(torch_npu.npu_dynamic_quant, x, dst_type=torch_npu.hifloat8,
                                          quant_mode=quant_mode)
    amax = x.float().abs().amax(-1) if quant_mode == "pertoken" else x.float().abs().amax().reshape(1)
    want_scale = amax / 32768
    q = x.float() / (want_scale[:, None] if quant_mode == "pertoken" else want_scale)
    want = torch.from_numpy(q.numpy().astype(en_dtypes.hifloat8).view(np.uint8))
    assert y.dtype == torch.uint8 and torch.equal(scale, want_scale) and torch.equal(y, want)
    assert torch.equal(y, y_cpu) and torch.equal(scale, scale_cpu)
    # decoded and scaled back: x again, to 4 significant bits where HiFloat8 keeps 3 mantissa bits (|q| in [1/8, 16))
    back = hifloat8_values[y.long()] * (want_scale[:, None] if quant_mode == "pertoken" else want_scale).double()
    dense = (q.abs() >= 0.125) & (q.abs() < 16)
    assert ((back - x.double()).abs() <= x.double().abs() / 16)[dense].all()
    with pytest.raises(RuntimeError, match="npu_dynamic_quant: dst_type must be"):
        torch_npu.npu_dynamic_quant(x.npu(), dst_type=torch.uint8)


# ------------------------------------------------------------------------------------------------ mx scale_alg


def block_exponent(amax, alg, type_max, emax, dst_type_max=0.0, max_low_bound=0.0):
    """aclnnDynamicMxQuantV3's scale (biased float8_e8m0 exponent) of one block, from its max|V|, in Python floats."""
    if alg == 2 and dst_type_max in (0.0, 6.0, 7.0):  # the OCP exponent, raised past 1.5 (1.75) * 2^e
        mant, exp = math.frexp(amax)  # amax = 2 mant * 2^(exp - 1), 2 mant in [1, 2)
        raised = 2 * mant - 1 > (0.75 if dst_type_max == 7.0 else 0.5)
        return min(max(exp - 1 + raised - emax, -127), 127) + 127
    s = torch.tensor(max(amax, max_low_bound) if alg == 1 else amax, dtype=torch.float32)
    s = (s / (type_max if alg == 1 else dst_type_max)).item()
    if s == 0:
        return 0
    mant, exp = math.frexp(s)
    if exp - 1 >= -126:  # normal: 2^(exp - 1), raised unless s is that power of two
        biased = exp - 1 + 127
        return biased + (mant != 0.5 and biased < 254)
    return 1 if s / 2.0 ** -126 > 0.5 else 0  # subnormal


@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_dynamic_mx_quant_scale_alg_1(dst):
    # cuBLAS's scale: S = max(amax, max_low_bound) / type max, rounded up to a power of two, y = V / S rounded.
    torch.manual_seed(44)
    x = (torch.randn(4, 128) * torch.logspace(-4, 4, 128)).to(torch.bfloat16)
    x[1, 32:64] = 0  # an all-zero block
    x[2, :32] = 2.0 ** -60  # a block below max_low_bound
    type_max, emax = {torch.float8_e4m3fn: (448.0, 8), torch.float8_e5m2: (57344.0, 15)}[dst]
    for bound in (0.0, 1e-12):
        (y, scale), (y_cpu, scale_cpu) = both(torch_npu.npu_dynamic_mx_quant, x, dst_type=dst, scale_alg=1,
                                              max_low_bound=bound)
        amax = x.float().reshape(4, 4, 32).abs().amax(-1)
        want = torch.tensor([[block_exponent(a, 1, type_max, emax, max_low_bound=bound) for a in row]
                             for row in amax.tolist()], dtype=torch.uint8)
        assert torch.equal(scale.flatten(-2), want) and torch.equal(scale, scale_cpu)
        div = (2.0 ** (want.double() - 127)).repeat_interleave(32, -1)
        assert torch.equal(y.view(torch.uint8), (x.double() / div).to(dst).view(torch.uint8))
        assert torch.equal(y.view(torch.uint8), y_cpu.view(torch.uint8))


@pytest.mark.parametrize("dst_type_max", [0.0, 7.0, 10.0])
def test_dynamic_mx_quant_scale_alg_2(dst_type_max):
    # float4_e2m1: the OCP exponent raised when the block's largest value would saturate (dst_type_max 0 / 6 / 7),
    # or the cuBLAS rule against dst_type_max.
    torch.manual_seed(45)
    x = (torch.randn(3, 256) * torch.logspace(-3, 3, 256)).to(torch.bfloat16)
    x[0, :32] = torch.tensor([1.5, 1.625, 1.75, 1.875] * 8)  # amax 1.875: mantissa 0.875, raised by both rules
    x[0, 32:64] = torch.tensor([1.5, 1.25, 1.625, 1.0] * 8)  # amax 1.625: raised for 6, not for 7
    (y, scale), (y_cpu, scale_cpu) = both(torch_npu.npu_dynamic_mx_quant, x, dst_type=296, scale_alg=2,
                                          dst_type_max=dst_type_max)
    amax = x.float().reshape(3, 8, 32).abs().amax(-1)
    want = torch.tensor([[block_exponent(a, 2, 6.0, 2, dst_type_max=dst_type_max) for a in row]
                         for row in amax.tolist()], dtype=torch.uint8)
    assert torch.equal(scale.flatten(-2), want) and torch.equal(scale, scale_cpu)
    div = (2.0 ** (want.double() - 127)).repeat_interleave(32, -1)
    assert torch.equal(decode_fp4(y, 296), nearest_even(FORMATS[296][0], x.double() / div))
    assert torch.equal(y, y_cpu)


def test_dynamic_mx_quant_scale_alg_errors():
    for device in ("npu", "meta"):
        x = torch.zeros(2, 64, dtype=torch.half, device=device)
        with pytest.raises(RuntimeError, match="npu_dynamic_mx_quant: scale_alg 1 is supported with float8"):
            torch_npu.npu_dynamic_mx_quant(x, dst_type=296, scale_alg=1)
        with pytest.raises(RuntimeError, match="npu_dynamic_mx_quant: max_low_bound must be non-negative"):
            torch_npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn, max_low_bound=1.0)


# ------------------------------------------------------------------------------------------------ attention antiquant


def fia(q, k, v, **kwargs):
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q.npu(), k.npu(), v.npu(), num_heads=q.shape[1], num_key_value_heads=k.shape[1] if k.dim() == 4 else 0,
        input_layout="BNSD", scale=0.25, **{a: t.npu() if isinstance(t, torch.Tensor) else t
                                             for a, t in kwargs.items()})
    return out.cpu()


def antiquant_case(b=2, n=4, n2=2, skv=40, d=16):
    g = torch.Generator().manual_seed(35)
    q = torch.randn(b, n, 1, d, generator=g).half()
    k8 = torch.randint(-128, 128, (b, n2, skv, d), dtype=torch.int8, generator=g)
    v8 = torch.randint(-128, 128, (b, n2, skv, d), dtype=torch.int8, generator=g)
    return q, k8, v8


def dequantized(x, scale, offset):
    """(x + offset) * scale in float32, rounded to the query's float16 (the chip's dequantized cache)."""
    return ((x.float() + offset) * scale).half()


@pytest.mark.parametrize("mode", [2, 3])
def test_fused_infer_attention_per_head_antiquant(mode):
    # key_/value_antiquant_mode 2: a scale and offset per key/value head, (KV_N,) in query's dtype; 3: per head and
    # token, (B, KV_N, KV_S) float32. Decode (Q_S = 1) only, as torch_npu documents.
    from test_fused_infer_attention import reference

    q, k8, v8 = antiquant_case()
    b, n2, skv, _ = k8.shape
    g = torch.Generator().manual_seed(mode)
    if mode == 2:
        ks, vs = ((torch.rand(n2, generator=g) * 0.02).half() for _ in range(2))
        ko, vo = (torch.randint(-3, 4, (n2,), generator=g).half() for _ in range(2))
        view = lambda t: t.float().view(1, n2, 1, 1)  # noqa: E731
    else:
        ks, vs = (torch.rand(b, n2, skv + 3, generator=g) * 0.02 for _ in range(2))  # KV_S larger than the cache's
        ko, vo = (torch.randint(-3, 4, (b, n2, skv + 3), generator=g).float() for _ in range(2))
        view = lambda t: t[..., :skv, None]  # noqa: E731
    dk, dv = dequantized(k8, view(ks), view(ko)), dequantized(v8, view(vs), view(vo))
    got = fia(q, k8, v8, key_antiquant_scale=ks, key_antiquant_offset=ko, value_antiquant_scale=vs,
              value_antiquant_offset=vo, key_antiquant_mode=mode, value_antiquant_mode=mode)
    assert torch.equal(got, fia(q, dk, dv))
    want, _ = reference(q, dk, dv, 0.25)
    torch.testing.assert_close(got.double(), want, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("mode", [4, 5])
def test_fused_infer_attention_paged_antiquant(mode):
    # 4: a per-token scale and offset kept in pages like the cache, (blocknum, block_size) float32; 5: per head too,
    # (blocknum, KV_N, block_size). The block table indexes the scales' pages as it does the cache's.
    from test_fused_infer_attention import paged, reference

    q, k8, v8 = antiquant_case()
    b, n2, skv, _ = k8.shape
    lengths, bs = [40, 23], 16
    g = torch.Generator().manual_seed(mode)
    heads = n2 if mode == 5 else 1
    ks, vs = (torch.rand(b, heads, skv, 1, generator=g) * 0.02 for _ in range(2))
    ko, vo = (torch.randint(-3, 4, (b, heads, skv, 1), generator=g).float() for _ in range(2))

    def pages(t):  # [B, heads, S, 1] -> (blocknum, [heads,] block_size)
        cache, table = paged(t, lengths, bs, layout="BnNBsD")
        return (cache[..., 0] if mode == 5 else cache[:, 0, :, 0]), table

    (kc, table), (vc, _) = paged(k8, lengths, bs, layout="BnNBsD"), paged(v8, lengths, bs, layout="BnNBsD")
    dk, dv = dequantized(k8, ks, ko), dequantized(v8, vs, vo)
    (dkc, _), (dvc, _) = paged(dk, lengths, bs, layout="BnNBsD"), paged(dv, lengths, bs, layout="BnNBsD")
    scales = dict(key_antiquant_scale=pages(ks)[0], key_antiquant_offset=pages(ko)[0],
                  value_antiquant_scale=pages(vs)[0], value_antiquant_offset=pages(vo)[0])
    common = dict(block_table=table, block_size=bs, actual_seq_lengths_kv=lengths)
    q_call = lambda k, v, **kw: torch_npu.npu_fused_infer_attention_score(  # noqa: E731
        q.npu(), k.npu(), v.npu(), num_heads=4, num_key_value_heads=n2, input_layout="BNSD", scale=0.25,
        **{a: t.npu() if isinstance(t, torch.Tensor) else t for a, t in kw.items()})[0].cpu()
    got = q_call(kc, vc, key_antiquant_mode=mode, value_antiquant_mode=mode, **scales, **common)
    assert torch.equal(got, q_call(dkc, dvc, **common))
    want, _ = reference(q, dk, dv, 0.25, kvlen=lengths)
    torch.testing.assert_close(got.double(), want, atol=2e-3, rtol=2e-3)


def test_fused_infer_attention_antiquant_mode_errors():
    q, k8, v8 = antiquant_case()
    s = torch.ones(2, 2, 40)
    with pytest.raises(RuntimeError, match="npu_fused_infer_attention_score: antiquant mode 4 .* needs block_table"):
        fia(q, k8, v8, key_antiquant_scale=s, value_antiquant_scale=s, key_antiquant_mode=4, value_antiquant_mode=4)
    with pytest.raises(RuntimeError, match="mode 3 is supported with Q_S = 1 only"):
        fia(torch.cat([q, q], 2), k8, v8, key_antiquant_scale=s, value_antiquant_scale=s, key_antiquant_mode=3,
            value_antiquant_mode=3)


def test_new_modes_trace_without_graph_breaks():
    # The modes go through the ops' Meta kernels: one graph each (fullgraph), the same results as eager.
    torch.manual_seed(48)
    qx = torch.randint(-128, 128, (3, 256), dtype=torch.int8).npu()
    w = torch_npu.npu_convert_weight_to_int4pack(torch.randint(-8, 8, (256, 16), dtype=torch.int32).npu())
    scale = pack_low_word(torch.rand(1, 16).half().float()).npu()
    pertoken, offset = torch.rand(3, 1).npu(), torch.randn(16).npu()

    def a8w4(qx, w, scale, pertoken, offset):
        return torch_npu.npu_quant_matmul(qx, w, scale, pertoken_scale=pertoken, offset=offset,
                                          group_sizes=[0, 0, 256], output_dtype=torch.bfloat16)

    args = (qx, w, scale, pertoken, offset)
    assert torch.equal(torch.compile(a8w4, backend="eager", fullgraph=True)(*args), a8w4(*args))
    x = torch.randn(4, 64, dtype=torch.bfloat16).npu()

    def mx(x):
        return torch_npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn, scale_alg=1)

    got, want = torch.compile(mx, backend="eager", fullgraph=True)(x), mx(x)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("mode", [1, 3])
def test_fused_infer_attention_per_token_antiquant_with_left_padding(mode):
    # kv_padding_size: each batch's tokens end kv_padding_size rows before KV_S; a per-token scale belongs to its
    # cache row, so it follows the row wherever the padding puts it.
    q, k8, v8 = antiquant_case(skv=24)
    b, n2, skv, _ = k8.shape
    g = torch.Generator().manual_seed(mode + 10)
    shape = (b, skv) if mode == 1 else (b, n2, skv)
    ks, vs = (torch.rand(shape, generator=g) * 0.02 for _ in range(2))
    view = (lambda t: t[:, None, :, None]) if mode == 1 else (lambda t: t[..., None])  # noqa: E731
    dk, dv = dequantized(k8, view(ks), 0.0), dequantized(v8, view(vs), 0.0)
    pad = dict(kv_padding_size=torch.tensor([3, 5]), actual_seq_lengths_kv=[15, 19])
    got = fia(q, k8, v8, key_antiquant_scale=ks, value_antiquant_scale=vs, key_antiquant_mode=mode,
              value_antiquant_mode=mode, **pad)
    assert torch.equal(got, fia(q, dk, dv, **pad))
