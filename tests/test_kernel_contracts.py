"""Where ATen's kernels disagree, npu answers as a device does, decided per op and found mechanically:

- Meta against CPU (tests/conformance/meta_audit.py): every op whose Meta kernel (which sizes npu's outputs) and CPU
  kernel (which computes them) describe an output's dtype or shape differently is decided in the op path, so a
  forward cannot save what its backward's CPU kernel refuses (LayerNorm's backward in bfloat16 did).
- CUDA against CPU: every op and dtype OpInfo lists for CUDA beyond the CPU's (dtypesIfCUDA: histc of integers,
  complex32 math, ...) runs on npu with the result the CPU gives in a wider dtype, rounded to the dtype CUDA returns.
"""

import builtins
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

_spec = importlib.util.spec_from_file_location(
    "meta_audit", Path(__file__).resolve().parent / "conformance" / "meta_audit.py")
meta_audit = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = meta_audit
_spec.loader.exec_module(meta_audit)

# OpInfos whose ops disagree between Meta and CPU (the normalizations, the losses and ops ops/meta_fixes.cpp corrects,
# a data-dependent one), and some that agree; `make conformance` audits every OpInfo.
AUDIT_SLICE = ["native_layer_norm", "nn.functional.layer_norm", "native_batch_norm", "nn.functional.batch_norm",
               "_native_batch_norm_legit", "nn.functional.instance_norm", "nn.functional.group_norm",
               "nn.functional.huber_loss", "addr", "nn.functional.embedding_bag", "add", "softmax"]


@pytest.fixture(scope="module")
def audited():
    return meta_audit.audit(AUDIT_SLICE, samples_per_dtype=6)


def test_the_audit_finds_the_known_mismatches(audited):
    # It would find nothing if it compared nothing: the half layer_norm's float32 statistics must be among its finds.
    ops = {(m.op, m.kind, m.dtype) for m in audited}
    for dtype in ("float16", "bfloat16"):
        assert ("aten::native_layer_norm", "dtype", dtype) in ops
        assert ("aten::native_batch_norm", "dtype", dtype) in ops
    # And the running statistics native_batch_norm writes without its schema saying so.
    assert ("aten::native_batch_norm", "write", "float32") in ops


def test_every_mismatch_is_decided(audited):
    undecided = sorted({(m.op, m.kind, m.dtype, m.output, m.cpu, m.meta) for m in audited
                        if meta_audit.decision(m) is None})
    assert not undecided, f"Meta and CPU kernels disagree, and the op path decided nothing for: {undecided}"


def test_the_statistics_contract_holds_in_the_backward():
    # issue 32's reproducer, and the other normalizations, in both half dtypes: the backward takes what the forward
    # saved, and matches the CPU's gradients (half_cases compares them with float64 truth).
    for dtype in (torch.bfloat16, torch.float16):
        for make, shape in ((lambda: torch.nn.LayerNorm(64), (4, 64)), (lambda: torch.nn.BatchNorm2d(6), (4, 6, 5, 5)),
                            (lambda: torch.nn.InstanceNorm1d(6, affine=True), (4, 6, 9))):
            torch.manual_seed(0)
            cpu = make().to(dtype)
            npu = make().to(dtype).npu()
            npu.load_state_dict(cpu.state_dict())
            x = torch.randn(*shape, dtype=dtype)
            xc, xn = x.clone().requires_grad_(), x.npu().requires_grad_()
            cpu(xc).sum().backward()
            npu(xn).sum().backward()
            eps = torch.finfo(dtype).eps
            torch.testing.assert_close(xn.grad.cpu(), xc.grad, atol=8 * eps, rtol=8 * eps)
            for p_npu, p_cpu in zip(npu.parameters(), cpu.parameters()):
                torch.testing.assert_close(p_npu.grad.cpu(), p_cpu.grad, atol=4 * eps * shape[0], rtol=8 * eps)


# ------------------------------------------------------------------------------------------------ dtypesIfCUDA

