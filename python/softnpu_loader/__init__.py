"""Loading softnpu: what must still work when softnpu itself cannot load.

softnpu's extension is compiled against one torch; under another, loading it fails on undefined symbols. So before
loading it, softnpu compares the running torch with the one its build recorded (``_build_info.py``, written by CMake)
and raises TorchVersionError, an ImportError naming both versions and the fix.

softnpu's entry points live here, outside the softnpu package, because loading an entry point imports its module's
package first, and softnpu's ``__init__`` is what raises: torch's autoload (the ``torch.backends`` group) turns the
error into a warning, so ``import torch`` still works, without npu; the ``softnpu`` command reports it as doctor's
failed torch check.
"""

import os
import re
import sys
import warnings

from ._build_info import SOFTNPU_VERSION, TORCH_VERSION

__all__ = ["TORCH_VERSION", "TorchVersionError", "ConfigurationError", "torch_version_error", "check_torch",
           "transfer_to_npu_requested", "autoload", "main"]


class TorchVersionError(ImportError):
    """The running torch is not the one softnpu was built for."""


class ConfigurationError(ValueError):
    """A variable softnpu reads when it loads has a malformed value (the message names it)."""


def transfer_to_npu_requested() -> bool:
    """TORCH_TRANSFER_TO_NPU=1: loading softnpu applies torch_npu.contrib.transfer_to_npu, so CUDA code runs on npu
    without a line changed (torch's autoload loads softnpu at `import torch`)."""
    value = os.environ.get("TORCH_TRANSFER_TO_NPU", "")
    if value not in ("", "0", "1"):
        raise ConfigurationError(f"TORCH_TRANSFER_TO_NPU={value!r}: expected 0 or 1")
    return value == "1"


def sanitizer_requested() -> bool:
    """TORCH_NPU_SANITIZER=1: loading softnpu enables torch.npu._sanitizer, which reports unsynchronized accesses to
    npu tensors from different streams."""
    value = os.environ.get("TORCH_NPU_SANITIZER", "")
    if value not in ("", "0", "1"):
        raise ConfigurationError(f"TORCH_NPU_SANITIZER={value!r}: expected 0 or 1")
    return value == "1"


def torch_version_error(running: str) -> TorchVersionError | None:
    """The error for running softnpu under torch `running`, or None if it is the torch softnpu was built for. Only the
    release part counts (2.13.0 of 2.13.0+cpu): local builds of one release share its ABI."""
    release = re.match(r"\d+(\.\d+)*", running)
    if release is not None and release.group() == TORCH_VERSION:
        return None
    return TorchVersionError(
        f"softnpu {SOFTNPU_VERSION} was built for torch {TORCH_VERSION}, but torch {running} is installed: install "
        f"the torch it was built for (pip install torch=={TORCH_VERSION}), or rebuild softnpu against this torch "
        "(make build)",
        name="softnpu",
    )


def check_torch() -> None:
    """Raises TorchVersionError unless the running torch is the one softnpu was built for."""
    import torch

    error = torch_version_error(torch.__version__)
    if error is not None:
        raise error


def autoload() -> None:
    """The ``torch.backends`` entry point: ``import torch`` alone registers npu.

    While softnpu itself is importing torch (``import softnpu`` first), ``import softnpu`` here finds it partly
    initialized, and softnpu completes the registration itself."""
    try:
        import softnpu  # noqa: F401  (importing softnpu registers the device)
    except (TorchVersionError, ConfigurationError) as e:
        warnings.warn(
            f"npu is not available: {e}. torch works without it; TORCH_DEVICE_BACKEND_AUTOLOAD=0 stops `import torch` "
            "from loading softnpu",
            RuntimeWarning,
            stacklevel=2,
        )


def main() -> int:
    """The ``softnpu`` command (softnpu/cli.py), or, when softnpu cannot load, what doctor can still tell."""
    try:
        from softnpu import cli
    except TorchVersionError as e:
        if sys.argv[1:2] == ["doctor"]:
            print(f"FAIL  torch  {e} -- hint: fix this first: the other checks need softnpu to load")
            print("softnpu doctor: 0 of 1 checks passed (the others need softnpu)")
        else:
            print(f"softnpu: {e}", file=sys.stderr)
        return 1
    return cli.main()
