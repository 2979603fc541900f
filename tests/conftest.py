"""Shared set-up of softnpu's Python tests.

The tests in this process run with a known configuration (2 devices of 2048 MiB, no debugging switches), whatever
the caller's environment holds, because the runtime reads its variables once per process. Anything that needs
another configuration, a fresh process or a malformed value runs in a child Python through `run_python` /
`start_python`.
"""

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV_VARS_DEF = REPO / "csrc" / "common" / "env_vars.def"


@dataclass(frozen=True)
class EnvVar:
    name: str
    layer: str
    kind: str
    default: str


def declared_env_vars() -> list[EnvVar]:
    """The variables of csrc/common/env_vars.def, the one place softnpu declares what it reads."""
    text = ENV_VARS_DEF.read_text()
    rows = re.findall(r'^SOFTNPU_ENV\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*"([^"]*)"', text, re.M)
    assert rows, f"no SOFTNPU_ENV rows found in {ENV_VARS_DEF}"
    return [EnvVar(*row) for row in rows]


# The configuration of this process (set before torch loads the backend, which reads it once).
DEVICE_COUNT = 2
MEMORY_MB = 2048
for _var in declared_env_vars():
    if _var.name != "TORCH_NPU_SANITIZER":  # kept, so the suite can run under the sanitizer
        os.environ.pop(_var.name, None)
os.environ["SOFTNPU_DEVICE_COUNT"] = str(DEVICE_COUNT)
os.environ["SOFTNPU_MEMORY_MB"] = str(MEMORY_MB)

import torch  # noqa: E402
import torch_npu  # noqa: E402,F401
import softnpu.host  # noqa: E402

MiB = 1 << 20

# What `softnpu report` adds to the float16 line where the float32 route takes MKL's half-precision GEMM: on Intel
# CPUs whose torch has MKL (csrc/backend/ops/cube.cpp), read here independently of the backend's own decision (cpuid).
MKL_HALF_GEMM = ("; mm, addmm, bmm and baddbmm through MKL's cblas_gemm_f16f16f32"
                 if torch.backends.mkl.is_available() and softnpu.host.cpu_vendor() == "GenuineIntel" else "")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def describe(self) -> str:
        return f"exit status {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def child_env(env: dict | None = None) -> dict:
    """This process's (sanitized) environment with `env` applied; a value of None unsets the variable."""
    out = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out


class Child:
    """A Python child started by start_python; wait() collects it (children run concurrently until then)."""

    def __init__(self, code: str, env: dict | None = None, timeout: float = 120):
        self.code = textwrap.dedent(code)
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.code],
            env=child_env(env),
            cwd=str(REPO / "tests"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, check: bool = True) -> Result:
        try:
            out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"child python timed out after {self.timeout} s (hung?)\n--- stdout\n{out}\n--- stderr\n{err}")
        result = Result(self.proc.returncode, out, err)
        if check and result.returncode != 0:
            pytest.fail(f"child python failed:\n{self.code}\n{result.describe()}")
        return result


def start_python(code: str, env: dict | None = None, timeout: float = 120) -> Child:
    return Child(code, env, timeout)


def run_python(code: str, env: dict | None = None, timeout: float = 120, check: bool = True) -> Result:
    """Runs `code` in a fresh `sys.executable -c`, with this process's environment plus `env`."""
    return start_python(code, env, timeout).wait(check=check)


def run_many(jobs: list[tuple[str, dict | None]], timeout: float = 120, check: bool = True,
             parallel: int = 4) -> list[Result]:
    """Runs several children, `parallel` at a time (each pays torch's import time, mostly waiting on imports, so
    overlapping them saves most of it), and returns their results in the order of `jobs`."""
    results: list[Result | None] = [None] * len(jobs)
    running: list[tuple[int, Child]] = []
    for i, (code, env) in enumerate(jobs):
        if len(running) >= parallel:
            j, child = running.pop(0)
            results[j] = child.wait(check=check)
        running.append((i, start_python(code, env, timeout)))
    for j, child in running:
        results[j] = child.wait(check=check)
    return results


@pytest.fixture(autouse=True)
def _npu_idle_after_test():
    """Leaves the devices as every test expects to find them: idle, no pending error, device 0 and the default
    streams current."""
    yield
    for d in range(torch.npu.device_count()):
        torch.npu.synchronize(d)
        torch.npu.set_stream(torch.npu.default_stream(d))
    torch.npu.set_device(0)
