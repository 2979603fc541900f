"""The Ascend-specific calls portable torch_npu code makes, with torch_npu's signatures. What they control on
Ascend (graph compilation of operators, CANN options, internal storage formats, AOE tuning, operator timeouts) has no
counterpart on a software NPU, whose kernels are ATen's; they are validated and recorded, and read back where
torch_npu reads them back. The overflow flag is real (kernels check their half-precision outputs) and stress_detect
runs a real self-test."""

from typing import Any

import torch

from .. import _C
from .device import _lazy_init

_options: dict[str, str] = {}
_aoe_dump_path: str | None = None
_op_timeout_ms: int | None = None


class _Config:
    """torch.npu.config: allow_internal_format (torch_npu: whether ops may pick private NPU formats such as
    NC1HWC0). softnpu keeps every tensor in its ATen layout, so the value is recorded only."""

    allow_internal_format = False


config = _Config()


def set_compile_mode(jit_compile: bool = False) -> None:
    """torch_npu: compile operators online (True) or use precompiled binaries (False). Recorded as the
    "jitCompile" option."""
    if not isinstance(jit_compile, bool):
        raise TypeError(f"jit_compile must be a bool, got {type(jit_compile).__name__}")
    _options["jitCompile"] = "enable" if jit_compile else "disable"


def is_jit_compile_false() -> bool:
    return _options.get("jitCompile", "disable") == "disable"


def set_option(option: dict) -> None:
    """torch_npu: CANN session options (e.g. {"ACL_OP_SELECT_IMPL_MODE": "high_performance"}); recorded."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    for k, v in option.items():
        _options[str(k)] = str(v)


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
    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 0:
        raise ValueError(f"set_op_timeout_ms: expected a non-negative int, got {timeout_ms!r}")
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
