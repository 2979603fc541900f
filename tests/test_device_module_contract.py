"""torch.npu answers every attribute torch's own Python code reads from an accelerator's device module as torch.cuda
answers it. The reads are found by scanning torch's installed sources (so a torch that adds a read fails here), and
the ones whose answer decides numerics are checked by what they do: activation checkpointing and fork_rng restore
npu's random state, so a recomputed dropout draws the numbers the forward drew.

How torch reaches a device module (each a "source"): torch.get_device_module(t), torch._utils._get_device_module(t),
torch.utils.checkpoint._get_device_module(t), getattr(torch, <device type>), any function returning one of those
(DeviceMesh's _get_device_handle, ...), and names holding one by convention (device_module, device_mod, device_handle,
custom_device_mod). A read is an attribute of a source, getattr/hasattr on it with a constant name (or a name bound to
a constant string), _get_custom_mod_func("<name>"), or _get_device_attr(lambda m: m.<name>)."""

import ast
import collections
import os
import re
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from conftest import run_python

TORCH_DIR = os.path.dirname(torch.__file__)

_SOURCE_CALLS = {"get_device_module", "_get_device_module"}
_HOLDER = re.compile(r"(^|_)(device_(module|mod|handle)|device_handle|custom_device_mod)$")

# Names torch.cuda has that torch.npu answers differently on purpose, with why it makes no difference.
NOT_ANSWERED = {
    # torch._utils._to reads it only for a storage whose is_sparse is True; no storage class is (TypedStorage and
    # UntypedStorage both say False), so the legacy torch.cuda.sparse tensor types are never reached.
    "sparse": "legacy sparse tensor types, read only for sparse storages, which do not exist",
}


def _name_of(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _callee(node):
    return _name_of(node.func) if isinstance(node, ast.Call) else None


def _is_source(node, source_calls):
    if not isinstance(node, ast.Call):
        return False
    if _callee(node) in source_calls:
        return True
    # getattr(torch, device_type[, default]): a module chosen by a device type held in a variable
    return (_callee(node) == "getattr" and isinstance(node.func, ast.Name) and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name) and node.args[0].id == "torch"
            and not isinstance(node.args[1], ast.Constant))


@lru_cache(maxsize=1)
def device_module_reads() -> dict[str, list[str]]:
    """{attribute: ["file:line", ...]} for every read of a device module in torch's Python sources."""
    texts = {}
    for dirpath, _, files in os.walk(TORCH_DIR):
        for fn in files:
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                with open(path, encoding="utf-8") as f:
                    texts[os.path.relpath(path, TORCH_DIR)] = f.read()

    def parse(text_pattern):
        # Only files that mention a source or a holder can read a device module (parsing all of torch takes a minute).
        found = {}
        for rel, text in texts.items():
            if re.search(text_pattern, text):
                try:
                    found[rel] = ast.parse(text)
                except SyntaxError:
                    continue
        return found

    # Functions that return a device module are sources too (two rounds reach wrappers of wrappers).
    source_calls = set(_SOURCE_CALLS)
    sourcing = parse(r"getattr\(torch,|get_device_module").values()
    for _ in range(2):
        for tree in sourcing:
            for fdef in ast.walk(tree):
                if isinstance(fdef, ast.FunctionDef) and any(
                        isinstance(r, ast.Return) and _is_source(r.value, source_calls) for r in ast.walk(fdef)):
                    source_calls.add(fdef.name)
    trees = parse("|".join([r"getattr\(torch,", "device_mod", "device_handle", "_get_custom_mod_func",
                            "_get_device_attr", *map(re.escape, source_calls)]))

    reads = collections.defaultdict(list)
    for rel, tree in trees.items():
        strings, holders = {}, set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                    strings.update((t.id, node.value.value) for t in node.targets if isinstance(t, ast.Name))
                if _is_source(node.value, source_calls):
                    holders.update(_name_of(t) for t in node.targets if _name_of(t))

        def holds(n):
            name = _name_of(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
            return _is_source(n, source_calls) or (name is not None and (name in holders or _HOLDER.search(name)))

        def string(n):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                return n.value
            return strings.get(n.id) if isinstance(n, ast.Name) else None

        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and holds(node.value):
                reads[node.attr].append(where)
            callee = _callee(node)
            if callee in ("getattr", "hasattr") and len(node.args) >= 2 and holds(node.args[0]) \
                    and string(node.args[1]):
                reads[string(node.args[1])].append(where)
            elif callee == "_get_custom_mod_func" and node.args and string(node.args[0]):
                reads[string(node.args[0])].append(where)
            elif callee == "_get_device_attr" and node.args and isinstance(node.args[0], ast.Lambda):
                arg = node.args[0].args.args[0].arg
                for n in ast.walk(node.args[0].body):
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == arg:
                        reads[n.attr].append(where)
    return dict(reads)


def test_the_scan_finds_the_reads_torch_is_known_to_make():
    # If torch moves these reads, the scan must still see them; if it sees none, it checks nothing.
    reads = device_module_reads()
    assert any(w.startswith("utils/checkpoint.py:") for w in reads["_initialized"])
    assert any(w.startswith("random.py:") for w in reads["_is_in_bad_fork"])  # getattr(mod, _bad_fork_name)
    assert any(w.startswith("random.py:") for w in reads["get_rng_state"])
    assert any(w.startswith("_utils.py:") for w in reads["current_device"])  # _get_device_attr(lambda m: ...)
    assert any(w.startswith("distributed/device_mesh.py:") for w in reads["set_device"])  # _get_device_handle()
    assert any(w.startswith("serialization.py:") for w in reads["_utils"])


def test_npu_answers_every_read_cuda_answers():
    reads = device_module_reads()
    read_from_cuda = {name: where for name, where in reads.items() if hasattr(torch.cuda, name)}
    assert len(read_from_cuda) >= 25
    missing = {name: where[:3] for name, where in read_from_cuda.items()
               if name not in NOT_ANSWERED and not hasattr(torch.npu, name)}
    assert not missing, f"torch reads these from a device module; torch.cuda has them, torch.npu does not: {missing}"
    assert not hasattr(torch.npu, "sparse")  # so NOT_ANSWERED must be revisited when that changes


def test_the_answers_mean_what_cudas_mean():
    # Attributes read for their value or called with CUDA's signature.
    assert torch.npu._initialized is True  # live: a module attribute copied at import would be False
    assert getattr(torch.npu, "_initialized", False) is True
    assert torch.npu._is_in_bad_fork() is False
    assert torch.npu._get_generator(torch.device("npu", 1)) is torch.npu.default_generators[1]
    with torch.npu.device(1):
        assert torch.npu._get_generator(torch.device("npu")) is torch.npu.default_generators[1]
        assert torch.npu._utils._get_device_index("npu", True) == 1
        assert torch.npu._utils._get_device_index(None, True) == 1
    assert torch.npu._utils._get_device_index("npu:1") == 1
    assert torch.npu._utils._get_device_index(torch.npu.device(1)) == 1
    assert torch.npu._utils._get_device_index("cpu", allow_cpu=True) == -1
    with pytest.raises(ValueError):
        torch.npu._utils._get_device_index("cpu")
    # torch_npu's list on a chip with bfloat16 (the default Ascend910B3): autocast takes each of them.
    assert torch.npu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16, torch.float32]
    assert isinstance(torch.npu.current_stream(), torch.npu.Stream)


