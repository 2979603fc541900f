"""Differential fuzzing of npu against the CPU (issue 15): Hypothesis draws an op from PyTorch's OpInfo database, one
of its sample inputs, and mutations of the sample's tensors (zero-size, 0-dim, broadcast and expanded, transposed and
strided views, other dtypes, extreme values); the op runs on npu and on the CPU and must have the same outcome: the
same exception class, or results of the same dtype and shape within OpInfo's tolerances.

    python tests/fuzz_ops.py --minutes 10      # what `make fuzz` runs (FUZZ_MINUTES)
    python tests/fuzz_ops.py --replay 'CASE'   # one case again, as a disagreement prints it

tests/test_fuzz.py runs a seeded slice. Each disagreement is printed as a minimal reproducer (Hypothesis shrinks the
case: fewer mutations, earlier samples) with both outcomes. The comparison is the conformance runner's
(tests/conformance/runner.py): the same replication of inputs, the same tolerances, the same ops left out (random
and uninitialized outputs).
"""

import argparse
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("SOFTNPU_CORES", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance import runner  # noqa: E402

runner._import_torch()
torch = runner.torch
warnings.filterwarnings("ignore")  # the ops' own deprecation and numerics warnings, the same on both sides

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import FlakyFailure  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

VARIANTS = ("function", "method", "inplace")
MUTATIONS = ("none", "zero_size", "zero_dim", "unsqueeze", "transpose", "non_contiguous", "expanded", "dtype",
             "extreme")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.bool, torch.complex64)
EXTREMES = (float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e38, -1e38, 1e-38)
MAX_SAMPLES = 24  # sample inputs considered per (op, dtype): the first ones, which OpInfos make small


# resize_ and resize_as_ grow tensors over uninitialized memory: only their metadata could be compared.
UNINITIALIZED = ("resize_", "resize_as_")

# Ops that do not check their arguments against each other (with unsafe=True, any op that takes it): _segment_reduce
# reads past its data where offsets or lengths exceed it, even with unsafe=False.
UNCHECKED = ("_segment_reduce.offsets", "_segment_reduce.lengths")

# Where the CPU kernel differs from CUDA's on mutated inputs, npu gives CUDA's answer: those cases are not compared.
CUDA_DIFFERS = {
    # (op, mutation kind): why
    ("native_dropout_backward", "dtype"): "grad and mask of different dtypes: the CPU kernel (grad * mask * scale) "
                                          "promotes them; CUDA's kernel, and the Meta kernel, keep grad's dtype",
    ("ldexp", "dtype"): "a bool exponent: the CPU takes a kernel of its own, which refuses bool; CUDA (and npu) run "
                        "ldexp's composite, self * pow(2, other)",
    ("nn.functional.pixel_unshuffle", "zero_size"): "an empty input: the CPU kernel returns it unchanged; the composite "
                                                    "kernel of other devices, and the Meta kernel, reshape it",
    ("nn.functional.max_pool1d", "dtype"): "integer input: on CPU tensors max_pool1d takes a kernel of its own, which "
                                           "refuses integers; on other devices it runs max_pool2d on the unsqueezed "
                                           "input, whose CPU kernel (npu's) takes them",
}


def _cpu_dtypes(op) -> list[str]:
    # The CPU's dtypes: in those only CUDA lists the CPU raises where npu computes (the conformance suite judges them
    # against a wider dtype instead).
    dtypes, cuda_only = runner.op_dtypes(op)
    return [d for d in dtypes if d not in cuda_only]


def _fuzzable(op) -> bool:
    # Sparse ops are left out: the fuzzer compares strided results (sparse COO on npu: tests/test_sparse.py).
    sparse = "sparse" in op.name
    return (runner.op_mode(op) == "values" and bool(_cpu_dtypes(op)) and not sparse
            and op.name not in UNINITIALIZED)


OPS = {runner.op_id(op): op for op in op_db if _fuzzable(op)}
OP_IDS = sorted(OPS)


@dataclass(frozen=True)
class Case:
    op: str
    variant: str
    dtype: str
    seed: int           # torch's seed while the OpInfo makes its sample inputs
    sample: int         # index among them (modulo their count)
    mutations: tuple    # (kind, which tensor, parameter) applied in order

    def __str__(self):
        return repr((self.op, self.variant, self.dtype, self.seed, self.sample, self.mutations))

    @staticmethod
    def parse(text: str) -> "Case":
        import ast
        op, variant, dtype, seed, sample, mutations = ast.literal_eval(text)
        return Case(op, variant, dtype, seed, sample, tuple(tuple(m) for m in mutations))


