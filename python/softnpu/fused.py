"""torch_npu's fused ops: ``torch_npu.npu_fusion_attention``, ``npu_rms_norm``, ``npu_rotary_mul``, ``npu_swiglu``,
``npu_geglu``, ``npu_format_cast`` (and ``npu_format_cast_``), ``get_npu_format``, ``empty_with_format``,
``get_storage_size``, with their backward ops; ``Format``, torch_npu's enumeration of tensor formats, which ``get_npu_format`` returns.

Each is the dispatcher op ``torch.ops.npu.<name>`` registered by softnpu's C++ (csrc/fused/, whose README describes
the ops and their arguments): torch_npu's schema and defaults, a Meta kernel (tracing, torch.compile), an autograd
formula, and on npu tensors a kernel on the current stream like any op. The names here are the op packets
themselves, so they take torch_npu's positional and keyword arguments.
"""

from enum import IntEnum

import torch

from . import _C  # noqa: F401  (registers the npu op namespace)

npu_fusion_attention = torch.ops.npu.npu_fusion_attention
npu_fusion_attention_grad = torch.ops.npu.npu_fusion_attention_grad
npu_rms_norm = torch.ops.npu.npu_rms_norm
npu_rms_norm_backward = torch.ops.npu.npu_rms_norm_backward
npu_rotary_mul = torch.ops.npu.npu_rotary_mul
npu_rotary_mul_backward = torch.ops.npu.npu_rotary_mul_backward
npu_swiglu = torch.ops.npu.npu_swiglu
npu_swiglu_backward = torch.ops.npu.npu_swiglu_backward
npu_geglu = torch.ops.npu.npu_geglu
npu_geglu_grad = torch.ops.npu.npu_geglu_grad
empty_with_format = torch.ops.npu.empty_with_format
get_storage_size = torch.ops.npu.get_storage_size


class Format(IntEnum):
    """torch_npu's tensor formats (aclFormat's values). Here ND, NCHW, NHWC, ... are metadata over ND data; the
    private ones (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...) are named so code can compare with them, but no tensor has
    one (casting to one raises NotImplementedError)."""
    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54

    def __str__(self):
        return self.name


def get_npu_format(tensor):
    """``tensor``'s format as a ``Format`` (an int: ``get_npu_format(x) == 2`` holds for ND), as torch_npu returns it."""
    return Format(torch.ops.npu.get_npu_format(tensor))


def npu_format_cast(tensor, acl_format):
    """A copy of ``tensor`` in format ``acl_format`` (ND=2, NCHW=0, NHWC=1, ...): metadata, the data stays ND. The
    private formats (NC1HWC0=3, FRACTAL_Z=4, FRACTAL_NZ=29, ...) raise NotImplementedError (not stored here)."""
    return torch.ops.npu.npu_format_cast(tensor, acl_format)


def npu_format_cast_(tensor, acl_format):
    """Sets ``tensor``'s format in place (metadata only; the private formats raise) and returns it."""
    return torch.ops.npu.npu_format_cast_.acl_format(tensor, acl_format)


__all__ = [
    "npu_fusion_attention", "npu_fusion_attention_grad", "npu_rms_norm", "npu_rms_norm_backward", "npu_rotary_mul",
    "npu_rotary_mul_backward", "npu_swiglu", "npu_swiglu_backward", "npu_geglu", "npu_geglu_grad", "npu_format_cast",
    "npu_format_cast_",
    "get_npu_format", "empty_with_format", "get_storage_size", "Format",
]

# As on torch_npu, the format casts are also tensor methods (x.npu_format_cast(29)).
torch.Tensor.npu_format_cast = npu_format_cast
torch.Tensor.npu_format_cast_ = npu_format_cast_
