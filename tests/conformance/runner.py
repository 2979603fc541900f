"""Conformance: PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations.op_db) and ModuleInfo
database (torch.testing._internal.common_modules.module_db) run on npu against the CPU.

For every OpInfo, every dtype the CPU or CUDA supports among DTYPE_NAMES (OpInfo's dtypes and dtypesIfCUDA; complex32
where only CUDA lists it), and every sample input:

- forward: the op on npu and on the CPU must agree (values with the OpInfo's tolerances, dtypes, shapes, structure,
  outputs on npu), or both raise the same exception type. Variants: the function, the method, the in-place method
  (which must return its input) and out= (preallocated outputs, then zero-size outputs to resize). Random ops
  (wrapped in wrapper_set_seed or marked non-deterministic by the OpInfo) must repeat themselves on npu under the same
  seed and match the CPU's metadata; ops that return uninitialized memory (empty, empty_like, ...) match metadata
  only.
- grad: for ops that support autograd, float32, float64, float16 and bfloat16 (those the CPU supports): the gradients
  of the inputs (torch.autograd.grad with seeded random grad_outputs) on npu and on the CPU in the same dtype.
- error: every error input: npu raises the exception type the CPU raises for the same input (or the OpInfo's type,
  for errors only a non-CPU device has), and the device stays usable.

Samples are generated on npu; the CPU reference is a replica of them (same storages, offsets, strides, conj/neg bits,
aliasing between arguments; tensors the OpInfo keeps on the CPU stay there).

For every ModuleInfo, every dtype it lists and float16 and bfloat16 (listed or not), train mode and (where the
ModuleInfo says they differ) eval mode, and every module input, as PyTorch's test_cpu_gpu_parity does (its inputs made
on the CPU, its tolerances):

- forward: the module built on the CPU and on npu with the CPU module's state dict, called on copies of the same
  inputs: the outputs and the module's state after the call (running statistics) must agree, or both raise the same
  exception type.
- backward: the gradients of the inputs and of the parameters (torch.autograd.grad with seeded random grad_outputs
  for every differentiable output) on npu and on the CPU.

Half precision (float16, bfloat16, complex32): a result that differs from the CPU's beyond the tolerance is
judged against the float64 truth, the same case run on the CPU with every floating input and module parameter in
float64 (complex128): it passes if npu's error against the truth is no larger than the CPU half kernel's (TRUTH_FACTOR,
TRUTH_SLACK_EPS), on each result or on the largest over the case's results (_Truth.settle), so npu differs from the CPU's
half kernel only where it is the more accurate of the two, or, failing that, if its error is within what computing the
case in the dtype entails: the largest error of the float64 truth run with every op's result rounded as the dtype
rounds, over ROUNDING_DRAWS random draws (a Monte Carlo test at the 5 % level). The report counts the cases so
accepted. A module the CPU cannot run in a half dtype (NotImplementedError) where npu computes it, as CUDA does, is compared with the CPU's result in float32, rounded to the dtype, and judged likewise; so is an op
case in a dtype only CUDA lists that the CPU has no kernel for (REFERENCE_DTYPE_NAMES: bool in uint8, integers in
float64, compared exactly), where npu must compute what CUDA computes. The report counts these cases apart ("added by
dtypesIfCUDA"). For half
inputs the saved statistics of the normalization ops are float32 on npu, as CUDA's kernels and the Meta kernels give
them (FLOAT32_STATS_OUTPUTS): they are compared with the CPU's in float32.

A case is one sample (or error input) of one (op, variant, dtype, kind), or one module input of one (module, mode,
dtype, kind). Each npu run ends with a synchronize, so an asynchronous error is charged to its case. Cases run in
worker subprocesses, an op or a module per request, so a crash (segfault, abort) is recorded against the case that
was running and the rest go on in a new worker. Expected failures live in expected_failures.toml; a listed case that
passes, an unlisted case that fails, a crash or a hang fails the run.

    python tests/conformance/runner.py                          # both databases, -j2
    python tests/conformance/runner.py --ops add,mul            # some OpInfos (names as in the report)
    python tests/conformance/runner.py --modules all            # the ModuleInfo database only
    python tests/conformance/runner.py --modules nn.Linear,nn.LSTM
    python tests/conformance/runner.py --modules all --dtypes float16,bfloat16       # the half dtypes only
    python tests/conformance/runner.py --ops all --kinds grad --dtypes float16,bfloat16
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import json
import math
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXPECTED_FAILURES = HERE / "expected_failures.toml"

DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "complex64", "int64", "int32", "uint8", "bool")
GRAD_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16")
# OpInfo cases also run in complex32 where CUDA lists it and the CPU does not (issue 33: the dtypes CUDA's kernels add;
# the complex32 cases of the views and copies the CPU lists are not run).
CUDA_ONLY_DTYPE_NAMES = ("complex32",)
# Every ModuleInfo also runs in these, whether or not it lists them (a module the CPU cannot run in them must fail the
# same way on npu).
MODULE_HALF_DTYPE_NAMES = ("float16", "bfloat16")
# The dtypes judged against the float64 truth when npu and the CPU differ beyond the tolerance.
TRUTH_DTYPE_NAMES = ("float16", "bfloat16", "complex32")
# Where CUDA lists a dtype for an op and the CPU has no kernel for it, npu computes it as CUDA's kernels do: the
# reference is the CPU's result with the case's tensors (and the half ones) in a wider dtype that holds their values,
# brought back to the dtype (_rounded).
REFERENCE_DTYPE_NAMES = {"float16": "float32", "bfloat16": "float32", "complex32": "complex64", "bool": "uint8",
                         "uint8": "float64", "int32": "float64", "int64": "float64"}
# npu passes against the truth if its error <= TRUTH_FACTOR * the CPU kernel's error + TRUTH_SLACK_EPS * eps, errors
# measured as the largest difference over the largest magnitude of the truth (as tests/half_cases.py does, whose
# margin is 1.25 and one eps). Each side rounds to the half dtype, at the end and between the ops of a module: values
# equally close to the truth before a rounding can round to neighbours one unit in the last place apart (eps at the
# largest magnitude), so the slack is one eps; the factor admits a different but equally accurate order of summation
# (a few percent). A kernel that loses precision (rounding its intermediates to the half dtype where the CPU keeps
# float32) is off by several units in the last place (the fused RNN cells: 2-4 times the CPU's error), beyond both.
TRUTH_FACTOR = 1.1
TRUTH_SLACK_EPS = 1.0
# A module case that fails those bounds is judged once more, against the error that computing it in the dtype
# entails: the float64 truth recomputed under floating point's standard model, every arithmetic op's result multiplied
# by 1 + d with d drawn uniformly within the dtype's unit roundoff (eps / 2; _rounding_model), ROUNDING_DRAWS times.
# npu passes if its largest error is within the largest of those: a Monte Carlo test at the 5 % level (a result drawn
# from the model exceeds the largest of 19 other draws with probability 1/20), run only on cases that failed the bounds
# above. Such a result is as close to float64 as a computation that rounds each op's result to the dtype, as the CPU's
# half kernels and CUDA's do, can be expected to be. Chains of ill-conditioned steps need it: a post-norm Transformer
# layer of d_model 4, whose bias gradients feed a LayerNorm over 4 elements, turns a one-ulp difference upstream into
# tens of ulps downstream, on the CPU as on npu, and which side lands nearer float64 is then chance
# (expected_failures.toml's norm_rounding_propagation listed 38 such cases, all within the model). A computation that
# loses precision is still caught: tests/test_conformance.py keeps a float16 chain whose intermediates are rounded to
# bfloat16 failing it.
ROUNDING_DRAWS = 19
# Outputs that follow CUDA's contract rather than the CPU's: for float16/bfloat16 inputs these ops give their saved
# mean and inverse standard deviation in float32 (CUDA's kernels, and PyTorch's Meta kernels that describe them); the
# CPU's kernels give them in the input dtype. npu takes CUDA's: the CPU's values are compared in float32, with the
# half dtype's tolerance and the float64-truth rule, and npu's must be float32. Op name -> output indices.
FLOAT32_STATS_OUTPUTS = {
    "native_layer_norm": (1, 2),
    "native_batch_norm": (1, 2),
    "_native_batch_norm_legit": (1, 2),
    "_batch_norm_with_update": (1, 2),
}
KINDS = ("forward", "grad", "error")
VARIANTS = ("function", "method", "inplace", "out")
# ModuleInfo cases: the forward (outputs and the module's state after it) and the backward (gradients of the inputs
# and of the parameters), in train and, where the module behaves differently, eval mode.
MODULE_KINDS = ("forward", "backward")
MODULE_MODES = ("train", "eval")
# Module case keys start with this, so they never mix with OpInfo keys: "module:nn.Linear|train|float32|forward|0".
MODULE_PREFIX = "module:"
# test_cpu_gpu_parity's tolerances (PyTorch's test/test_modules.py): atol per dtype, on top of assert_close's defaults.
MODULE_PARITY_ATOL = {"float32": 5e-2, "float64": 4e-4}

# Seconds a worker may spend in one case before it counts as hung.
CASE_TIMEOUT = 300


def case_key(op: str, variant: str, dtype: str, kind: str, sample) -> str:
    return f"{op}|{variant}|{dtype}|{kind}|{sample}"


def module_case_key(module: str, mode: str, dtype: str, kind: str, sample) -> str:
    return f"{MODULE_PREFIX}{module}|{mode}|{dtype}|{kind}|{sample}"


def split_key(key: str) -> tuple[str, str, str, str, str]:
    op, variant, dtype, kind, sample = key.rsplit("|", 4)
    return op, variant, dtype, kind, sample


def suite_of(key: str) -> str:
    return "module" if key.startswith(MODULE_PREFIX) else "op"


# ================================================================================================ expected failures


@dataclass
class Expectation:
    """One [[xfail]] entry: fnmatch patterns (or lists of them) for the op, variant, dtype and kind, optionally the
    sample indices; or one [[module_xfail]] entry (suite "module"): patterns for the module, mode, dtype and kind. Every
    case it matches must fail: one that passes is an unexpected pass."""

    suite: str
    op: list
    variant: list
    dtype: list
    kind: list
    samples: list | None
    reason: str
    matched: int = 0
    passed: list = field(default_factory=list)

    def matches(self, key: str) -> bool:
        if suite_of(key) != self.suite:
            return False
        fields = split_key(key.removeprefix(MODULE_PREFIX))
        return (all(any(fnmatch.fnmatchcase(value, p) for p in patterns)
                    for value, patterns in zip(fields[:4], (self.op, self.variant, self.dtype, self.kind)))
                and (self.samples is None or int(fields[4]) in self.samples))

    def describe(self) -> str:
        samples = "" if self.samples is None else f" samples={self.samples}"
        return f"{self.suite} {self.op} {self.variant} {self.dtype} {self.kind}{samples}"


def load_expectations(path: Path = EXPECTED_FAILURES) -> tuple[dict, list[Expectation]]:
    data = tomllib.loads(path.read_text())
    as_list = lambda v: [v] if isinstance(v, str) else list(v)  # noqa: E731
    reasons = data.get("reasons", {})
    out = []

    for section, suite, fields, kinds_allowed in (("xfail", "op", ("op", "variant"), KINDS),
                                                  ("module_xfail", "module", ("module", "mode"), MODULE_KINDS)):
        for e in data.get(section, []):
            unknown = set(e) - {*fields, "dtype", "kind", "samples", "reason"}
            assert not unknown, f"{path}: unknown keys {unknown} in {e}"
            assert e["reason"] in reasons, f"{path}: reason {e['reason']!r} of {e} is not declared under [reasons]"
            kinds = as_list(e.get("kind", "*"))
            assert all(k == "*" or k in kinds_allowed for k in kinds), f"{path}: bad kind in {e}"
            variants = as_list(e.get(fields[1], "*"))
            assert suite == "op" or all(m == "*" or m in MODULE_MODES for m in variants), f"{path}: bad mode in {e}"
            out.append(Expectation(suite, as_list(e[fields[0]]), variants, as_list(e.get("dtype", "*")), kinds,
                                   e.get("samples"), e["reason"]))
    return reasons, out


# ================================================================================================ worker side
# Everything below up to the master runs in worker processes (torch and the op database are imported there only).

torch = None  # imported by worker_main


def _import_torch():
    global torch
    os.environ.setdefault("SOFTNPU_CORES", "1")
    import torch as _torch
    import torch_npu  # noqa: F401

    torch = _torch
    # One host thread and one kernel thread per device: two workers on two cores, and reductions that split work
    # the same way on both sides.
    torch.set_num_threads(1)


class _Raised:
    """An op call that raised; on npu, with the error of an earlier kernel of the same call, if one failed."""

    def __init__(self, exc: BaseException, deferred: BaseException | None = None):
        self.type = type(exc)
        self.message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        self.deferred = None if deferred is None else _Raised(deferred)

    def types(self) -> tuple:
        return (self.type,) + (() if self.deferred is None else (self.deferred.type,))

    def __repr__(self):
        text = f"{self.type.__name__}({self.message!r})"
        return text + (f" after the kernel error {self.deferred!r}" if self.deferred else "")


class _HostTensor:
    """An npu output brought to the host: its values, and where it lived."""

    def __init__(self, t):
        self.device = t.device
        self.dtype = t.dtype
        self.shape = t.shape
        self.layout = t.layout
        self.values = t.detach().cpu() if t.layout == torch.strided else t.detach().to_dense().cpu()


def _is_npu_device(d) -> bool:
    if isinstance(d, torch.device):
        return d.type == "npu"
    return isinstance(d, str) and (d == "npu" or d.startswith("npu:"))


class Replicator:
    """Copies of a sample's tensors: on the CPU (the reference) or on their own devices (fresh inputs for a run that
    may write them). Tensors sharing a storage share the replica's storage, with the same offsets and strides."""

    def __init__(self, to_cpu: bool, requires_grad: bool = False):
        self.to_cpu = to_cpu
        self.requires_grad = requires_grad
        self.storages: dict = {}
        self.tensors: dict = {}

    def tensor(self, t):
        if id(t) in self.tensors:
            return self.tensors[id(t)][1]
        r = self._replicate(t)
        self.tensors[id(t)] = (t, r)  # keeps t alive, so ids stay unique
        return r

    def _replicate(self, t):
        if t.device.type == "meta":
            return t  # no data to copy (error inputs use them for device mismatches)
        device = torch.device("cpu") if self.to_cpu else t.device
        with torch.no_grad():
            if t.layout != torch.strided or t.is_nested or type(t) is not torch.Tensor and not isinstance(
                    t, torch.nn.Parameter):
                r = t.detach().to(device, copy=True)
            else:
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in self.storages:
                    whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
                    self.storages[key] = (storage, whole.to(device, copy=True).untyped_storage())
                r = torch.empty(0, dtype=t.dtype, device=device)
                r.set_(self.storages[key][1], t.storage_offset(), t.shape, t.stride())
                if t.is_conj():
                    r = r.conj()
                if t.is_neg():
                    r = torch._neg_view(r)
        if self.requires_grad and t.requires_grad:
            r.requires_grad_(True)
        return r

    def value(self, v):
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, tuple):
            return tuple(self.value(x) for x in v)
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        if self.to_cpu and _is_npu_device(v):
            return torch.device("cpu") if isinstance(v, torch.device) else "cpu"
        if self.to_cpu and isinstance(v, torch.Generator) and v.device.type == "npu":
            return torch.Generator().manual_seed(v.initial_seed())
        return v

    def sample(self, s):
        from torch.testing._internal.opinfo.core import SampleInput

        return SampleInput(self.value(s.input), args=self.value(s.args), kwargs=self.value(s.kwargs),
                           output_process_fn_grad=s.output_process_fn_grad, broadcasts_input=s.broadcasts_input,
                           name=s.name)


