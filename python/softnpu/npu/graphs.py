"""NPU graphs, as torch.cuda's graphs module: NPUGraph (capture, replay), the graph() context manager,
graph_pool_handle, make_graphed_callables, is_current_stream_capturing.

A capture records the kernels, copies and memsets launched on the capturing stream (the runtime's stream capture)
instead of running them; replay() enqueues the whole recorded sequence on the current stream as one launch.
Allocations during capture come from a private pool of the caching allocator, so the addresses the recorded kernels
use stay valid across replays; the pool lives as long as the graphs that captured into it. Random ops draw fresh
numbers on each replay (the npu generator's offset advances per replay, as CUDA's Philox offset does)."""

from __future__ import annotations

import gc
from typing import Any, Callable, Optional

import torch
from torch.utils import _pytree

from .. import _C
from .device import synchronize
from .host_memory import host_empty_cache
from .memory import empty_cache
from .streams import Stream, current_stream, stream as stream_context

_CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def is_current_stream_capturing() -> bool:
    """Whether the current stream of the current device is capturing an NPU graph."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """An opaque token for a memory pool several graph captures may share (pass it as `pool=`)."""
    return _C._graph_pool_handle()


class NPUGraph:
    """A captured sequence of npu work, replayed with one launch (torch.cuda.CUDAGraph's semantics)."""

    def __init__(self, keep_graph: bool = False):
        # keep_graph is accepted for torch.cuda's signature: an NPU graph is always kept and launchable after capture.
        self._graph = _C._NPUGraph()

    def capture_begin(self, pool: Optional[tuple[int, int]] = None, capture_error_mode: str = "global") -> None:
        """Begins capturing the current stream (not a default stream). Prefer `with torch.npu.graph(g)`."""
        if capture_error_mode not in _CAPTURE_MODES:
            raise ValueError(
                f"capture_error_mode must be one of {sorted(_CAPTURE_MODES)}, got {capture_error_mode!r}")
        self._graph.capture_begin(tuple(pool) if pool is not None else (0, 0), _CAPTURE_MODES[capture_error_mode])

    def capture_end(self) -> None:
        """Ends the capture; raises RuntimeError if an illegal call invalidated it."""
        self._graph.capture_end()

    def replay(self) -> None:
        """Enqueues the captured work on the current stream (asynchronous: returns before it runs)."""
        self._graph.replay()

    def reset(self) -> None:
        """Drops the captured graph and its reference to the memory pool."""
        self._graph.reset()

    def pool(self) -> tuple[int, int]:
        """The memory pool's token, to share it with another capture."""
        return self._graph.pool()

    def _node_count(self) -> int:
        """Kernels, copies and memsets captured (softnpu's, for tests and benchmarks)."""
        return self._graph.node_count()

    def _replay_count(self) -> int:
        """Replays so far (softnpu's, for tests and benchmarks)."""
        return self._graph.replay_count()


class graph:
    """Context manager that captures the npu work inside it into an NPUGraph, as torch.cuda.graph: the device is
    synchronized and the cache emptied first, and the work is captured on a side stream (or `stream`)."""

    default_capture_stream: Optional[Stream] = None

    def __init__(self, npu_graph: NPUGraph, pool: Optional[tuple[int, int]] = None,
                 stream: Optional[Stream] = None, capture_error_mode: str = "global"):
        if stream is None and graph.default_capture_stream is None:
            graph.default_capture_stream = Stream()
        self.pool = pool
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = stream_context(self.capture_stream)
        self.npu_graph = npu_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        synchronize()
        gc.collect()
        empty_cache()
        host_empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.npu_graph.capture_end()
        except RuntimeError:
            # An error inside the block (the op that invalidated the capture) says more than the invalidation.
            if exc is None:
                raise
        finally:
            self.stream_ctx.__exit__(exc_type, exc, tb)
        return False


def _tensors(args: tuple, what: str) -> tuple[torch.Tensor, ...]:
    flat, _ = _pytree.tree_flatten(args)
    for a in flat:
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"make_graphed_callables: {what} may only hold tensors, got {type(a).__name__}")
    return tuple(flat)


