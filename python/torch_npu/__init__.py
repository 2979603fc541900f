"""torch_npu, served by softnpu: code written for Huawei's torch_npu runs unchanged on the software NPU."""

import sys

import softnpu
from softnpu import __version__, npu  # noqa: F401

# torch_npu.npu and its submodules are torch.npu's.
for _name, _module in list(sys.modules.items()):
    if _name == "softnpu.npu" or _name.startswith("softnpu.npu."):
        sys.modules["torch_npu" + _name[len("softnpu"):]] = _module
del _name, _module
