"""npu_grouped_matmul's quantized forms (csrc/fused/moe/grouped_matmul.cpp) against references written here in
int64 / float64: int8 x and weight accumulated exactly, dequantized by scale (float32, bfloat16, or int64 from
npu_trans_quant_param), per_token_scale and an int32 or float bias, to int8 / float16 / bfloat16 / int32 outputs; and
the antiquant (weight-only int8 / int4) forms with antiquant_scale / antiquant_offset per channel and per group.
"""

import pytest
import torch
import torch_npu

COUNTS = [5, 0, 11, 6]


def int8_case(m=24, k=32, n=20, groups=4, seed=0):
    torch.manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    w = torch.randint(-128, 128, (groups, k, n), dtype=torch.int8)
    return x, w


def ref_acc(x, w, counts, bias=None):
    """int64 accumulation of each group's rows (rows past the groups: zero) + an int32 bias."""
    out = torch.zeros(x.shape[0], w.shape[-1], dtype=torch.int64)
    row = 0
    for g, c in enumerate(counts):
        out[row:row + c] = x[row:row + c].long() @ w[g].long() + (bias[g].long() if bias is not None else 0)
        row += c
    return out


def per_group(t, counts, rows):
    """A per-group tensor [G, N] as one row per x row (zero past the groups)."""
    out = torch.zeros(rows, t.shape[-1], dtype=t.dtype)
    row = 0
    for g, c in enumerate(counts):
        out[row:row + c] = t[g]
        row += c
    return out


def fp19(scale):
    """The scale the chip reads from npu_trans_quant_param's packing: float32 with the 13 low mantissa bits zero."""
    return (scale.view(torch.int32) & ~0x1FFF).view(torch.float32)


def gmm(x, w, **kw):
    kw = {k: ([t.npu() for t in v] if isinstance(v, list) else v.npu() if isinstance(v, torch.Tensor) else v)
          for k, v in kw.items()}
    return torch_npu.npu_grouped_matmul([x.npu()], [w.npu()], group_list=torch.tensor(COUNTS).npu(), split_item=3,
                                        group_type=0, group_list_type=1, **kw)[0].cpu()


def test_int32_output_is_the_exact_accumulation():
    x, w = int8_case()
    bias = torch.randint(-1000, 1000, (4, 20), dtype=torch.int32)
    got = gmm(x, w, bias=[bias], output_dtype=torch.int32)
    assert got.dtype == torch.int32 and torch.equal(got.long(), ref_acc(x, w, COUNTS, bias))


@pytest.mark.parametrize("out_dtype, scale_dtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                                                    (torch.float16, torch.float32)])
def test_per_channel_and_per_token_dequantization(out_dtype, scale_dtype):
    x, w = int8_case(seed=1)
    scale = (torch.rand(4, 20) * 1e-3).to(scale_dtype)
    pts = torch.rand(24) + 0.5
    bias = torch.randint(-500, 500, (4, 20), dtype=torch.int32)
    got = gmm(x, w, scale=[scale], per_token_scale=[pts], bias=[bias], output_dtype=out_dtype)
    want = ref_acc(x, w, COUNTS, bias).double() * per_group(scale.double(), COUNTS, 24) * pts.double().unsqueeze(1)
    want[22:] = 0
    assert got.dtype == out_dtype
    torch.testing.assert_close(got.double(), want.to(out_dtype).double(), atol=1e-3, rtol=1e-2)
    # A float bias joins after the scales: (x @ w) * scale * per_token_scale + bias.
    fbias = torch.randn(4, 20).to(out_dtype)
    got = gmm(x, w, scale=[scale], per_token_scale=[pts], bias=[fbias], output_dtype=out_dtype)
    want = (ref_acc(x, w, COUNTS).double() * per_group(scale.double(), COUNTS, 24) * pts.double().unsqueeze(1)
            + per_group(fbias.double(), COUNTS, 24))
    want[22:] = 0
    torch.testing.assert_close(got.double(), want.to(out_dtype).double(), atol=1e-3, rtol=1e-2)


def test_int64_scale_to_int8_output():
    # npu_trans_quant_param's packing: FP19 scale and a 9-bit offset; int8 = round((acc + bias) * scale + offset).
    x, w = int8_case(seed=2)
    scale, offset = torch.rand(4, 20) * 2e-4 + 1e-4, torch.tensor([3.0])
    packed = torch.stack([torch_npu.npu_trans_quant_param(scale[g].npu(), offset.npu()).cpu() for g in range(4)])
    bias = torch.randint(-500, 500, (4, 20), dtype=torch.int32)
    got = gmm(x, w, scale=[packed], bias=[bias], output_dtype=torch.int8)
    want = torch.round(ref_acc(x, w, COUNTS, bias).double() * per_group(fp19(scale).double(), COUNTS, 24) + 3)
    want = want.clamp(-128, 127)
    want[22:] = 0
    assert got.dtype == torch.int8
    torch.testing.assert_close(got.long(), want.long(), atol=1, rtol=0)  # float32 vs float64 at exact halves
    assert (got.long() == want.long()).float().mean() > 0.99


def test_vllm_ascend_w8a8_dynamic_moe_call_form():
    # vLLM-Ascend's W8A8_DYNAMIC MoE scheme (AscendW8A8DynamicFusedMoEMethod's MLP): hidden states quantized by
    # npu_dynamic_quant, then npu_grouped_matmul(x=[hidden_states], weight=[w1], scale=[w1_scale], bias=None,
    # per_token_scale=[pertoken_scale], split_item=2, group_type=0, group_list=group_list,
    # group_list_type=group_list_type, output_dtype=w2_scale_dtype) with bfloat16 scales.
    torch.manual_seed(3)
    h = torch.randn(24, 32, dtype=torch.bfloat16)
    qx, pts = torch_npu.npu_dynamic_quant(h.npu())
    w1 = torch.randint(-128, 128, (4, 32, 16), dtype=torch.int8)
    w1_scale = (torch.rand(4, 16) * 1e-2).to(torch.bfloat16)
    group_list = torch.tensor(COUNTS).cumsum(0)
    out = torch_npu.npu_grouped_matmul(x=[qx], weight=[w1.npu()], scale=[w1_scale.npu()], bias=None,
                                       per_token_scale=[pts], split_item=2, group_type=0,
                                       group_list=group_list.npu(), group_list_type=0,
                                       output_dtype=w1_scale.dtype)[0].cpu()
    want = (ref_acc(qx.cpu(), w1, COUNTS).double() * per_group(w1_scale.double(), COUNTS, 24)
            * pts.cpu().double().unsqueeze(1))
    want[22:] = 0
    torch.testing.assert_close(out.double(), want.to(torch.bfloat16).double(), atol=1e-3, rtol=1e-2)
    # And it approximates the float layer it quantizes.
    wf = w1.double() * w1_scale.double().unsqueeze(1)
    approx = per_group_matmul(h.double(), wf)
    assert (out.double()[:22] - approx[:22]).abs().max() < 0.05 * approx.abs().max()


def per_group_matmul(x, w):
    out = torch.zeros(x.shape[0], w.shape[-1], dtype=x.dtype)
    row = 0
    for g, c in enumerate(COUNTS):
        out[row:row + c] = x[row:row + c] @ w[g]
        row += c
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_antiquant_int8_per_channel(dtype):
    torch.manual_seed(4)
    x = torch.randn(24, 32).to(dtype)
    w = torch.randint(-128, 128, (4, 32, 20), dtype=torch.int8)
    scale, offset = (torch.rand(4, 20) * 0.02).to(dtype), torch.randn(4, 20).to(dtype)
    bias = torch.randn(4, 20).to(torch.float32 if dtype == torch.bfloat16 else dtype)
    deq = ((w.to(dtype) + offset.unsqueeze(1)) * scale.unsqueeze(1))  # in x's dtype, each step rounded
    for b in (None, bias):
        got = gmm(x, w, antiquant_scale=[scale], antiquant_offset=[offset], bias=None if b is None else [b])
        want = per_group_matmul(x.double(), deq.double())
        if b is not None:
            want = want + per_group(b.double(), COUNTS, 24)
        want[22:] = 0
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want.to(dtype).double(), atol=2e-2, rtol=2e-2)


