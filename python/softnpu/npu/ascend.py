"""The Ascend-specific calls portable torch_npu code makes, with torch_npu's signatures. What they control on
Ascend (graph compilation of operators, CANN options, internal storage formats, AOE tuning, operator timeouts) has no
counterpart on a software NPU, whose kernels are ATen's; they are validated and recorded, and read back where
torch_npu reads them back. The overflow flag is real (kernels check their half-precision outputs) and stress_detect
runs a real self-test. set_deterministic_level turns torch's deterministic algorithms on or off as torch_npu does."""

import json
import os
import warnings
from typing import Any

import torch

from .. import _C
from .acl_init import check_jit_compile
from .device import _lazy_init

_options: dict[str, str] = {}
_aoe_dump_path: str | None = None
_op_timeout_ms: int | None = None


class _Config:
    """torch.npu.config: allow_internal_format (torch_npu: whether ops may pick private NPU formats such as
    NC1HWC0). softnpu keeps every tensor in its ATen layout, so the value is recorded only."""

    allow_internal_format = False


config = _Config()


# torch_npu's checks of set_option's values (the CANN options it validates; any other key is passed through).
_OPTION_CHOICES = {
    "ACL_PRECISION_MODE": ("allow_fp32_to_fp16", "must_keep_origin_dtype"),
    "ACL_OP_SELECT_IMPL_MODE": ("high_performance", "high_precision"),
    "ACL_OP_DEBUG_LEVEL": ("0", "1", "2", "3", "4"),
    "ACL_OP_COMPILER_CACHE_MODE": ("disable", "enable", "force"),
}
_DEPRECATED_OPTIONS = ("ACL_OP_SELECT_IMPL_MODE", "ACL_OPTYPELIST_FOR_IMPLMODE")


def set_compile_mode(jit_compile: bool = False) -> None:
    """torch_npu: compile operators online (True) or use precompiled binaries (False). Recorded as the
    "jitCompile" option; with aclops disabled (ACL_OP_INIT_MODE=2) it cannot change, as on torch_npu."""
    if not isinstance(jit_compile, bool):
        raise TypeError(f"jit_compile must be a bool, got {type(jit_compile).__name__}")
    check_jit_compile(jit_compile, not is_jit_compile_false())
    _options["jitCompile"] = "enable" if jit_compile else "disable"


def is_jit_compile_false() -> bool:
    return _options.get("jitCompile", "disable") == "disable"


