"""The offline executor's max pooling of channels-last activations (csrc/offline/model/ops/pooling.cpp) against
PyTorch's CPU max_pool2d. The pooling reads a convolution's output, as in a CNN: a 1x1 convolution with the identity
filter (softnpu's direct kernel, channels-last output) passes finite values through exactly, and spreads a NaN or an
infinity to NaN over its pixel's channels (0 x inf), as PyTorch's does in the reference."""
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from softnpu.offline.onnx_backend import SoftnpuBackend


def pool_model(n, c, h, w, kernel, stride, pads, ceil_mode):
    eye = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "I"], ["c"], name="identity"),
             helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[kernel, kernel],
                              strides=[stride, stride], pads=[pads] * 4, ceil_mode=ceil_mode)]
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "oh", "ow"])],
                          [numpy_helper.from_array(eye, "I")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("n,c,h,w,kernel,stride,pads,ceil_mode", [
    (1, 64, 15, 15, 3, 2, 1, 0),   # resnet's stem pooling, odd size
    (2, 32, 7, 9, 2, 2, 0, 1),     # ceil_mode: a last window hanging over the edge
    (1, 16, 6, 6, 3, 1, 1, 0),
    (1, 24, 8, 8, 3, 2, 1, 0),     # channels not a multiple of 16: ATen's pooling
])
def test_max_pool_matches_cpu(n, c, h, w, kernel, stride, pads, ceil_mode):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x[0, 3, 2, 2] = np.nan  # NaN in a window gives NaN, as ATen's
    x[0, 5, 4, 4] = -np.inf
    (y,) = SoftnpuBackend.prepare(pool_model(n, c, h, w, kernel, stride, pads, ceil_mode),
                                  precision_mode="force_fp32").run([x])
    eye = torch.eye(c).reshape(c, c, 1, 1)
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), eye)
    expected = torch.nn.functional.max_pool2d(conv, kernel, stride, pads, ceil_mode=bool(ceil_mode))
    assert expected.isnan().any()
    assert y.shape == tuple(expected.shape)
    np.testing.assert_array_equal(y, expected.numpy())
