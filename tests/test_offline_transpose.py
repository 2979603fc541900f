"""Transpose in the offline executor (csrc/offline/model/ops/shape.cpp): a permutation that keeps the last axis moves
whole rows (one copy each), the others run ATen's strided copy; both against numpy's transpose, read back."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from softnpu.offline.onnx_backend import SoftnpuBackend

TYPES = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.float16: TensorProto.FLOAT16,
         np.uint8: TensorProto.UINT8}


@pytest.mark.parametrize("shape,perm,dtype", [
    ((2, 64, 2, 64), (0, 2, 1, 3), np.float32),  # BERT's head split: rows of 64 floats
    ((3, 5, 7, 33), (2, 0, 1, 3), np.float32),  # rows of 33 floats, a 3-axis rotation of the outer dims
    ((4, 6, 16), (1, 0, 2), np.int64),  # 128-byte rows
    ((2, 3, 4, 40), (3, 1, 2, 0), np.float16),  # the last axis moves: ATen's
    ((5, 9, 70), (1, 0, 2), np.uint8),  # 70-byte rows of bytes
    ((2, 3, 8), (1, 0, 2), np.float32),  # 32-byte rows: ATen's
])
def test_transpose_matches_numpy(shape, perm, dtype):
    x = (np.random.default_rng(0).standard_normal(shape) * 50).astype(dtype)
    out_shape = [shape[p] for p in perm]
    node = helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TYPES[dtype], list(shape))],
                          [helper.make_tensor_value_info("y", TYPES[dtype], out_shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (y,) = SoftnpuBackend.prepare(model, precision_mode="must_keep_origin_dtype").run([x])
    np.testing.assert_array_equal(y, np.transpose(x, perm))