@st.composite
def cases(draw, ops=None):
    op_name = draw(st.sampled_from(ops or OP_IDS))
    op = OPS[op_name]
    variants = [v for v in VARIANTS if _variant_fn(op, v) is not None]
    mutation = st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 7), st.integers(0, 7))
    return Case(op_name, draw(st.sampled_from(variants)), draw(st.sampled_from(_cpu_dtypes(op))),
                draw(st.integers(0, 3)), draw(st.integers(0, MAX_SAMPLES - 1)),
                tuple(draw(st.lists(mutation, max_size=3))))


def _variant_fn(op, variant):
    if variant == "function":
        return op.op
    if variant == "method":
        return op.method_variant
    return op.inplace_variant


# ------------------------------------------------------------------------------------------------ inputs

_SAMPLES: dict = {}


def _samples(op, dtype, seed):
    key = (runner.op_id(op), dtype, seed)
    if key not in _SAMPLES:
        torch.manual_seed(seed)
        samples = []
        # Made on npu, so each tensor is where the OpInfo puts it (tensor_split's indices stay on the CPU, as CUDA
        # requires); the CPU reference is a replica.
        for s in op.sample_inputs("npu", dtype, requires_grad=False):
            samples.append(s)
            if len(samples) == MAX_SAMPLES:
                break
        if len(_SAMPLES) > 256:
            _SAMPLES.clear()
        _SAMPLES[key] = samples
    return _SAMPLES[key]


def _mutate(t, kind: str, param: int):
    """t changed as `kind` says; the same tensor if the mutation does not apply to it."""
    if kind == "zero_size":
        if t.dim() == 0:
            return t.reshape(1)[:0]
        return t.narrow(param % t.dim(), 0, 0)
    if kind == "zero_dim":
        return t.reshape(-1)[param % t.numel()].clone() if t.numel() > 0 else t
    if kind == "unsqueeze":
        return t.unsqueeze(param % (t.dim() + 1))
    if kind == "transpose":
        return t.transpose(0, param % t.dim()) if t.dim() >= 2 else t
    if kind == "non_contiguous":
        # The same values, every other element of a buffer twice the size.
        if t.dim() == 0:
            return t
        wide = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device=t.device)
        wide[..., ::2] = t
        return wide[..., ::2]
    if kind == "expanded":
        # A size-1 dimension expanded over the tensor's shape: overlapping memory (stride 0).
        if t.dim() == 0 or t.shape[-1] < 2:
            return t
        return t[..., :1].expand(t.shape)
    if kind == "dtype":
        return t.to(DTYPES[param % len(DTYPES)])
    if kind == "extreme":
        if t.numel() == 0:
            return t
        t = t.clone()
        flat = t.view(-1) if t.is_contiguous() else None
        if flat is None:
            return t
        value = EXTREMES[param % len(EXTREMES)]
        if t.dtype.is_floating_point or t.dtype.is_complex:
            flat[param % t.numel()] = value
        elif t.dtype == torch.bool:
            flat[param % t.numel()] = True
        else:
            info = torch.iinfo(t.dtype)
            flat[param % t.numel()] = info.max if value >= 0 else info.min
        return t
    return t


def _tensor_slots(s):
    """(container, key) of every tensor of the sample, in a fixed order: input, args, kwargs."""
    slots = [("input", None)] if isinstance(s.input, torch.Tensor) else []
    if isinstance(s.input, (list, tuple)):
        slots += [("input", i) for i, x in enumerate(s.input) if isinstance(x, torch.Tensor)]
    slots += [("args", i) for i, x in enumerate(s.args) if isinstance(x, torch.Tensor)]
    slots += [("kwargs", k) for k, x in sorted(s.kwargs.items()) if isinstance(x, torch.Tensor)]
    return slots


