"""torch_npu._C._distributed_c10d: ``ProcessGroupHCCL`` and ``ProcessGroupHCCL.Options`` (softnpu's hccl backend)."""

from softnpu.distributed import ProcessGroupHCCL  # noqa: F401
