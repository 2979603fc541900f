"""Offline models the ACL and ais_bench tests build: ONNX graphs made with onnx.helper, converted by the installed
`atc`, with their weights, so each test computes its reference with PyTorch's CPU ops."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ATC = Path(sys.executable).parent / "atc"


def atc(onnx_path: Path, out_stem: Path, *options: str) -> Path:
    """Converts with atc (force_fp32, so the comparison with the CPU is tight); returns the .om path."""
    r = subprocess.run([str(ATC), f"--model={onnx_path}", "--framework=5", f"--output={out_stem}",
                        "--soc_version=Ascend910B3", "--precision_mode=force_fp32", *options],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out_stem.with_suffix(".om")


def _save(graph, path: Path, opset: int = 17) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def conv_net(directory: Path):
    """x [1,3,8,8] -> Conv 3x3 (4 channels, pad 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (5) -> y [1,5]."""
    rng = np.random.default_rng(0)
    w = {"W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "B": rng.standard_normal(4).astype(np.float32),
         "W2": rng.standard_normal((5, 4)).astype(np.float32), "B2": rng.standard_normal(5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    return atc(_save(g, directory / "conv_net.onnx"), directory / "conv_net"), w


def mlp(directory: Path, batch_profiles=(1, 4, 8)):
    """x [N,16] -> MatMul [16,8] -> Add -> Relu -> y [N,8], converted with --dynamic_batch_size."""
    rng = np.random.default_rng(1)
    w = {"W": rng.standard_normal((16, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    profiles = ",".join(str(b) for b in batch_profiles)
    return atc(_save(g, directory / "mlp.onnx"), directory / "mlp", "--input_shape=x:-1,16",
               f"--dynamic_batch_size={profiles}"), w


def add_relu(directory: Path):
    """x [A,B], z [A,B] -> Relu(x) + z, converted with --dynamic_dims for (A, B) in (2, 3) and (4, 5)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("Add", ["r", "z"], ["y"], name="add")], "add_relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["A", "B"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])])
    return atc(_save(g, directory / "add_relu.onnx"), directory / "add_relu", "--input_shape=x:-1,-1;z:-1,-1",
               "--dynamic_dims=2,3,2,3;4,5,4,5")


def matmul_chain(directory: Path, n: int = 1024, depth: int = 12):
    """x [n,n] multiplied depth times by one [n,n] weight: a model that runs for hundreds of milliseconds."""
    w = (np.random.default_rng(2).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", "W"], [f"h{i + 1}" if i + 1 < depth else "y"],
                              name=f"matmul{i}") for i in range(depth)]
    g = helper.make_graph(nodes, "matmul_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                          [numpy_helper.from_array(w, "W")])
    return atc(_save(g, directory / "matmul_chain.onnx"), directory / "matmul_chain"), w


def gather(directory: Path):
    """idx [2] (int64) -> Gather of a [4,3] constant along axis 0 -> y [2,3]: an index out of range fails at run time."""
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = helper.make_graph([helper.make_node("Gather", ["data", "idx"], ["y"], name="gather", axis=0)], "gather",
                          [helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(data, "data")])
    return atc(_save(g, directory / "gather.onnx"), directory / "gather"), data
