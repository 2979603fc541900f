"""The offline executor's matrix products by a constant matrix (csrc/offline/model/ops/direct_conv.cpp: the direct
kernel with the matrix packed at load) against PyTorch's CPU: MatMul and Gemm, with the bias, the residual and the
activation (Relu, Gelu, its tanh form) the lowering fuses into them; ATen's for what the kernel does not take. Each
case is a small ONNX model converted in memory and run through ACL; every result is read back."""
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

AVX512 = "avx512f" in Path("/proc/cpuinfo").read_text()
ATC = Path(sys.executable).parent / "atc"


def half(a):
    return a.astype(np.float16).astype(np.float32)


def matmul_model(rows, k, n, *, op="MatMul", trans_b=False, bias="1d", residual=False, act=None, seed=0,
                 float16_values=False, scale=1.0):
    """x [*rows, K] times a constant W, + bias, [+ r (an input of the output's shape)], [-> act]; returns the model,
    its feeds and PyTorch CPU's result (of every value rounded to float16 first when float16_values)."""
    rng = np.random.default_rng(seed)
    rounded = half if float16_values else (lambda a: a)
    x = rounded((scale * rng.standard_normal((*rows, k))).astype(np.float32))
    w = rounded((rng.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(max(k, 1))).astype(np.float32))
    b = rounded(rng.standard_normal((1, n) if bias == "2d" else (n,)).astype(np.float32))
    inits = [numpy_helper.from_array(w, "W")]
    if op == "Gemm":
        inputs = ["x", "W"] + (["B"] if bias else [])
        nodes = [helper.make_node("Gemm", inputs, ["mm"], name="gemm", transB=int(trans_b))]
    else:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="matmul")]
        if bias:
            nodes.append(helper.make_node("Add", ["mm", "B"], ["biased"], name="bias"))
    if bias:
        inits.append(numpy_helper.from_array(b, "B"))
    out_shape = [*rows, n]
    feeds = [x]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    expected = torch.from_numpy(x) @ torch.from_numpy(w.T if trans_b else w)
    if bias:
        expected = expected + torch.from_numpy(b)
    if residual:
        r = rounded(rng.standard_normal(out_shape).astype(np.float32))
        nodes.append(helper.make_node("Add", ["r", nodes[-1].output[0]], ["sum"], name="residual"))
        graph_inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape))
        feeds.append(r)
        expected = expected + torch.from_numpy(r)
    if act:
        kind, attrs = act if isinstance(act, tuple) else (act, {})
        nodes.append(helper.make_node(kind, [nodes[-1].output[0]], ["act"], name="act", **attrs))
        expected = {"Relu": torch.relu, "Tanh": torch.tanh}.get(kind, lambda t: torch.nn.functional.gelu(t, **attrs))(
            expected)
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "mm", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), feeds, expected.numpy()


GELU = ("Gelu", {})
GELU_TANH = ("Gelu", {"approximate": "tanh"})
CASES = {
    # The packed kernel: rows not a multiple of its six, columns of 64 + 16 and 48 (partial panels), a vector times a
    # matrix, BERT's shapes.
    "matmul_bias": dict(rows=(2, 7), k=40, n=80),
    "matmul_panel_48": dict(rows=(13,), k=64, n=48, bias=None),
    "matmul_vector": dict(rows=(), k=32, n=16, bias=None),
    "matmul_empty_inner_dim": dict(rows=(3,), k=0, n=16, residual=True),  # the bias plus the residual
    "matmul_gelu": dict(rows=(1, 64), k=128, n=512, act=GELU),
    "matmul_gelu_tanh": dict(rows=(3, 5), k=24, n=32, act=GELU_TANH),
    "matmul_relu": dict(rows=(9,), k=16, n=64, act="Relu"),
    "matmul_residual": dict(rows=(1, 64), k=512, n=128, residual=True),
    "gemm_trans_b": dict(rows=(5,), k=128, n=128, op="Gemm", trans_b=True),
    "gemm_bias_row": dict(rows=(6,), k=20, n=32, op="Gemm", bias="2d", act="Relu"),
    "gemm_no_bias_residual": dict(rows=(4,), k=8, n=16, op="Gemm", bias=None, residual=True),
    # BERT's pooler: one row, Tanh (its series near 0, saturation far out: the inputs span both).
    "gemm_tanh": dict(rows=(1,), k=128, n=128, op="Gemm", act="Tanh"),
    "matmul_tanh_large": dict(rows=(7,), k=16, n=32, act="Tanh", scale=30.0),
    # ATen's: columns not a multiple of 16 (the fused bias, residual and activation still apply).
    "aten_odd_columns": dict(rows=(2, 3), k=16, n=10, residual=True, act=GELU),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matmul_matches_cpu(name):
    model, feeds, expected = matmul_model(**CASES[name])
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds)
    assert y.shape == expected.shape
    # GELU's erf to 1.5e-7 absolute, the sums' order: a few float32 ulps of the largest output.
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def loaded_nodes(model, tmp_path) -> list:
    """The loaded model's nodes as `atc --mode=1` shows them: (type, packed, activation)."""
    om = tmp_path / "m.om"
    om.write_bytes(convert(model.SerializeToString(), "force_fp32"))
    r = subprocess.run([str(ATC), "--mode=1", f"--om={om}", f"--json={tmp_path / 'm.json'}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    nodes = json.loads((tmp_path / "m.json").read_text())["nodes"]
    return [(n["type"], n["attributes"].get("softnpu_packed", 0), n["attributes"].get("softnpu_activation", ""))
            for n in nodes]


@pytest.mark.parametrize("name,node", [("matmul_gelu", ("MatMul", 1, "Gelu")),
                                       ("matmul_gelu_tanh", ("MatMul", 1, "GeluTanh")),
                                       ("matmul_residual", ("MatMul", 1, "")),
                                       ("gemm_trans_b", ("Gemm", 1, "")),
                                       ("gemm_tanh", ("Gemm", 1, "Tanh")),
                                       ("aten_odd_columns", ("MatMul", 0, "Gelu"))])
def test_bias_residual_and_activation_fuse_into_one_node(name, node, tmp_path):
    model, *_ = matmul_model(**CASES[name])
    kind, packed, act = node
    assert loaded_nodes(model, tmp_path) == [(kind, packed if AVX512 else 0, act)]


def test_a_matrix_read_by_another_node_is_not_packed(tmp_path):
    """The packed layout replaces the matrix in device memory: a matrix another node reads as it is stays as it is,
    and the product runs ATen's."""
    model, feeds, expected = matmul_model(rows=(4,), k=16, n=32, bias=None)
    g = model.graph
    g.node.append(helper.make_node("Mul", ["W", "s"], ["w_out"], name="scale"))
    g.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]))
    g.output.append(helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [16, 32]))
    assert [n[:2] for n in loaded_nodes(model, tmp_path)] == [("MatMul", 0), ("Mul", 0)]
    y, w = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run(feeds + [np.array([2.0], np.float32)])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(w, 2 * numpy_helper.to_array(g.initializer[0]))


