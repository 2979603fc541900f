"""torch_npu.multiprocessing.reductions: softnpu's reducers (softnpu/multiprocessing/reductions.py) under torch_npu's
name. Public, as torch_npu's: rebuild_npu_tensor (the function an npu tensor's pickle calls), which takes this
module as its home, as PyTorch's re-exporting modules do; reduce_tensor and reduce_storage (torch_npu's are private)
are attributes only."""

from softnpu.multiprocessing.reductions import rebuild_npu_tensor, reduce_storage, reduce_tensor  # noqa: F401

__all__ = ["rebuild_npu_tensor"]

rebuild_npu_tensor.__module__ = __name__
