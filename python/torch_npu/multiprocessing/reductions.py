"""torch_npu.multiprocessing.reductions: softnpu's (rebuild_npu_tensor, reduce_tensor, reduce_storage)."""

from softnpu.multiprocessing.reductions import rebuild_npu_tensor, reduce_storage, reduce_tensor  # noqa: F401

__all__ = ["rebuild_npu_tensor", "reduce_tensor", "reduce_storage"]
