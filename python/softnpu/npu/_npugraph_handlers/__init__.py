"""torch_npu's NPU graph operator handlers (npugraph_handler.py: the base class and the registry;
simple_handler.py: the built-in handlers that only update arguments; ifa_handler.py: those of
npu_fused_infer_attention_score and its v2, which capture a functional call as its .out form)."""

from . import ifa_handler, simple_handler  # noqa: F401  (register the built-in handlers)
from .npugraph_handler import NpuGraphOpHandler, register_npu_graph_handler

__all__ = ["NpuGraphOpHandler", "register_npu_graph_handler"]
