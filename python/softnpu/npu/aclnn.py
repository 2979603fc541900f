"""torch.npu.aclnn: the switches of torch_npu's aclnn operators. allow_hf32 is the convolutions' HF32 switch (the same
setting as torch.npu.conv.allow_hf32; recorded, no effect on numerics here), settable directly or for a block with
flags(allow_hf32=...)."""

import contextlib
import sys
import types
import warnings

from .backends import conv


def version():
    """torch_npu: the aclnn library's version, which it does not report (None, with its warning)."""
    warnings.warn("torch.npu.aclnn.version isn't implemented!")
    return None


def set_flags(_allow_hf32=None):
    """Sets the switches given (None leaves one as it is); returns the previous values."""
    previous = (conv.allow_hf32,)
    if _allow_hf32 is not None:
        conv.allow_hf32 = _allow_hf32
    return previous


@contextlib.contextmanager
def flags(allow_hf32=True):
    """The switches for the duration of a block, restored after it."""
    previous = set_flags(allow_hf32)
    try:
        yield
    finally:
        set_flags(*previous)


class _AclnnModule(types.ModuleType):
    @property
    def allow_hf32(self) -> bool:
        return conv.allow_hf32

    @allow_hf32.setter
    def allow_hf32(self, value: bool) -> None:
        conv.allow_hf32 = value


sys.modules[__name__].__class__ = _AclnnModule
__all__ = ["version", "allow_hf32", "flags", "set_flags"]
