"""torch_npu, served by softnpu: code written for Huawei's torch_npu runs unchanged on the software NPU."""

import sys

import softnpu
from softnpu import __version__, distributed, npu, profiler  # noqa: F401

# torch_npu.npu (torch.npu), torch_npu.profiler and torch_npu.distributed, with their submodules, are softnpu's.
for _name, _module in list(sys.modules.items()):
    if _name.split(".")[:2] in (["softnpu", "npu"], ["softnpu", "profiler"], ["softnpu", "distributed"]):
        sys.modules["torch_npu" + _name[len("softnpu"):]] = _module
del _name, _module
