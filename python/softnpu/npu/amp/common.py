"""torch.npu.amp.common (torch.cuda.amp.common's counterpart)."""

from ..device import is_available


def amp_definitely_not_available() -> bool:
    """True when no npu device is there, so mixed precision cannot run on one."""
    return not is_available()
