"""The attention core the lowering fuses (csrc/offline/model/passes.cpp, ops/softmax_attention.cpp): what
torch.onnx.export writes for scaled_dot_product_attention — MatMul(q, kt) -> Add(mask) -> Softmax -> Where(IsNaN, 0)
-> MatMul(v) — is one softnpu:SoftmaxAttention node, and the head split and merge around it (Reshape, Transpose) are
part of it; against PyTorch's CPU on the same values; every result is read back."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from softnpu.offline import convert
from softnpu.offline.onnx_backend import SoftnpuBackend

ATC = Path(sys.executable).parent / "atc"
F = TensorProto.FLOAT


def attention_model(batch, s, d, t, e, *, mask_shape=None, nan_where=True, seed=0, masked_rows=(), scale=None):
    """The exported pattern on inputs q [*batch, S, D], kt [*batch, D, T], v [*batch, T, E] and an additive mask, q
    and kt each multiplied by the constant `scale` first when given (as the exporter writes the softmax scale);
    returns the model, its feeds and PyTorch CPU's result."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, s, d)).astype(np.float32)
    kt = (rng.standard_normal((*batch, d, t)) / np.sqrt(d)).astype(np.float32)
    v = rng.standard_normal((*batch, t, e)).astype(np.float32)
    feeds, inputs = [q, kt, v], [helper.make_tensor_value_info(n, F, a.shape) for n, a in zip("qkv", (q, kt, v))]
    inits = []
    nodes = [helper.make_node("MatMul", ["q", "k"], ["scores"])]
    scores = torch.from_numpy(q) @ torch.from_numpy(kt)
    if scale is not None:
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), "c"))
        nodes = [helper.make_node("Mul", ["q", "c"], ["qs"]), helper.make_node("Mul", ["c", "k"], ["ks"]),
                 helper.make_node("MatMul", ["qs", "ks"], ["scores"])]
        c = torch.tensor(scale, dtype=torch.float32)
        scores = (torch.from_numpy(q) * c) @ (torch.from_numpy(kt) * c)
    last = "scores"
    if mask_shape is not None:
        mask = np.where(rng.random(mask_shape) < 0.25, -np.inf, 0).astype(np.float32)
        for r in masked_rows:  # a fully masked query row: softmax of -inf only
            mask[..., r, :] = -np.inf
        feeds.append(mask)
        inputs.append(helper.make_tensor_value_info("mask", F, mask.shape))
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"]))
        scores = scores + torch.from_numpy(mask)
        last = "masked"
    nodes.append(helper.make_node("Softmax", [last], ["probs"], axis=-1))
    probs = torch.softmax(scores, -1)
    last = "probs"
    if nan_where:
        nodes += [helper.make_node("IsNaN", ["probs"], ["nan"]), helper.make_node("Where", ["nan", "zero", "probs"], ["p"])]
        inits.append(numpy_helper.from_array(np.array(0, np.float32), "zero"))
        probs = torch.where(probs.isnan(), 0.0, probs)
        last = "p"
    nodes.append(helper.make_node("MatMul", [last, "v"], ["y"]))
    expected = (probs @ torch.from_numpy(v)).numpy()
    g = helper.make_graph(nodes, "attn", inputs, [helper.make_tensor_value_info("y", F, list(expected.shape))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), feeds, expected


CASES = {
    # BERT's: [B, H, S, D] with a [B, 1, 1, T] padding mask.
    "bert": dict(batch=(2, 2), s=64, d=64, t=64, e=64, mask_shape=(2, 1, 1, 64), scale=0.125 ** 0.5),
    # Sizes off the 16-lane vectors and 64-column blocks, a mask of full shape, a fully masked row zeroed.
    "odd_sizes": dict(batch=(3,), s=5, d=7, t=70, e=33, mask_shape=(3, 5, 70), masked_rows=(2,)),
    # A mask broadcast along the row (one value per query row) and over the batch.
    "row_mask": dict(batch=(2,), s=9, d=16, t=20, e=16, mask_shape=(9, 1)),
    "no_mask": dict(batch=(1, 2), s=8, d=32, t=17, e=48, scale=0.3),
    # Without the Where, a fully masked row is NaN, as Softmax makes it.
    "nan_row_kept": dict(batch=(2,), s=4, d=8, t=16, e=16, mask_shape=(2, 4, 16), masked_rows=(1,), nan_where=False),
}


def loaded_nodes_json(model, tmp_path):
    """The converted model's nodes as `atc --mode=1` writes them."""
    om = tmp_path / "m.om"
    om.write_bytes(convert(model.SerializeToString(), "force_fp32"))
    r = subprocess.run([str(ATC), "--mode=1", f"--om={om}", f"--json={tmp_path / 'm.json'}"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((tmp_path / "m.json").read_text())["nodes"]


def fused_types(model, tmp_path):
    return [n["type"] for n in loaded_nodes_json(model, tmp_path)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_core_is_one_node_and_matches_cpu(name, tmp_path):
    model, feeds, expected = attention_model(**CASES[name])
    assert fused_types(model, tmp_path) == ["SoftmaxAttention"]
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds)
    assert y.shape == expected.shape
    assert np.array_equal(np.isnan(y), np.isnan(expected)), "NaN exactly where PyTorch has NaN"
    ok = ~np.isnan(expected)
    np.testing.assert_allclose(y[ok], expected[ok], rtol=1e-5, atol=1e-5)


def test_a_value_read_elsewhere_is_not_fused(tmp_path):
    """The scores are also a graph output: the nodes stay as they are (nothing they compute may disappear)."""
    model, feeds, expected = attention_model(**{**CASES["no_mask"], "scale": None})
    model.graph.output.append(helper.make_tensor_value_info("scores", F, [1, 2, 8, 17]))
    assert "SoftmaxAttention" not in fused_types(model, tmp_path)
    y, scores = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scores, feeds[0] @ feeds[1], rtol=1e-5, atol=1e-5)


class HeadsAttention(torch.nn.Module):
    """Multi-head attention as transformers writes it: projections, the head split (view, transpose), PyTorch's
    scaled_dot_product_attention with an additive padding mask, the head merge (transpose, reshape)."""

    def __init__(self, e, heads, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.heads = heads
        self.q, self.k, self.v = (torch.nn.Linear(e, e) for _ in range(3))

    def forward(self, x, memory, mask):
        b, s, e = x.shape
        split = lambda t: t.view(b, t.shape[1], self.heads, e // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(memory)), split(self.v(memory))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return y.transpose(1, 2).reshape(b, s, e)


def exported_heads_model(tmp_path, batch, s, t, e, heads):
    """The module exported by torch.onnx.export (its own head split and key transpose chains); its inputs and
    PyTorch CPU's output. Key row 0 is masked out for the first batch."""
    module = HeadsAttention(e, heads).eval()
    x, memory = torch.randn(batch, s, e), torch.randn(batch, t, e)
    mask = torch.zeros(batch, 1, 1, t)
    mask[0, ..., 0] = float("-inf")
    path = tmp_path / "heads.onnx"
    torch.onnx.export(module, (x, memory, mask), str(path), input_names=["x", "memory", "mask"], output_names=["y"],
                      dynamo=True)
    with torch.no_grad():
        expected = module(x, memory, mask).numpy()
    import onnx

    return onnx.load(str(path)), [x.numpy(), memory.numpy(), mask.numpy()], expected


@pytest.mark.parametrize("batch, s, t, e, heads", [
    (1, 64, 64, 128, 2),   # the tiny BERT's layer at batch 1: its key chain's reshapes are views
    (3, 7, 20, 40, 4),     # head dims of 10, other key count; at batch 3 the key chain's [B*H, T, D] step copies
])
def test_head_split_and_merge_are_part_of_the_node(tmp_path, batch, s, t, e, heads):
    model, feeds, expected = exported_heads_model(tmp_path, batch, s, t, e, heads)
    nodes = loaded_nodes_json(model, tmp_path)
    types = [n["type"] for n in nodes]
    assert types.count("SoftmaxAttention") == 1
    assert "Transpose" not in types and "Reshape" not in types, types
    assert [n["attributes"]["heads"] for n in nodes if n["type"] == "SoftmaxAttention"] == [heads]
    # k and v, products of the same memory, are one product where their widths are multiples of 16: the node reads
    # their column blocks in place.
    splits = [n["attributes"].get("softnpu_split") for n in nodes if n["type"] == "MatMul"]
    assert splits.count([e, e]) == (1 if e % 16 == 0 else 0), splits
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_heads_form_under_force_fp16(tmp_path):
    """force_fp16: the merged k/v product stores float16 values in its column blocks, the attention reads them as
    they are and its output is rounded: float16 values within float16's error of PyTorch's float32."""
    model, feeds, expected = exported_heads_model(tmp_path, 3, 7, 20, 48, 4)
    assert [48, 48] in [n["attributes"].get("softnpu_split") for n in loaded_nodes_json(model, tmp_path)]
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp16").run(feeds)
    assert np.array_equal(y, y.astype(np.float16).astype(np.float32)), "outputs are float16 values"
    np.testing.assert_allclose(y, expected, rtol=1e-2, atol=1e-2)


def heads_chain_model(rng, *, b, s, t, h, d, q_perm=(0, 2, 1, 3), kt_perm=(0, 2, 3, 1), extra_output=None):
    """q [B, S, H*D], k and v [B, T, H*D] split by Reshape + Transpose as written (kt with one Transpose to
    [B, H, D, T]), the attention core, and the merge; returns the model, its feeds and the result NumPy computes for
    the same graph."""
    q, k, v = (rng.standard_normal((b, n, h * d)).astype(np.float32) for n in (s, t, t))
    shapes = {"qs": [b, s, h, d], "ks": [b, t, h, d], "merged": [b, s, h * d]}
    inits = [numpy_helper.from_array(np.array(v_, np.int64), n) for n, v_ in shapes.items()]
    inits.append(numpy_helper.from_array(np.array(0, np.float32), "zero"))
    nodes = [
        helper.make_node("Reshape", ["q", "qs"], ["q4"]), helper.make_node("Transpose", ["q4"], ["qh"], perm=q_perm),
        helper.make_node("Reshape", ["k", "ks"], ["k4"]), helper.make_node("Transpose", ["k4"], ["kt"], perm=kt_perm),
        helper.make_node("Reshape", ["v", "ks"], ["v4"]), helper.make_node("Transpose", ["v4"], ["vh"], perm=(0, 2, 1, 3)),
        helper.make_node("MatMul", ["qh", "kt"], ["scores"]), helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o"]), helper.make_node("Transpose", ["o"], ["ot"], perm=(0, 2, 1, 3)),
        helper.make_node("Reshape", ["ot", "merged"], ["y"]),
    ]
    qh = q.reshape(b, s, h, d).transpose(q_perm)
    kt = k.reshape(b, t, h, d).transpose(kt_perm)
    scores = torch.from_numpy(np.ascontiguousarray(qh)) @ torch.from_numpy(np.ascontiguousarray(kt))
    o = torch.softmax(scores, -1) @ torch.from_numpy(np.ascontiguousarray(v.reshape(b, t, h, d).transpose(0, 2, 1, 3)))
    expected = o.numpy().transpose(0, 2, 1, 3).reshape(b, -1, h * d)
    outputs = [helper.make_tensor_value_info("y", F, list(expected.shape))]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, F, shapes["qs"]))
    inputs = [helper.make_tensor_value_info(n, F, a.shape) for n, a in zip("qkv", (q, k, v))]
    g = helper.make_graph(nodes, "heads", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), [q, k, v], expected


def test_keys_transposed_in_one_step_are_the_heads_form(tmp_path):
    """Keys split and transposed by one Transpose(0, 2, 3, 1), as older exporters and hand-written models do."""
    model, feeds, expected = heads_chain_model(np.random.default_rng(1), b=2, s=5, t=9, h=3, d=16)
    assert fused_types(model, tmp_path) == ["SoftmaxAttention"]
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["other_permutation", "split_read_elsewhere"])
def test_chains_that_are_not_the_head_split_stay(tmp_path, variant):
    """q's chain puts the heads' rows elsewhere (q's S and H swapped: square, so the graph is still valid), or an
    intermediate of the split is a graph output: the chains stay nodes, the core is still one node, and the result is
    the graph's."""
    rng = np.random.default_rng(2)
    if variant == "other_permutation":
        model, feeds, expected = heads_chain_model(rng, b=2, s=4, t=4, h=4, d=8, q_perm=(0, 1, 2, 3))
    else:
        model, feeds, expected = heads_chain_model(rng, b=2, s=4, t=6, h=2, d=8, extra_output="q4")
    types = fused_types(model, tmp_path)
    assert "SoftmaxAttention" in types and "Transpose" in types
    y, *rest = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    if rest:
        np.testing.assert_array_equal(rest[0], feeds[0].reshape(rest[0].shape))