def _to_host(v):
    """Outputs with every npu tensor brought to the host (which also waits for the kernels that made them)."""
    if isinstance(v, torch.Tensor):
        return _HostTensor(v) if v.device.type != "cpu" else v.detach().clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_to_host(x) for x in v) if type(v) in (list, tuple) else tuple(_to_host(x) for x in v)
    if isinstance(v, dict):
        return {k: _to_host(x) for k, x in v.items()}
    return v


def _cpu_result(v):
    """CPU outputs detached and cloned (a later run must not change them)."""
    if isinstance(v, torch.Tensor):
        return v.detach().clone() if v.layout == torch.strided else v.detach().to_dense()
    if isinstance(v, (list, tuple)):
        return tuple(_cpu_result(x) for x in v) if type(v) not in (list,) else [_cpu_result(x) for x in v]
    if isinstance(v, dict):
        return {k: _cpu_result(x) for k, x in v.items()}
    return v


def _run(fn, *, on_npu: bool):
    """fn()'s outputs (brought to the host), or _Raised. On npu, kernel errors surface at the synchronize inside."""
    try:
        out = fn()
        if on_npu:
            torch.npu.synchronize()
            return _to_host(out)
        return _cpu_result(out)
    except Exception as e:  # noqa: BLE001  (any exception type is a result to compare)
        if on_npu:
            try:
                torch.npu.synchronize()
            except Exception as deferred:  # noqa: BLE001  (an earlier kernel's error, reported at this synchronize)
                return _Raised(e, deferred)
        return _Raised(e)


class Mismatch(Exception):
    pass


def _check(cond, path, msg):
    if not cond:
        raise Mismatch(f"{path}: {msg}")


class _Float32Stats:
    """A CPU output that npu gives in float32 under CUDA's contract (FLOAT32_STATS_OUTPUTS): the CPU's half-precision
    value widened to float32, compared with the half dtype's tolerance."""

    def __init__(self, t):
        self.half = t.dtype
        self.value = t.float()


def _float32_stats(op_name, dtype, result):
    """The CPU result of op_name with its FLOAT32_STATS_OUTPUTS marked, for float16/bfloat16 inputs."""
    indices = FLOAT32_STATS_OUTPUTS.get(op_name, ())
    if dtype not in (torch.float16, torch.bfloat16) or not indices or not isinstance(result, tuple):
        return result
    return tuple(_Float32Stats(t) if i in indices and isinstance(t, torch.Tensor) else t for i, t in enumerate(result))