def build(case: Case):
    """The sample input of the case, mutated; None if the OpInfo has no such sample."""
    op = OPS[case.op]
    samples = _samples(op, getattr(torch, case.dtype), case.seed)
    if not samples:
        return None
    s = samples[case.sample % len(samples)]
    if (s.kwargs.get("unsafe") is True or case.op in UNCHECKED) and any(kind != "none" for kind, _, _ in case.mutations):
        return None  # the op does not check its inputs against each other: mutated, undefined behaviour
    if any((case.op, kind) in CUDA_DIFFERS for kind, _, _ in case.mutations):
        return None
    inp = list(s.input) if isinstance(s.input, (list, tuple)) else s.input
    args, kwargs = list(s.args), dict(s.kwargs)
    slots = _tensor_slots(s)
    for kind, which, param in case.mutations:
        if kind == "none" or not slots:
            continue
        where, key = slots[which % len(slots)]
        if where == "input" and key is None:
            inp = _mutate(inp, kind, param)
        elif where == "input":
            inp[key] = _mutate(inp[key], kind, param)
        elif where == "args":
            args[key] = _mutate(args[key], kind, param)
        else:
            kwargs[key] = _mutate(kwargs[key], kind, param)
    if isinstance(s.input, tuple):
        inp = tuple(inp)
    return inp, tuple(args), kwargs


def _describe(v) -> str:
    if isinstance(v, runner._HostTensor):
        return f"npu tensor({tuple(v.shape)}, {str(v.dtype).replace('torch.', '')})"
    if isinstance(v, torch.Tensor):
        return f"tensor({tuple(v.shape)}, stride={v.stride()}, {str(v.dtype).replace('torch.', '')})"
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_describe(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_describe(x)}" for k, x in v.items()) + "}"
    return repr(v)


# ------------------------------------------------------------------------------------------------ one case


class Disagreement(AssertionError):
    pass


@dataclass
class _Sample:
    input: object
    args: tuple
    kwargs: dict


def _shifted(v, k: int):
    """v with its storage copied k elements into a fresh buffer (the same strides and overlaps): other memory, other
    alignment."""
    if isinstance(v, torch.Tensor) and v.layout == torch.strided:
        n = v.untyped_storage().nbytes() // v.element_size()
        storage = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage(), 0, (n,))
        buf = torch.zeros(n + k, dtype=v.dtype)
        buf[k:].copy_(storage)
        out = buf.as_strided(v.shape, v.stride(), v.storage_offset() + k)
        return out.requires_grad_() if v.requires_grad and out.dtype.is_floating_point else out
    if isinstance(v, (list, tuple)):
        return type(v)(_shifted(x, k) for x in v)
    if isinstance(v, dict):
        return {key: _shifted(x, k) for key, x in v.items()}
    return v


def _on_cpu(fn, built, shift: int = 0):
    """fn's outcome on CPU replicas of the built inputs (placed `shift` elements into fresh buffers), and the
    replicated input (which an in-place variant wrote)."""
    cpu = runner.Replicator(to_cpu=True)
    inp, args, kwargs = (cpu.value(v) for v in built)
    if shift:
        inp, args, kwargs = (_shifted(v, shift) for v in (inp, args, kwargs))
    return runner._run(lambda: fn(inp, *args, **kwargs), on_npu=False), inp


def _cpu_reproducible(fn, built, expected, tol, shifts=16) -> bool:
    """Whether the CPU gives its first answer again on fresh replicas placed elsewhere in memory, at every element
    offset within a 64-byte line (LAPACK on an ill-conditioned input may not: its answer then depends on where the
    data lies). Run only for a mismatch."""
    for k in range(1, shifts + 1):
        again, _ = _on_cpu(fn, built, shift=k)
        try:
            runner._compare(again, expected, tol, npu_outputs=False)
        except runner.Mismatch:
            return False
    return True


