"""resnet18 and a tiny BERT (random weights) through the Ascend inference pipeline: torch.onnx.export, atc, then
ACL from Python (ais_bench's InferSession over pyACL), against PyTorch CPU. The C++ side of the same pipeline is
examples/acl (run by `make test-cpp`)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "acl"))
import models  # noqa: E402

ATC = pathlib.Path(sys.executable).with_name("atc")


def convert(onnx_path: pathlib.Path, out: pathlib.Path, *extra: str) -> pathlib.Path:
    r = subprocess.run([str(ATC), f"--model={onnx_path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910B3",
                        *extra], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return out.with_suffix(".om")


def infer(om: pathlib.Path, inputs) -> list[np.ndarray]:
    from ais_bench.infer.interface import InferSession

    session = InferSession(0, str(om))
    try:
        return session.infer([np.ascontiguousarray(t.numpy()) for t in inputs])
    finally:
        session.free_resource()


@pytest.mark.parametrize("name, rtol, atol", [("resnet18", 1e-3, 1e-3), ("bert", 1e-3, 1e-4)])
def test_exported_model_runs_through_atc_and_acl_like_pytorch_cpu(tmp_path, name, rtol, atol):
    path, inputs, expected = models.export(name, tmp_path)
    om = convert(path, tmp_path / name, "--precision_mode=force_fp32")
    outputs = infer(om, inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=rtol, atol=atol)


def test_default_precision_mode_keeps_resnet18_close_to_float32(tmp_path):
    """force_fp16, ATC's default: half-precision storage between ops, still the same classification."""
    path, inputs, expected = models.export("resnet18", tmp_path)
    om = convert(path, tmp_path / "r16")
    got = infer(om, inputs)[0]
    want = expected[0].numpy()
    assert not np.array_equal(got, want)
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2)
    assert (got.argmax(1) == want.argmax(1)).all()


def test_an_op_softnpu_lacks_fails_at_conversion_with_the_op_listed(tmp_path):
    import torch

    import onnx
    from onnx import TensorProto, helper

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    torch.onnx.export(Model().eval(), (torch.randn(2, 3),), str(tmp_path / "m.onnx"), input_names=["x"], dynamo=True)
    model = onnx.load(str(tmp_path / "m.onnx"))
    # A node of an op type softnpu has no kernel for, as a converter for another framework would emit it.
    model.graph.node.append(helper.make_node("StringNormalizer", [model.graph.output[0].name], ["s"], name="normalize"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("s", TensorProto.STRING, [2, 3]))
    onnx.save(model, str(tmp_path / "m.onnx"))
    r = subprocess.run([str(ATC), f"--model={tmp_path / 'm.onnx'}", "--framework=5", f"--output={tmp_path / 'm'}",
                        "--soc_version=Ascend910B3"], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "normalize (StringNormalizer)" in r.stdout
    assert not (tmp_path / "m.om").exists()


def test_npu_smi_shows_the_acl_process_and_its_device_memory():
    """ACL is a layer over the runtime every softnpu process publishes its statistics through: aclrtMalloc'd memory
    and a loaded model's weights show in npu-smi under this process."""
    import os
    import re

    import acl

    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    ptr, ret = acl.rt.malloc(96 << 20, 0)
    assert ret == 0
    try:
        out = subprocess.run([str(ATC.with_name("npu-smi")), "info"], capture_output=True, text=True, check=True).stdout
        rows = [r for r in out.splitlines() if re.match(rf"\|\s*0\s+0\s+\|\s*{os.getpid()}\s", r)]
        assert rows, out
        assert int(rows[0].rstrip(" |").split("|")[-1]) >= 96
    finally:
        acl.rt.free(ptr)