class _Truth:
    """The float64 truth of a half-precision case: `compute` runs the case on the CPU with every floating input and
    module parameter in float64 (complex128). It runs at the first mismatch that needs it. The comparisons it decided
    in npu's favour are collected in ACCEPTED, for the case's report."""

    def __init__(self, dtype, compute):
        self.dtype = dtype
        self.eps = torch.finfo(dtype).eps
        self.compute = compute
        self.model = compute  # compute, kept for its runs under the rounding model (rounding_error)
        self.result = None
        # Every result judged against the truth in this case: (npu's error, the CPU's error, the mismatch it had, the
        # result's trail, the scale of its errors).
        self.judged = []

    def settle(self):
        """The case's verdict, over every result judged against the truth: npu's largest error must be within
        TRUTH_FACTOR and TRUTH_SLACK_EPS of the CPU's largest. One verdict per case, not one per tensor: a module's
        backward compares some 20 gradients of a few elements each (d_model 4), whose errors are a few units in the
        last place on both sides, and requiring npu to be as close on every one of them failed equally accurate results
        by chance (91 Transformer cases, 2 %, where npu and the CPU differ only in LayerNorm, npu's the more accurate
        alone). A kernel that loses precision is further on its worst result too: fused RNN cells that rounded each
        step to the half dtype failed 20 of their 200 cases so (53 judged tensor by tensor; 2 on the mean)."""
        failing = [m for e_npu, e_cpu, m, _, _ in self.judged
                   if e_npu > TRUTH_FACTOR * e_cpu + TRUTH_SLACK_EPS * self.eps]
        if not failing:
            return
        worst_npu = max(j[0] for j in self.judged)
        worst_cpu = max(j[1] for j in self.judged)
        if worst_npu <= TRUTH_FACTOR * worst_cpu + TRUTH_SLACK_EPS * self.eps:
            ACCEPTED.append(f"{len(failing)} of {len(self.judged)} results each further from float64 than the CPU's; "
                            f"the largest error {worst_npu:.3g} on npu, {worst_cpu:.3g} on the CPU")
            return
        model = self.rounding_error()
        if model is not None and worst_npu <= model:
            ACCEPTED.append(f"the largest error {worst_npu:.3g} on npu ({worst_cpu:.3g} on the CPU) is within the "
                            f"{model:.3g} of float64 with each op's result rounded (_rounding_model)")
            return
        raise Mismatch(f"{failing[0]} (largest over the case's {len(self.judged)} results: {worst_npu:.3g} on npu, "
                       f"{worst_cpu:.3g} on the CPU"
                       + (f", {model:.3g} with each op's result rounded)" if model is not None else ")"))

    def rounding_error(self):
        """The largest error, over the case's judged results and ROUNDING_DRAWS draws, of the float64 truth computed
        with every op's result rounded as the case's dtype rounds (_rounding_model): the error a computation in that
        dtype has on this case. None when such a run raises."""
        worst = 0.0
        for draw in range(ROUNDING_DRAWS):
            def rounded(draw=draw):
                with _rounding_model(self.dtype, draw):
                    return self.model()

            result = _run(rounded, on_npu=False)
            if isinstance(result, _Raised):
                return None
            for _, _, _, trail, scale in self.judged:
                got, ref = _at(result, trail), self.at(trail)
                if got is None or got.shape != ref.shape:
                    return None
                worst = max(worst, _truth_error(got, ref, scale)[0])
        return worst

    def at(self, trail):
        """The truth's tensor at trail (the keys from the result's root), or None (it raised, or has none there)."""
        if self.compute is not None:
            self.result, self.compute = _run(self.compute, on_npu=False), None
        return _at(self.result, trail)


def _at(v, trail):
    """The tensor of a result at trail (the keys from the result's root), or None (it raised, or has none there)."""
    for k in trail:
        if isinstance(v, (list, tuple)) and isinstance(k, int) and k < len(v) or isinstance(v, dict) and k in v:
            v = v[k]
        else:
            return None
    return v if isinstance(v, torch.Tensor) else None


# Comparisons accepted against the float64 truth in the running case, and other notes on how it was judged
# (Worker.case reports and clears them).
ACCEPTED: list = []
NOTES: list = []


def _truth_error(x, truth, scale):
    """x's largest difference from the truth over `scale`, among the elements where both are finite; and the mask of
    the elements where one of them is not finite and they differ (an overflow, a NaN of its own)."""
    x = x.to(truth.dtype)
    same = (x == truth) | (x.isnan() & truth.isnan())
    wrong = ~same & ~(x.isfinite() & truth.isfinite())
    diff = (x - truth).abs().masked_fill(same | wrong, 0)
    return (diff.max().item() / scale if diff.numel() else 0.0), wrong


def _judge_by_truth(got, expected, truth, trail, path, mismatch):
    """Records how close npu's result `got` and the CPU half kernel's `expected` are to the float64 truth, for the
    case's verdict (_Truth.settle); raises Mismatch at once where npu is not finite and the CPU is."""
    ref = truth.at(trail)
    if ref is None or ref.shape != expected.shape:
        raise Mismatch(f"{mismatch} (and no float64 truth to judge by)")
    finite = ref[ref.isfinite()].abs()
    scale = max(finite.max().item() if finite.numel() else 0.0, torch.finfo(torch.float64).tiny)
    e_npu, wrong_npu = _truth_error(got, ref, scale)
    e_cpu, wrong_cpu = _truth_error(expected, ref, scale)
    verdict = f"against float64, error {e_npu:.3g} on npu, {e_cpu:.3g} on the CPU"
    if (wrong_npu & ~wrong_cpu).any():
        raise Mismatch(f"{mismatch}; {int((wrong_npu & ~wrong_cpu).sum())} elements not finite on npu only")
    truth.judged.append((e_npu, e_cpu, f"{mismatch}; {verdict}", trail, scale))
    if e_npu <= TRUTH_FACTOR * e_cpu + TRUTH_SLACK_EPS * truth.eps:
        ACCEPTED.append(f"{path} {verdict}")


def _compare_case(actual, expected, tol, truth=None, **kwargs):
    """_compare over a case's whole result, then the case's verdict against the float64 truth (_Truth.settle)."""
    _compare(actual, expected, tol, truth=truth, **kwargs)
    if truth is not None:
        truth.settle()


def _compare(actual, expected, tol, path="output", values=True, npu_outputs=True, truth=None, trail=()):
    """Raises Mismatch unless the npu result `actual` matches the CPU result `expected`. truth: the case's _Truth (half
    precision), which judges tensors that differ beyond the tolerance; trail: the keys of this part of the result."""
    if isinstance(expected, _Raised) or isinstance(actual, _Raised):
        _check(isinstance(expected, _Raised), path, f"npu raised {actual!r}, the CPU did not")
        _check(isinstance(actual, _Raised), path, f"the CPU raised {expected!r}, npu did not")
        # A composite op whose first kernel fails inside (a dtype its CPU kernel does not implement) and whose next
        # step fails a check at the call raises the second on npu and the first at the next synchronize, both
        # reported: either is the CPU's answer.
        _check(expected.type in actual.types(), path, f"npu raised {actual!r}, the CPU {expected!r}")
        return
    if isinstance(expected, (torch.Tensor, _Float32Stats)):
        _check(isinstance(actual, (_HostTensor, torch.Tensor)), path,
               f"npu gave {type(actual).__name__}, the CPU a tensor")
        if isinstance(actual, _HostTensor):
            got = actual.values
        else:
            _check(not npu_outputs, path, "npu gave a CPU tensor, expected an npu tensor")
            got = actual
        if isinstance(expected, _Float32Stats):
            _check(actual.dtype == torch.float32, path,
                   f"dtype {actual.dtype} on npu, float32 expected (CUDA's statistics for {expected.half} inputs)")
            expected, tol_dtype = expected.value, expected.half
        else:
            _check(actual.dtype == expected.dtype, path, f"dtype {actual.dtype} on npu, {expected.dtype} on the CPU")
            tol_dtype = expected.dtype
        _check(actual.shape == expected.shape, path,
               f"shape {tuple(actual.shape)} on npu, {tuple(expected.shape)} on the CPU")
        if values:
            atol, rtol = tol(tol_dtype)
            try:
                torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, equal_nan=True, check_device=False,
                                           check_layout=False, check_stride=False)
            except AssertionError as e:
                mismatch = f"{path}: " + " ".join(str(e).split("\n")[:4])
                if truth is None or not (expected.is_floating_point() or expected.is_complex()):
                    raise Mismatch(mismatch) from None
                _judge_by_truth(got, expected, truth, trail, path, mismatch)
        return
    if isinstance(expected, (list, tuple)):
        _check(isinstance(actual, (list, tuple)), path, f"npu gave {type(actual).__name__}, the CPU a sequence")
        _check(len(actual) == len(expected), path, f"{len(actual)} outputs on npu, {len(expected)} on the CPU")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, tol, f"{path}[{i}]", values, npu_outputs, truth, trail + (i,))
        return
    if isinstance(expected, dict):
        _check(isinstance(actual, dict) and actual.keys() == expected.keys(), path, "different keys")
        for k in expected:
            _compare(actual[k], expected[k], tol, f"{path}[{k!r}]", values, npu_outputs, truth, trail + (k,))
        return
    _check(not isinstance(actual, (_HostTensor, torch.Tensor)), path,
           f"npu gave a tensor, the CPU {type(expected).__name__}")
    if isinstance(expected, (bool, int, float, complex)) and not isinstance(expected, bool):
        _check(isinstance(actual, (int, float, complex)) and not isinstance(actual, bool), path,
               f"npu gave {actual!r}, the CPU {expected!r}")
        if values:
            atol, rtol = tol(torch.float64 if not isinstance(expected, complex) else torch.complex128)
            _check(actual == expected or (cmath_isnan(actual) and cmath_isnan(expected))
                   or abs(actual - expected) <= atol + rtol * abs(expected), path,
                   f"npu gave {actual!r}, the CPU {expected!r}")
        return
    if values:
        _check(type(actual) is type(expected) and actual == expected, path, f"npu gave {actual!r}, the CPU {expected!r}")


def cmath_isnan(x) -> bool:
    return isinstance(x, (float, complex)) and (x != x)


# ------------------------------------------------------------------------------------------------ the OpInfos


def op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _compare_cpu_skip_reasons(op) -> list[str]:
    """Reasons of the OpInfo's skips of TestCommon.test_compare_cpu (PyTorch's own device-vs-CPU test)."""
    import inspect
    import unittest

    from torch.testing._internal.opinfo.core import DecorateInfo

    reasons = []
    for d in op.decorators:
        if not isinstance(d, DecorateInfo) or d.test_name != "test_compare_cpu" or d.device_type not in (None, "npu"):
            continue
        for dec in d.decorators:
            if dec is unittest.expectedFailure:
                continue
            try:
                reasons.append(str(inspect.getclosurevars(dec).nonlocals.get("reason", "")))
            except TypeError:
                pass
    return reasons


