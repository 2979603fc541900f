"""torch_npu's super kernels: NPUGraph.super_kernel_optimize's options, checked as torch_npu checks them.

On Ascend, super_kernel_optimize hands a captured graph to the super-kernel compiler (aclskOptimize), which fuses its
kernels into fewer launches. softnpu's replay is already one submission of the captured kernels to the runtime, so
there is nothing further to fuse: the options are validated (unknown keys and wrong types raise RuntimeError with
torch_npu's PTA error code) and the graph replays as captured, with the same results."""

from __future__ import annotations

from typing import Any, Optional

from ..error_code import ErrCode, pta_error

# Each accepted key and the type of its value, as torch_npu's NPUGraph._validate_options.
_OPTIONS: dict[str, dict[str, Any]] = {
    "optimize_options": {
        "preload_code": int,
        "split_mode": int,
        "stream_fusion": int,
        "constant_codegen": int,
        "auto_op_parallel": int,
        "early_start": int,
        "opt_extend": str,
        "dcci_before_kernel_start": [str],
        "dcci_after_kernel_end": [str],
        "dcci_disable_on_kernel": [str],
        "ubuf_lock_ignore_kernel": [str],
        "aggressive_opt_strategies": {
            "event_breaker_bypass": int,
            "value_breaker_bypass": int,
            "task_breaker_bypass": int,
        },
    },
    "debug_options": {
        "debug_sync_all": int,
        "debug_op_exec_trace": int,
        "debug_cross_core_sync_check": int,
        "debug_per_op_max_core_num": int,
        "debug_extend": str,
    },
}


def _error(message: str) -> RuntimeError:
    return RuntimeError(message + pta_error(ErrCode.PARAM))


def validate_options(option_name: str, options: Optional[dict]) -> None:
    """Raises RuntimeError unless `options` is None or a dict of `option_name`'s keys with values of their types."""
    if options is None:
        return
    if not isinstance(options, dict):
        raise _error(f"{option_name} param must be dict or None.")
    accepted = _OPTIONS[option_name]
    for key, value in options.items():
        if key not in accepted:
            raise _error(f"Invalid {option_name} param key: '{key}'.")
        expected = accepted[key]
        if isinstance(expected, list):
            if not isinstance(value, list):
                raise _error(f"{option_name} param['{key}'] must be list, got {type(value).__name__}")
            for i, element in enumerate(value):
                if not isinstance(element, expected[0]):
                    raise _error(f"{option_name}['{key}'][{i}] must be {expected[0].__name__}, "
                                 f"got {type(element).__name__}")
        elif isinstance(expected, dict):
            if not isinstance(value, dict):
                raise _error(f"{option_name} param['{key}'] must be dict, got {type(value).__name__}")
            for sub_key, sub_value in value.items():
                if sub_key not in expected:
                    raise _error(f"Invalid sub_key '{sub_key}' in {option_name}['{key}'].")
                if not isinstance(sub_value, expected[sub_key]):
                    raise _error(f"{option_name}['{key}']['{sub_key}'] must be {expected[sub_key].__name__}, "
                                 f"got {type(sub_value).__name__}")
        elif not isinstance(value, expected):
            raise _error(f"{option_name} param['{key}'] must be {expected.__name__}, got {type(value).__name__}")
