"""torch_npu's fused ops: ``torch_npu.npu_fusion_attention``, ``npu_rms_norm``, ``npu_rotary_mul``, ``npu_swiglu``,
``npu_format_cast`` (and ``npu_format_cast_``), ``get_npu_format``, ``empty_with_format``, ``get_storage_size``, with
their backward ops.

Each is the dispatcher op ``torch.ops.npu.<name>`` registered by softnpu's C++ (csrc/fused/, whose README describes
the ops and their arguments): torch_npu's schema and defaults, a Meta kernel (tracing, torch.compile), an autograd
formula, and on npu tensors a kernel on the current stream like any op. The names here are the op packets
themselves, so they take torch_npu's positional and keyword arguments.
"""

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
get_npu_format = torch.ops.npu.get_npu_format
empty_with_format = torch.ops.npu.empty_with_format
get_storage_size = torch.ops.npu.get_storage_size


def npu_format_cast(tensor, acl_format):
    """A copy of ``tensor`` in format ``acl_format`` (ND=2, NCHW=0, NHWC=1, ...): metadata, the data stays ND. The
    private formats (NC1HWC0=3, FRACTAL_Z=4, FRACTAL_NZ=29, ...) raise NotImplementedError (not stored here)."""
    return torch.ops.npu.npu_format_cast(tensor, acl_format)


def npu_format_cast_(tensor, acl_format):
    """Sets ``tensor``'s format in place (metadata only; the private formats raise) and returns it."""
    return torch.ops.npu.npu_format_cast_.acl_format(tensor, acl_format)


__all__ = [
    "npu_fusion_attention", "npu_fusion_attention_grad", "npu_rms_norm", "npu_rms_norm_backward", "npu_rotary_mul",
    "npu_rotary_mul_backward", "npu_swiglu", "npu_swiglu_backward", "npu_format_cast", "npu_format_cast_",
    "get_npu_format", "empty_with_format", "get_storage_size",
]

# As on torch_npu, the format casts are also tensor methods (x.npu_format_cast(29)).
torch.Tensor.npu_format_cast = npu_format_cast
torch.Tensor.npu_format_cast_ = npu_format_cast_