def _uses_set_seed(fn) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def op_mode(op) -> str:
    """'values' (compared with the CPU), 'random' (reproducible under a seed, the CPU's metadata) or 'uninitialized'
    (the CPU's metadata only), from what the OpInfo says of the op."""
    reasons = _compare_cpu_skip_reasons(op)
    if "empty" in op.name.split(".")[-1]:  # empty, empty_like, new_empty, empty_strided, ...: memory as found
        return "uninitialized"
    if any("non-deterministic" in r for r in reasons) or _uses_set_seed(op.op) or (
            op.gradcheck_wrapper is not None and getattr(op.gradcheck_wrapper, "__name__", "") == "wrapper_set_seed"):
        return "random"
    return "values"


def _listed(names, cpu, cuda) -> tuple[list[str], set[str]]:
    """Of names, those the CPU's or CUDA's dtypes hold (CUDA_ONLY_DTYPE_NAMES only where the CPU's do not), and the
    ones only CUDA's hold."""
    candidates = names + CUDA_ONLY_DTYPE_NAMES
    added = {n for n in candidates if getattr(torch, n) in cuda - cpu}
    return [n for n in candidates if n in added or n in names and getattr(torch, n) in cpu], added


def op_dtypes(op) -> tuple[list[str], set[str]]:
    """The forward's dtypes: OpInfo's dtypes (the CPU's) and dtypesIfCUDA; and those only CUDA lists."""
    return _listed(DTYPE_NAMES, op.supported_dtypes("cpu"), op.supported_dtypes("cuda"))


def op_grad_dtypes(op) -> tuple[list[str], set[str]]:
    """The gradients' dtypes (backward dtypes the forward supports too), on the CPU or CUDA; and those only CUDA's."""
    if not op.supports_autograd:
        return [], set()
    return _listed(GRAD_DTYPE_NAMES,
                   *(op.supported_backward_dtypes(d) & op.supported_dtypes(d) for d in ("cpu", "cuda")))


def tolerance_fn(op, dtype):
    """(atol, rtol) per output dtype: assert_close's defaults, or the OpInfo's tolerance overrides (for the CPU or any
    device) when larger."""
    from torch.testing._comparison import default_tolerances
    from torch.testing._internal.common_device_type import toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    overrides = []
    for d in op.decorators:
        decs = [d]
        if isinstance(d, DecorateInfo):
            if d.device_type not in (None, "cpu") or (d.dtypes is not None and dtype not in d.dtypes):
                continue
            decs = d.decorators
        overrides += [x for x in decs if isinstance(x, toleranceOverride)]

    def tol(out_dtype):
        rtol, atol = default_tolerances(torch.empty(0, dtype=out_dtype))
        for o in overrides:
            t = o.d.get(out_dtype) or o.d.get(dtype)
            if t is not None:
                atol, rtol = max(atol, t.atol), max(rtol, t.rtol)
        return atol, rtol

    return tol


