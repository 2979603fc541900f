"""torch.distributed on npu: the ``hccl`` backend, under torch_npu's name.

Importing softnpu (which ``import torch`` does) registers it for the ``npu`` device type, so
``init_process_group("hccl")``, ``init_process_group("cpu:gloo,npu:hccl")`` and, with npu as the accelerator,
``init_process_group()`` (torch picks ``Backend.default_device_backend_map["npu"]``) run collectives on npu tensors,
DistributedDataParallel included. The backend carries them over Gloo through pinned host buffers, with HCCL's stream
semantics (see csrc/backend/c10d/process_group_hccl.h).
"""

import torch.distributed as dist

from ._c10d import ProcessGroupHCCL

__all__ = ["ProcessGroupHCCL", "is_hccl_available"]


def is_hccl_available() -> bool:
    """Whether the ``hccl`` backend can be used: always, as it needs nothing beyond Gloo."""
    return True


# ProcessGroupHCCL(store, rank, size, timeout) is the creator torch calls for each new group.
dist.Backend.register_backend("hccl", ProcessGroupHCCL, devices=["npu"])
# torch_npu adds it next to torch.distributed.is_nccl_available and is_gloo_available.
dist.is_hccl_available = is_hccl_available
