"""The offline executor's own convolution kernels (csrc/offline/model/ops/winograd.cpp, direct_conv.cpp) against
PyTorch's CPU convolution: Winograd F(4x4) and F(2x2) for 3x3 stride-1 filters, the direct kernel with packed filters
for the others, ATen's for what neither takes. Each case is a one-node ONNX model (Conv, then Relu that the lowering
fuses into it) converted in memory and run through ACL; every result is read back."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import acl
from softnpu.offline import convert
from softnpu.offline.onnx_backend import SoftnpuBackend

AVX512 = "avx512f" in Path("/proc/cpuinfo").read_text()
ATC = Path(sys.executable).parent / "atc"


def conv_model(n, c, h, w, oc, k, *, stride=1, pads=None, dilation=1, group=1, bias=True, relu=True,
               auto_pad=None, residual=False, seed=0):
    """Conv [-> Add(., r), r a second input of the output's shape] [-> Relu]; returns the model, its inputs and
    what the reference needs."""
    rng = np.random.default_rng(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    weight = (rng.standard_normal((oc, c // group, kh, kw)) / np.sqrt(c * kh * kw)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    attrs = {"strides": [stride, stride], "dilations": [dilation, dilation], "group": group}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = pads if pads is not None else [k // 2] * 4 if isinstance(k, int) else [0] * 4
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    out_shape = reference([x], weight, b, attrs, False).shape
    inputs = ["x", "W"] + (["B"] if bias else [])
    nodes = [helper.make_node("Conv", inputs, ["conv" if residual or relu else "y"], name="conv", **attrs)]
    feeds = [x]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    if residual:
        nodes.append(helper.make_node("Add", ["r", "conv"], ["sum" if relu else "y"], name="add"))
        graph_inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, list(out_shape)))
        feeds.append(rng.standard_normal(out_shape).astype(np.float32))
    if relu:
        nodes.append(helper.make_node("Relu", [nodes[-1].output[0]], ["y"], name="relu"))
    inits = [numpy_helper.from_array(weight, "W")] + ([numpy_helper.from_array(b, "B")] if bias else [])
    g = helper.make_graph(nodes, "conv", graph_inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return model, feeds, weight, (b if bias else None), attrs


def reference(feeds, weight, b, attrs, relu):
    """PyTorch's CPU convolution of feeds[0], plus feeds[1] when given, then ReLU."""
    xt = torch.from_numpy(feeds[0])
    if "auto_pad" in attrs:  # SAME_UPPER: the odd unit of padding at the end
        kh, kw = weight.shape[2:]
        ph, pw = kh - 1, kw - 1
        xt = torch.nn.functional.pad(xt, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        pad = 0
    else:
        top, left, bottom, right = attrs["pads"]
        xt = torch.nn.functional.pad(xt, [left, right, top, bottom])
        pad = 0
    y = torch.nn.functional.conv2d(xt, torch.from_numpy(weight), None if b is None else torch.from_numpy(b),
                                   attrs["strides"], pad, attrs["dilations"], attrs["group"])
    if len(feeds) > 1:
        y = y + torch.from_numpy(feeds[1])
    return (y.relu() if relu else y).numpy()


CASES = {
    # Winograd F(4x4): 3x3 stride 1 on at least 512 positions per run; partial tiles (23 = 5 x 4 + 3), channels not
    # a multiple of 16 (the masked tail), output panels 64 + 16, batch 3, asymmetric pads.
    "winograd4": dict(n=1, c=32, h=24, w=24, oc=64, k=3),
    "winograd4_partial_tiles": dict(n=1, c=5, h=23, w=25, oc=80, k=3),
    "winograd4_batch": dict(n=3, c=16, h=14, w=14, oc=48, k=3, bias=False),
    "winograd4_asymmetric_pads": dict(n=1, c=16, h=24, w=24, oc=32, k=3, pads=[0, 2, 1, 0], relu=False),
    "winograd4_same_upper": dict(n=1, c=16, h=24, w=24, oc=16, k=3, auto_pad="SAME_UPPER"),
    # F(2x2): 128 to 511 positions; fewer: the direct kernel.
    "winograd2": dict(n=1, c=64, h=14, w=14, oc=64, k=3),
    "direct_3x3_small_map": dict(n=1, c=64, h=7, w=7, oc=128, k=3),
    # The direct kernel: a first layer (7x7 stride 2, 3 channels), strides, 1x1, dilation, rectangular filters.
    "direct_stem": dict(n=2, c=3, h=40, w=36, oc=64, k=7, stride=2),
    "direct_stride2": dict(n=1, c=24, h=15, w=15, oc=32, k=3, stride=2),
    "direct_1x1": dict(n=2, c=40, h=9, w=9, oc=16, k=1, stride=2, pads=[0, 0, 0, 0]),
    "direct_dilated": dict(n=1, c=16, h=20, w=20, oc=48, k=3, dilation=2, pads=[2, 2, 2, 2]),
    "direct_rectangular": dict(n=1, c=8, h=12, w=10, oc=16, k=(1, 5), pads=[0, 1, 0, 3], relu=False),
    # Neither: grouped, or output channels not a multiple of 16 (ATen's convolution).
    "aten_grouped": dict(n=1, c=16, h=24, w=24, oc=32, k=3, group=4),
    "aten_odd_channels": dict(n=1, c=8, h=24, w=24, oc=10, k=3),
    # A residual added after the convolution (resnet's blocks) is the convolution's fourth input, added before ReLU.
    "winograd4_residual": dict(n=2, c=16, h=24, w=24, oc=32, k=3, residual=True),
    "winograd2_residual": dict(n=1, c=32, h=14, w=14, oc=64, k=3, residual=True, relu=False),
    "direct_residual": dict(n=1, c=16, h=15, w=15, oc=32, k=1, stride=2, pads=[0, 0, 0, 0], residual=True),
    "aten_residual": dict(n=1, c=16, h=12, w=12, oc=32, k=3, group=2, residual=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv_matches_cpu(name):
    case = dict(CASES[name])
    relu = case.get("relu", True)
    model, feeds, weight, b, attrs = conv_model(**case)
    rep = SoftnpuBackend.prepare(model, precision_mode="force_fp32")
    (y,) = rep.run(feeds)
    expected = reference(feeds, weight, b, attrs, relu)
    assert y.shape == expected.shape
    # Winograd's transforms add rounding steps: F(4x4)'s error is a few float32 ulps of the largest output.
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def kernel_choice(model, tmp_path) -> list:
    """Each Conv's kernel as the loaded model shows it in `atc --mode=1`'s JSON: (Winograd's m, direct). Conversion
    chooses m; loading keeps it, or picks the direct kernel, where the host has the kernels."""
    om = tmp_path / "m.om"
    om.write_bytes(convert(model.SerializeToString(), "force_fp32"))
    r = subprocess.run([str(ATC), "--mode=1", f"--om={om}", f"--json={tmp_path / 'm.json'}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    nodes = json.loads((tmp_path / "m.json").read_text())["nodes"]
    assert [n["type"] for n in nodes] == ["Conv"], "Add and Relu fused into the convolution"
    return [(n["attributes"].get("softnpu_winograd", 0), n["attributes"].get("softnpu_direct", 0))
            for n in nodes if n["type"] == "Conv"]


@pytest.mark.parametrize("name,m,direct", [("winograd4", 4, 0), ("winograd4_batch", 4, 0), ("winograd2", 2, 0),
                                           ("direct_3x3_small_map", 0, 1), ("direct_stem", 0, 1),
                                           ("direct_dilated", 0, 1), ("aten_grouped", 0, 0),
                                           ("aten_odd_channels", 0, 0), ("winograd4_residual", 4, 0),
                                           ("direct_residual", 0, 1), ("aten_residual", 0, 0)])
def test_kernel_choice_by_filter_and_positions(name, m, direct, tmp_path):
    model, *_ = conv_model(**CASES[name])
    assert kernel_choice(model, tmp_path) == ([(m, direct)] if AVX512 else [(0, 0)])


@pytest.mark.skipif(not AVX512, reason="the kernels need AVX-512F; this host runs ATen's convolution")
def test_winograd_filter_is_transformed_into_device_memory_at_load():
    """F(4x4)'s transformed filter is 36/9 = 4x the filter's bytes, and it is npu device memory: loading the model
    takes that much more of the device than its weights."""
    model, feeds, weight, b, attrs = conv_model(n=1, c=64, h=32, w=32, oc=128, k=3)
    SoftnpuBackend.prepare(model, precision_mode="force_fp32")  # initializes ACL
    free0, _, ret = acl.rt.get_mem_info(1)
    assert ret == 0
    rep = SoftnpuBackend.prepare(model, precision_mode="force_fp32")
    free1, _, ret = acl.rt.get_mem_info(1)
    assert ret == 0
    transformed = 36 * 128 * 64 * 4
    assert free0 - free1 >= transformed
    (y,) = rep.run(feeds)
    np.testing.assert_allclose(y, reference(feeds, weight, b, attrs, True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["winograd4", "winograd2", "direct_stem", "aten_grouped", "winograd4_residual",
                                  "direct_residual"])
def test_force_fp16_conv_rounds_like_the_cube(name):
    """force_fp16: inputs and filter rounded to float16, float32 arithmetic, output stored as float16 values (by the
    kernel itself for softnpu's own kernels)."""
    case = dict(CASES[name])
    model, feeds, weight, b, attrs = conv_model(**case)
    (y,) = SoftnpuBackend.prepare(model, precision_mode="force_fp16").run(feeds)
    half = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    assert np.array_equal(y, half(y)), "outputs are float16 values"
    expected = half(reference([half(f) for f in feeds], half(weight), half(b), attrs, case.get("relu", True)))
    # One float16 ulp of the output, from the float32 sums' own rounding differences.
    np.testing.assert_allclose(y, expected, rtol=2 ** -10, atol=1e-3)