def test_initialized_is_live_in_a_fresh_process():
    result = run_python(
        """
        import torch, torch_npu
        print(getattr(torch.npu, "_initialized", None))
        torch.ones(1, device="npu")
        print(getattr(torch.npu, "_initialized", None))
        """
    )
    assert result.lines == ["False", "True"]


def _checkpoint_gradients(use_reentrant):
    torch.manual_seed(0)
    lin, drop = torch.nn.Linear(16, 16).npu(), torch.nn.Dropout(0.5)
    x = torch.randn(4, 16, device="npu", requires_grad=use_reentrant)  # reentrant needs an input that wants grad
    f = lambda x: drop(lin(x)).sum(-1)  # noqa: E731
    grads = []
    # .backward(), not autograd.grad: the reentrant checkpoint supports only the former.
    for run in (f, lambda x: checkpoint(f, x, use_reentrant=use_reentrant)):
        lin.weight.grad = None
        torch.manual_seed(1)
        run(x).sum().backward()
        grads.append(lin.weight.grad.cpu())
    return grads


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_recomputes_dropout_with_the_forwards_numbers(use_reentrant):
    plain, checkpointed = _checkpoint_gradients(use_reentrant)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(checkpointed, plain, rtol=0, atol=0)


def test_checkpoint_restores_the_state_of_the_inputs_device():
    # The input on npu:1: its generator is the one stashed and restored (npu:0's is untouched by the recompute).
    torch.manual_seed(3)
    w = torch.randn(8, 8, device="npu:1", requires_grad=True)
    x = torch.randn(4, 8, device="npu:1")
    f = lambda x: F.dropout(x @ w, 0.5).sum()  # noqa: E731
    torch.manual_seed(5)
    plain = torch.autograd.grad(f(x), w)[0].cpu()
    torch.manual_seed(5)
    checkpointed = torch.autograd.grad(checkpoint(f, x, use_reentrant=False), w)[0].cpu()
    torch.testing.assert_close(checkpointed, plain, rtol=0, atol=0)


@pytest.mark.parametrize("devices", [None, [1]])
def test_fork_rng_restores_npu_state(devices):
    torch.manual_seed(9)
    device = "npu:1" if devices else "npu"
    expected = torch.rand(32, device=device).cpu()
    torch.manual_seed(9)
    with torch.random.fork_rng(devices=devices, device_type="npu"):
        inside = torch.rand(32, device=device).cpu()
    after = torch.rand(32, device=device).cpu()
    assert torch.equal(inside, expected)
    assert torch.equal(after, expected)  # the draw inside is forgotten
