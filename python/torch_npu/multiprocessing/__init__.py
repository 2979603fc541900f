"""torch_npu.multiprocessing: torch.multiprocessing with npu tensors shared as CUDA's are (softnpu.multiprocessing,
whose reducers importing torch_npu registers)."""

from torch.multiprocessing import *  # noqa: F401,F403

from . import reductions  # noqa: F401