def check(case: Case) -> bool:
    """Runs the case on both sides; raises Disagreement if the outcomes differ. False if the case does not exist."""
    built = build(case)
    if built is None:
        return False
    op = OPS[case.op]
    fn = _variant_fn(op, case.variant)
    tol = runner.tolerance_fn(op, getattr(torch, case.dtype))
    inp, args, kwargs = built
    if any(t.layout != torch.strided for t in runner._sample_tensors(_Sample(inp, args, kwargs))):
        return False  # a sparse sample: not fuzzed (see _fuzzable)
    expected, cpu_inp = _on_cpu(fn, built)
    npu = runner.Replicator(to_cpu=False)  # fresh copies: the sample itself stays as built
    npu_inp, npu_args, npu_kwargs = npu.value(inp), npu.value(args), npu.value(kwargs)
    actual = runner._run(lambda: fn(npu_inp, *npu_args, **npu_kwargs), on_npu=True)
    try:
        # A sample that names the CPU as its device (new_full(device="cpu")) gives CPU outputs on both sides.
        npu_outputs = runner._expects_npu_outputs(_Sample(inp, args, kwargs))
        runner._compare(actual, expected, tol, npu_outputs=npu_outputs)
        if case.variant == "inplace" and not isinstance(expected, runner._Raised):
            runner._compare(runner._to_host(npu_inp), runner._cpu_result(cpu_inp), tol, path="self")
    except runner.Mismatch as e:
        if not isinstance(expected, runner._Raised) and not _cpu_reproducible(fn, built, expected, tol):
            return True  # no reference: the CPU's own answer changes from run to run (an ill-posed input)
        raise Disagreement(f"{e}\n  case: {case}\n  inputs: {_describe(inp)} args={_describe(args)} "
                           f"kwargs={_describe(kwargs)}\n  cpu: {_describe(expected)}\n  npu: {_describe(actual)}") from None
    return True


# ------------------------------------------------------------------------------------------------ runs


@dataclass
class Tally:
    tried: int = 0
    found: dict = None  # op|variant -> the report of its minimal disagreeing case

    def __post_init__(self):
        self.found = {}


class _TimeUp(Exception):
    pass


_REASONS, _EXPECTATIONS = runner.load_expectations()


def expected_reason(case: Case) -> str | None:
    """The conformance suite's reason when it lists the op, variant and dtype as failing forward (for some samples:
    the fuzzer's samples are not the suite's, so the whole op, variant and dtype are left out)."""
    import fnmatch
    fields = (case.op, case.variant, case.dtype, "forward")
    for e in _EXPECTATIONS:
        if all(any(fnmatch.fnmatchcase(v, p) for p in patterns)
               for v, patterns in zip(fields, (e.op, e.variant, e.dtype, e.kind))):
            return e.reason
    return None


def _first_disagreement(group: BaseExceptionGroup) -> Disagreement:
    matched, _ = group.split(Disagreement)
    if matched is None:
        raise group
    while isinstance(matched, BaseExceptionGroup):
        matched = matched.exceptions[0]
    return matched


def _key(case: Case) -> str:
    return f"{case.op}|{case.variant}"


def fuzz(seconds: float, seed: int | None, ops=None, max_examples: int | None = None, skip=(), progress=None,
         out=sys.stdout) -> Tally:
    """Runs cases until the time is up (or max_examples were tried). A disagreement ends Hypothesis's run once it is
    shrunk to a minimal case; the run then starts again without that op and variant, until the time is up. With a
    seed, the whole run is reproducible. progress(tally, case) is called before each case."""
    from hypothesis import seed as hypothesis_seed

    tally = Tally()
    deadline = time.monotonic() + seconds
    round_seed = seed
    skipped = set(skip)
    while time.monotonic() < deadline and (max_examples is None or tally.tried < max_examples):
        shrinking = []  # set once a disagreement is found: its shrinking runs to the end

        def body(case):
            if not shrinking and time.monotonic() > deadline:
                raise _TimeUp
            if _key(case) in skipped or expected_reason(case):
                return
            tally.tried += 1
            if progress:
                progress(tally, case)
            try:
                check(case)
            except Disagreement:
                shrinking.append(case)
                raise

        run = given(cases(ops))(body)
        run = settings(max_examples=max_examples or 10**9, deadline=None, database=None,
                       suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink],
                       report_multiple_bugs=False, print_blob=False)(run)
        if round_seed is not None:
            run = hypothesis_seed(round_seed)(run)
        try:
            run()
            break  # max_examples reached
        except _TimeUp:
            break
        except (Disagreement, FlakyFailure) as e:
            # Hypothesis raises the minimal case's error last; a FlakyFailure when that case agreed when run again
            # (an outcome that changes from run to run: a kernel reading outside its inputs, say).
            flaky = isinstance(e, FlakyFailure)
            if flaky:
                e = _first_disagreement(e)
            case = Case.parse(str(e).split("  case: ")[1].splitlines()[0])
            tally.found[_key(case)] = str(e)
            skipped.add(_key(case))
            what = " (not reproducible: the case agreed when run again)" if flaky else ""
            print(f"DISAGREEMENT {len(tally.found)}{what}: {e}\n"
                  f"  replay: python tests/fuzz_ops.py --replay \"{case}\"\n", file=out, flush=True)
            round_seed = None if round_seed is None else round_seed + 1
    return tally


