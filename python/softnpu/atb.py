"""torch_npu.atb (this module under that name): the ATB operators torch_npu exports under that module
(npu_multi_head_latent_attention, ...), the dispatcher ops of the ``atb`` namespace registered by softnpu's C++
(csrc/fused/attention/). They are read from the dispatcher: every public op, and each op's private workspace query
(``_<op>_get_workspace``), which graph capture calls. The ATB ops torch_npu exports on torch_npu itself
(_npu_paged_attention, ...) are there, not here."""

import torch

from . import _C  # noqa: F401  (registers the atb namespace)


def _registered_ops():
    names = {qualified.partition("::")[2].split(".")[0] for qualified in torch._C._dispatch_get_all_op_names()
             if qualified.startswith("atb::")}
    public = {name for name in names if not name.startswith("_")}
    return sorted(public | {name for name in names if any(name == f"_{op}_get_workspace" for op in public)})


# No __all__, as torch_npu's torch_npu.atb has none: the op packets are module attributes, whose __module__ is
# torch's (torch._ops.atb), which a public list would have to name.
globals().update({name: getattr(torch.ops.atb, name) for name in _registered_ops()})
