"""LayerNormalization over the last axis (csrc/offline/model/ops/layer_norm.cpp: one row at a time in registers on
AVX-512F hosts, ATen's native_layer_norm otherwise or when the node also outputs the mean and deviation) against
PyTorch's CPU layer_norm; every result is read back."""
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from softnpu.offline.onnx_backend import SoftnpuBackend

F = TensorProto.FLOAT


def layer_norm_model(shape, *, bias=True, outputs=1, eps=1e-12, seed=0):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    inits = [numpy_helper.from_array(scale, "scale")] + ([numpy_helper.from_array(b, "b")] if bias else [])
    names = ["y", "mean", "rstd"][:outputs]
    node = helper.make_node("LayerNormalization", ["x", "scale"] + (["b"] if bias else []), names, axis=-1, epsilon=eps)
    stat_shape = list(shape[:-1]) + [1]
    outs = [helper.make_tensor_value_info("y", F, list(shape))] + [helper.make_tensor_value_info(o, F, stat_shape)
                                                                    for o in names[1:]]
    g = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", F, list(shape))], outs, inits)
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (n,), torch.from_numpy(scale),
                                              torch.from_numpy(b) if bias else None, eps).numpy()
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x, expected


@pytest.mark.parametrize("case", [dict(shape=(64, 128)), dict(shape=(3, 5, 33)), dict(shape=(2, 7), bias=False),
                                  dict(shape=(4, 48)), dict(shape=(1, 1, 5), eps=1e-5),
                                  dict(shape=(6, 40), outputs=3)])
def test_layer_norm_matches_cpu(case):
    model, x, expected = layer_norm_model(**case)
    outs = SoftnpuBackend.prepare(model, precision_mode="force_fp32").run([x])
    assert outs[0].shape == expected.shape
    np.testing.assert_allclose(outs[0], expected, rtol=1e-5, atol=1e-5)
    if len(outs) == 3:
        np.testing.assert_allclose(outs[1].reshape(-1), x.mean(-1), rtol=1e-5, atol=1e-5)
