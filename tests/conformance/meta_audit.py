"""Where ATen's Meta kernel and CPU kernel describe an op's outputs differently: found mechanically, and each checked
against the decision the op path made for it.

npu allocates an op's outputs as its Meta kernel describes them and runs the CPU kernel into them, so every op whose
two kernels disagree on an output's dtype or shape needs a decision (csrc/backend/ops):
- the CPU's contract: the Meta result corrected before allocation (ops/meta_fixes.cpp), or the op always synchronizes
  and takes the CPU kernel's shapes (data-dependent outputs, ops/op_info.cpp);
- CUDA's contract, which the Meta kernel describes: the op computes in float32 for float16/bfloat16 (ops/cube.cpp's
  float32 contract: layer norm's and batch norm's statistics), so forward and backward agree on it.
A dtype or shape mismatch with neither is undecided: the forward may look right while the backward's CPU kernel
refuses what npu's forward saved (issue 32: LayerNorm's backward in bfloat16). Strides may differ: npu's outputs take
the Meta kernel's layout (CUDA's), with the same values; they are listed, not failed.

It also finds the arguments a CPU kernel writes without its schema saying so (native_batch_norm's running statistics):
the op path must know them (ops/op_info.cpp), or a route that hands the kernel copies of its operands (the float32
route) drops the writes.

For every OpInfo sample (forward, and backward where the op has autograd) run on the CPU, every aten op it reaches —
decompositions and backward ops included — is run again on meta tensors and the outputs compared.

    python tests/conformance/meta_audit.py                       # every OpInfo, float32/float64/float16/bfloat16
    python tests/conformance/meta_audit.py --ops native_layer_norm,nn.functional.batch_norm
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Ops whose outputs are not computed from their inputs' metadata alone, or that only move or describe data.
_SKIPPED_PREFIXES = ("aten::_local_scalar", "aten::lift", "aten::empty", "aten::set_", "aten::detach", "aten::alias",
                     "aten::_to_copy", "aten::copy_")


@dataclass(frozen=True)
class Mismatch:
    op: str  # "aten::native_layer_norm" (with ".overload" where the op has one)
    dtype: str
    kind: str  # dtype, shape, strides, count, or write (an argument written without the schema declaring it)
    output: int
    cpu: str
    meta: str


def _qualified(func) -> str:
    schema = func._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def _to_meta(t):
    if isinstance(t, torch.Tensor):
        if t.layout != torch.strided:
            raise TypeError("not strided")
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return t


def _values(t):
    """t's values as stored: conjugate and negative views resolved, NaNs made comparable."""
    t = t.resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.nan_to_num(nan=0.5) if t.is_floating_point() else t


def _same_values(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_values(a), _values(b)) and (
        not a.is_floating_point() or torch.equal(a.isnan(), b.isnan()))


def _undeclared_candidates(func, args, kwargs) -> dict:
    """The tensor arguments the schema does not declare written, and not sharing memory with one that is, with a
    copy of their values."""
    schema = func._schema
    named = {a.name: v for a, v in zip(schema.arguments, args)} | kwargs
    declared = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    written_storages = {v.untyped_storage().data_ptr() for n, v in named.items()
                        if n in declared and isinstance(v, torch.Tensor) and v.layout == torch.strided}
    return {n: (v, v.clone()) for n, v in named.items()
            if n not in declared and isinstance(v, torch.Tensor) and v.layout == torch.strided and v.numel()
            and v.untyped_storage().data_ptr() not in written_storages}