# Not run on npu in these dtypes, with why. Each is checked to still fail, so a fix shows up here.
CUDA_ONLY = {
    # ATen's fft composites allow float16 by device type (CUDA and meta), before any kernel runs.
    **{(f"fft.{n}", "float16"): "RuntimeError" for n in (
        "fft", "fft2", "fftn", "hfft", "hfft2", "hfftn", "ifft", "ifft2", "ifftn", "ihfft", "ihfft2", "ihfftn",
        "irfft", "irfft2", "irfftn", "rfft", "rfft2", "rfftn")},
    # The CPU has no complex nansum in any dtype to widen to.
    **{(n, d): "RuntimeError" for n in ("nansum", "nanmean") for d in ("complex32", "complex64", "complex128")},
    # CUDA-only kernels.
    ("torch.ops.aten._efficient_attention_forward", "float16"): "NotImplementedError",
    ("torch.ops.aten._efficient_attention_forward", "float32"): "NotImplementedError",
    ("torch.ops.aten._flash_attention_forward", "float16"): "NotImplementedError",
}

WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64,
         torch.bool: torch.uint8}


def _cuda_dtype_cases():
    cases = []
    for op in op_db:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if name == "nn.functional.batch_norm.without_cudnn":
            continue  # lists no CPU dtypes, though the CPU runs it in every one: the conformance suite runs it
        for dtype in sorted(set(op.supported_dtypes("cuda")) - set(op.supported_dtypes("cpu")), key=str):
            cases.append(pytest.param(op, dtype, id=f"{name}-{str(dtype).removeprefix('torch.')}"))
    return cases


def _reference(op, sample, dtype):
    """The op on the CPU with every tensor of `dtype` widened, its results in the dtypes the Meta kernel gives."""
    wide = WIDER.get(dtype, torch.float64)
    widen = lambda v: v.to(wide) if isinstance(v, torch.Tensor) and v.dtype == dtype else v  # noqa: E731
    meta = lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v  # noqa: E731
    out = op(widen(sample.input), *tree_map(widen, sample.args), **tree_map(widen, sample.kwargs))
    meta_out = op(meta(sample.input), *tree_map(meta, sample.args), **tree_map(meta, sample.kwargs))
    return tree_map(lambda o, m: o.to(m.dtype) if isinstance(o, torch.Tensor) else o, out, meta_out)


def _assert_rounded_from(got, expected, dtype):
    """got is expected (computed wide) rounded to a half dtype, up to a few units of its precision relative to the
    result's magnitude (a CUDA kernel may round partial sums: convolutions of complex32 run as float16 ones)."""
    if not isinstance(expected, torch.Tensor):
        assert got == expected
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, expected.dtype, got.shape)
    if expected.numel() == 0:
        return
    if not (expected.is_floating_point() or expected.is_complex()):
        assert torch.equal(got, expected)
        return
    wide = expected.to(torch.complex128 if expected.is_complex() else torch.float64)
    diff = (got.to(wide.dtype) - wide).abs()
    finite = wide.isfinite()
    assert torch.equal(got.to(wide.dtype).isfinite(), finite)
    if not finite.any():
        return
    eps = torch.finfo(torch.float16 if dtype == torch.complex32 else expected.dtype).eps
    scale = wide[finite].abs().max().item()
    assert diff[finite].max().item() <= 8 * eps * max(scale, 1e-3), (
        f"difference {diff[finite].max().item():.3g} at magnitude {scale:.3g}")


@pytest.mark.parametrize("op, dtype", _cuda_dtype_cases())
def test_cuda_dtypes_run_on_npu(op, dtype):
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    key = (name, str(dtype).removeprefix("torch."))
    samples = list(op.sample_inputs("cpu", dtype))[:10]
    if key in CUDA_ONLY:
        with pytest.raises(getattr(builtins, CUDA_ONLY[key])):
            for s in samples:
                s = s.transform(lambda t: t.npu() if isinstance(t, torch.Tensor) else t)
                op(s.input, *s.args, **s.kwargs)
            torch.npu.synchronize()
        return
    ran = 0
    for s in samples:
        try:
            expected = _reference(op, s, dtype)
        except Exception:  # noqa: BLE001  (an input the op rejects in every dtype: the conformance suite's business)
            continue
        n = s.transform(lambda t: t.npu() if isinstance(t, torch.Tensor) else t)
        with torch.random.fork_rng(devices=[]):
            got = op(n.input, *n.args, **n.kwargs)
        got = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, got)  # synchronizes
        if op.name in ("nn.functional.rrelu",):
            got, expected = tree_flatten(got)[0][0].shape, tree_flatten(expected)[0][0].shape  # random slopes
            assert got == expected
        else:
            for g, e in zip(tree_flatten(got)[0], tree_flatten(expected)[0]):
                _assert_rounded_from(g, e, dtype)
        ran += 1
    assert ran, f"{key}: no sample ran"
