"""torch.npu.amp: automatic mixed precision on npu (torch.cuda.amp's names)."""

from . import common  # noqa: F401  (torch.cuda.amp.common's counterpart)
from .autocast_mode import autocast, custom_bwd, custom_fwd
from .grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]
