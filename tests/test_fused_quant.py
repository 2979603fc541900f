"""torch_npu's quantization ops (csrc/fused/quantization/): npu_dynamic_quant, npu_quant_matmul,
npu_trans_quant_param, npu_weight_quant_batchmatmul, npu_convert_weight_to_int4pack, npu_dynamic_mx_quant,
npu_sign_bits_pack / npu_sign_bits_unpack.

Each is checked against a reference written here from torch_npu's documented formula (integer products exact, scales
applied as documented, the roundings named), on npu and on the CPU path of the same op; with the call forms of the
libraries that use them (vLLM-Ascend / sglang W8A8 and W4A4, torchao's int4 weight-only linear, DeepSpeed's 1-bit
compression), errors raised at the call, and torch.compile tracing them through their Meta kernels.
"""

import math
import subprocess
import sys

import pytest
import torch
import torch_npu

DTYPE_MAX = {torch.int8: 127, torch.quint4x2: 7, torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def pack_int4(values):
    """int values in [-8, 7], last dim 8n -> int32 [.., n], element 8i + j in bits 4j.. (written independently)."""
    v = (values.to(torch.int64) & 0xF).reshape(*values.shape[:-1], -1, 8)
    out = torch.zeros(v.shape[:-1], dtype=torch.int64)
    for j in range(8):
        out |= v[..., j] << (4 * j)
    return out.to(torch.int32)  # wraps to int32's bit pattern


def unpack_int4(packed):
    cols = [((packed.to(torch.int64) >> (4 * j)) & 0xF) for j in range(8)]
    v = torch.stack(cols, -1).flatten(-2)
    return torch.where(v >= 8, v - 16, v).to(torch.int8)


def both(fn, *args, **kwargs):
    """fn on npu and on the CPU, results read back."""
    on_npu = fn(*[a.npu() if isinstance(a, torch.Tensor) else a for a in args],
                **{k: v.npu() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    on_cpu = fn(*args, **kwargs)
    if isinstance(on_npu, tuple):
        return tuple(t.cpu() for t in on_npu), on_cpu
    return on_npu.cpu(), on_cpu


# ------------------------------------------------------------------------------------------------ dynamic_quant


def dynamic_quant_reference(x, smooth=None, group_index=None, dst_type=torch.int8, mode="pertoken"):
    x = x.float()
    if group_index is not None:
        rows = x.reshape(-1, x.shape[-1]).clone()
        start = 0
        for g, end in enumerate(group_index.tolist()):
            rows[start:end] *= smooth[g].float()
            start = end
        x = rows.reshape(x.shape)
    elif smooth is not None:
        x = x * smooth.float()
    if mode == "pertoken":
        amax = x.abs().amax(-1, keepdim=True)
    elif mode == "perchannel":
        amax = x.abs().amax(-2, keepdim=True)
    else:
        amax = x.abs().amax().reshape(1)
    scale = amax / DTYPE_MAX[dst_type]
    q = x / scale
    if dst_type in (torch.int8, torch.quint4x2):
        q = torch.round(q).clamp(-DTYPE_MAX[dst_type] - 1, DTYPE_MAX[dst_type])
        y = q.to(torch.int8) if dst_type == torch.int8 else pack_int4(q.to(torch.int32))
    else:
        y = q.to(dst_type)
    scale = scale if mode == "pertensor" else scale.squeeze(-2 if mode == "perchannel" else -1)
    return y, scale


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dst_type", [torch.int8, torch.quint4x2, torch.float8_e4m3fn], ids=str)
@pytest.mark.parametrize("mode", ["pertoken", "perchannel", "pertensor"])
def test_dynamic_quant(dtype, dst_type, mode):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 32).to(dtype)
    (y, scale), (y_cpu, scale_cpu) = both(torch_npu.npu_dynamic_quant, x, dst_type=dst_type, quant_mode=mode)
    want_y, want_scale = dynamic_quant_reference(x, dst_type=dst_type, mode=mode)
    torch.testing.assert_close(scale, want_scale, rtol=0, atol=0)
    assert y.dtype == want_y.dtype and y.shape == want_y.shape
    torch.testing.assert_close(y.view(torch.uint8) if y.dtype.is_floating_point else y,
                               want_y.view(torch.uint8) if y.dtype.is_floating_point else want_y, rtol=0, atol=0)
    assert torch.equal(y.view(torch.uint8) if y.dtype.is_floating_point else y,
                       y_cpu.view(torch.uint8) if y.dtype.is_floating_point else y_cpu)


def test_dynamic_quant_smooth_scales_and_moe_groups():
    torch.manual_seed(1)
    x = torch.randn(7, 16, dtype=torch.float16)
    smooth = torch.rand(16, dtype=torch.float16) + 0.5
    (y, scale), _ = both(torch_npu.npu_dynamic_quant, x, smooth_scales=smooth)
    want = dynamic_quant_reference(x, smooth)
    assert torch.equal(y, want[0]) and torch.equal(scale, want[1])
    # MoE: smooth_scales[g] applies to rows group_index[g - 1] <= r < group_index[g] (torch_npu's documented example).
    smooth = torch.rand(3, 16, dtype=torch.float16) + 0.5
    group_index = torch.tensor([2, 2, 7], dtype=torch.int32)
    (y, scale), _ = both(torch_npu.npu_dynamic_quant, x, smooth_scales=smooth, group_index=group_index)
    want = dynamic_quant_reference(x, smooth, group_index)
    assert torch.equal(y, want[0]) and torch.equal(scale, want[1])


def test_dynamic_quant_documented_example_and_errors():
    x = torch.rand((3, 3), dtype=torch.float16).npu()
    output, scale = torch_npu.npu_dynamic_quant(x)
    assert output.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (3,)
    assert output.cpu().abs().amax(-1).tolist() == [127, 127, 127]  # each row's largest |value| maps to 127
    for device in ("npu", "meta"):
        with pytest.raises(RuntimeError, match="npu_dynamic_quant: input must be float16 or bfloat16"):
            torch_npu.npu_dynamic_quant(torch.zeros(2, 8, device=device))
        with pytest.raises(RuntimeError, match="last dim of input must be divisible by 8"):
            torch_npu.npu_dynamic_quant(torch.zeros(2, 6, dtype=torch.half, device=device), dst_type=torch.quint4x2)
        with pytest.raises(RuntimeError, match="more than one dim"):
            torch_npu.npu_dynamic_quant(torch.zeros(8, dtype=torch.half, device=device))
        with pytest.raises(RuntimeError, match="quant_mode must be"):
            torch_npu.npu_dynamic_quant(torch.zeros(2, 8, dtype=torch.half, device=device), quant_mode="perrow")
        with pytest.raises(RuntimeError, match="smooth_scales must be 1-D"):
            torch_npu.npu_dynamic_quant(torch.zeros(2, 8, dtype=torch.half, device=device),
                                        smooth_scales=torch.ones(4, dtype=torch.half, device=device))


# ------------------------------------------------------------------------------------------------ quant_matmul


def fp19(scale):
    """float32 -> float32 with only the top 19 bits (npu_trans_quant_param's truncation)."""
    bits = scale.float().contiguous().view(torch.int32).to(torch.int64) & 0xFFFFE000
    return bits.to(torch.int32).view(torch.float32)


def test_trans_quant_param_packing():
    scale = torch.tensor([0.1, 1.5, 3e-5], dtype=torch.float32)
    offset = torch.tensor([2.4, -3.6, 300.0], dtype=torch.float32)
    got, got_cpu = both(torch_npu.npu_trans_quant_param, scale, offset)
    assert got.dtype == torch.int64 and torch.equal(got, got_cpu)
    bits = scale.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    for i, (b, off) in enumerate(zip(bits.tolist(), [2, -4, 255])):
        assert got[i].item() == (b & 0xFFFFE000) | (1 << 46) | ((off & 0x1FF) << 37)
    # round_mode=1 rounds the dropped 13 bits first: 1 + 2^-11 (bit 12 set) rounds up to 1 + 2^-10.
    one_plus = torch.tensor([1 + 2 ** -11 + 2 ** -20])
    rounded = torch_npu.npu_trans_quant_param(one_plus.npu(), round_mode=1).cpu()
    assert (rounded.item() & 0xFFFFFFFF) == torch.tensor([1 + 2 ** -10]).view(torch.int32).item()


def quant_matmul_reference(x1, x2, scale, offset=None, pertoken=None, bias=None, out=torch.int8):
    acc = x1.to(torch.int64) @ x2.to(torch.int64)  # exact integer products
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias
    if out == torch.int32:
        return acc.to(torch.int32)
    s = scale.float()
    if scale.dtype == torch.float32 and pertoken is None and out in (torch.int8, torch.float16):
        s = fp19(scale)  # what torch_npu's kernel does with a float32 scale there
        offset = None if offset is None else offset.round().clamp(-256, 255)
    r = acc.float() * s
    if pertoken is not None:
        r = r * pertoken[:, None]
    if out == torch.int8:
        if offset is not None:
            r = r + offset
        return torch.round(r).clamp(-128, 127).to(torch.int8)
    if bias is not None and bias.dtype != torch.int32:
        r = r + bias.float()
    return r.to(out)


def test_quant_matmul_documented_int8_example():
    torch.manual_seed(2)
    x1 = torch.randint(-5, 5, (1, 256, 768), dtype=torch.int8)
    x2 = torch.randint(-5, 5, (31, 768, 16), dtype=torch.int8)
    scale, offset = torch.randn(16) * 0.05, torch.randn(16) * 3
    bias = torch.randint(-5, 5, (31, 1, 16), dtype=torch.int32)
    got, got_cpu = both(torch_npu.npu_quant_matmul, x1, x2, scale, offset=offset, bias=bias)
    assert got.shape == (31, 256, 16) and got.dtype == torch.int8
    want = quant_matmul_reference(x1, x2, scale, offset, bias=bias)
    assert torch.equal(got, want) and torch.equal(got_cpu, want)
    # Method 2 of the documentation: the scale and offset packed by npu_trans_quant_param first.
    packed = torch_npu.npu_trans_quant_param(scale.npu(), offset.npu())
    assert torch.equal(torch_npu.npu_quant_matmul(x1.npu(), x2.npu(), packed, bias=bias.npu()).cpu(), want)


@pytest.mark.parametrize("out", [torch.bfloat16, torch.float16], ids=str)
def test_quant_matmul_w8a8_dynamic_call_form(out):
    # vLLM-Ascend's / sglang's W8A8 dynamic linear: the activation quantized per token, then
    # npu_quant_matmul(x, weight, weight_scale, pertoken_scale=pertoken_scale, bias=bias, output_dtype=x.dtype).
    torch.manual_seed(3)
    x = torch.randn(5, 64).to(out)
    weight = torch.randint(-127, 128, (64, 24), dtype=torch.int8)
    weight_scale = torch.rand(24) * 0.01
    bias = torch.randn(24).to(torch.bfloat16 if out == torch.bfloat16 else torch.float32)

    def linear(x, weight, weight_scale, bias):
        qx, pertoken = torch_npu.npu_dynamic_quant(x)
        return torch_npu.npu_quant_matmul(qx, weight, weight_scale, pertoken_scale=pertoken, bias=bias,
                                          output_dtype=x.dtype)

    got, got_cpu = both(linear, x, weight, weight_scale, bias)
    qx, pertoken = dynamic_quant_reference(x)
    want = quant_matmul_reference(qx, weight, weight_scale, pertoken=pertoken, bias=bias, out=out)
    assert got.dtype == out and torch.equal(got, want) and torch.equal(got_cpu, want)
    # and close to the float linear it approximates
    torch.testing.assert_close(got.float(), x.float() @ ((weight.float() * weight_scale)) + bias.float(),
                               atol=0.1, rtol=0.05)


def test_quant_matmul_w4a4_call_form_and_int32_output():
    # sglang's W4A4: npu_dynamic_quant(x, dst_type=torch.quint4x2), the weight packed by
    # npu_convert_weight_to_int4pack, npu_quant_matmul(..., pertoken_scale=..., output_dtype=x.dtype).
    torch.manual_seed(4)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    w = torch.randint(-8, 8, (64, 32), dtype=torch.int32)
    w_scale = torch.rand(32) * 0.1

    def linear(x, w, w_scale):
        q, pertoken = torch_npu.npu_dynamic_quant(x, dst_type=torch.quint4x2)
        return torch_npu.npu_quant_matmul(q, torch_npu.npu_convert_weight_to_int4pack(w), w_scale,
                                          pertoken_scale=pertoken, output_dtype=x.dtype)

    got, got_cpu = both(linear, x, w, w_scale)
    q, pertoken = dynamic_quant_reference(x, dst_type=torch.quint4x2)
    want = quant_matmul_reference(unpack_int4(q), w, w_scale, pertoken=pertoken, out=torch.bfloat16)
    assert torch.equal(got, want) and torch.equal(got_cpu, want)
    x1, x2 = torch.randint(-128, 128, (4, 32), dtype=torch.int8), torch.randint(-128, 128, (32, 8), dtype=torch.int8)
    bias = torch.randint(-100, 100, (8,), dtype=torch.int32)
    got, _ = both(torch_npu.npu_quant_matmul, x1, x2, torch.ones(1), bias=bias, output_dtype=torch.int32)
    assert torch.equal(got, quant_matmul_reference(x1, x2, None, bias=bias, out=torch.int32))


def test_quant_matmul_errors_at_the_call():
    for device in ("npu", "meta"):
        x1 = torch.zeros(4, 32, dtype=torch.int8, device=device)
        x2 = torch.zeros(32, 8, dtype=torch.int8, device=device)
        s = torch.ones(8, device=device)
        cases = [
            (lambda: torch_npu.npu_quant_matmul(x1.float(), x2, s), "must both be int8"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2[:16], s), "x1's k"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, torch.ones(3, device=device)), "scale must be 1-D"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, s, output_dtype=torch.float32), "output_dtype must be"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, s, pertoken_scale=torch.ones(4, device=device)),
             "pertoken_scale needs output_dtype"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, s, group_sizes=[1, 1, 32]), "group_sizes"),
        ]
        for call, message in cases:
            with pytest.raises(RuntimeError, match=f"npu_quant_matmul: .*{message}"):
                call()


