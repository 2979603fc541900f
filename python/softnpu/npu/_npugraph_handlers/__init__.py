"""torch_npu's NPU graph operator handlers (npugraph_handler.py: the base class and the registry)."""

from .npugraph_handler import NpuGraphOpHandler, register_npu_graph_handler

__all__ = ["NpuGraphOpHandler", "register_npu_graph_handler"]