def _flatten_tensors(v, out):
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _flatten_tensors(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _flatten_tensors(x, out)
    return out


def _wide_dtype(dtype, reference_of=None):
    """The dtype of the float64 truth for dtype: float64 for floating, complex128 for complex, itself otherwise. With
    reference_of (a case's dtype that the CPU has no kernel for): the dtype of the CPU's reference for that case
    (REFERENCE_DTYPE_NAMES) for the half dtypes and the case's own, itself for others (indices stay integers) and for
    dtypes with no wider one (complex64)."""
    if reference_of is not None:
        name = str(dtype).removeprefix("torch.")
        return (getattr(torch, REFERENCE_DTYPE_NAMES.get(name, name))
                if name in TRUTH_DTYPE_NAMES or dtype == reference_of else dtype)
    return torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else dtype


def _widen(v, memo, reference_of=None):
    """v with its tensors in _wide_dtype (every floating one in float64 and complex one in complex128, or as for the
    reference of a case in reference_of), same values, requires_grad kept (one copy per tensor, in memo, so a tensor
    passed twice stays one tensor), and dtypes given as arguments likewise."""
    if isinstance(v, torch.Tensor):
        if id(v) not in memo:
            wide = _wide_dtype(v.dtype, reference_of)
            memo[id(v)] = (v, v if wide == v.dtype else v.detach().to(wide).requires_grad_(v.requires_grad))
        return memo[id(v)][1]  # memo keeps v alive, so ids stay unique
    if isinstance(v, torch.dtype):
        return _wide_dtype(v, reference_of)
    if isinstance(v, list):
        return [_widen(x, memo, reference_of) for x in v]
    if isinstance(v, tuple):
        items = [_widen(x, memo, reference_of) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else type(v)(items)  # a namedtuple, or a tuple (torch.Size)
    if isinstance(v, dict):
        return {k: _widen(x, memo, reference_of) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # options objects (an acc_dtype to widen)
        return dataclasses.replace(v, **{f.name: _widen(getattr(v, f.name), memo, reference_of)
                                         for f in dataclasses.fields(v) if f.init})
    return v


def _rounded(v, dtype):
    """A result of the CPU's reference for a case in dtype with its tensors in the reference dtype brought back to
    dtype (rounded; integers truncated, the reference's values of them being whole), and for complex32 its float32
    ones (absolute values, angles) to float16: the dtypes CUDA's kernels, and the Meta kernels, give."""
    narrow = {_wide_dtype(dtype, dtype): dtype}
    if dtype == torch.complex32:
        narrow[torch.float32] = torch.float16
    if isinstance(v, torch.Tensor):
        return v.to(narrow[v.dtype]) if v.dtype in narrow else v
    if isinstance(v, (list, tuple)):
        return type(v)(_rounded(x, dtype) for x in v)
    if isinstance(v, dict):
        return {k: _rounded(x, dtype) for k, x in v.items()}
    return v


def _no_kernel(result) -> bool:
    """Whether a CPU result is the error of a kernel the CPU lacks for the dtype (NotImplementedError: "... not
    implemented for 'Half'"; a RuntimeError naming the dtype: the FFTs' "Unsupported dtype Half" and "MKL FFT doesn't
    support tensors of type: Half", nansum's "does not support complex inputs"), not one of the sample's own (an
    in-place broadcast)."""
    return isinstance(result, _Raised) and (result.type is NotImplementedError or result.type is RuntimeError and (
        "type" in result.message or "complex" in result.message))


def _cpu_reference(dtype, compute):
    """The CPU's result for a case in a dtype it has no kernel for and npu computes as CUDA's kernels do: compute()
    (the case with its inputs in the reference dtype, REFERENCE_DTYPE_NAMES) rounded to dtype, or what it raised."""
    NOTES.append(f"the CPU has no {str(dtype).removeprefix('torch.')} kernel: compared with its result in "
                 f"{str(_wide_dtype(dtype, dtype)).removeprefix('torch.')}, rounded")
    wider = _run(compute, on_npu=False)
    return wider if isinstance(wider, _Raised) else _rounded(wider, dtype)


def _op_reference(dtype, compute, raised):
    """_cpu_reference for an OpInfo case in a dtype only CUDA lists, where the CPU raised `raised`. A different error
    in the wider dtype is the sample's own (an in-place broadcast), for npu to raise too. The same error means the CPU
    cannot compute the case in any dtype (ATen refuses complex nansum on every device but CUDA): CUDA computes it, so
    there is no reference to pass by, and a refusal on npu fails, as one where the CPU's reference exists does."""
    expected = _cpu_reference(dtype, compute)
    if isinstance(expected, _Raised) and (expected.type, expected.message) == (raised.type, raised.message):
        raise Mismatch(f"CUDA lists {str(dtype).removeprefix('torch.')}; the CPU raised {expected!r} in the wider "
                       f"dtype too: no reference")
    return expected


def _wide_sample(s, memo, reference_of=None):
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(_widen(s.input, memo, reference_of), args=_widen(s.args, memo, reference_of),
                       kwargs=_widen(s.kwargs, memo, reference_of), output_process_fn_grad=s.output_process_fn_grad,
                       broadcasts_input=s.broadcasts_input, name=s.name)


def _grad_outputs(outs, dtypes):
    """Seeded random grad_outputs made on the CPU, the same on both sides: in `dtypes` (the CPU run's outputs' dtypes,
    which the float64 truth reuses so that it differentiates with the same values), then as each output."""
    gen = torch.Generator().manual_seed(SAMPLE_SEED)
    if len(dtypes) != len(outs):
        dtypes = [t.dtype for t in outs]
    return [torch.randn(t.shape, dtype=d, generator=gen).to(t.device, t.dtype) for t, d in zip(outs, dtypes)]


def _sample_tensors(s):
    return _flatten_tensors([s.input, s.args, s.kwargs], [])


def _devices_named(v, out) -> set:
    """Device types of the tensors and devices in a sample (tensors as the (type, True))."""
    if isinstance(v, torch.Tensor):
        out.add((v.device.type, v.dim() > 0))
    elif isinstance(v, torch.device):
        out.add((v.type, None))
    elif isinstance(v, str) and (v == "cpu" or _is_npu_device(v)):
        out.add((torch.device(v).type, None))
    elif isinstance(v, (list, tuple)):
        for x in v:
            _devices_named(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _devices_named(x, out)
    return out


def _expects_npu_outputs(s) -> bool:
    """Whether the op's tensor outputs belong on npu: the sample involves npu and names no CPU device (arange(5) with
    no device, empty_like(x, device="cpu") and x.to("cpu") rightly give CPU tensors)."""
    named = _devices_named([s.input, s.args, s.kwargs], set())
    return any(t == "npu" for t, _ in named) and ("cpu", None) not in named


def _mixes_devices(s) -> bool:
    """Whether the sample holds tensors (other than CPU scalars) off npu next to npu ones: errors that only a non-CPU
    device can have (the CPU reference has all its tensors on the CPU)."""
    named = _devices_named([s.input, s.args, s.kwargs], set())
    return any(t == "npu" for t, _ in named) and any(t != "npu" and dim for t, dim in named if dim is not None)


# ------------------------------------------------------------------------------------------------ the ModuleInfos


def module_tolerance_fn(info, dtype):
    """(atol, rtol) per output dtype: assert_close's defaults with test_cpu_gpu_parity's atol, or the ModuleInfo's
    tolerance and precision overrides for that test when larger."""
    from torch.testing._comparison import default_tolerances
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    atol_o, rtol_o = MODULE_PARITY_ATOL.get(str(dtype).removeprefix("torch."), 0.0), 0.0
    for d in info.decorators:
        if not isinstance(d, DecorateInfo) or d.test_name not in (None, "test_cpu_gpu_parity") or (
                d.device_type not in (None, "npu")) or (d.dtypes is not None and dtype not in d.dtypes):
            continue
        for dec in d.decorators:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                atol_o, rtol_o = max(atol_o, dec.d[dtype].atol), max(rtol_o, dec.d[dtype].rtol)
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                atol_o = max(atol_o, dec.d[dtype])

    def tol(out_dtype):
        rtol, atol = default_tolerances(torch.empty(0, dtype=out_dtype))
        return max(atol, atol_o), max(rtol, rtol_o)

    return tol


def _fresh(v, device):
    """A copy of a module input on device: tensors detached and copied (keeping requires_grad), so a run that writes
    its inputs leaves the ModuleInput as it was."""
    if isinstance(v, torch.Tensor):
        return v.detach().to(device, copy=True).requires_grad_(v.requires_grad)
    if isinstance(v, (list, tuple)):
        return type(v)(_fresh(x, device) for x in v) if type(v) in (list, tuple) else type(v)(
            *(_fresh(x, device) for x in v))
    if isinstance(v, dict):
        return {k: _fresh(x, device) for k, x in v.items()}
    return v


def _build_module(info, mi, dtype, training, device, cpu_state, wide=None):
    """The module on device with its forward inputs. On the CPU its state dict is kept in cpu_state["state"]; on
    npu the module loads it, so both sides start from the same parameters and buffers (unless the CPU could not build
    the module: then npu must fail as the CPU did). wide (torch.float64: the float64 truth; torch.float32): the CPU's
    module (its state loaded) and inputs widened to that dtype (complex ones to its complex counterpart)."""
    args = _fresh(mi.constructor_input.args, device)
    kwargs = _fresh(mi.constructor_input.kwargs, device)
    torch.manual_seed(SAMPLE_SEED)
    m = info.module_cls(*args, **kwargs).to(dtype).to(device)
    m.train(training)
    f_args = _fresh(mi.forward_input.args, device)
    f_kwargs = _fresh(mi.forward_input.kwargs, device)
    if info.is_lazy:  # a lazy module makes its parameters at its first forward
        with torch.no_grad():
            m(*_fresh(f_args, device), **_fresh(f_kwargs, device))
    if wide is not None:
        if "state" in cpu_state:
            m.load_state_dict(cpu_state["state"])
        reference_of = dtype if wide == torch.float32 else None
        m.to(_wide_dtype(dtype, reference_of))
        memo = {}
        f_args, f_kwargs = _widen(f_args, memo, reference_of), _widen(f_kwargs, memo, reference_of)
    elif device == "cpu":
        cpu_state["state"] = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                              for k, v in m.state_dict().items()}
    elif "state" in cpu_state:
        m.load_state_dict(cpu_state["state"])
    return m, f_args, f_kwargs


@functools.cache
def _rounding_model_class():
    """The rounding model's TorchDispatchMode class (made once torch is imported: the master never imports it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class RoundingModel(TorchDispatchMode):
        """Floating point's standard model over a float64 run: each op's floating result multiplied by 1 + d, d
        uniform in [-u, u] with u the unit roundoff of dtype (seeded by draw), as if every op rounded its result to
        dtype. Views are left alone (no arithmetic, and scaling one would scale its base), and so are the ops in
        EXACT_OPS, whose results are values of their inputs (copies, selections) or new data (creation, random numbers
        drawn in the dtype): nothing rounds them."""

        EXACT_OPS = frozenset({
            "_to_copy", "clone", "copy_", "contiguous", "cat", "stack", "index", "index_select", "gather",
            "scatter", "index_put_", "index_put", "masked_fill", "masked_fill_", "where", "constant_pad_nd",
            "slice_scatter", "select_scatter", "as_strided_scatter", "zero_", "fill_", "zeros", "ones", "full",
            "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
            "empty", "empty_strided", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "relu", "threshold_backward",
            "max", "min", "amax", "amin", "maximum", "minimum", "sort", "topk", "repeat", "expand_copy",
            "permute_copy", "transpose_copy", "t_copy", "view_copy", "_unsafe_view", "split_with_sizes_copy",
            "unbind_copy", "neg", "abs", "rand", "randn", "normal", "uniform_", "normal_", "bernoulli"})

        def __init__(self, dtype, draw):
            super().__init__()
            self.u = torch.finfo(dtype).eps / 2
            self.gen = torch.Generator().manual_seed(SAMPLE_SEED + 1 + draw)

        def _round(self, t):
            # A complex result rounds its real and imaginary parts each on its own, as complex32 stores them.
            parts = torch.view_as_real(t) if t.is_complex() else t
            d = (torch.rand(parts.shape, dtype=parts.dtype, generator=self.gen) * 2 - 1) * self.u
            rounded = parts * (1 + d)
            return torch.view_as_complex(rounded) if t.is_complex() else rounded

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in self.EXACT_OPS:
                return out
            outs = out if isinstance(out, (tuple, list)) else (out,)
            rounded = []
            for r, t in zip(func._schema.returns, outs):
                if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
                    rounded.append(t)
                elif r.alias_info is None:
                    rounded.append(self._round(t))
                elif r.alias_info.is_write:
                    t.copy_(self._round(t))  # an in-place or out= result: its stored value is the rounded one
                    rounded.append(t)
                else:
                    rounded.append(t)  # a view
            if not isinstance(out, (tuple, list)):
                return rounded[0]
            return type(out)(rounded) if len(rounded) == len(outs) else out

    return RoundingModel


def _rounding_model(dtype, draw):
    """The rounding model for dtype's unit roundoff, seeded by draw (ROUNDING_DRAWS)."""
    return _rounding_model_class()(dtype, draw)


def _module_forward(info, mi, dtype, training, device, cpu_state, wide=None):
    m, args, kwargs = _build_module(info, mi, dtype, training, device, cpu_state, wide)
    torch.manual_seed(SAMPLE_SEED)
    out = m(*args, **kwargs)
    return {"outputs": out, "state after": dict(m.state_dict())}


def _module_backward(info, mi, dtype, training, device, cpu_state, wide=None):
    """Gradients of the inputs and the parameters for seeded random grad_outputs (made on the CPU, the same on both
    sides) of every differentiable output."""
    from torch.utils._pytree import tree_leaves

    m, args, kwargs = _build_module(info, mi, dtype, training, device, cpu_state, wide)
    torch.manual_seed(SAMPLE_SEED)
    out = m(*args, **kwargs)
    outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs:
        return "no differentiable outputs"
    grad_outputs = _grad_outputs(outs, cpu_state.setdefault("grad dtypes", [t.dtype for t in outs]))
    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    params = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(outs, inputs + [p for _, p in params], grad_outputs, allow_unused=True)
    return {"inputs": list(grads[:len(inputs)]), "parameters": dict(zip((n for n, _ in params), grads[len(inputs):]))}


# ------------------------------------------------------------------------------------------------ cases

SAMPLE_SEED = 20240601


class Worker:
    def __init__(self, emit):
        self.emit = emit  # emit(dict): one protocol message
        self.added = set()  # (kind, dtype) of the running op's cases that only CUDA's dtypes list

    # -- plumbing

    def case(self, key, skip, body):
        if key in skip:
            return
        self.emit({"start": key})
        t0 = time.monotonic()
        ACCEPTED.clear()
        NOTES.clear()
        try:
            body()
            status, detail = "pass", "; ".join(dict.fromkeys(NOTES + ACCEPTED))
        except Mismatch as e:
            status, detail = "fail", str(e)
        except Exception as e:  # noqa: BLE001  (a harness-level error in this case)
            status, detail = "fail", f"{type(e).__name__}: {str(e).strip()[:500]}"
        usable = self.device_usable()
        if not usable:
            status, detail = "fail", (detail + "; " if detail else "") + "npu unusable afterwards"
        self.emit({"result": key, "status": status, "detail": detail[:2000], "seconds": round(time.monotonic() - t0, 3),
                   "by_truth": status == "pass" and bool(ACCEPTED),
                   "added": suite_of(key) == "op" and (split_key(key)[3], split_key(key)[2]) in self.added})
        if not usable:
            raise SystemExit(3)  # the master starts a fresh worker for the rest

    @staticmethod
    def device_usable() -> bool:
        try:
            torch.npu.synchronize()
            x = torch.arange(4.0, device="npu") * 2
            return x.sum().item() == 12.0
        except Exception:  # noqa: BLE001
            return False

    def samples(self, op, dtype, requires_grad, key_prefix, skip):
        """The op's samples (generated on npu, seeded); a generator failure becomes a failing case."""
        torch.manual_seed(SAMPLE_SEED)
        out = []
        try:
            it = op.sample_inputs("npu", dtype, requires_grad=requires_grad,
                                  include_conjugated_inputs=op.test_conjugated_samples and dtype.is_complex)
            for s in it:
                out.append(s)
        except Exception as e:  # noqa: BLE001
            msg = f"generating sample {len(out)} on npu raised {type(e).__name__}: {str(e).strip()[:300]}"
            key = f"{key_prefix}|{len(out)}"

            def fail():
                raise Mismatch(msg)

            self.case(key, skip, fail)
        return out

    # -- forward

    def forward(self, op, dtype_name, skip):
        dtype = getattr(torch, dtype_name)
        mode = op_mode(op)
        tol = tolerance_fn(op, dtype)
        name = op_id(op)
        samples = self.samples(op, dtype, False, f"{name}|function|{dtype_name}|forward", skip)
        variants = [("function", op.op), ("method", op.method_variant), ("inplace", op.inplace_variant)]
        for i, s in enumerate(samples):
            cpu_ref = {}  # the CPU function result of this sample, for out=

            for variant, fn in variants:
                if fn is None:
                    continue
                key = case_key(name, variant, dtype_name, "forward", i)
                self.case(key, skip, lambda: self.forward_case(op, fn, variant, s, mode, tol, cpu_ref, dtype))
            if op.supports_out:
                key = case_key(name, "out", dtype_name, "forward", i)
                if key not in skip and self.out_applicable(op, s, cpu_ref):
                    self.case(key, skip, lambda: self.out_case(op, s, mode, tol, cpu_ref, dtype))

    @staticmethod
    def truth(dtype, s, call):
        """The _Truth of a half-precision case: call on the CPU replica of s widened to float64; None for others."""
        if str(dtype).removeprefix("torch.") not in TRUTH_DTYPE_NAMES:
            return None

        def compute():
            wide = _wide_sample(Replicator(to_cpu=True).sample(s), {})
            torch.manual_seed(SAMPLE_SEED)
            return call(wide)

        return _Truth(dtype, compute)

    def forward_case(self, op, fn, variant, s, mode, tol, cpu_ref, dtype):
        inplace = variant == "inplace"
        process = (lambda r: r) if inplace else s.output_process_fn_grad

        def call(sample, check_self=False):
            r = fn(sample.input, *sample.args, **sample.kwargs)
            if check_self and not (r is sample.input):
                raise Mismatch("the in-place variant did not return its input")
            r = process(r)
            return (r, sample.input) if inplace else r

        cpu = Replicator(to_cpu=True).sample(s)
        torch.manual_seed(SAMPLE_SEED)
        expected = _run(lambda: call(cpu), on_npu=False)
        if ("forward", str(dtype).removeprefix("torch.")) in self.added and _no_kernel(expected):
            expected = _op_reference(dtype, lambda: self.on_reference(cpu, dtype, call), expected)
        if variant == "function":
            cpu_ref["result"] = expected
        if mode == "random":
            first = self.npu_run(s, lambda x: call(x, inplace))
            second = self.npu_run(s, lambda x: call(x, inplace))
            _compare(first, expected, tol, values=False, npu_outputs=_expects_npu_outputs(s))
            _compare(second, _as_host(first), lambda _: (0.0, 0.0), path="second npu run vs first",
                     npu_outputs=_expects_npu_outputs(s))
            return
        actual = self.npu_run(s, lambda x: call(x, inplace))
        if not inplace:
            expected = _float32_stats(op.name, dtype, expected)
        _compare_case(actual, expected, tol, values=mode == "values", npu_outputs=_expects_npu_outputs(s),
                 truth=self.truth(dtype, s, call))

    @staticmethod
    def on_reference(cpu, dtype, call):
        """call on the CPU replica cpu of a case's sample with its tensors in the reference dtype of dtype."""
        wide = _wide_sample(cpu, {}, reference_of=dtype)
        torch.manual_seed(SAMPLE_SEED)
        return call(wide)

    @staticmethod
    def npu_run(s, call):
        """call() on fresh npu copies of the sample (so runs that write their inputs leave s as it was)."""
        fresh = Replicator(to_cpu=False).sample(s)
        torch.manual_seed(SAMPLE_SEED)
        return _run(lambda: call(fresh), on_npu=True)

    @staticmethod
    def out_applicable(op, s, cpu_ref):
        r = cpu_ref.get("result")
        if isinstance(r, torch.Tensor):
            return True
        return isinstance(r, (tuple, list)) and len(r) > 0 and all(isinstance(t, torch.Tensor) for t in r)

    def out_case(self, op, s, mode, tol, cpu_ref, dtype):
        template = cpu_ref["result"]
        # The function's raw results give the out= tensors' dtypes and shapes (output_process_fn_grad may have changed
        # them: only the raw form is used for out=).
        cpu = Replicator(to_cpu=True).sample(s)
        torch.manual_seed(SAMPLE_SEED)
        raw = _run(lambda: op(cpu.input, *cpu.args, **cpu.kwargs), on_npu=False)
        reference = ("forward", str(dtype).removeprefix("torch.")) in self.added and _no_kernel(raw)
        if reference:
            raw = _op_reference(dtype, lambda: self.on_reference(
                cpu, dtype, lambda x: op(x.input, *x.args, **x.kwargs)), raw)
        if isinstance(raw, _Raised):
            raise Mismatch(f"the CPU function raised {raw!r} on a second run")
        del template
        multi = isinstance(raw, (tuple, list))
        like = list(raw) if multi else [raw]

        # The same known values on both sides, so an op that leaves out= untouched (as ATen's fft_ihfftn does for a
        # single dimension) leaves the same values.
        # widen: None, or the reference's or the truth's dtypes for the out= tensors (dtype -> dtype).
        def outs(device, resized, widen):
            ts = [torch.full((0,) if resized else t.shape, 3, dtype=widen(t.dtype) if widen else t.dtype,
                             device=device) for t in like]
            return (ts if isinstance(raw, list) else tuple(ts)) if multi else ts[0]

        def call(sample, device, resized, widen=None):
            out = outs(device, resized, widen)
            r = op(sample.input, *sample.args, **sample.kwargs, out=out)
            # Ops whose out= is a tensor list return None; the others return their out tensors.
            if r is not None:
                returned = list(r) if multi else [r]
                given = list(out) if multi else [out]
                if len(returned) != len(given) or any(a is not b for a, b in zip(returned, given)):
                    raise Mismatch(f"out= on {device} did not return the out tensors")
            return out, r is None

        for resized in (False, True):
            what = "zero-size out=" if resized else "out="
            torch.manual_seed(SAMPLE_SEED)
            expected = _run(lambda: call(cpu, "cpu", resized), on_npu=False)
            if reference:
                expected = _op_reference(dtype, lambda: self.on_reference(
                    cpu, dtype, lambda x: call(x, "cpu", resized, lambda d: _wide_dtype(d, dtype))), expected)
            if mode == "random":
                first = self.npu_run(s, lambda x: call(x, "npu", resized))
                second = self.npu_run(s, lambda x: call(x, "npu", resized))
                _compare(first, expected, tol, path=what, values=False)
                _compare(second, _as_host(first), lambda _: (0.0, 0.0), path=f"{what} second npu run vs first")
            else:
                actual = self.npu_run(s, lambda x: call(x, "npu", resized))
                _compare_case(actual, expected, tol, path=what, values=mode == "values",
                         truth=self.truth(dtype, s, lambda x: call(x, "cpu", resized, _wide_dtype)))

    # -- gradients

    def grad(self, op, dtype_name, skip):
        dtype = getattr(torch, dtype_name)
        mode = op_mode(op)
        tol = tolerance_fn(op, dtype)
        name = op_id(op)
        samples = self.samples(op, dtype, True, f"{name}|function|{dtype_name}|grad", skip)
        for i, s in enumerate(samples):
            if not any(t.requires_grad for t in _sample_tensors(s)):
                continue
            key = case_key(name, "function", dtype_name, "grad", i)
            self.case(key, skip, lambda: self.grad_case(op, s, mode, tol, dtype))

    @staticmethod
    def grads(op, s, inputs, on_npu, like):
        """The gradients of inputs; like["dtypes"]: the dtypes of the grad_outputs, set by the first (CPU) run."""

        def fn():
            torch.manual_seed(SAMPLE_SEED)
            out = op.gradcheck_wrapper(op.get_op(), s.input, *s.args, **s.kwargs)
            out = s.output_process_fn_grad(out)
            outs = [t for t in _flatten_tensors(out, []) if t.requires_grad]
            if not outs:
                return "no differentiable outputs"
            grad_outputs = _grad_outputs(outs, like.setdefault("dtypes", [t.dtype for t in outs]))
            return list(torch.autograd.grad(outs, inputs, grad_outputs, allow_unused=True))

        return _run(fn, on_npu=on_npu)

    def grad_case(self, op, s, mode, tol, dtype):
        rep = Replicator(to_cpu=True, requires_grad=True)
        cpu = rep.sample(s)
        npu_inputs = [t for t in _sample_tensors(s) if t.requires_grad]
        cpu_inputs = [rep.tensor(t) for t in npu_inputs]
        like = {}
        expected = self.grads(op, cpu, cpu_inputs, False, like)
        actual = self.grads(op, s, npu_inputs, True, like)
        if ("grad", str(dtype).removeprefix("torch.")) in self.added and _no_kernel(expected):
            # The grad_outputs' dtypes come from npu's run (the CPU's raised first): the reference differentiates the
            # same values.
            memo = {}
            ref = _wide_sample(cpu, memo, reference_of=dtype)
            expected = _op_reference(dtype, lambda: self.grads(
                op, ref, [_widen(t, memo, dtype) for t in cpu_inputs], False, like), expected)
        if mode == "random":
            again = self.grads(op, s, npu_inputs, True, like)
            _compare(actual, expected, tol, path="grads", values=False)
            _compare(again, _as_host(actual), lambda _: (0.0, 0.0), path="grads of a second npu run vs first")
            return

        def truth():
            # The CPU replica widened, differentiated with respect to the widened inputs.
            memo = {}
            wide = _wide_sample(cpu, memo)
            return self.grads(op, wide, [_widen(t, memo) for t in cpu_inputs], False, like)

        _compare_case(actual, expected, tol, path="grads", values=mode == "values",
                 truth=_Truth(dtype, truth) if str(dtype).removeprefix("torch.") in TRUTH_DTYPE_NAMES else None)

    # -- error inputs

    def errors(self, op, skip):
        name = op_id(op)
        torch.manual_seed(SAMPLE_SEED)
        try:
            inputs = list(op.error_inputs("npu"))
        except Exception as e:  # noqa: BLE001
            msg = f"generating error inputs on npu raised {type(e).__name__}: {str(e).strip()[:300]}"

            def fail():
                raise Mismatch(msg)

            self.case(case_key(name, "function", "none", "error", 0), skip, fail)
            return
        for i, ei in enumerate(inputs):
            self.case(case_key(name, "function", "none", "error", i), skip, lambda: self.error_case(op, ei))

    @staticmethod
    def error_case(op, ei):
        s = ei.sample_input
        cpu = Replicator(to_cpu=True).sample(s)
        on_cpu = _run(lambda: op(cpu.input, *cpu.args, **cpu.kwargs), on_npu=False)
        # The CPU's error; for an error only a non-CPU device can have (a device mismatch), the OpInfo's. Where the
        # CPU raises nothing for an error input (a Python-level error input both accept), npu must not either.
        expected = on_cpu.type if isinstance(on_cpu, _Raised) else ei.error_type if _mixes_devices(s) else None
        on_npu = _run(lambda: op(s.input, *s.args, **s.kwargs), on_npu=True)
        if expected is None:
            if isinstance(on_npu, _Raised):
                raise Mismatch(f"npu raised {on_npu!r}, the CPU nothing")
            return
        if not isinstance(on_npu, _Raised):
            raise Mismatch(f"npu raised nothing, expected {expected.__name__}"
                           + (f" (CPU: {on_cpu!r})" if isinstance(on_cpu, _Raised) else ""))
        if on_npu.type is not expected:
            raise Mismatch(f"npu raised {on_npu!r}, expected {expected.__name__}"
                           + (f" (CPU: {on_cpu!r})" if isinstance(on_cpu, _Raised) else ""))

    # -- one op

    def run_op(self, op, kinds, dtypes, grad_dtypes, skip):
        forward_dtypes, forward_added = op_dtypes(op)
        backward_dtypes, backward_added = op_grad_dtypes(op)
        self.added = {("forward", d) for d in forward_added} | {("grad", d) for d in backward_added}
        if "forward" in kinds:
            for d in forward_dtypes:
                if dtypes is None or d in dtypes:
                    self.forward(op, d, skip)
        if "grad" in kinds:
            for d in backward_dtypes:
                if (dtypes is None or d in dtypes) and (grad_dtypes is None or d in grad_dtypes):
                    self.grad(op, d, skip)
        if "error" in kinds and op.error_inputs_func is not None:
            self.errors(op, skip)

    # -- one module (ModuleInfo)

    def run_module(self, info, kinds, dtypes, skip):
        modes = MODULE_MODES if info.train_and_eval_differ else MODULE_MODES[:1]
        listed = sorted(info.supported_dtypes("npu"), key=str)
        halves = [getattr(torch, n) for n in MODULE_HALF_DTYPE_NAMES]
        for mode in modes:
            for dtype in listed + [d for d in halves if d not in listed]:
                dtype_name = str(dtype).removeprefix("torch.")
                if dtypes is not None and dtype_name not in dtypes:
                    continue
                tol = module_tolerance_fn(info, dtype)
                inputs = self.module_inputs(info, dtype, mode == "train",
                                            module_case_key(info.name, mode, dtype_name, "forward", ""), skip)
                for i, mi in enumerate(inputs):
                    if mi.forward_input is None:
                        continue
                    for kind in MODULE_KINDS:
                        if kind in kinds:
                            key = module_case_key(info.name, mode, dtype_name, kind, i)
                            self.case(key, skip, lambda: self.module_case(info, mi, dtype, mode == "train", kind, tol))

    def module_inputs(self, info, dtype, training, key_prefix, skip):
        """The module's inputs, made on the CPU (seeded) as test_cpu_gpu_parity makes them; a failure to make them
        becomes a failing case."""
        torch.manual_seed(SAMPLE_SEED)
        try:
            return list(info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True,
                                                training=training))
        except Exception as e:  # noqa: BLE001
            msg = f"making the module inputs raised {type(e).__name__}: {str(e).strip()[:300]}"

            def fail():
                raise Mismatch(msg)

            self.case(key_prefix + "0", skip, fail)
            return []

    @staticmethod
    def module_case(info, mi, dtype, training, kind, tol):
        """The module on the CPU, then on npu with the CPU module's state dict: their forward results (outputs and the
        state after the forward, e.g. running statistics) or their gradients must match."""
        cpu_state = {}
        run = _module_forward if kind == "forward" else _module_backward
        expected = _run(lambda: run(info, mi, dtype, training, "cpu", cpu_state), on_npu=False)
        actual = _run(lambda: run(info, mi, dtype, training, "npu", cpu_state), on_npu=True)
        if str(dtype).removeprefix("torch.") not in TRUTH_DTYPE_NAMES:
            _compare(actual, expected, tol, path=kind)
            return
        if isinstance(expected, _Raised) and expected.type is NotImplementedError and not isinstance(actual, _Raised):
            # The CPU has no kernel for the dtype; npu computes it as CUDA's kernels do, in float32 rounded once: the
            # reference is the CPU's result with float32 inputs and parameters, rounded to the dtype.
            expected = _cpu_reference(dtype, lambda: run(info, mi, dtype, training, "cpu", cpu_state,
                                                         wide=torch.float32))
        truth = _Truth(dtype, lambda: run(info, mi, dtype, training, "cpu", cpu_state, wide=torch.float64))
        _compare_case(actual, expected, tol, path=kind, truth=truth)


def _as_host(v):
    """A result already brought to the host, as the expected side of a comparison (npu results compare as tensors)."""
    if isinstance(v, _HostTensor):
        return v.values
    if isinstance(v, (list, tuple)):
        return type(v)(_as_host(x) for x in v) if type(v) in (list, tuple) else tuple(_as_host(x) for x in v)
    if isinstance(v, dict):
        return {k: _as_host(x) for k, x in v.items()}
    return v


def worker_main():
    """Requests on stdin (JSON: ops by index, kinds, dtypes, case keys to skip); messages on the protocol fd."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the ops print goes to the worker's log, not into the protocol
    import warnings

    warnings.simplefilter("ignore")
    _import_torch()
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db

    def emit(msg):
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    worker = Worker(emit)
    emit({"ready": os.getpid()})
    for line in sys.stdin:
        req = json.loads(line)
        if req["suite"] == "module":
            worker.run_module(module_db[req["index"]], req["kinds"], req["dtypes"], set(req["skip"]))
        else:
            worker.run_op(op_db[req["index"]], req["kinds"], req["dtypes"], req["grad_dtypes"], set(req["skip"]))
        emit({"done": req["index"]})


# ================================================================================================ master side


@dataclass
class Results:
    status: dict = field(default_factory=dict)  # case key -> "pass" | "fail" | "crash" | "hang"
    detail: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    by_truth: set = field(default_factory=set)  # passing cases that needed the float64 truth
    added: set = field(default_factory=set)  # OpInfo cases in dtypes only CUDA's list (dtypesIfCUDA beyond dtypes)


def list_cases(ops: list[str] | None, modules: list[str] | None):
    """(suite, index, id) of the OpInfos and ModuleInfos to run (None: none; "all": the whole database; else those
    named), reading the databases in a child (the master stays free of torch). Module ids carry MODULE_PREFIX."""
    code = ("import json, torch\n"
            "from torch.testing._internal.common_methods_invocations import op_db\n"
            "from torch.testing._internal.common_modules import module_db\n"
            "print(json.dumps([[o.name + ('.' + o.variant_test_name if o.variant_test_name else '') for o in op_db],"
            " [m.name for m in module_db]]))\n")
    env = dict(os.environ, SOFTNPU_DEVICE_COUNT="1")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    op_ids, module_ids = json.loads(out.strip().splitlines()[-1])
    work = []
    for suite, names, ids, what in (("op", ops, op_ids, "OpInfos"), ("module", modules, module_ids, "ModuleInfos")):
        if names is None:
            continue
        if names != ["all"]:
            unknown = set(names) - set(ids)
            if unknown:
                raise SystemExit(f"unknown {what}: {sorted(unknown)}")
        prefix = MODULE_PREFIX if suite == "module" else ""
        work += [(suite, i, prefix + n) for i, n in enumerate(ids) if names == ["all"] or n in set(names)]
    return work


class WorkerProcess:
    def __init__(self, log_path: Path):
        self.log = open(log_path, "a")
        env = dict(os.environ)
        env.setdefault("SOFTNPU_CORES", "1")
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # ATen's warnings from kernels, by the thousand
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     cwd=str(REPO), env=env)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = b""

    def read(self, timeout):
        """The next message, None at exit, or "timeout" (unbuffered reads: select must see every byte not yet read)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return "timeout"
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, req):
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def exit_description(self) -> str:
        rc = self.proc.wait()
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit status {rc}"


def run_cases(work, kinds, dtypes, grad_dtypes, jobs, log_dir: Path, progress) -> Results:
    results = Results()
    lock = threading.Lock()
    todo: queue.Queue = queue.Queue()
    for item in work:
        todo.put(item)

    def slot(n):
        proc = None
        log_path = log_dir / f"worker{n}.log"
        while True:
            try:
                suite, index, name = todo.get_nowait()
            except queue.Empty:
                break
            done_here: set = set()
            while True:  # until the op completes, restarting the worker after a crash
                if proc is None:
                    proc = WorkerProcess(log_path)
                    msg = proc.read(120)
                    if not isinstance(msg, dict) or "ready" not in msg:
                        raise RuntimeError(f"worker failed to start: {msg!r}; see {log_path}")
                with lock:
                    skip = [k for k in results.status if split_key(k)[0] == name]
                suite_kinds = [k for k in kinds if k in (MODULE_KINDS if suite == "module" else KINDS)]
                proc.send({"suite": suite, "index": index, "kinds": suite_kinds, "dtypes": dtypes,
                           "grad_dtypes": grad_dtypes, "skip": skip})
                current = None
                finished = False
                while True:
                    msg = proc.read(CASE_TIMEOUT)
                    if msg == "timeout":
                        proc.kill()
                        status, detail = "hang", f"no progress for {CASE_TIMEOUT} s"
                        break
                    if msg is None:
                        status, detail = "crash", f"worker {proc.exit_description()}"
                        break
                    if "start" in msg:
                        current = msg["start"]
                    elif "result" in msg:
                        with lock:
                            results.status[msg["result"]] = msg["status"]
                            results.detail[msg["result"]] = msg["detail"]
                            results.seconds[msg["result"]] = msg["seconds"]
                            if msg["by_truth"]:
                                results.by_truth.add(msg["result"])
                            if msg["added"]:
                                results.added.add(msg["result"])
                        done_here.add(msg["result"])
                        current = None
                    elif "done" in msg:
                        finished = True
                        break
                if finished:
                    break
                # The worker died or hung: the case it was running is recorded, the rest go on in a new worker.
                rc_desc = detail
                proc.log.write(f"\n=== softnpu conformance: worker {rc_desc} during {current}\n")
                proc.log.flush()
                proc.log.close()
                proc = None
                if current is not None and status in ("crash", "hang"):
                    with lock:
                        results.status[current] = status
                        results.detail[current] = f"{rc_desc} (log: {log_path})"
                elif current is None and status in ("crash", "hang"):
                    # Died between cases (worker exit 3: the device was unusable after the last case).
                    pass
            progress(name)
        if proc is not None:
            proc.stop()

    threads = [threading.Thread(target=slot, args=(n,), daemon=True) for n in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ------------------------------------------------------------------------------------------------ the verdict


@dataclass
class Verdict:
    counts: dict  # (suite, kind, dtype) -> Counter(pass, xfail, fail, crash, hang)
    added: dict  # (kind, dtype) -> the Counter of the OpInfo cases in dtypes only CUDA's list
    by_truth: Counter  # (suite, kind, dtype) -> passing cases that needed the float64 truth
    unexpected_failures: list
    unexpected_passes: list
    crashes: list
    stale: list  # expectations that matched no case (full runs only)
    xfail_by_reason: Counter
    xfail_entries_by_reason: Counter

    @property
    def ok(self) -> bool:
        return not (self.unexpected_failures or self.unexpected_passes or self.crashes or self.stale)

    def count(self, suite, kind, dtype=None) -> Counter:
        """The counts of (suite, kind), of one dtype or all."""
        return sum((c for (s, k, d), c in self.counts.items() if (s, k) == (suite, kind) and dtype in (None, d)),
                   Counter())

    def rate(self, kind, suite="op", dtype=None) -> float:
        c = self.count(suite, kind, dtype)
        total = sum(c.values())
        return 100.0 * c["pass"] / total if total else math.nan


def judge(results: Results, expectations: list[Expectation], full_suites=()) -> Verdict:
    """full_suites: the suites ("op", "module") run in full, whose expectations must each match a case."""
    counts, added, by_truth = defaultdict(Counter), defaultdict(Counter), Counter()
    unexpected_failures, unexpected_passes, crashes = [], [], []
    xfail_by_reason = Counter()
    for key, status in sorted(results.status.items()):
        _, _, dtype, kind, _ = split_key(key.removeprefix(MODULE_PREFIX))
        row = (suite_of(key), kind, dtype)
        exp = next((e for e in expectations if e.matches(key)), None)
        if exp is not None:
            exp.matched += 1
        if status in ("crash", "hang"):
            crashes.append((key, status, results.detail[key]))
            outcome = status
        elif status == "pass":
            outcome = "pass"
            by_truth[row] += key in results.by_truth
            if exp is not None:
                exp.passed.append(key)
                unexpected_passes.append((key, exp.reason))
        elif exp is not None:
            outcome = "xfail"
            xfail_by_reason[exp.reason] += 1
        else:
            outcome = "fail"
            unexpected_failures.append((key, results.detail[key]))
        counts[row][outcome] += 1
        if key in results.added:
            added[(kind, dtype)][outcome] += 1
    stale = [e for e in expectations if e.matched == 0 and e.suite in full_suites]
    entries = Counter(e.reason for e in expectations if e.matched)
    return Verdict(dict(counts), dict(added), by_truth, unexpected_failures, unexpected_passes, crashes, stale,
                   xfail_by_reason, entries)


def report(verdict: Verdict, reasons: dict, seconds: float, out=None):
    p = lambda *a: print(*a, file=out or sys.stdout)  # noqa: E731  (sys.stdout as it is now: pytest captures it)

    def line(label, c, truth):
        total = sum(c.values())
        rate = f"{100.0 * c['pass'] / total:6.2f}%" if total else "    n/a"
        accepted = f", {truth} of them by the float64 truth" if truth else ""
        return (f"  {label:22s} {rate}  {c['pass']} of {total} cases pass{accepted}"
                f" ({c['xfail']} expected failures, {c['fail']} unexpected failures,"
                f" {c['crash'] + c['hang']} crashes/hangs)")

    p("")
    for suite, title, rows in (
            ("op", "softnpu op conformance (PyTorch OpInfo database, npu vs CPU)",
             (("forward", "forward"), ("grad", "gradients"), ("error", "error inputs"))),
            ("module", "softnpu module conformance (PyTorch ModuleInfo database, npu vs CPU, train and eval modes)",
             (("forward", "forward"), ("backward", "backward")))):
        if not any(s == suite for s, _, _ in verdict.counts):
            continue
        p(title)
        for kind, label in rows:
            dtypes = sorted({d for s, k, d in verdict.counts if (s, k) == (suite, kind)},
                            key=lambda d: (d not in MODULE_HALF_DTYPE_NAMES, d))
            truth = sum(n for (s, k, _), n in verdict.by_truth.items() if (s, k) == (suite, kind))
            p(line(label, verdict.count(suite, kind), truth))
            # Per dtype, the half dtypes first (the acceptance reads them).
            for d in dtypes if len(dtypes) > 1 else ():
                p(line(f"  {d}", verdict.count(suite, kind, d), verdict.by_truth[(suite, kind, d)]))
        if suite == "op" and verdict.added:
            # Issue 33's acceptance: the cases in the dtypes CUDA lists beyond the CPU's, per kind and dtype.
            p(line("added by dtypesIfCUDA", sum(verdict.added.values(), Counter()), 0))
            for kind, d in sorted(verdict.added):
                p(line(f"  {kind} {d}", verdict.added[(kind, d)], 0))
    p(f"  duration      {seconds:.0f} s")
    if verdict.xfail_by_reason:
        p("expected failures by reason (cases, entries):")
        for reason, n in verdict.xfail_by_reason.most_common():
            p(f"  {n:6d} {verdict.xfail_entries_by_reason[reason]:4d}  {reason}: {reasons.get(reason, '?')}")
    for title, rows in (("CRASHES / HANGS", [f"{k}  {s}: {d}" for k, s, d in verdict.crashes]),
                        ("UNEXPECTED FAILURES", [f"{k}  {d}" for k, d in verdict.unexpected_failures]),
                        ("UNEXPECTED PASSES (remove from expected_failures.toml)",
                         [f"{k}  (listed as {r})" for k, r in verdict.unexpected_passes]),
                        ("EXPECTATIONS MATCHING NO CASE", [e.describe() for e in verdict.stale])):
        if rows:
            p(f"{title}: {len(rows)}")
            for r in rows[:400]:
                p("  " + r)
            if len(rows) > 400:
                p(f"  ... {len(rows) - 400} more")
    p("PASS" if verdict.ok else "FAIL")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops", help="comma-separated OpInfo ids, or all (default: all, unless --modules is given)")
    ap.add_argument("--modules",
                    help="comma-separated ModuleInfo names (nn.Linear), or all (default: all, unless --ops is given)")
    all_kinds = list(dict.fromkeys(KINDS + MODULE_KINDS))
    ap.add_argument("--kinds", default=",".join(all_kinds),
                    help="OpInfo kinds forward,grad,error; module kinds forward,backward")
    ap.add_argument("--dtypes", help="comma-separated dtypes (default: " + ",".join(DTYPE_NAMES) + ")")
    ap.add_argument("--grad-dtypes", help="of those, the dtypes of OpInfo gradients (default: "
                    + ",".join(GRAD_DTYPE_NAMES) + ")")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "build" / "conformance", help="logs and results.json")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.worker:
        worker_main()
        return 0

    reasons, expectations = load_expectations()
    ops = args.ops.split(",") if args.ops else None
    modules = args.modules.split(",") if args.modules else None
    if ops is None and modules is None:
        ops = modules = ["all"]
    kinds = args.kinds.split(",")
    if set(kinds) - set(all_kinds):
        ap.error(f"unknown kinds {sorted(set(kinds) - set(all_kinds))} (kinds: {','.join(all_kinds)})")
    dtypes = args.dtypes.split(",") if args.dtypes else None
    grad_dtypes = args.grad_dtypes.split(",") if args.grad_dtypes else None
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("worker*.log"):
        old.unlink()
    work = list_cases(ops, modules)
    t0 = time.monotonic()
    done = [0]

    def progress(name):
        done[0] += 1
        if not args.quiet:
            print(f"[{done[0]}/{len(work)} {time.monotonic() - t0:6.0f}s] {name}", file=sys.stderr, flush=True)

    results = run_cases(work, kinds, dtypes, grad_dtypes, args.jobs, args.out, progress)
    seconds = time.monotonic() - t0
    full_suites = [suite for suite, names, suite_kinds in (("op", ops, KINDS), ("module", modules, MODULE_KINDS))
                   if names == ["all"] and set(suite_kinds) <= set(kinds) and dtypes is None
                   and (suite == "module" or grad_dtypes is None)]
    verdict = judge(results, expectations, full_suites)
    (args.out / "results.json").write_text(json.dumps(
        {"status": results.status, "detail": results.detail, "seconds": results.seconds,
         "by_truth": sorted(results.by_truth), "added": sorted(results.added)}, indent=0, sort_keys=True))
    report(verdict, reasons, seconds)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