class _Audit(TorchDispatchMode):
    def __init__(self, dtype: str, found: set):
        super().__init__()
        self.dtype = dtype
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _qualified(func)
        before = _undeclared_candidates(func, args, kwargs)
        out = func(*args, **kwargs)
        for arg, (t, copy) in before.items():
            if not _same_values(t, copy):
                self.found.add(Mismatch(name, self.dtype, "write", -1, arg, ""))
        if (func.is_view or name.startswith(_SKIPPED_PREFIXES) or torch.Tag.nondeterministic_seeded in func.tags
                or torch.Tag.inplace_view in func.tags):
            return out
        try:
            margs, mkwargs = tree_map(_to_meta, (args, kwargs))
            mout = func(*margs, **mkwargs)
        except Exception:  # noqa: BLE001  (no Meta kernel, or a data-dependent one: the op path synchronizes)
            return out
        cpu = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        meta = [t for t in tree_flatten(mout)[0] if isinstance(t, torch.Tensor)]
        if len(cpu) != len(meta):
            self.found.add(Mismatch(name, self.dtype, "count", -1, str(len(cpu)), str(len(meta))))
            return out
        for i, (c, m) in enumerate(zip(cpu, meta)):
            if c.dtype != m.dtype:
                self.found.add(Mismatch(name, self.dtype, "dtype", i, str(c.dtype), str(m.dtype)))
            elif c.shape != m.shape:
                self.found.add(Mismatch(name, self.dtype, "shape", i, str(tuple(c.shape)), str(tuple(m.shape))))
            elif c.numel() > 1 and c.stride() != m.stride():
                self.found.add(Mismatch(name, self.dtype, "strides", i, str(c.stride()), str(m.stride())))
        return out


def audit(op_names: list[str] | None = None, dtypes=DTYPES, samples_per_dtype: int = 12) -> set[Mismatch]:
    """The mismatches reached by the OpInfos named (all when None), forward and backward, on the CPU."""
    from torch.testing._internal.common_methods_invocations import op_db

    found: set[Mismatch] = set()
    for op in op_db:
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if op_names is not None and full not in op_names:
            continue
        for dtype in dtypes:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            grad = op.supports_autograd and dtype.is_floating_point
            try:
                samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))[:samples_per_dtype]
            except Exception:  # noqa: BLE001  (the OpInfo cannot make samples in this dtype)
                continue
            for s in samples:
                try:
                    with _Audit(str(dtype).removeprefix("torch."), found):
                        out = op(s.input, *s.args, **s.kwargs)
                        if not grad:
                            continue
                        outs = [t for t in tree_flatten(out)[0]
                                if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point]
                        ins = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
                               if isinstance(t, torch.Tensor) and t.requires_grad]
                        if outs and ins:
                            torch.autograd.grad(outs, ins, [torch.ones_like(o) for o in outs], allow_unused=True)
                except Exception:  # noqa: BLE001  (a sample the CPU rejects: nothing to compare)
                    continue
    return found


def decision(m: Mismatch) -> str | None:
    """How npu decided the mismatch, or None: undecided."""
    import softnpu

    route = softnpu._C._op_route(m.op)
    if m.kind == "write":
        return "written (op path knows)" if m.cpu in route["written"] else None
    if m.kind == "strides":
        return "Meta layout"
    if route["float32_contract"] and m.kind == "dtype":
        return "CUDA contract (float32)"
    if route["float32_contract"] and m.kind == "shape":
        return "CUDA contract (per-channel statistics in eval mode)"
    if route["meta_fix"]:
        return "CPU contract (Meta corrected)"
    if route["data_dependent"]:
        return "CPU shapes (synchronizes)"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="OpInfo names, comma-separated (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    found = audit(args.ops.split(",") if args.ops else None)
    by_op = defaultdict(list)
    for m in found:
        by_op[m.op].append(m)
    undecided = 0
    for op in sorted(by_op):
        kinds = sorted({(m.kind, m.dtype) for m in by_op[op]})
        how = {decision(m) for m in by_op[op]}
        undecided += None in how
        print(f"{op:50s} {', '.join(f'{k} ({d})' for k, d in kinds)}  ->  "
              f"{', '.join(sorted(h or 'UNDECIDED' for h in how))}")
    print(f"meta audit: {len(by_op)} ops whose Meta and CPU kernels disagree, {undecided} undecided")
    return 1 if undecided else 0


if __name__ == "__main__":
    sys.exit(main())
