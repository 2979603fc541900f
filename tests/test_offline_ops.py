"""Offline model ops on cases ONNX's node tests leave out, converted by atc and run through ACL
(softnpu.offline.onnx_backend), against onnxruntime's CPU kernels on the same inputs: older opsets' Resize and
Upsample, MaxRoiPool, RoiAlign's adaptive sampling, pooling with ceil_mode, dilations and padding together."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from softnpu.offline.onnx_backend import SoftnpuBackend

FLOAT = TensorProto.FLOAT


def _model(node, inputs, output_rank, opset, initializers=()):
    """A one-node model; inputs: (name, array) fed at run time."""
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(node.output[0], FLOAT, [None] * output_rank)],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 10
    return model


def _check(model, feeds, rtol=1e-5, atol=1e-5):
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, dict(feeds))
    got = SoftnpuBackend.prepare(model).run([a for _, a in feeds])
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def _const(name, values, dtype=np.float32):
    return onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 1.5, 2.5], [1, 1, 0.6, 0.4]])
def test_resize_opset10(mode, scales):
    # Resize-10 has no coordinate_transformation_mode: asymmetric coordinates, nearest rounding as onnxruntime's.
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 7)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode=mode)
    _check(_model(node, [("x", x)], 4, 10, [_const("scales", scales)]), [("x", x)])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opset9(mode):
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 3)).astype(np.float32)
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
    _check(_model(node, [("x", x)], 4, 9, [_const("scales", [1, 1, 2, 3])]), [("x", x)])


def test_max_roi_pool():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 8, 10)).astype(np.float32)
    # batch index, x1, y1, x2, y2: inside, whole map, sub-pixel, partly outside.
    rois = np.array([[0, 1, 1, 6, 5], [1, 0, 0, 9, 7], [0, 4.4, 2.6, 5.2, 3.1], [1, 8, 6, 20, 20]], np.float32)
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2], spatial_scale=0.5)
    _check(_model(node, [("x", x), ("rois", rois)], 4, 16), [("x", x), ("rois", rois)])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align_adaptive_sampling(mode, transform):
    # sampling_ratio=0: each region samples ceil(region / output) points per bin, a count known only at run time.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = np.array([[0.5, 1.2, 9.1, 8.7], [2, 2, 3, 3], [0, 0, 11.5, 9.5]], np.float32)
    batch = np.array([0, 1, 1], np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3, output_width=4,
                            sampling_ratio=0, spatial_scale=0.9, coordinate_transformation_mode=transform)
    feeds = [("x", x), ("rois", rois), ("batch", batch)]
    _check(_model(node, feeds, 4, 16), feeds)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_ceil_mode_dilations_pads(count_include_pad):
    x = np.random.default_rng(4).standard_normal((1, 2, 9, 8)).astype(np.float32)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 1],
                            pads=[2, 0, 1, 1], ceil_mode=1, count_include_pad=count_include_pad)
    _check(_model(node, [("x", x)], 4, 22), [("x", x)])


def test_lp_pool_pads_strides():
    x = np.random.default_rng(5).standard_normal((1, 2, 7, 6)).astype(np.float32)
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=3)
    _check(_model(node, [("x", x)], 4, 22), [("x", x)])


def test_resize_scales_keep_precision_under_force_fp16():
    # atc's default precision mode rounds float32 inputs to float16, but not a parameter like Resize's scales:
    # 1/3 in float16 (0.33325) would shrink 9 rows to 2 instead of 3.
    from softnpu.offline import convert
    from softnpu.offline.onnx_backend import SoftnpuRep

    x = np.arange(81, dtype=np.float32).reshape(1, 1, 9, 9)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    model = _model(node, [("x", x)], 4, 19, [_const("scales", [1, 1, 1 / 3, 1 / 3])])
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = SoftnpuRep(convert(model.SerializeToString(), precision_mode="force_fp16")).run([x])[0]
    assert got.shape == expected.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(got, expected)


def test_qlinear_matmul_per_row_and_per_column_scales():
    # a quantized per row (M scales and zero points), b per column (N): each output element takes its row's and its
    # column's scale. M != N, so a scale applied along the wrong axis cannot broadcast by accident.
    rng = np.random.default_rng(5)
    m, k, n = 3, 5, 4
    a = rng.integers(0, 255, (m, k), dtype=np.uint8)
    b = rng.integers(0, 255, (k, n), dtype=np.uint8)
    a_scale = np.array([0.02, 0.05, 0.03], np.float32)
    a_zp = np.array([120, 128, 131], np.uint8)
    b_scale = np.array([0.01, 0.04, 0.02, 0.03], np.float32)
    b_zp = np.array([127, 125, 130, 128], np.uint8)
    y_scale, y_zp = np.float32(0.5), np.uint8(128)
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k]),
                      helper.make_tensor_value_info("b", TensorProto.UINT8, [k, n])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])],
        [_const("a_scale", a_scale), _const("a_zp", a_zp, np.uint8), _const("b_scale", b_scale),
         _const("b_zp", b_zp, np.uint8), _const("y_scale", y_scale), _const("y_zp", y_zp, np.uint8)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    acc = (a.astype(np.int64) - a_zp[:, None]) @ (b.astype(np.int64) - b_zp[None, :])
    real = acc * (a_scale[:, None] * b_scale[None, :]).astype(np.float64)
    expected = np.clip(np.rint(real / np.float64(y_scale)) + y_zp, 0, 255).astype(np.uint8)
    got = SoftnpuBackend.prepare(model).run([a, b])[0]
    np.testing.assert_array_equal(got, expected)