def _graphed(fn: Callable, sample_args: tuple, num_warmup_iters: int, allow_unused_input: bool,
             pool: tuple[int, int]) -> Callable:
    params = tuple(p for p in fn.parameters() if p.requires_grad) if isinstance(fn, torch.nn.Module) else ()
    static_inputs = _tensors(sample_args, "sample_args") + params
    needs_grad = tuple(t for t in static_inputs if t.requires_grad)

    def grads_of(outputs, grad_outputs):
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
        if not pairs or not needs_grad:
            return (None,) * len(needs_grad)
        return torch.autograd.grad(tuple(o for o, _ in pairs), needs_grad, tuple(g for _, g in pairs),
                                   allow_unused=allow_unused_input)

    # Warm-up, so lazy initializations happen before capture, not inside it; on the stream the captures use, with
    # its autograd graphs dropped: autograd nodes of another stream kept alive would make the capture's backward
    # synchronize streams through events, which a capture refuses.
    if graph.default_capture_stream is None:
        graph.default_capture_stream = Stream()
    synchronize()
    with stream_context(graph.default_capture_stream):
        for _ in range(num_warmup_iters):
            outputs = _pytree.tree_leaves(fn(*sample_args))
            grads_of(outputs, tuple(torch.ones_like(o) for o in outputs))
            del outputs
    synchronize()

    fwd_graph, bwd_graph = NPUGraph(), NPUGraph()
    with graph(fwd_graph, pool=pool):
        static_out = fn(*sample_args)
    static_outputs, out_spec = _pytree.tree_flatten(static_out)
    static_grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None for o in static_outputs)
    with graph(bwd_graph, pool=pool):
        static_grads = grads_of(static_outputs, static_grad_outputs)
    grad_of_input = dict(zip((id(t) for t in needs_grad), static_grads))
    static_grad_inputs = tuple(grad_of_input.get(id(t)) for t in static_inputs)

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, new in zip(static_inputs, inputs):
                if static.data_ptr() != new.data_ptr():
                    static.copy_(new)
            fwd_graph.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            for static, g in zip(static_grad_outputs, grads):
                if static is not None and g is not None:
                    static.copy_(g)
            bwd_graph.replay()
            # Copies: autograd may keep a returned gradient as a leaf's .grad, which the next replay would overwrite.
            return tuple(g.clone() if g is not None else None for g in static_grad_inputs)

    def run(*args):
        flat = _tensors(args, "the arguments")
        return _pytree.tree_unflatten(list(Graphed.apply(*(flat + params))), out_spec)

    run._fwd_graph, run._bwd_graph = fwd_graph, bwd_graph
    return run


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Optional[tuple[int, int]] = None) -> Any:
    """Graphed versions of callables (modules or functions), as torch.cuda.make_graphed_callables: each one's forward
    and backward are captured into NPU graphs (sharing one memory pool) from `sample_args`, and replayed when called
    with tensors of the same shapes. A module keeps its eager forward when its training mode or grad mode differs
    from the capture's."""
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError("make_graphed_callables: one tuple of sample args per callable")
    pool = pool if pool is not None else graph_pool_handle()
    result = []
    for fn, args in zip(callables, sample_args):
        if isinstance(fn, torch.nn.Module) and (fn._backward_hooks or fn._forward_hooks or fn._forward_pre_hooks):
            raise RuntimeError("make_graphed_callables: modules must not have hooks registered when graphed")
        run = _graphed(fn, tuple(args), num_warmup_iters, allow_unused_input, pool)
        if isinstance(fn, torch.nn.Module):
            eager_forward, training = fn.forward, fn.training

            def forward(*a, _run=run, _eager=eager_forward, _module=fn, _training=training):
                if _module.training == _training and torch.is_grad_enabled() == _training:
                    return _run(*a)
                return _eager(*a)

            fn.forward = forward
            result.append(fn)
        else:
            result.append(run)
    return result[0] if single else tuple(result)


__all__ = ["NPUGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables"]
