"""softnpu: a software NPU for PyTorch.

Importing softnpu (or torch_npu, or just torch: softnpu registers itself through the ``torch.backends`` entry point)
makes the ``npu`` device available: ``torch.device("npu:0")``, ``tensor.npu()``, ``torch.npu``. Device memory,
streams and kernels are provided by softnpu's runtime, which executes ATen's CPU kernels on its own compute threads.
"""

import os
import sys

import torch
import softnpu_loader

softnpu_loader.check_torch()  # before the extension: under another torch it would fail on undefined symbols
from . import cann  # noqa: E402

cann.setup_environment()  # ASCEND_HOME_PATH and the rest of CANN's set_env.sh, unless the user has a CANN
torch.version.cann = cann.get_cann_version()  # as torch_npu sets it (ColossalAI and MindSpeed read it)
# Read before anything is registered, so a malformed value leaves nothing half done.
_TRANSFER_TO_NPU = softnpu_loader.transfer_to_npu_requested()
_SANITIZER = softnpu_loader.sanitizer_requested()
from . import _C  # noqa: E402,F401  (loads the backend: kernels, guard, hooks, allocators)
from . import npu  # noqa: E402
from . import multiprocessing  # noqa: E402,F401  (npu tensors through torch.multiprocessing)
from . import fused, optim  # noqa: E402
from .fused import *  # noqa: E402,F401,F403  (torch_npu.npu_fusion_attention, ...)

__version__ = "0.1.0"
__all__ = ["npu", "optim", "__version__", *fused.__all__]


def _register():
    if getattr(torch, "npu", None) is npu:
        return
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)
    # Submodules under their torch.npu names, so `from torch.npu.amp import ...` finds these modules rather than
    # loading second copies.
    for name, module in list(sys.modules.items()):
        if name.startswith("softnpu.npu."):
            sys.modules["torch.npu." + name[len("softnpu.npu."):]] = module
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    # Lazy modules' uninitialized parameters allow a list of methods, .cuda() among them: let .npu() move them too.
    torch.nn.parameter.UninitializedTensorMixin._allowed_methods.append(torch.Tensor.npu)


_register()

from . import inductor  # noqa: E402

inductor.install()  # torch.compile on npu, once Dynamo and Inductor are imported

if torch.distributed.is_available():
    from . import distributed  # noqa: E402,F401  (registers the hccl collective backend)

if _TRANSFER_TO_NPU:
    from .contrib import transfer_to_npu  # noqa: E402,F401  (TORCH_TRANSFER_TO_NPU=1: as if the program imported it)

if _SANITIZER:
    npu._sanitizer.enable_npu_sanitizer()  # TORCH_NPU_SANITIZER=1, once npu is fully registered
