"""torch.npu.matmul / torch.npu.conv (torch_npu's precision switches) and the autocast getters and setters.

allow_hf32 is recorded and read back as on Ascend, where it lets the cube unit compute float32 matmuls and
convolutions in HF32. softnpu's kernels are ATen's CPU kernels: they compute float32 in float32 whatever the switch
says, so it has no effect on numerics here."""

import torch


class _PrecisionSwitch:
    def __init__(self, name: str, allow_hf32: bool):
        self._name = name
        self.allow_hf32 = allow_hf32

    def __setattr__(self, key: str, value) -> None:
        if key == "allow_hf32" and not isinstance(value, bool):
            raise TypeError(f"torch.npu.{self._name}.allow_hf32 must be a bool, got {type(value).__name__}")
        if not key.startswith("_") and key != "allow_hf32":
            raise AttributeError(f"torch.npu.{self._name} has no setting '{key}' (only allow_hf32)")
        super().__setattr__(key, value)

    def __repr__(self) -> str:
        return f"torch.npu.{self._name}(allow_hf32={self.allow_hf32})"


# torch_npu's defaults: HF32 off for matmul, on for convolution.
matmul = _PrecisionSwitch("matmul", False)
conv = _PrecisionSwitch("conv", True)


def is_autocast_enabled() -> bool:
    """Whether autocast is on for npu in this thread (torch.is_autocast_enabled("npu"))."""
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("npu", enabled)


def get_autocast_dtype() -> torch.dtype:
    """The dtype autocast casts to on npu (float16 by default)."""
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("npu", dtype)
