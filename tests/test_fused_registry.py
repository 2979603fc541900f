"""The npu op namespace against its documentation and its Python exports.

csrc/fused's READMEs (the top one and one per family folder) each hold a table of ops (`| `op` | `file` | ... |`);
these tables, the schemas registered in the dispatcher and torch_npu's exports must name the same ops, each defined
(``m.def("<op>(`` in a ``TORCH_LIBRARY_FRAGMENT(npu, m)``) in the file its table gives, so documentation, build and
exports cannot drift apart.
"""

import re
from pathlib import Path

import torch
import softnpu.fused
import torch_npu

FUSED = Path(__file__).resolve().parents[1] / "csrc" / "fused"
ROW = re.compile(r"^\|\s*`([A-Za-z_][\w.]*)`\s*\|\s*`([\w./]+\.cpp)`\s*\|")


def documented():
    """{op name: source file} from every table of csrc/fused's READMEs."""
    ops = {}
    for readme in sorted(FUSED.glob("**/README.md")):
        for line in readme.read_text().splitlines():
            m = ROW.match(line)
            if m:
                name, source = m.groups()
                assert name not in ops, f"{name} is documented twice ({readme})"
                ops[name] = readme.parent / source
    return ops


def registered():
    """{op name (overload names dropped): schema} of the npu namespace."""
    ops = {}
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, name = qualified.partition("::")
        if namespace == "npu":
            ops[name.split(".")[0]] = qualified
    return ops


def test_every_registered_op_is_documented_and_every_documented_op_registered():
    docs, regs = documented(), registered()
    assert sorted(set(regs) - set(docs)) == [], "registered in the npu namespace but missing from csrc/fused's READMEs"
    assert sorted(set(docs) - set(regs)) == [], "documented in csrc/fused's READMEs but not registered"


def test_each_op_is_defined_in_the_file_its_table_names():
    for name, source in documented().items():
        assert source.is_file(), f"{name}: {source} does not exist"
        text = source.read_text()
        assert "TORCH_LIBRARY_FRAGMENT(npu, m)" in text, f"{source} registers no schemas"
        assert re.search(r'm\.def\("' + re.escape(name) + r"[(.]", text), f"{name}'s schema is not in {source}"


def test_public_ops_are_exported_by_torch_npu():
    public = sorted(n for n in registered() if not n.startswith("_"))
    assert public, "the npu namespace is empty"
    for name in public:
        assert name in softnpu.fused.__all__, name
        assert callable(getattr(torch_npu, name)), name
    assert not any(n.startswith("_") for n in softnpu.fused.__all__)


def test_torch_npus_public_names_are_documented():
    # torch_npu.__all__ (erase_stream and the fused ops torch_npu exposes), each with a docstring as torch_npu's
    # test_ops_doc requires; an op's gives its overloads' signatures.
    assert torch_npu.__all__[0] == "erase_stream" and set(torch_npu.__all__[1:]) <= set(softnpu.fused.__all__)
    assert [n for n in torch_npu.__all__ if not getattr(torch_npu, n).__doc__] == []
    assert "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)" in \
        torch_npu.npu_rms_norm.__doc__
