"""torch.npu.set_sync_debug_mode / get_sync_debug_mode, as torch.cuda's: report every host synchronization an op
makes on its own (Tensor.item(), a host fallback of a data-dependent op, a blocking or pageable copy), naming the op.
Explicit synchronizations (torch.npu.synchronize, Stream.synchronize, Event.synchronize) are never reported."""

from typing import Union

from .. import _C

_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: Union[int, str]) -> None:
    """0 or "default": no report; 1 or "warn": a UserWarning naming the op; 2 or "error": a RuntimeError naming the op
    (the op does not run)."""
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError('invalid value of debug_mode, expected one of `default`, `warn`, `error`')
        debug_mode = _MODES[debug_mode]
    if not isinstance(debug_mode, int) or isinstance(debug_mode, bool) or debug_mode not in (0, 1, 2):
        raise RuntimeError("invalid value of debug_mode, expected one of 0,1,2")
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    return _C._get_sync_debug_mode()
