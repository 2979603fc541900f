"""The offline models' random ops (csrc/offline/model/ops/random.cpp) through atc's conversion and ACL: ONNX's node
tests check only RandomUniformLike and Bernoulli, and only against numpy's draws. What users rely on: a `seed`
repeats its draws on every run, no seed draws anew on each run (the op is never folded into a constant at
conversion), and the draws follow the distribution the attributes give."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from softnpu.offline.onnx_backend import SoftnpuBackend

N = 1 << 14


def model(node, inputs, output_type, output_shape):
    graph = helper.make_graph([node], "random", inputs, [helper.make_tensor_value_info("y", output_type, output_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def run(m, *inputs):
    onnx.checker.check_model(m)
    return SoftnpuBackend.prepare(m).run(list(inputs))[0]


@pytest.mark.parametrize("dtype, np_dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)])
def test_random_uniform_seeded_repeats_and_covers_its_range(dtype, np_dtype):
    m = model(helper.make_node("RandomUniform", [], ["y"], shape=[N], low=2.0, high=3.0, seed=5.0, dtype=dtype), [],
              dtype, [N])
    rep = SoftnpuBackend.prepare(m)
    a, b = rep.run([])[0], rep.run([])[0]
    assert a.dtype == np_dtype and a.shape == (N,)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, run(m))  # another conversion of the same model: the same draws
    assert a.min() >= 2.0 and a.max() < 3.0
    assert abs(a.mean() - 2.5) < 0.02 and abs(a.std() - 12 ** -0.5) < 0.02


def test_random_normal_seeded_follows_mean_and_scale():
    m = model(helper.make_node("RandomNormal", [], ["y"], shape=[N], mean=10.0, scale=0.5, seed=3.0), [],
              TensorProto.FLOAT, [N])
    y = run(m)
    assert abs(y.mean() - 10.0) < 0.02 and abs(y.std() - 0.5) < 0.02


def test_random_like_without_seed_draws_anew_on_each_run():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])
    m = model(helper.make_node("RandomUniformLike", ["x"], ["y"]), [x], TensorProto.FLOAT, [N])
    rep = SoftnpuBackend.prepare(m)
    x0 = np.zeros(N, np.float32)
    a, b = rep.run([x0])[0], rep.run([x0])[0]
    assert a.shape == (N,) and a.dtype == np.float32
    assert not np.array_equal(a, b)
    assert a.min() >= 0.0 and a.max() < 1.0


def test_bernoulli_of_certain_probabilities_is_exact():
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [6])
    m = model(helper.make_node("Bernoulli", ["x"], ["y"]), [x], TensorProto.DOUBLE, [6])
    p = np.array([0, 1, 1, 0, 0, 1], np.float64)
    np.testing.assert_array_equal(run(m, p), p)


def test_multinomial_never_draws_a_class_of_zero_probability():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    m = model(helper.make_node("Multinomial", ["x"], ["y"], sample_size=1000, seed=1.0), [x], TensorProto.INT32,
              [2, 1000])
    logits = np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, 0.0]], np.float32)
    y = run(m, logits)
    assert y.dtype == np.int32 and y.shape == (2, 1000)
    assert set(np.unique(y[0])) == {0, 2}
    assert (y[1] == 2).all()
