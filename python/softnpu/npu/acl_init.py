"""ACL's initialization as torch_npu configures it: the aclInit configuration file (TORCH_ACL_INIT_CONFIG_PATH) and
how ACL's operator compiler (aclops) starts (ACL_OP_INIT_MODE). Both are read once, when the device initializes.

softnpu's CANN is 8.3.RC1 or later, so set_device is lazy, as on such a CANN: a user's aclInit file must then carry
``"defaultDevice": {"default_device": "0"}``, and torch_npu refuses to start without it. The file's other sections
(dump, profiling) configure CANN tools softnpu does not run; it is checked, not applied.
"""

import json
import os
import warnings

from ..error_code import ErrCode, pta_error

_ACL_OP_INIT_MODES = {0: "aclops initialized at start", 1: "aclops initialized at first use", 2: "aclops disabled"}
_acl_op_init_mode: int | None = None


def _default_acl_op_init_mode() -> int:
    """torch_npu's default for the chips softnpu presents (910B, 910_93 (A3) and 310P): lazy aclops (1) from CANN
    8.3.RC1 on, else aclops initialized at start (0)."""
    from .utils import _is_gte_cann_version

    return 1 if _is_gte_cann_version("8.3.RC1") else 0


def acl_op_init_mode() -> int:
    """ACL_OP_INIT_MODE: 0, 1 or 2 (see _ACL_OP_INIT_MODES). Another integer is warned about and replaced by the
    default, as torch_npu does; text that is not an integer is an error (torch_npu would read it as 0)."""
    global _acl_op_init_mode
    if _acl_op_init_mode is None:
        default = _default_acl_op_init_mode()
        text = os.environ.get("ACL_OP_INIT_MODE", "").strip()
        if not text:
            mode = default
        elif not text.lstrip("+-").isdigit():
            raise RuntimeError(f"ACL_OP_INIT_MODE={text!r} is not an integer: expected 0 (aclops initialized at "
                               "start), 1 (at first use) or 2 (disabled)" + pta_error(ErrCode.VALUE))
        elif int(text) in _ACL_OP_INIT_MODES:
            mode = int(text)
        else:
            warnings.warn(f"Get env ACL_OP_INIT_MODE not in [0, 1, 2], so reset it to the default value {default}. "
                          f"(ACL_OP_INIT_MODE={text!r})", stacklevel=2)
            mode = default
        _acl_op_init_mode = mode
    return _acl_op_init_mode


def check_jit_compile(jit_compile: bool, current: bool) -> None:
    """set_compile_mode's check: with aclops disabled (ACL_OP_INIT_MODE=2) the compile mode cannot change."""
    if jit_compile != current and acl_op_init_mode() == 2:
        raise RuntimeError("Jit compile set is disabled! If you want to set, please change the environment variable "
                           "ACL_OP_INIT_MODE to 0 or 1." + pta_error(ErrCode.NOT_SUPPORT))


def _config_error(message: str, code: ErrCode) -> RuntimeError:
    return RuntimeError(message + pta_error(code))


def check_init_config() -> str | None:
    """TORCH_ACL_INIT_CONFIG_PATH: the real path of the user's aclInit JSON file, checked as torch_npu checks it
    before aclInit (RuntimeError: the path does not resolve, the file cannot be opened or parsed, or it lacks the
    lazy set_device's defaultDevice of "0"); None when the variable is unset."""
    path = os.environ.get("TORCH_ACL_INIT_CONFIG_PATH")
    if path is None:
        return None
    real = os.path.realpath(path) if path and os.path.exists(path) else ""
    if not real:
        raise _config_error(f"TORCH_ACL_INIT_CONFIG_PATH {path} is invalid. Please set the environment variable "
                            "'TORCH_ACL_INIT_CONFIG_PATH' to a valid JSON config file path.", ErrCode.UNAVAIL)
    try:
        with open(real) as f:
            text = f.read()
    except OSError as e:
        raise _config_error(f"Failed to open user acl json {real}. Please ensure the file exists and has read "
                            f"permission. ({e.strerror})", ErrCode.UNAVAIL) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise _config_error(f"Failed to parse user acl json {real}. Please check that the file contains valid JSON "
                            f"syntax. Error: {e}", ErrCode.UNAVAIL) from None
    default_device = config.get("defaultDevice") if isinstance(config, dict) else None
    if not isinstance(default_device, dict):
        raise _config_error(f"User acl json {real} lacks 'defaultDevice' object, required for lazy set_device mode. "
                            "Please add: \"defaultDevice\": {\"default_device\": \"0\"}", ErrCode.VALUE)
    if default_device.get("default_device") != "0":
        raise _config_error(f"User acl json {real} requires 'defaultDevice.default_device' to be \"0\" in lazy "
                            "set_device mode. Please set: \"defaultDevice\": {\"default_device\": \"0\"}",
                            ErrCode.VALUE)
    return real


def initialize() -> None:
    """The checks of ACL's initialization, run by torch.npu's lazy initialization before the runtime starts."""
    check_init_config()
    acl_op_init_mode()
