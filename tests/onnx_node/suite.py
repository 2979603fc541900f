"""ONNX's backend node tests (onnx.backend.test, of the pinned onnx release) through softnpu's offline models.

Each case converts its model with atc's conversion in memory and runs it through ACL (softnpu.offline.onnx_backend);
ONNX's own harness compares the outputs with the expected ones. `failures.txt` lists the cases expected to fail, each
with its reason; they are marked expected failures, so a listed case that starts passing is reported and the list
must shrink. The random ones (reason "random: ...") are not run: they could pass only by chance.
"""
from __future__ import annotations

import pathlib
import re

import onnx.backend.test

from softnpu.offline.onnx_backend import SoftnpuBackend

FAILURES = pathlib.Path(__file__).with_name("failures.txt")
NODE_GROUP = "OnnxBackendNodeModelTest"


def expected_failures() -> dict[str, str]:
    """Test name (without the _cpu suffix) -> reason."""
    out = {}
    for line in FAILURES.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(":")
        if not reason.strip():
            raise ValueError(f"{FAILURES.name}: '{name}' has no reason")
        out[name.strip()] = reason.strip()
    return out


def node_test_cases(name: str, only: list[str] | None = None) -> dict:
    """The node test cases as unittest classes for pytest to collect (only: regexes of test names to keep)."""
    suite = onnx.backend.test.BackendTest(SoftnpuBackend, name)
    for test, reason in expected_failures().items():
        # A random op's expected output is one draw of numpy's: softnpu's draw matches it only by chance (the
        # 10-value Bernoulli cases about once in a few hundred runs), which would fail an expected failure.
        if reason.startswith("random:"):
            suite.exclude(rf"^{re.escape(test)}_cpu$")
        else:
            suite.xfail(rf"^{re.escape(test)}_cpu$")
    if only:
        for pattern in only:
            suite.include(pattern)
    return {k: v for k, v in suite.test_cases.items() if k == NODE_GROUP}
