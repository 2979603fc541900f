"""Version matching: softnpu checks the running torch against the one its build recorded before loading its
extension. A mismatch is one ImportError naming both versions and the fix, from `import softnpu` / `import torch_npu`
and `softnpu doctor`; `import torch` still works, warning why npu is missing. The mismatch is faked with a copy of the
installed softnpu_loader whose build record names another torch, first on PYTHONPATH (no other torch installed)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import softnpu_loader
import torch

from conftest import run_python

BUILT_FOR = softnpu_loader.TORCH_VERSION
FAKE = "2.12.0"


@pytest.fixture(scope="module")
def fake_record(tmp_path_factory) -> dict:
    """The environment of a child that sees softnpu built for torch FAKE."""
    root = tmp_path_factory.mktemp("fake_build")
    copy = root / "softnpu_loader"
    shutil.copytree(Path(softnpu_loader.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    record = copy / "_build_info.py"
    record.write_text(record.read_text().replace(f'"{BUILT_FOR}"', f'"{FAKE}"'))
    return {"PYTHONPATH": str(root)}


def expected_message(running: str) -> str:
    return (f"softnpu 0.1.0 was built for torch {FAKE}, but torch {running} is installed: install the torch it was "
            f"built for (pip install torch=={FAKE}), or rebuild softnpu against this torch (make build)")


def test_the_build_records_the_torch_it_was_built_against():
    assert BUILT_FOR == torch.__version__.split("+")[0]
    assert softnpu_loader.torch_version_error(torch.__version__) is None
    assert softnpu_loader.torch_version_error(BUILT_FOR + "+cpu") is None  # local tags do not count
    assert isinstance(softnpu_loader.torch_version_error("2.12.0+cpu"), ImportError)


def test_import_torch_still_works_and_says_why_npu_is_missing(fake_record):
    result = run_python(
        """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        print(torch._C._get_privateuse1_backend_name(), (torch.ones(2) + 1).sum().item())
        for w in caught:
            print(w.category.__name__, w.message)
        try:
            import torch_npu
        except ImportError as e:
            print("ImportError", e)
        """,
        env=fake_record,
    )
    message = expected_message(torch.__version__)
    assert result.lines[0] == "privateuseone 4.0"
    warnings = [line for line in result.lines[1:] if line.startswith("RuntimeWarning")]
    assert warnings == [f"RuntimeWarning npu is not available: {message}. torch works without it; "
                        "TORCH_DEVICE_BACKEND_AUTOLOAD=0 stops `import torch` from loading softnpu"]
    assert result.lines[-1] == f"ImportError {message}"
    assert "undefined symbol" not in result.stdout + result.stderr


@pytest.mark.parametrize("module", ["softnpu", "torch_npu"])
def test_importing_softnpu_first_raises_one_clear_import_error(fake_record, module):
    result = run_python(
        f"""
        try:
            import {module}
        except ImportError as e:
            print(type(e).__name__, e)
        """,
        env=fake_record,
    )
    assert result.lines == [f"TorchVersionError {expected_message(torch.__version__)}"]


def test_doctor_fails_the_torch_check_with_the_same_message(fake_record):
    import os

    softnpu_command = Path(sys.executable).parent / "softnpu"
    r = subprocess.run([str(softnpu_command), "doctor"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **fake_record})
    assert r.returncode == 1, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first == (f"FAIL  torch  {expected_message(torch.__version__)} -- hint: fix this first: the other checks "
                     "need softnpu to load")