# ------------------------------------------------------------------------------------------------ make fuzz

# A case that crashes the process (a segfault in a kernel) is a disagreement too: the fuzzing runs in a worker
# process, which records the case it is about to run; when the worker dies, the supervisor reports that case and
# starts a new worker without its op.


def _worker(a) -> int:
    import json
    state = Path(a.state)

    def progress(tally, case):
        state.write_text(json.dumps({"tried": tally.tried, "case": str(case), "found": list(tally.found)}))

    tally = fuzz(a.seconds, a.seed, a.ops or None, skip=a.skip, progress=progress)
    state.write_text(json.dumps({"tried": tally.tried, "case": None, "found": list(tally.found)}))
    return 0


def _supervise(minutes: float, seed: int | None, ops) -> int:
    import json
    import subprocess
    import tempfile

    start = time.monotonic()
    deadline = start + minutes * 60
    tried, found, skip, cpu_crashes = 0, [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.json"
        while time.monotonic() < deadline - 5:
            state.write_text(json.dumps({"tried": 0, "case": None, "found": []}))
            cmd = [sys.executable, __file__, "--worker", "--state", str(state),
                   "--seconds", str(deadline - time.monotonic())]
            cmd += ["--seed", str(seed)] if seed is not None else []
            for o in ops or ():
                cmd += ["--op", o]
            for k in skip:
                cmd += ["--skip", k]
            proc = subprocess.run(cmd)
            info = json.loads(state.read_text())
            tried += info["tried"]
            found += info.get("found", [])
            skip += info.get("found", [])
            if proc.returncode == 0 and info["case"] is None:
                break
            case = Case.parse(info["case"])
            skip.append(_key(case))
            seed = None if seed is None else seed + 1
            cpu_alone = subprocess.run([sys.executable, __file__, "--cpu-only", str(case)], capture_output=True)
            if cpu_alone.returncode < 0:
                cpu_crashes.append(_key(case))
                print(f"CPU CRASH (PyTorch's CPU kernel dies on this input by itself, signal {-cpu_alone.returncode}; "
                      f"npu, running it, dies alike):\n  case: {case}\n", flush=True)
                continue
            found.append(_key(case))
            print(f"DISAGREEMENT: the process died (exit status {proc.returncode}) running\n  case: {case}\n"
                  f"  replay: python tests/fuzz_ops.py --replay \"{case}\"\n", flush=True)
    print(f"fuzz: {tried} cases tried over {len(ops or OP_IDS)} ops in {time.monotonic() - start:.0f} s; "
          f"{len(found)} disagreements found" + (": " + ", ".join(found) if found else "") +
          (f"; {len(cpu_crashes)} ops whose CPU kernel crashed by itself: " + ", ".join(cpu_crashes)
           if cpu_crashes else ""))
    return 1 if found else 0


def _run_cpu_side(case: Case) -> int:
    built = build(case)
    if built is None:
        return 2
    _on_cpu(_variant_fn(OPS[case.op], case.variant), built)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", "10")))
    p.add_argument("--seed", type=int, default=None, help="a reproducible run (default: random)")
    p.add_argument("--op", dest="ops", action="append", help="only this op (OpInfo name; repeatable)")
    p.add_argument("--replay", help="one case, as a disagreement prints it")
    p.add_argument("--cpu-only", help=argparse.SUPPRESS)  # a case's CPU side alone (does it crash by itself?)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--state", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    p.add_argument("--skip", action="append", default=[], help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.ops:
        unknown = [o for o in a.ops if o not in OPS]
        if unknown:
            p.error(f"not an OpInfo op here: {', '.join(unknown)}")
    if a.replay:
        try:
            if not check(Case.parse(a.replay)):
                print("no such sample")
                return 2
        except Disagreement as e:
            print(e)
            return 1
        print("same outcome on npu and the CPU")
        return 0
    if a.cpu_only:
        return _run_cpu_side(Case.parse(a.cpu_only))
    if a.worker:
        return _worker(a)
    return _supervise(a.minutes, a.seed, a.ops)


if __name__ == "__main__":
    sys.exit(main())
