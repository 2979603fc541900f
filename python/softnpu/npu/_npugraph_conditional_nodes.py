"""torch.cond captured into an NPU graph as conditional nodes (torch_npu's torch.npu._npugraph_conditional_nodes, as
torch's cudagraph_conditional_nodes): under NPUGraphCaptureControlFlowOpDispatchMode a torch.cond with an npu
predicate records both branches, each in a conditional IF node of the graph (NPUGraph.begin_capture_to_if_node), so a
replay runs the branch the predicate's value selects at that replay. The false branch copies its outputs into the true
branch's, so the work captured after the cond reads one set of tensors whichever branch ran.

ControlFlowOpWarmupDispatchMode runs torch.cond eagerly, after capturing both branches once into a graph it drops, so
that what either branch initializes lazily exists before the real capture."""

from __future__ import annotations

import contextlib

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .graphs import NPUGraph, graph, is_current_stream_capturing
from .streams import Stream

__all__ = ["NPUGraphCaptureControlFlowOpDispatchMode", "ControlFlowOpWarmupDispatchMode"]


@contextlib.contextmanager
def _if_node(pred: torch.Tensor):
    capturing = NPUGraph.get_currently_capturing_graph()
    capturing.begin_capture_to_if_node(pred)
    try:
        yield
    finally:
        capturing.end_capture_to_conditional_node()


def if_else_node(pred: torch.Tensor, true_fn, false_fn, operands):
    """Captures torch.cond(pred, true_fn, false_fn, operands) as two conditional nodes; returns the outputs both
    branches write."""
    if not isinstance(pred, torch.Tensor) or pred.device.type != "npu":
        raise ValueError("Conditions must be on an npu device to use conditional nodes in npu graphs")
    # Both conditions come from the predicate's value before either branch runs.
    otherwise = torch.logical_not(pred)
    with _if_node(pred):
        outputs = true_fn(*operands)
    with _if_node(otherwise):
        for out, other in zip(pytree.tree_iter(outputs), pytree.tree_iter(false_fn(*operands))):
            out.copy_(other)
    return outputs


class NPUGraphCaptureControlFlowOpDispatchMode(TorchDispatchMode):
    """While an NPU graph captures: torch.cond becomes conditional nodes (nested conds too)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self) -> None:
        self.supports_higher_order_operators = True
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.higher_order.cond:
            with self:  # the branches may hold conds of their own
                return if_else_node(*args)
        return func(*args, **(kwargs or {}))


class ControlFlowOpWarmupDispatchMode(TorchDispatchMode):
    """Before capturing: each torch.cond runs eagerly, after both branches were captured once (relaxed mode, the graph
    dropped), so both sides are warmed up although the data takes one."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self) -> None:
        super().__init__()
        self.supports_higher_order_operators = True
        self.capture_stream = Stream()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.ops.higher_order.cond:
            return func(*args, **kwargs)
        if is_current_stream_capturing():  # a cond inside a branch being warmed up
            with self:
                return if_else_node(*args)
        with graph(NPUGraph(), stream=self.capture_stream, capture_error_mode="relaxed"), self:
            if_else_node(*args)
        return func(*args, **kwargs)
