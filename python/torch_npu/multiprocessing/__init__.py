"""torch_npu.multiprocessing: as torch_npu's, only ``reductions`` (npu tensors through torch.multiprocessing, whose
reducers importing softnpu registers); torch.multiprocessing itself is used under its own name."""

from . import reductions  # noqa: F401