@pytest.mark.parametrize("name", ["matmul_bias", "matmul_gelu", "matmul_residual", "gemm_trans_b", "aten_odd_columns"])
def test_force_fp16_matmul_rounds_like_the_cube(name):
    """force_fp16: the input and the matrix rounded to float16, float32 arithmetic, the output stored as float16
    values (by the packed kernel itself)."""
    model, feeds, expected = matmul_model(**CASES[name], float16_values=True)
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp16").run(feeds)
    assert np.array_equal(y, half(y)), "outputs are float16 values"
    # One float16 ulp of the output, from the float32 sums' own rounding differences.
    np.testing.assert_allclose(y, half(expected), rtol=2 ** -10, atol=1e-3)


def shared_input_model(seed=0):
    """x [2, 5, 24] times three constant matrices (q, k, v style: 32 and 48 columns with biases, 16 without), a
    fourth product with Relu and a Tanh reading one product: its outputs y0..y3 and t, and PyTorch CPU's values."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 5, 24)).astype(np.float32)
    widths, biased = (32, 48, 16, 16), (True, True, False, False)
    inits, nodes, expected = [], [], []
    for i, (n, b) in enumerate(zip(widths, biased)):
        w = rng.standard_normal((24, n)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        y = torch.from_numpy(x) @ torch.from_numpy(w)
        nodes.append(helper.make_node("MatMul", ["x", f"W{i}"], [f"p{i}" if b or i == 3 else f"y{i}"]))
        if b:
            bias = rng.standard_normal(n).astype(np.float32)
            inits.append(numpy_helper.from_array(bias, f"b{i}"))
            nodes.append(helper.make_node("Add", [f"p{i}", f"b{i}"], [f"y{i}"]))
            y = y + torch.from_numpy(bias)
        if i == 3:
            nodes.append(helper.make_node("Relu", ["p3"], ["y3"]))
            y = torch.relu(y)
        expected.append(y.numpy())
    nodes.append(helper.make_node("Tanh", ["y1"], ["t"]))
    expected.append(np.tanh(expected[1]))
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(e.shape))
               for n, e in zip(["y0", "y1", "y2", "y3", "t"], expected)]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)], outputs,
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), [x], expected


def test_products_of_the_same_rows_are_one_node(tmp_path):
    """The three plain products of x (with and without bias) are one product whose outputs are its column blocks;
    the one with an activation stays apart. Each output, a graph output and another node's input, has its values."""
    model, feeds, expected = shared_input_model()
    nodes = loaded_nodes(model, tmp_path)
    assert [n[0] for n in nodes] == ["MatMul", "MatMul", "Tanh"]
    merged = json.loads((tmp_path / "m.json").read_text())["nodes"][0]
    assert merged["outputs"] == ["y0", "y1", "y2"] and merged["attributes"]["softnpu_split"] == [32, 48, 16]
    for mode in ("force_fp32", "force_fp16"):
        got = SoftnpuBackend.prepare(model, precision_mode=mode).run(feeds)
        for y, e in zip(got, expected):
            assert y.shape == e.shape
            if mode == "force_fp32":
                np.testing.assert_allclose(y, e, rtol=1e-5, atol=1e-5)
            else:
                assert np.array_equal(y, half(y)), "outputs are float16 values"
                np.testing.assert_allclose(y, e, rtol=1e-2, atol=5e-2)