def set_option(option: dict) -> None:
    """torch_npu: CANN session options (e.g. {"ACL_PRECISION_MODE": "must_keep_origin_dtype"}), validated as torch_npu
    validates them and recorded. MM_BMM_ND_ENABLE sets set_mm_bmm_format_nd."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    for name, value in option.items():
        value = str(value)
        choices = _OPTION_CHOICES.get(name)
        if choices is not None and value not in choices:
            raise ValueError(f"value of {name} should be in {list(choices)} but got {value}")
        if name == "ACL_AICORE_NUM" and not (value.isdigit() and 1 <= int(value) <= 32):
            raise ValueError(f"value of {name} should be an integer from 1 to 32 but got {value}")
        if name in _DEPRECATED_OPTIONS:
            warnings.warn(f"{name} will be deprecated in a future version. The accuracy or performance may not be "
                          "optimal when configuring this option. We do not recommend setting it.")
    if option.get("MM_BMM_ND_ENABLE") in ("enable", "disable"):
        set_mm_bmm_format_nd(option["MM_BMM_ND_ENABLE"] == "enable")
    for name, value in option.items():
        _options[str(name)] = str(value)


_mm_bmm_format_nd = True


def set_mm_bmm_format_nd(is_nd: bool = True) -> None:
    """torch_npu: whether Linear's matmuls keep ND (else FRACTAL_NZ) operands. Recorded: softnpu's matmuls read ND."""
    global _mm_bmm_format_nd
    _mm_bmm_format_nd = bool(is_nd)


def get_mm_bmm_format_nd() -> bool:
    return _mm_bmm_format_nd


def init_dump() -> None:
    """torch_npu: turns ACL's model data dump on (the configuration set_dump names). Recorded: softnpu dumps nothing
    (torch.npu's tools that dump tensors, such as msprobe, work from Python)."""
    _options["mdldumpswitch"] = "enable"


def set_dump(cfg_file: str) -> None:
    """torch_npu: ACL's dump configuration file (acl.json's "dump" section). The file must exist and be JSON; its path
    is recorded."""
    if not os.path.exists(cfg_file):
        raise AssertionError(f"cfg_file {cfg_file} path does not exists.")
    with open(cfg_file) as f:
        try:
            json.load(f)
        except ValueError as e:
            raise ValueError(f"set_dump: {cfg_file} is not a JSON dump configuration: {e}") from None
    _options["mdldumpconfigpath"] = os.path.realpath(cfg_file)


def finalize_dump() -> None:
    _options["mdldumpswitch"] = "disable"


def use_compatible_impl(is_enable: bool) -> None:
    """torch_npu: ops follow PyTorch's semantics where an Ascend kernel differs (TORCH_NPU_USE_COMPATIBLE_IMPL).
    softnpu's kernels are ATen's, so they always do; the choice is recorded and read back."""
    _options["TORCH_NPU_USE_COMPATIBLE_IMPL"] = "1" if is_enable else "0"


def are_compatible_impl_enabled() -> bool:
    return _options.get("TORCH_NPU_USE_COMPATIBLE_IMPL") == "1"


_deterministic_level = 0


def set_deterministic_level(level: int) -> None:
    """torch_npu's deterministic levels: 0 off, 1 and 2 deterministic kernels, 3 also the same results whatever the
    batch size. As torch_npu, level 0 turns torch.use_deterministic_algorithms off and any other level turns it on
    (warning when that changes torch's setting); npu's ops then honour torch's flag as the CPU's kernels do."""
    global _deterministic_level
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
        raise RuntimeError("'torch_npu.npu.set_deterministic_level' supports configuring 0/1/2/3.")
    enabled = torch.are_deterministic_algorithms_enabled()
    if (level == 0) == enabled:
        warnings.warn("The current configuration value of 'torch_npu.npu.set_deterministic_level' conflicts with "
                      "'torch.use_deterministic_algorithms'. 'torch.use_deterministic_algorithms' has been configured "
                      f"to '{level != 0}'.")
        torch.use_deterministic_algorithms(level != 0)
    _deterministic_level = level
    warnings.warn("After using 'torch_npu.npu.set_deterministic_level', please do not use "
                  "'torch.use_deterministic_algorithms' anymore, as it may cause unknown errors.")


def _get_deterministic_level() -> int:
    """The level in effect: torch's flag decides between 0 and the level set (1 if it was turned on without one)."""
    if not torch.are_deterministic_algorithms_enabled():
        return 0
    return _deterministic_level or 1


def _obfuscation_unavailable(name: str):
    raise RuntimeError(f"torch.npu.{name}: model obfuscation runs inside Ascend's confidential-computing agent "
                       "(PMCC) on the NPU's host driver, which a software NPU does not have.")


def obfuscation_initialize(hidden_size, tp_rank, cmd, *, data_type=None, model_obf_seed_id=0, data_obf_seed_id=0,
                           thread_num=4, obf_coefficient=1.0):
    """torch_npu: sets up model obfuscation (a secret transform kept in a trusted agent). Raises RuntimeError here."""
    _obfuscation_unavailable("obfuscation_initialize")


def obfuscation_calculate(fd, x, param, *, obf_coefficient=1.0):
    _obfuscation_unavailable("obfuscation_calculate")


def obfuscation_finalize(fd_to_close):
    _obfuscation_unavailable("obfuscation_finalize")


def get_option(key: str) -> Any:
    """The value set_option or set_compile_mode recorded for `key` (None if never set)."""
    return _options.get(key)


def set_aoe(dump_path: str) -> None:
    """torch_npu: turn on AOE operator tuning, dumping graphs under dump_path. Recorded; softnpu does no tuning."""
    global _aoe_dump_path
    if not isinstance(dump_path, str) or not dump_path:
        raise ValueError("set_aoe: dump_path must be a non-empty string")
    _aoe_dump_path = dump_path


def set_op_timeout_ms(timeout_ms: int) -> None:
    """torch_npu: the operator execution timeout. Recorded; softnpu's kernels are never timed out."""
    global _op_timeout_ms
    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool):
        raise TypeError(f"set_op_timeout_ms: expected an int, got {type(timeout_ms).__name__}")
    # torch_npu reads it as an unsigned 32-bit int, with Python's and torch's errors for what does not fit.
    if timeout_ms < 0:
        raise OverflowError("can't convert negative value to unsigned int")
    if timeout_ms > 0xFFFFFFFF:
        raise ValueError("Overflow when unpacking long long")
    _op_timeout_ms = timeout_ms


def get_npu_overflow_flag() -> bool:
    """Whether a kernel wrote inf or nan to a float16 or bfloat16 tensor since clear_npu_overflow_flag (Ascend's
    floating-point status). Waits for the device's queued kernels. Kernels check their half-precision outputs only
    once the program has called this function or clear_npu_overflow_flag (the check costs a pass over each output),
    so call clear_npu_overflow_flag first."""
    _lazy_init()
    torch.npu.synchronize()
    return _C._get_overflow_flag()


def clear_npu_overflow_flag() -> None:
    """Clears the overflow flag (after the device's queued kernels), and turns the check on from now."""
    _lazy_init()
    torch.npu.synchronize()
    _C._clear_overflow_flag()


def stress_detect() -> int:
    """torch_npu's hardware self-test: 0 on success. Runs matrix, convolution and reduction kernels on the current
    npu device and compares them with the CPU; 1 if any differs."""
    _lazy_init()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 128, generator=g), torch.randn(128, 128, generator=g)
    x, w = torch.randn(2, 3, 16, 16, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    checks = [
        (lambda a, b: a @ b, (a, b)),
        (lambda x, w: torch.nn.functional.conv2d(x, w), (x, w)),
        (lambda a, b: torch.softmax(a + b, dim=1).sum(0), (a, b)),
    ]
    for fn, args in checks:
        got = fn(*(t.npu() for t in args)).cpu()
        if not torch.allclose(got, fn(*args), rtol=1e-4, atol=1e-4):
            return 1
    return 0
