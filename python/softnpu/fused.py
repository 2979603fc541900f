"""torch_npu's fused ops: every public op of the ``npu`` op namespace (``torch_npu.npu_fusion_attention``,
``npu_rms_norm``, ``npu_grouped_matmul``, ...), with their backward ops; ``Format``, torch_npu's enumeration of tensor
formats, which ``get_npu_format`` returns.

Each is the dispatcher op ``torch.ops.npu.<name>`` registered by softnpu's C++ (csrc/fused/, one folder per family,
whose READMEs describe the ops and their arguments): torch_npu's schema and defaults, a Meta kernel (tracing,
torch.compile), an autograd formula, and on npu tensors a kernel on the current stream like any op. The names here
are the op packets themselves, so they take torch_npu's positional and keyword arguments. They are read from the
dispatcher, not listed: an op registered in C++ is exported here (names starting with ``_`` are softnpu's internal
kernels and are not).
"""

from enum import IntEnum

import torch

from . import _C  # noqa: F401  (registers the npu op namespace)


def _registered_ops():
    """The public op names of the npu namespace, as registered by the C++ library."""
    names = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, name = qualified.partition("::")
        if namespace == "npu" and not name.startswith("_"):
            names.add(name.split(".")[0])
    return sorted(names)


_OPS = _registered_ops()
globals().update({name: getattr(torch.ops.npu, name) for name in _OPS})


def _signature(schema) -> str:
    """An overload's schema as its call reads: defaults as Python writes them (1e-06, not 9.9999999999999995e-07)."""
    args, keyword_only = [], False
    for arg in schema.arguments:
        if arg.kwarg_only and not keyword_only:
            args.append("*")
            keyword_only = True
        args.append(f"{arg.type} {arg.name}" + (f"={arg.default_value!r}" if arg.has_default_value() else ""))
    returns = [str(r.type) for r in schema.returns]
    result = returns[0] if len(returns) == 1 else f"({', '.join(returns)})"
    overload = f".{schema.overload_name}" if schema.overload_name else ""
    return f"{schema.name.partition('::')[2]}{overload}({', '.join(args)}) -> {result}"


def _document(name: str) -> None:
    # torch_npu documents each exported op (its __all__'s names all have a __doc__); a packet has none of its own.
    packet = getattr(torch.ops.npu, name)
    if packet.__doc__:
        return
    overloads = "\n".join(f"    {_signature(getattr(packet, o)._schema)}" for o in packet.overloads())
    packet.__doc__ = (
        f"torch_npu.{name}: the dispatcher op torch.ops.npu.{name}, with torch_npu's schema. On npu tensors it runs "
        "on the current stream like any op; its Meta kernel lets torch.compile and FakeTensor trace it.\n\n"
        f"Overloads:\n{overloads}\n"
    )


for _name in _OPS:
    _document(_name)
del _name


class Format(IntEnum):
    """torch_npu's tensor formats (aclFormat's values). Every one is metadata over ND data here: a tensor in
    FRACTAL_NZ keeps its shape and values, and get_storage_size reports torch_npu's padded size for it
    (csrc/backend/format.cpp)."""
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
    """A copy of ``tensor`` in format ``acl_format`` (an int: ND=2, NCHW=0, FRACTAL_NZ=29, ...; or a tensor whose
    format to take): metadata, the data stays ND. A private format gives its base format while
    ``torch.npu.config.allow_internal_format`` is False."""
    return torch.ops.npu.npu_format_cast(tensor, acl_format)


def npu_format_cast_(tensor, acl_format):
    """Sets ``tensor``'s format in place (an int, or a tensor whose format to take; metadata only) and returns it."""
    return torch.ops.npu.npu_format_cast_(tensor, acl_format)


__all__ = [*_OPS, "Format"]

# As on torch_npu, the format casts are also tensor methods (x.npu_format_cast(29)).
torch.Tensor.npu_format_cast = npu_format_cast
torch.Tensor.npu_format_cast_ = npu_format_cast_

_tensor_deepcopy = torch.Tensor.__deepcopy__


def _deepcopy_keeping_format(self, memo):
    """copy.deepcopy of an npu tensor keeps its format, as on torch_npu. There the format belongs to the storage,
    which deepcopy copies; here it belongs to the tensor (csrc/backend/format.cpp), which torch's __deepcopy__
    rebuilds around the copied storage, so the copy takes the original's backend metadata."""
    copied = _tensor_deepcopy(self, memo)
    if self.device.type == "npu" and copied is not self:
        metadata = torch._utils.get_tensor_metadata(self)
        if metadata:
            torch._utils.set_tensor_metadata(copied, metadata)
    return copied


torch.Tensor.__deepcopy__ = _deepcopy_keeping_format
