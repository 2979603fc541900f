"""atc: ATC's command line, messages, exit status and error codes; the .om file's checks at load; precision modes."""
from __future__ import annotations

import json
import pathlib
import struct
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import acl

ATC = pathlib.Path(sys.executable).with_name("atc")
START = "ATC start working now, please wait for a moment."
SUCCESS = "ATC run success, welcome to the next use."
FAILED = "ATC run failed, Please check the detail log, Try 'atc --help' for more information"


def atc(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(ATC), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def save(model: onnx.ModelProto, path: pathlib.Path) -> pathlib.Path:
    onnx.save(model, str(path))
    return path


def mlp_model(opset: int = 18, batch: int | str = 2) -> onnx.ModelProto:
    """x[batch, 8] @ W1 + b1 -> Relu -> @ W2: a model whose matmuls are cube ops."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="mm1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["h"], name="relu1"),
             helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], [w1, b1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def mlp_reference(x: np.ndarray, model: onnx.ModelProto, round_fp16: bool = False) -> np.ndarray:
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    r = (lambda t: t.half().float()) if round_fp16 else (lambda t: t)
    h = r(torch.relu(r(r(torch.from_numpy(x)) @ r(w["w1"])) + w["b1"]))
    return r(r(h) @ r(w["w2"])).numpy()


def run_om(path: pathlib.Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from ais_bench.infer.interface import InferSession

    session = InferSession(0, str(path))
    try:
        return session.infer(inputs)
    finally:
        session.free_resource()


def test_success_messages_exit_status_and_both_option_forms(tmp_path):
    model = save(mlp_model(), tmp_path / "mlp.onnx")
    a = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'a'}", "--soc_version=Ascend910B3")
    b = atc("--model", str(model), "--framework", "5", "--output", str(tmp_path / "b"), "--soc_version", "Ascend910B3")
    for r in (a, b):
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.splitlines()[0] == START and r.stdout.splitlines()[-1] == SUCCESS
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    ya, yb = run_om(tmp_path / "a.om", [x])[0], run_om(tmp_path / "b.om", [x])[0]
    np.testing.assert_array_equal(ya, yb)


@pytest.mark.parametrize("args, code, text", [
    (["--precision_mode=fastest"], "E10001", "[--precision_mode]"),
    (["--soc_version=Ascend910B"], "E10001", "[--soc_version]"),
    (["--input_shape=x:2,8,1"], "E10002", "rank"),
    (["--input_shape=x:2,a"], "E10002", "[--input_shape]"),
    (["--input_shape=nosuch:2,8"], "E10001", "nosuch"),
    (["--framework=3"], "E10001", "[--framework]"),
    (["--mode=2"], "E10001", "[--mode]"),
    (["--dynamic_batch_size=1"], "E10001", "[--dynamic_batch_size]"),
    (["--no_such_option=1"], "E10001", "--no_such_option"),
])
def test_bad_options_fail_with_atc_codes_and_a_solution(tmp_path, args, code, text):
    model = save(mlp_model(), tmp_path / "mlp.onnx")
    base = {"--model": str(model), "--framework": "5", "--output": str(tmp_path / "out"), "--soc_version": "Ascend910B3"}
    for a in args:
        base[a.split("=")[0]] = a.split("=", 1)[1]
    r = atc(*[f"{k}={v}" for k, v in base.items()])
    assert r.returncode != 0
    lines = r.stdout.splitlines()
    assert lines[0] == START and FAILED in lines
    error = next(line for line in lines if line.startswith(code + ":"))
    assert text in error
    assert any(line.strip().startswith("Solution:") for line in lines)
    assert not (tmp_path / "out.om").exists()


def unsupported_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("TfIdfVectorizer", ["a"], ["b"], name="tfidf", mode="TF", min_gram_length=1,
                              max_gram_length=1, max_skip_count=0, ngram_counts=[0], ngram_indexes=[0], pool_int64s=[1]),
             helper.make_node("FancyOp", ["b"], ["y"], name="fancy", domain="com.example")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)])


def test_every_unsupported_node_is_reported_at_once_and_nothing_is_written(tmp_path):
    model = save(unsupported_model(), tmp_path / "bad.onnx")
    r = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'bad'}", "--soc_version=Ascend910B3")
    assert r.returncode != 0 and FAILED in r.stdout
    assert "E19010" in r.stdout
    assert "tfidf (TfIdfVectorizer)" in r.stdout and "fancy (FancyOp)" in r.stdout
    assert not (tmp_path / "bad.om").exists()

    report = tmp_path / "check.json"
    r = atc("--mode=3", f"--model={model}", "--framework=5", "--soc_version=Ascend910B3", f"--check_report={report}")
    assert r.returncode != 0
    data = json.loads(report.read_text())
    assert data["summary"]["result"] == "failed" and data["summary"]["op_unsupported"] == 2
    results = {op["name"]: op["result"] for op in data["op"]}
    assert results == {"ok": "success", "tfidf": "failed", "fancy": "failed"}


def test_precheck_of_a_supported_model_succeeds_without_writing_a_model(tmp_path):
    model = save(mlp_model(), tmp_path / "mlp.onnx")
    report = tmp_path / "check.json"
    r = atc("--mode=3", f"--model={model}", "--framework=5", "--soc_version=Ascend910B3", f"--check_report={report}",
            f"--output={tmp_path / 'mlp'}")
    assert r.returncode == 0 and SUCCESS in r.stdout
    assert json.loads(report.read_text())["summary"]["result"] == "success"
    assert not (tmp_path / "mlp.om").exists()


def test_mode_1_json_and_mode_6_info_describe_the_model(tmp_path):
    model = save(mlp_model(), tmp_path / "mlp.onnx")
    assert atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'mlp'}", "--soc_version=Ascend910B3").returncode == 0
    r = atc("--mode=1", f"--om={tmp_path / 'mlp.om'}", f"--json={tmp_path / 'mlp.json'}")
    assert r.returncode == 0, r.stdout
    data = json.loads((tmp_path / "mlp.json").read_text())
    assert data["metadata"]["soc_version"] == "Ascend910B3" and data["metadata"]["opset"] == 18
    assert "--soc_version=Ascend910B3" in data["metadata"]["atc_command"]
    assert data["inputs"][0]["dims"] == [2, 8] and data["outputs"][0]["dims"] == [2, 4]
    # The lowering: the bias joined the first matmul and the ReLU runs inside it.
    types = [n["type"] for n in data["nodes"]]
    assert types == ["MatMul", "MatMul"]
    assert data["nodes"][0]["attributes"]["softnpu_activation"] == "Relu"
    r = atc("--mode=6", f"--om={tmp_path / 'mlp.om'}")
    assert r.returncode == 0 and '"soc_version": "Ascend910B3"' in r.stdout


def rewrite_om(path: pathlib.Path, version: int | None = None, soc: str | None = None) -> bytes:
    """The .om with another format version in its header, or another soc_version in its metadata partition."""
    data = bytearray(path.read_bytes())
    magic, ver, count = struct.unpack_from("<8sII", data, 0)
    table = [struct.unpack_from("<IIQQ", data, 16 + 24 * i) for i in range(count)]
    parts = {kind: bytes(data[off:off + size]) for kind, _, off, size in table}
    if soc is not None:
        meta = parts[1]
        old = b"Ascend910B3"
        i = meta.index(old)
        assert meta[i - 2] == 0x12 and meta[i - 1] == len(old)  # field 2, length-delimited
        parts[1] = meta[:i - 1] + bytes([len(soc)]) + soc.encode() + meta[i + len(old):]
    out = bytearray(struct.pack("<8sII", magic, ver if version is None else version, count))
    offset = 16 + 24 * count
    for kind, _, _, _ in table:
        out += struct.pack("<IIQQ", kind, 0, offset, len(parts[kind]))
        offset += len(parts[kind])
    for kind, _, _, _ in table:
        out += parts[kind]
    return bytes(out)


def load_from_mem(image: bytes) -> int:
    if acl.init() not in (0, 100002):
        pytest.fail("acl.init failed")
    assert acl.rt.set_device(0) == 0
    buf = np.frombuffer(image, dtype=np.uint8).copy()
    model_id, ret = acl.mdl.load_from_mem(acl.util.numpy_to_ptr(buf), buf.nbytes)
    if ret == 0:
        acl.mdl.unload(model_id)
    return ret


def test_a_model_of_another_version_or_soc_or_truncated_is_refused_with_a_clear_error(tmp_path):
    model = save(mlp_model(), tmp_path / "mlp.onnx")
    assert atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'mlp'}", "--soc_version=Ascend910B3").returncode == 0
    om = tmp_path / "mlp.om"
    assert load_from_mem(om.read_bytes()) == 0
    for image, words in [(rewrite_om(om, version=99), "format version 99"),
                         (rewrite_om(om, soc="Ascend910B"), "Ascend910B"),
                         (om.read_bytes()[:100], "truncated"),
                         (b"not a model at all", "")]:
        assert load_from_mem(image) != 0
        assert words in acl.get_recent_err_msg()
    (tmp_path / "v99.om").write_bytes(rewrite_om(om, version=99))
    r = atc("--mode=6", f"--om={tmp_path / 'v99.om'}")
    assert r.returncode != 0 and "format version 99" in r.stdout


@pytest.mark.parametrize("mode", ["force_fp32", "must_keep_origin_dtype", "force_fp16", "allow_mix_precision"])
def test_precision_modes_are_applied(tmp_path, mode):
    m = mlp_model()
    model = save(m, tmp_path / "mlp.onnx")
    assert atc(f"--model={model}", "--framework=5", f"--output={tmp_path / mode}", "--soc_version=Ascend910B3",
               f"--precision_mode={mode}").returncode == 0
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    y = run_om(tmp_path / f"{mode}.om", [x])[0]
    exact, rounded = mlp_reference(x, m), mlp_reference(x, m, round_fp16=True)
    if mode in ("force_fp32", "must_keep_origin_dtype"):
        np.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-5)
    else:
        # Half-precision storage: the result is float16-representable and differs from the float32 result.
        np.testing.assert_array_equal(y, y.astype(np.float16).astype(np.float32))
        np.testing.assert_allclose(y, rounded, rtol=1e-2, atol=1e-2)
        assert np.abs(y - exact).max() > 1e-5


def test_force_fp16_rounds_like_a_float16_store(tmp_path):
    # Every edge of float32 -> float16 rounding, as numpy (IEEE round to nearest even) does it: ties, overflow to
    # infinity, the largest finite value, subnormals, signed zero, NaN; 1001 values, so the vector loop and its
    # scalar tail both run.
    edges = np.array([65519.0, 65520.0, -65520.0, 65504.0, 1e6, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                      2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -24, 6e-8, -0.0, np.nan, np.inf, -np.inf], np.float32)
    x = np.random.default_rng(4).standard_normal(1001).astype(np.float32) * 100
    x[:len(edges)] = edges
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "one"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1001])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1001])], [one])
    model = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "mul.onnx")
    assert atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'mul'}", "--soc_version=Ascend910B3",
               "--precision_mode=force_fp16").returncode == 0
    y = run_om(tmp_path / "mul.om", [x])[0]
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))
    assert np.signbit(y[11]) and np.isinf(y[1]) and y[0] == 65504.0


def test_force_fp16_data_movement_keeps_rounded_input_values(tmp_path):
    # Transpose, Reshape and Relu under force_fp16 are not rounded again (their outputs are values of their
    # inputs), but their inputs are: a model input reaches the output as its float16 values.
    x = np.random.default_rng(6).standard_normal((3, 5)).astype(np.float32) * 100
    shape = numpy_helper.from_array(np.array([5, 3], np.int64), "shape")
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0], name="t"),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="r"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 3])], [shape])
    model = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "move.onnx")
    assert atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'move'}", "--soc_version=Ascend910B3",
               "--precision_mode=force_fp16").returncode == 0
    y = run_om(tmp_path / "move.om", [x])[0]
    np.testing.assert_array_equal(y, np.maximum(x.astype(np.float16).astype(np.float32).T, 0))


def test_out_nodes_selects_an_inner_output(tmp_path):
    m = mlp_model()
    model = save(m, tmp_path / "mlp.onnx")
    r = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'inner'}", "--soc_version=Ascend910B3",
            "--out_nodes=relu1:0", "--precision_mode=force_fp32")
    assert r.returncode == 0, r.stdout
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    y = run_om(tmp_path / "inner.om", [x])[0]
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    np.testing.assert_allclose(y, np.maximum(x @ w["w1"] + w["b1"], 0), rtol=1e-5, atol=1e-5)


def test_dynamic_batch_profiles(tmp_path):
    m = mlp_model(batch="N")
    model = save(m, tmp_path / "mlp.onnx")
    r = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'dyn'}", "--soc_version=Ascend910B3",
            "--input_shape=x:-1,8", "--dynamic_batch_size=1,2,4", "--precision_mode=force_fp32")
    assert r.returncode == 0, r.stdout
    r = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'no'}", "--soc_version=Ascend910B3")
    assert r.returncode != 0 and "E10002" in r.stdout  # a dynamic dim needs --input_shape or profiles
    from ais_bench.infer.interface import InferSession

    session = InferSession(0, str(tmp_path / "dyn.om"))
    try:
        for batch in (1, 4, 2):
            x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
            y = session.infer([x], mode="dymbatch")[0]
            assert y.shape == (batch, 4)
            np.testing.assert_allclose(y, mlp_reference(x, m), rtol=1e-5, atol=1e-5)
    finally:
        session.free_resource()
