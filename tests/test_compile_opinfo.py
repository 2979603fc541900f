"""A slice of PyTorch's OpInfo database through torch.compile on npu, against eager npu (as PyTorch's own
test/inductor/test_torchinductor_opinfo.py does for CPU and CUDA).

Each op's first float32 samples run eager on npu and compiled (Inductor, `dynamic=False`, `fullgraph=True`) on
npu, from clones of the same inputs (some samples mutate, e.g. batch norm's running statistics); the outputs, and the
inputs afterwards, are compared with `torch.testing.assert_close`. The slice covers elementwise ops, reductions and
scans, normalization, matrix ops, shape and index ops; one compilation per sample, so samples per op are bounded.
"""

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

SLICE = [
    # elementwise
    "abs", "neg", "exp", "log", "sigmoid", "tanh", "sqrt", "rsqrt", "sin", "erf", "floor", "reciprocal",
    "nan_to_num", "clamp", "add", "sub", "mul", "div.no_rounding_mode", "pow", "maximum", "atan2", "eq", "where",
    "lerp", "addcmul", "nn.functional.relu", "nn.functional.silu", "nn.functional.gelu",
    # reductions and scans
    "sum", "mean", "amax", "argmax", "var", "std", "prod", "logsumexp", "cumsum", "any",
    # normalization
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.cross_entropy",
    # matrix ops, convolution, pooling
    "matmul", "mm", "bmm", "addmm", "nn.functional.linear", "nn.functional.conv2d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
    # shapes and indexing
    "cat", "stack", "permute", "transpose", "reshape", "expand", "flip", "tril", "nn.functional.pad.constant",
    "__getitem__", "index_select", "gather", "scatter", "index_add", "index_put", "masked_fill",
    "nn.functional.embedding",
]

SAMPLES_PER_OP = 2

# op -> (why its compiled result cannot match eager npu here, the error it raises).
EXPECTED_FAILURES = {}

_OPS = {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db}


from compile_fixtures import fresh_dynamo, inductor_cache  # noqa: F401 (autouse fixtures)


def _clone(tree):
    return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def test_slice_names_real_ops():
    assert len(set(SLICE)) == len(SLICE)
    assert [name for name in SLICE if name not in _OPS] == []
    assert set(EXPECTED_FAILURES) <= set(SLICE)


def _check(name):
    op = _OPS[name]
    func = op.get_op()

    def fn(*args, **kwargs):
        return func(*args, **kwargs)

    samples = list(op.sample_inputs("npu", torch.float32, requires_grad=False))[:SAMPLES_PER_OP]
    assert samples, name
    for sample in samples:
        torch._dynamo.reset()
        args = [sample.input, *sample.args]
        eager_args, eager_kwargs = _clone((args, sample.kwargs))
        expected = fn(*eager_args, **eager_kwargs)
        compiled = torch.compile(fn, backend="inductor", dynamic=False, fullgraph=True)
        compiled_args, compiled_kwargs = _clone((args, sample.kwargs))
        actual = compiled(*compiled_args, **compiled_kwargs)
        to_cpu = lambda tree: tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, tree)  # noqa: E731
        msg = f"{name} on {sample.summary()}" if hasattr(sample, "summary") else name
        torch.testing.assert_close(to_cpu(actual), to_cpu(expected), equal_nan=True, msg=lambda m: f"{msg}: {m}")
        # In-place effects on the input tensors (running statistics, ...) are the same too. Only the tensors: the
        # other arguments (gelu's approximate, a pad mode, an index's slices) are not what assert_close compares.
        tensors = lambda tree: [t.cpu() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]  # noqa: E731
        torch.testing.assert_close(tensors((compiled_args, compiled_kwargs)), tensors((eager_args, eager_kwargs)),
                                   equal_nan=True)


@pytest.mark.parametrize("name", SLICE)
def test_compiled_op_matches_eager(name):
    if name in EXPECTED_FAILURES:
        reason, error = EXPECTED_FAILURES[name]
        with pytest.raises(error):
            _check(name)
        return
    _check(name)