# ------------------------------------------------------------------------------------------------ weight_quant


def weight_quant_reference(x, w, scale, offset=None, bias=None, group=0, quant_scale=None, quant_offset=None):
    """x @ ((w + offset) * scale) + bias, the weight dequantized in x's dtype, accumulated in float32."""
    k = w.shape[0]

    def rows(t):
        t = t.reshape(1, -1) if t.dim() == 1 else t
        return t if t.shape[0] == 1 else t.repeat_interleave(group, 0)[:k]

    deq = w.to(x.dtype)
    if offset is not None:
        deq = deq + rows(offset)
    deq = deq * rows(scale)
    y = x.float() @ deq.float()
    if bias is not None:
        y = y + bias.float().reshape(-1)
    if quant_scale is None:
        return y.to(x.dtype)
    y = y * quant_scale.reshape(-1) + (0 if quant_offset is None else quant_offset.reshape(-1))
    return torch.round(y).clamp(-128, 127).to(torch.int8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_weight_quant_batchmatmul_int8_per_channel_and_quant_output(dtype):
    torch.manual_seed(5)
    x = torch.randn(8, 96).to(dtype)
    w = torch.randint(-128, 128, (96, 40), dtype=torch.int8)
    scale, offset = (torch.rand(1, 40) * 0.02).to(dtype), torch.randn(1, 40).to(dtype)
    bias = torch.randn(40).to(torch.float32 if dtype == torch.bfloat16 else torch.float16)
    got, got_cpu = both(torch_npu.npu_weight_quant_batchmatmul, x, w, scale, offset, bias=bias)
    want = weight_quant_reference(x, w, scale, offset, bias)
    assert got.dtype == dtype and torch.equal(got, want) and torch.equal(got_cpu, want)
    # the documented transposed weight (a view of a contiguous (N, K)) computes the same
    wt = w.t().contiguous().t()
    assert torch.equal(torch_npu.npu_weight_quant_batchmatmul(x.npu(), wt.npu(), scale.npu(), offset.npu(),
                                                              bias=bias.npu()).cpu(), want)
    qs, qo = torch.rand(40) * 0.5, torch.randn(40)
    got, _ = both(torch_npu.npu_weight_quant_batchmatmul, x, w, scale, offset, qs, qo, bias)
    assert got.dtype == torch.int8 and torch.equal(got, weight_quant_reference(x, w, scale, offset, bias, 0, qs, qo))


def test_weight_quant_batchmatmul_int4_per_group_documented_example():
    torch.manual_seed(6)
    m, k, n = 16, 128, 32
    x = torch.randn((m, k), dtype=torch.float16)
    w = torch.randint(low=-8, high=8, size=(k, n), dtype=torch.int32)
    packed = torch_npu.npu_convert_weight_to_int4pack(w.npu())
    assert packed.shape == (k, n // 8) and packed.dtype == torch.int32
    assert torch.equal(packed.cpu(), pack_int4(w))
    scale, offset = (torch.rand(k // 32, n) * 0.1).half(), torch.randn(k // 32, n).half()
    got = torch_npu.npu_weight_quant_batchmatmul(x.npu(), packed, scale.npu(), offset.npu(),
                                                 antiquant_group_size=32).cpu()
    want = weight_quant_reference(x, w, scale, offset, group=32)
    # Without a bias the product is ATen's half GEMM (float32 accumulation in its own order, one rounding): within
    # one rounding of the reference.
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-2)


def test_weight_quant_batchmatmul_errors_at_the_call():
    for device in ("npu", "meta"):
        x = torch.zeros(4, 64, dtype=torch.half, device=device)
        w = torch.zeros(64, 16, dtype=torch.int8, device=device)
        s = torch.ones(16, dtype=torch.half, device=device)
        cases = [
            (lambda: torch_npu.npu_weight_quant_batchmatmul(x.float(), w, s), "x must be float16 or bfloat16"),
            (lambda: torch_npu.npu_weight_quant_batchmatmul(x, w[:32], s), "x's K"),
            (lambda: torch_npu.npu_weight_quant_batchmatmul(x, w, s.float()), "antiquant_scale must have x's dtype"),
            (lambda: torch_npu.npu_weight_quant_batchmatmul(x, w, torch.ones(3, 16, dtype=torch.half, device=device),
                                                            antiquant_group_size=32), "antiquant_scale of shape"),
            (lambda: torch_npu.npu_weight_quant_batchmatmul(x, w, s, antiquant_group_size=48),
             "antiquant_group_size must be a multiple of 32"),
            (lambda: torch_npu.npu_weight_quant_batchmatmul(x, w, s, bias=torch.ones(16, device=device)),
             "bias must be"),
        ]
        for call, message in cases:
            with pytest.raises(RuntimeError, match=f"npu_weight_quant_batchmatmul: .*{message}"):
                call()
        with pytest.raises(RuntimeError, match="last dim should be the multiple of 8"):
            torch_npu.npu_convert_weight_to_int4pack(torch.zeros(4, 12, dtype=torch.int32, device=device))


TORCHAO = "torchao==0.18.0"


@pytest.fixture(scope="module")
def torchao():
    """torchao, pinned, installed without its dependencies (it needs none at run time) so torch stays."""
    try:
        import torchao as module  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", TORCHAO], check=True)
    import torchao as module
    return module


def test_torchao_int4_weight_only_linear_on_npu(torchao):
    # torchao's Int4WeightOnlyConfig(int4_packing_format="plain_int32") on npu packs with
    # npu_convert_weight_to_int4pack and runs npu_weight_quant_batchmatmul (Int4PlainInt32Tensor's npu path).
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(256, 64, bias=True)).to(torch.bfloat16).npu()
    float_weight = model[0].weight.detach().cpu().float()
    quantize_(model, Int4WeightOnlyConfig(group_size=64, int4_packing_format="plain_int32"))
    weight = model[0].weight
    assert type(weight).__name__ == "Int4PlainInt32Tensor"
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    got = model(x.npu()).cpu()
    # The CPU reference: the same int4 values, scales and offsets through the documented formula.
    q = unpack_int4(weight.qdata.cpu()).t()  # (K, N)
    scale, zero = weight.scale.cpu(), weight.zero_point.cpu()
    want = weight_quant_reference(x, q, scale, zero, model[0].bias.detach().cpu().float(), group=64)
    assert torch.equal(got, want)
    # Note: torchao's zero points follow dequant = (q - zero_point) * scale while npu_weight_quant_batchmatmul adds
    # antiquant_offset as torch_npu documents, so the model's output is what a device gives, not torchao's float
    # dequantization (measured here: max |weight error| 0.021 against 0.005 for the minus convention).


# ------------------------------------------------------------------------------------------------ mx quant

FORMATS = {  # dst_type: (all non-negative representable values, emax)
    296: ([0, 0.5, 1, 1.5, 2, 3, 4, 6], 2),
    297: ([i / 4 for i in range(8)], 0),
}


def float8_values(dtype):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
    return sorted({v for v in codes.tolist() if math.isfinite(v) and v >= 0})


def nearest_even(values, x):
    """x rounded to the nearest of `values` (sorted), ties to the one with an even index (even mantissa)."""
    grid = torch.tensor(values, dtype=torch.float64)
    mag = x.abs().double().clamp_max(grid[-1]).unsqueeze(-1)
    d = (grid - mag).abs()
    best = d.min(-1, keepdim=True).values
    candidates = (d == best)
    idx = torch.where(candidates.sum(-1) > 1, candidates.int().argmax(-1) + (candidates.int().argmax(-1) % 2),
                      candidates.int().argmax(-1))
    return grid[idx] * torch.where(x < 0, -1.0, 1.0).double()


def mx_reference(x, dst_type, block=32):
    if dst_type in FORMATS:
        values, emax = FORMATS[dst_type]
    else:
        dtype = {24: torch.float8_e4m3fn, 23: torch.float8_e5m2}[dst_type]
        values, emax = float8_values(dtype), {24: 8, 23: 15}[dst_type]
    xf = x.float().reshape(*x.shape[:-1], -1, block)
    amax = xf.abs().amax(-1, keepdim=True)
    exp = (torch.floor(torch.log2(amax)) - emax).clamp(-127, 127)
    y = nearest_even(values, xf / 2.0 ** exp).reshape(x.shape)
    return y, (exp + 127).squeeze(-1).to(torch.uint8)


def decode_fp4(packed, dst_type):
    values, _ = FORMATS[dst_type]
    codes = torch.stack([packed & 0xF, packed >> 4], -1).flatten(-2).long()
    mag = torch.tensor(values, dtype=torch.float64)[codes & 7]
    return torch.where(codes >= 8, -mag, mag)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dst_type", [296, 297, torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_dynamic_mx_quant(dtype, dst_type):
    torch.manual_seed(8)
    x = (torch.randn(3, 128) * torch.logspace(-3, 3, 128)).to(dtype)
    (y, scale), (y_cpu, scale_cpu) = both(torch_npu.npu_dynamic_mx_quant, x, dst_type=dst_type)
    code = dst_type if isinstance(dst_type, int) else {torch.float8_e4m3fn: 24, torch.float8_e5m2: 23}[dst_type]
    want_y, want_exp = mx_reference(x, code)
    # mxscale: [3, ceil(4 blocks / 2) = 2, 2]
    assert scale.shape == (3, 2, 2) and scale.dtype == torch.uint8
    assert torch.equal(scale.flatten(-2), want_exp)
    decoded = decode_fp4(y, code) if code in FORMATS else y.double()
    assert torch.equal(decoded, want_y)
    assert torch.equal(y.view(torch.uint8), y_cpu.view(torch.uint8)) and torch.equal(scale, scale_cpu)


def test_dynamic_mx_quant_axis_odd_blocks_and_errors():
    x = torch.randn(96, 4, dtype=torch.bfloat16)
    y, scale = torch_npu.npu_dynamic_mx_quant(x.npu(), axis=0, dst_type=torch.float8_e4m3fn)
    assert y.shape == (96, 4) and scale.shape == (2, 4, 2)  # 3 blocks along axis 0 -> 2 pairs, the last scale 0
    want_y, want_exp = mx_reference(x.t().contiguous(), 24)
    assert torch.equal(scale.cpu()[:, :, :].permute(1, 0, 2).flatten(-2)[:, :3], want_exp)
    assert scale.cpu()[1, :, 1].eq(0).all() and torch.equal(y.cpu().double().t(), want_y)
    for device in ("npu", "meta"):
        xd = torch.zeros(2, 64, dtype=torch.half, device=device)
        with pytest.raises(RuntimeError, match="npu_dynamic_mx_quant: Parameter block_size"):
            torch_npu.npu_dynamic_mx_quant(xd, block_size=48)
        with pytest.raises(RuntimeError, match="npu_dynamic_mx_quant: dst_type must be"):
            torch_npu.npu_dynamic_mx_quant(xd, dst_type=torch.int8)
        with pytest.raises(RuntimeError, match="axis is out of input dimension range"):
            torch_npu.npu_dynamic_mx_quant(xd, axis=2)


# ------------------------------------------------------------------------------------------------ sign bits


def test_sign_bits_documented_examples_and_deepspeed_round_trip():
    a = torch.tensor([5, 4, 3, 2, 0, -1, -2, 4, 3, 2, 1, 0, -1, -2], dtype=torch.float32).npu()
    assert torch_npu.npu_sign_bits_pack(a, 2).cpu().tolist() == [[159], [15]]
    assert torch_npu.npu_sign_bits_pack(a, 1).cpu().tolist() == [[159, 15]]
    packed = torch.tensor([159, 15], dtype=torch.uint8).npu()
    assert torch_npu.npu_sign_bits_unpack(packed, 2, torch.float32).cpu().tolist() == [
        [1, 1, 1, 1, 1, -1, -1, 1], [1, 1, 1, 1, -1, -1, -1, -1]]
    # DeepSpeed's compressed allreduce (runtime/comm/hccl.py): the error-compensated buffer's signs packed per rank,
    # unpacked as float32 +-1 (then scaled by the worker's norm).
    torch.manual_seed(9)
    world = 2
    buffer_m = torch.randn(world * 8 * 5, dtype=torch.float16)
    signs = torch_npu.npu_sign_bits_pack(buffer_m.npu(), world)
    assert signs.shape == (world, 5) and signs.dtype == torch.uint8
    back = torch_npu.npu_sign_bits_unpack(signs.flatten(), world, torch.float32).cpu()
    assert torch.equal(back.flatten(), torch.where(buffer_m >= 0, 1.0, -1.0))
    odd = torch.randn(13)
    got, got_cpu = both(torch_npu.npu_sign_bits_pack, odd, 1)
    assert torch.equal(got, got_cpu) and got.shape == (1, 2)
    bits = torch_npu.npu_sign_bits_unpack(got.flatten(), 1, torch.float16)[0]
    assert bits.dtype == torch.float16 and torch.equal(bits[:13], torch.where(odd >= 0, 1.0, -1.0).half())
    assert bits[13:].eq(-1).all()  # the padding decodes as -1
    with pytest.raises(RuntimeError, match="npu_sign_bits_pack: .*divisible by size"):
        torch_npu.npu_sign_bits_pack(odd.npu(), 3)
    with pytest.raises(RuntimeError, match="npu_sign_bits_unpack: dtype must be"):
        torch_npu.npu_sign_bits_unpack(got.flatten().npu(), 1, torch.int32)


# ------------------------------------------------------------------------------------------------ compile


def test_quant_ops_compile_without_graph_breaks():
    torch.manual_seed(10)

    def f(x, w, w_scale, xw, w4, s4, sign_src):
        q, pertoken = torch_npu.npu_dynamic_quant(x)
        y = torch_npu.npu_quant_matmul(q, w, w_scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)
        y2 = torch_npu.npu_weight_quant_batchmatmul(xw, w4, s4, antiquant_group_size=32)
        mx, mx_scale = torch_npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
        bits = torch_npu.npu_sign_bits_unpack(torch_npu.npu_sign_bits_pack(sign_src, 1).flatten(), 1, torch.float32)
        return y, y2, mx.float(), mx_scale, bits

    args = (torch.randn(4, 64, dtype=torch.bfloat16), torch.randint(-128, 128, (64, 16), dtype=torch.int8),
            torch.rand(16), torch.randn(4, 64, dtype=torch.half),
            torch_npu.npu_convert_weight_to_int4pack(torch.randint(-8, 8, (64, 16), dtype=torch.int32).npu()).cpu(),
            torch.rand(2, 16, dtype=torch.half), torch.randn(32))
    npu_args = [a.npu() for a in args]
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    for got, want in zip(compiled(*npu_args), f(*args)):
        assert torch.equal(got.cpu(), want)


# ------------------------------------------------------------------------------------------------ quant_matmul modes


def test_quant_matmul_int4_per_group_asymmetric():
    # torch_npu's "K-G" mode: int4 x1 per token, int4 x2 per group of k with a float16 offset,
    # out = pertoken_scale * sum_j scale[j] * (x1_j @ x2_j - x1_j @ offset[j]); x2 as torch_npu's example passes it,
    # the transpose of an (n, k/8) pack.
    torch.manual_seed(11)
    m, k, n, group = 6, 128, 16, 32
    x = torch.randint(-8, 8, (m, k), dtype=torch.int32)
    w = torch.randint(-8, 8, (k, n), dtype=torch.int32)
    scale = torch.rand(k // group, n) * 0.01
    offset = torch.randint(-3, 4, (k // group, n)).to(torch.float16)
    pertoken = torch.rand(m, 1) + 0.5
    x2 = torch_npu.npu_convert_weight_to_int4pack(w.t().contiguous().npu()).cpu().t()
    args = (pack_int4(x), x2, scale)
    kwargs = dict(offset=offset, pertoken_scale=pertoken, output_dtype=torch.bfloat16, group_sizes=[1, 1, group])
    got, got_cpu = both(torch_npu.npu_quant_matmul, *args, **kwargs)
    want = torch.zeros(m, n, dtype=torch.float64)
    for j in range(k // group):
        rows = slice(j * group, (j + 1) * group)
        acc = x[:, rows].double() @ w[rows].double() - x[:, rows].double().sum(-1, keepdim=True) * offset[j].double()
        want += acc * scale[j].double()
    want = (want * pertoken.double()).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (m, n) and torch.equal(got, got_cpu)
    torch.testing.assert_close(got, want, rtol=8e-3, atol=1e-3)  # float32 sums, one bfloat16 rounding
    # group_sizes [0, 0, 0]: the group inferred from the scale's shape
    kwargs["group_sizes"] = [0, 0, 0]
    assert torch.equal(torch_npu.npu_quant_matmul(*[a.npu() for a in args],
                                                  **{k_: v.npu() if isinstance(v, torch.Tensor) else v
                                                     for k_, v in kwargs.items()}).cpu(), got)


def test_quant_matmul_int8_per_block():
    # "G-B": x1 per (token, 128 of k), x2 per (128 of k, 128 of n), a float32 bias, bfloat16 out.
    torch.manual_seed(12)
    m, k, n = 5, 256, 256
    x1 = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    x2 = torch.randint(-128, 128, (k, n), dtype=torch.int8)
    scale, pertoken, bias = torch.rand(2, 2) * 1e-3, torch.rand(m, 2) * 1e-2, torch.randn(n)
    got, got_cpu = both(torch_npu.npu_quant_matmul, x1, x2, scale, pertoken_scale=pertoken, bias=bias,
                        output_dtype=torch.bfloat16, group_sizes=[1, 128, 128])
    want = torch.zeros(m, n, dtype=torch.float64)
    for j in range(2):
        acc = x1[:, j * 128:(j + 1) * 128].double() @ x2[j * 128:(j + 1) * 128].double()
        want += acc * pertoken[:, j:j + 1].double() * scale[j].double().repeat_interleave(128)
    want = (want + bias.double()).to(torch.bfloat16)
    assert torch.equal(got, got_cpu)
    torch.testing.assert_close(got, want, rtol=8e-3, atol=1e-3)


def test_quant_matmul_float8_per_channel_and_static():
    torch.manual_seed(13)
    m, k, n = 7, 64, 24
    x1 = (torch.randn(m, k) * 4).to(torch.float8_e4m3fn)
    x2 = (torch.randn(k, n) * 4).to(torch.float8_e5m2)
    scale, pertoken, bias = torch.rand(n) * 0.1, torch.rand(m) + 0.5, torch.randn(n)
    acc = x1.double() @ x2.double()  # every fp8 product is exact; float32 sums differ from these by rounding only
    got, got_cpu = both(torch_npu.npu_quant_matmul, x1, x2, scale, pertoken_scale=pertoken, bias=bias,
                        output_dtype=torch.float32)
    assert got.dtype == torch.float32 and torch.equal(got, got_cpu)
    torch.testing.assert_close(got.double(), acc * scale.double() * pertoken.double()[:, None] + bias.double(),
                               rtol=1e-5, atol=1e-5)
    # Without pertoken_scale the float32 scale is packed (FP19) and the bias joins before it: (x1 @ x2 + bias) * scale.
    got, _ = both(torch_npu.npu_quant_matmul, x1, x2, scale, bias=bias, output_dtype=torch.bfloat16)
    want = ((acc + bias.double()) * fp19(scale).double()).to(torch.bfloat16)
    torch.testing.assert_close(got, want, rtol=8e-3, atol=1e-3)


@pytest.mark.parametrize("dst_type", [torch.float8_e4m3fn, 296], ids=["float8_e4m3fn", "float4_e2m1"])
def test_quant_matmul_mx_after_dynamic_mx_quant(dst_type):
    # MX: x quantized along k per 32 values (scale (m, k/64, 2)), the weight along its k axis (scale (k/64, n, 2)),
    # as npu_dynamic_mx_quant returns them; the product of the dequantized operands, accumulated in float32.
    torch.manual_seed(14)
    m, k, n = 4, 128, 16
    x, w = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
    qx, sx = torch_npu.npu_dynamic_mx_quant(x.npu(), dst_type=dst_type)
    qw, sw = torch_npu.npu_dynamic_mx_quant(w.npu(), axis=-2, dst_type=dst_type)
    assert sx.shape == (m, k // 64, 2) and sw.shape == (k // 64, n, 2)
    fp4 = dst_type == 296
    kwargs = dict(pertoken_scale=sx, output_dtype=torch.float32, scale_dtype=torch_npu.float8_e8m0fnu,
                  pertoken_scale_dtype=torch_npu.float8_e8m0fnu, group_sizes=[1, 1, 32])
    if fp4:
        kwargs.update(x1_dtype=torch_npu.float4_e2m1fn_x2, x2_dtype=torch_npu.float4_e2m1fn_x2)
    got = torch_npu.npu_quant_matmul(qx, qw, sw, **kwargs)
    meta = torch_npu.npu_quant_matmul(*[t.to("meta") for t in (qx, qw, sw)],
                                      **{k_: v.to("meta") if isinstance(v, torch.Tensor) else v
                                         for k_, v in kwargs.items()})
    assert meta.shape == got.shape == (m, n) and got.dtype == torch.float32
    vx = decode_fp4(qx.cpu(), 296) if fp4 else qx.cpu().double()
    vw = decode_fp4(qw.cpu(), 296) if fp4 else qw.cpu().double()
    dx = vx * (2.0 ** (sx.cpu().flatten(-2).double() - 127)).repeat_interleave(32, -1)
    dw = vw * (2.0 ** (sw.cpu().movedim(-1, -2).flatten(0, 1).double() - 127)).repeat_interleave(32, 0)
    torch.testing.assert_close(got.cpu().double(), dx @ dw, rtol=1e-5, atol=1e-4)
    # and the float product it approximates (mx float8 keeps ~2 significant digits, float4 ~1)
    err = (got.cpu().double() - x.double() @ w.double()).norm() / (x.double() @ w.double()).norm()
    assert err < (0.3 if fp4 else 0.06)


def test_quant_matmul_modes_that_raise():
    for device in ("npu", "meta"):
        x1 = torch.zeros(4, 32, dtype=torch.int8, device=device)
        x2 = torch.zeros(32, 8, dtype=torch.int8, device=device)
        s = torch.ones(8, device=device)
        cases = [
            (lambda: torch_npu.npu_quant_matmul(x1, x2, s, x1_dtype=torch_npu.hifloat8, output_dtype=torch.bfloat16),
             "hifloat8"),
            (lambda: torch_npu.npu_quant_matmul(x1, torch.zeros(32, 1, dtype=torch.int32, device=device), s),
             "A8W4"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, s, y_scale=torch.ones(1, 8, dtype=torch.int64,
                                                                              device=device)), "y_scale"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, s, group_sizes=[1, 1]), "three elements"),
            (lambda: torch_npu.npu_quant_matmul(x1, x2, torch.ones(1, 8, device=device),
                                                output_dtype=torch.bfloat16), "needs a float32 pertoken_scale"),
        ]
        for call, message in cases:
            with pytest.raises(RuntimeError, match=f"npu_quant_matmul: .*{message}"):
                call()


def test_weight_quant_batchmatmul_int64_scales():
    # torch_npu's documented int64 forms: antiquant_scale packed by npu_trans_quant_param with an int32 offset (the
    # weight transposed from (N, K)), and an int64 quant_scale carrying its offset.
    torch.manual_seed(15)
    x = torch.randn(8, 64, dtype=torch.float16)
    w = torch.randint(-8, 8, (16, 64), dtype=torch.int8)
    a_scale = (torch.rand(16) * 0.05).float()
    packed = torch_npu.npu_trans_quant_param(a_scale.npu()).cpu().reshape(16, 1)
    offset = torch.randint(-4, 4, (16, 1), dtype=torch.int32)
    got, got_cpu = both(torch_npu.npu_weight_quant_batchmatmul, x, w.t(), packed.t(), offset.t())
    deq = ((w.t().float() + offset.t().float()) * fp19(a_scale)).to(torch.float16)
    want = x @ deq
    assert got.dtype == torch.float16 and torch.equal(got, got_cpu)
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-2)
    ws = torch.rand(1, 16, dtype=torch.float16) * 0.05
    q_scale, q_offset = torch.rand(16) * 2, torch.randn(16) * 3
    q_packed = torch_npu.npu_trans_quant_param(q_scale.npu(), q_offset.npu()).cpu()
    got, _ = both(torch_npu.npu_weight_quant_batchmatmul, x, w.t(), ws, quant_scale=q_packed)
    y = weight_quant_reference(x, w.t(), ws).float()  # no bias: the half GEMM's rounding, then quantized
    want = torch.round(y * fp19(q_scale) + q_offset.round()).clamp(-128, 127).to(torch.int8)
    assert got.dtype == torch.int8 and (got.int() - want.int()).abs().max() <= 1
