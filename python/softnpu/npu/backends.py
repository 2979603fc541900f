"""torch.npu.backends: torch.npu.matmul / torch.npu.conv (torch_npu's precision switches), the autocast getters and
setters, the attention and linear algebra switches, torch_npu's deterministic regions and its FFT plan cache.

allow_hf32 is recorded and read back as on Ascend, where it lets the cube unit compute float32 matmuls and
convolutions in HF32. softnpu's kernels are ATen's CPU kernels: they compute float32 in float32 whatever the switch
says, so it has no effect on numerics here."""

import enum

import torch

from .. import _C


class CubeMathType(enum.IntEnum):
    """torch_npu's choices for torch.npu.matmul.cube_math_type: how the cube unit computes float32 matmuls on Ascend.
    Recorded; softnpu computes float32 in float32 whatever is chosen."""

    KEEP_DTYPE = 0
    ALLOW_FP32_DOWN_PRECISION = 1
    USE_FP16 = 2
    USE_HF32 = 3
    FORCE_GRP_ACC_FOR_FP32 = 4
    USE_FP32_ADD = 4


class _PrecisionSwitch:
    def __init__(self, name: str, allow_hf32: bool, settings: tuple[str, ...] = ("allow_hf32",)):
        self._name = name
        self._settings = settings
        self.allow_hf32 = allow_hf32
        if "cube_math_type" in settings:
            self.cube_math_type = None  # torch_npu: None until set

    def __setattr__(self, key: str, value) -> None:
        if key == "allow_hf32" and not isinstance(value, bool):
            raise TypeError(f"torch.npu.{self._name}.allow_hf32 must be a bool, got {type(value).__name__}")
        if key == "cube_math_type" and value is not None and not isinstance(value, CubeMathType):
            raise TypeError("value should be one of Enum CubeMathType when setting cube_math_type, but got "
                            f"{type(value)}")
        if not key.startswith("_") and key not in self._settings:
            raise AttributeError(f"torch.npu.{self._name} has no setting '{key}' (only {', '.join(self._settings)})")
        super().__setattr__(key, value)

    def __repr__(self) -> str:
        return f"torch.npu.{self._name}(allow_hf32={self.allow_hf32})"


# torch_npu's defaults: HF32 off for matmul, on for convolution.
matmul = _PrecisionSwitch("matmul", False, ("allow_hf32", "cube_math_type"))
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


# torch.npu.backends: scaled_dot_product_attention's kernel switches and the linear algebra library, as
# torch.backends.cuda's. They are ATen's process-wide settings, which npu's attention choice (the CPU's, ops/attention.cpp)
# and linear algebra honour.
enable_flash_sdp = torch.backends.cuda.enable_flash_sdp
flash_sdp_enabled = torch.backends.cuda.flash_sdp_enabled
enable_mem_efficient_sdp = torch.backends.cuda.enable_mem_efficient_sdp
mem_efficient_sdp_enabled = torch.backends.cuda.mem_efficient_sdp_enabled
enable_math_sdp = torch.backends.cuda.enable_math_sdp
math_sdp_enabled = torch.backends.cuda.math_sdp_enabled
sdp_kernel = torch.backends.cuda.sdp_kernel


def preferred_linalg_library(backend=None) -> "torch._C._LinalgBackend":
    """torch_npu: npu has no choice of linear algebra library (its linalg ops are ATen's own kernels here, on Ascend
    its operators), so the answer is always Default and a choice given is ignored, as torch_npu does."""
    return torch._C._LinalgBackend.Default


class _DeterministicRegion(torch.autograd.Function):
    """Identity whose forward sets deterministic algorithms to `forward_value` and whose backward sets the opposite,
    so a region marked by enable/disable is deterministic in the backward pass too (which runs it in reverse)."""

    @staticmethod
    def forward(ctx, tensor, forward_value):
        torch.use_deterministic_algorithms(forward_value)
        ctx.forward_value = forward_value
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        torch.use_deterministic_algorithms(not ctx.forward_value)
        return grad, None


def enable_deterministic_with_backward(tensor: torch.Tensor) -> torch.Tensor:
    """torch_npu's: deterministic algorithms from here on, and in the backward of what follows until the matching
    disable_deterministic_with_backward."""
    return _DeterministicRegion.apply(tensor, True)


def disable_deterministic_with_backward(tensor: torch.Tensor) -> torch.Tensor:
    return _DeterministicRegion.apply(tensor, False)


class _FFTPlanCache:
    """torch_npu's torch.npu.backends.fft_plan_cache (CUDA's cufft_plan_cache, one for the process as torch_npu's):
    the plans the host prepares once per FFT geometry (csrc/backend/ops/fft_plan_cache.h says what a plan is here).
    size is read-only; max_size bounds the plans (0 keeps none); clear() drops them."""

    @property
    def size(self) -> int:
        return _C._fft_plan_cache_size()

    @size.setter
    def size(self, value) -> None:
        raise RuntimeError(".size is a read-only property showing the number of plans currently in the cache.")

    @property
    def max_size(self) -> int:
        return _C._fft_plan_cache_max_size()

    @max_size.setter
    def max_size(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"fft_plan_cache.max_size must be an int, got {type(value).__name__}")
        _C._set_fft_plan_cache_max_size(value)

    def clear(self) -> None:
        _C._clear_fft_plan_cache()

    def __setattr__(self, name: str, value) -> None:
        if name not in ("size", "max_size"):
            raise AttributeError(f"Unknown attribute {name}")
        super().__setattr__(name, value)


fft_plan_cache = _FFTPlanCache()