def test_antiquant_int4_per_group():
    # int4 weights packed 8 per int32 along N (npu_convert_weight_to_int4pack), a scale row per group of 8 K rows.
    torch.manual_seed(5)
    x = torch.randn(24, 32, dtype=torch.bfloat16)
    values = torch.randint(-8, 8, (4, 32, 16), dtype=torch.int32)
    packed = torch_npu.npu_convert_weight_to_int4pack(values.npu()).cpu()
    assert packed.shape == (4, 32, 2)
    scale = (torch.rand(4, 4, 16) * 0.1).to(torch.bfloat16)
    deq = (values.to(torch.bfloat16).view(4, 4, 8, 16) * scale.unsqueeze(2)).view(4, 32, 16)
    got = gmm(x, packed, antiquant_scale=[scale])
    want = per_group_matmul(x.double(), deq.double())
    want[22:] = 0
    assert got.shape == (24, 16)
    torch.testing.assert_close(got.double(), want.to(torch.bfloat16).double(), atol=2e-2, rtol=2e-2)


def test_quantized_errors_at_the_call():
    x, w = int8_case()
    with pytest.raises(RuntimeError, match="an int8 x needs scale"):
        gmm(x, w, output_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="offset only takes None"):
        gmm(x, w, scale=[torch.ones(4, 20)], offset=[torch.ones(4, 20)], output_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="per_token_scale must be float32 1-D"):
        gmm(x, w, scale=[torch.ones(4, 20)], per_token_scale=[torch.ones(23)], output_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="scale 0 must be 1-D of N = 20"):
        gmm(x, w, scale=[torch.ones(4, 19)], output_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="needs antiquant_scale"):
        gmm(torch.randn(24, 32, dtype=torch.bfloat16), w)
    with pytest.raises(RuntimeError, match="antiquant_scale must have x's dtype"):
        gmm(torch.randn(24, 32, dtype=torch.bfloat16), w, antiquant_scale=[torch.ones(4, 20)])


def test_quantized_forms_compile_fullgraph():
    torch._dynamo.reset()
    x, w = int8_case(seed=6)
    scale, pts = torch.rand(4, 20) * 1e-3, torch.rand(24)

    def f(x, w, scale, pts, gl):
        return torch_npu.npu_grouped_matmul([x], [w], scale=[scale], per_token_scale=[pts], group_list=gl,
                                            split_item=3, group_type=0, group_list_type=1,
                                            output_dtype=torch.bfloat16)[0]

    args = [t.npu() for t in (x, w, scale, pts, torch.tensor(COUNTS))]
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(*args).cpu(), f(*args).cpu())
