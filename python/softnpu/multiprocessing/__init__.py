"""npu tensors shared between processes, as CUDA tensors are: ``torch.multiprocessing`` (``mp.Queue``, ``Pipe``,
``spawn``'s arguments) pickles an npu tensor as a handle to its device memory, which the receiving process maps (the
software device's memory lives in shared memory), with CUDA IPC's lifetime rules. ``reductions`` holds the reducers;
importing softnpu registers them."""

from . import reductions

__all__ = ["reductions"]
