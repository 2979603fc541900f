"""torch_npu's NPU graph operator handlers (npugraph_handler.py: the base class and the registry;
simple_handler.py: the built-in handlers that only update arguments)."""

from . import simple_handler  # noqa: F401  (registers the built-in handlers)
from .npugraph_handler import NpuGraphOpHandler, register_npu_graph_handler

__all__ = ["NpuGraphOpHandler", "register_npu_graph_handler"]
