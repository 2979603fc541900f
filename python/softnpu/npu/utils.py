"""torch_npu.npu.utils: where torch_npu keeps its device functions; here the same objects as torch.npu's, plus
``npu_check_overflow``, ``is_support_inf_nan`` and the CANN versions (``get_cann_version(module)``,
``_is_gte_cann_version``)."""

import re

import torch

from .. import _C
from ..cann import get_cann_version as _toolkit_version
from ..cann import get_driver_version as _driver_version
from .ascend import (  # noqa: F401
    clear_npu_overflow_flag,
    finalize_dump,
    get_npu_overflow_flag,
    init_dump,
    obfuscation_calculate,
    obfuscation_finalize,
    obfuscation_initialize,
    set_dump,
    set_op_timeout_ms,
    stress_detect,
)
from .device import (  # noqa: F401
    current_device,
    device,
    device_of,
    device_count,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_soc_version,
    is_available,
    set_device,
    synchronize,
)
from .interop import current_blas_handle, ipc_collect  # noqa: F401
from .memory import _erase_stream  # noqa: F401  (torch_npu.erase_stream)
from .streams import StreamContext, current_stream, default_stream, set_stream, stream  # noqa: F401
from .sync_debug import get_sync_debug_mode, set_sync_debug_mode  # noqa: F401

# CANN's components as torch_npu names them. All but the driver are softnpu's CANN toolkit tree (one version); the
# driver is softnpu's runtime, whose version npu-smi prints (softnpu/driver/version.info, see csrc/ascend).
_CANN_MODULES = ("CANN", "RUNTIME", "COMPILER", "HCCL", "TOOLKIT", "OPP", "OPP_KERNEL", "DRIVER")


def get_cann_version(module: str = "CANN") -> str:
    """The version of a CANN component (torch_npu's module names: CANN, RUNTIME, ..., DRIVER)."""
    if module not in _CANN_MODULES:
        raise RuntimeError(f"module should be in {list(_CANN_MODULES)}, but got {module}")
    return _driver_version() if module == "DRIVER" else _toolkit_version()


def _version_key(version: str) -> tuple:
    """Orders CANN's versions: 8.3.RC1 < 8.3.RC2 < 8.3.0 < 8.3.1 < 8.5.0 (a release candidate precedes the
    release). Alpha/beta tags count as release candidates 0."""
    parts = version.strip().split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise RuntimeError(f"Invalid CANN version: {version!r}")
    key = [int(parts[0]), int(parts[1])]
    third = parts[2] if len(parts) > 2 else "0"
    rc = re.fullmatch(r"(?i)rc(\d+)", third)
    if rc:
        key += [0, int(rc.group(1))]
    elif third.isdigit():
        key += [1, int(third)]
    else:
        key += [0, 0]
    return tuple(key)


def _is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    """Whether the component's version is `version` or later."""
    current = get_cann_version(module)
    if current == "not known":
        return False
    return _version_key(current) >= _version_key(version)


def is_support_inf_nan() -> bool:
    """Whether the chip computes with infinities and NaNs (INF_NAN mode: the 910B and later) rather than saturating
    (the 910A and 310P's overflow mode)."""
    return _C._soc_profile()["soc_version"] >= 220


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return bool(_C._soc_profile()["supports_bf16"])


def npu_check_overflow(grad):
    """Whether ``grad`` (a tensor or a float) holds inf or nan: torch_npu's check in its inf/nan mode (the 910B's).
    Reads the value back, so it synchronizes."""
    total = float(grad.float().sum()) if isinstance(grad, torch.Tensor) else float(grad)
    return total in (float("inf"), -float("inf")) or total != total
