"""NPU graphs, as torch.cuda's graphs module: NPUGraph (capture, replay), the graph() context manager,
graph_pool_handle, make_graphed_callables, is_current_stream_capturing.

A capture records the kernels, copies and memsets launched on the capturing stream (the runtime's stream capture)
instead of running them; replay() enqueues the whole recorded sequence on the current stream as one launch.
Allocations during capture come from a private pool of the caching allocator, so the addresses the recorded kernels
use stay valid across replays; the pool lives as long as the graphs that captured into it. Random ops draw fresh
numbers on each replay, as CUDA's graph-safe RNG: a captured random op draws at run time from the generator's
(seed, offset) at that replay, so it draws what eager would at the same seed and offset, and each replay advances
the generator by the graph's offsets. Streams that wait on the capturing stream (wait_stream, an event recorded
during capture) join the capture until it ends."""

from __future__ import annotations

import dataclasses
import gc
import logging
import warnings
from typing import Any, Callable, Optional

import torch
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _C
from . import _npugraph_utils, super_kernel
# torch_npu's graph tensor dump specs, under torch_npu.npu.graphs' names.
from .graph_tensor_dump import (  # noqa: F401
    _NPUGRAPH_TENSOR_BUFFER_SPEC_MARKER,
    _NPUGRAPH_TENSOR_PTR_SPEC_MARKER,
    _make_npugraph_tensor_ptr_spec,
    _materialize_npugraph_tensor_arg,
)
from .device import synchronize
from .host_memory import host_empty_cache
from .memory import empty_cache
from ._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS
from .streams import ExternalEvent, Stream, current_stream, stream as stream_context

_CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def is_current_stream_capturing() -> bool:
    """Whether the current stream of the current device is capturing an NPU graph."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """An opaque token for a memory pool several graph captures may share (pass it as `pool=`)."""
    return _C._graph_pool_handle()


def _stream_key(stream: torch.Stream) -> tuple[int, int]:
    return stream.device_index, stream.stream_id


_capturing: dict[tuple[int, int], "NPUGraph"] = {}  # the graph each capturing stream records into
_updating: dict[tuple[int, int], tuple["_TaskGroup", Any]] = {}  # the task group each updating stream rewrites


class NPUGraph:
    """A captured sequence of npu work, replayed with one launch (torch.cuda.CUDAGraph's semantics).

    torch_npu's task groups (graph_task_group_begin/end) cut the capture into segments, each a graph of the runtime
    sharing the first one's memory pool; replay() launches them in order, so the work runs as captured."""

    def __init__(self, keep_graph: bool = False):
        # keep_graph is accepted for torch.cuda's signature: an NPU graph is always kept and launchable after capture.
        self._graph = _C._NPUGraph()
        self._segments = [self._graph]
        self._mode = 0
        self._stream: Optional[tuple[int, int]] = None
        self.auto_dispatch_capture = False  # set by graph(..., auto_dispatch_capture=True)
        self.graph_dispatch_mode = _GraphDispatchMode()
        self._captured = False  # a capture ended successfully and reset() has not dropped it

    def capture_begin(self, pool: Optional[tuple[int, int]] = None, capture_error_mode: str = "global") -> None:
        """Begins capturing the current stream (not a default stream). Prefer `with torch.npu.graph(g)`."""
        if capture_error_mode not in _CAPTURE_MODES:
            raise ValueError(
                f"capture_error_mode must be one of {sorted(_CAPTURE_MODES)}, got {capture_error_mode!r}")
        self._mode = _CAPTURE_MODES[capture_error_mode]
        self._graph.capture_begin(tuple(pool) if pool is not None else (0, 0), self._mode)
        self._segments = [self._graph]
        self._stream = _stream_key(current_stream())
        _capturing[self._stream] = self

    def register_generator_state(self, generator: torch.Generator) -> None:
        """Makes each replay advance `generator` by the offsets the capture draws from it (torch_npu's and CUDA's
        name; a generator the capture draws from is registered at its first draw in any case)."""
        self._graph.register_generator_state(generator)

    def begin_capture_to_if_node(self, pred: torch.Tensor) -> None:
        """The work captured until end_capture_to_conditional_node runs at a replay only if `pred` (an npu bool tensor
        of one element) is true when the replay reaches it (a conditional IF node, as torch.cuda.CUDAGraph's)."""
        self._segments[-1].begin_capture_to_if_node(pred)

    def end_capture_to_conditional_node(self) -> None:
        self._segments[-1].end_capture_to_conditional_node()

    @staticmethod
    def get_currently_capturing_graph() -> "NPUGraph":
        """The NPUGraph the current stream captures into."""
        graph = _capturing.get(_stream_key(current_stream()))
        if graph is None:
            raise RuntimeError(
                "get_currently_capturing_graph() can be used only between capture_begin() and capture_end(). Did you "
                "use a stream without making it depend upon the original stream used for capture?")
        return graph

    def capture_end(self) -> None:
        """Ends the capture; raises RuntimeError if an illegal call invalidated it."""
        _capturing.pop(self._stream, None)
        self._segments[-1].capture_end()
        self._captured = True

    def _next_segment(self) -> int:
        """Ends the segment being captured and begins the next one on the same stream and pool; its index."""
        self._segments[-1].capture_end()
        segment = _C._NPUGraph()
        segment.capture_begin(self._graph.pool(), self._mode)
        self._segments.append(segment)
        return len(self._segments) - 1

    def replay(self) -> None:
        """Enqueues the captured work on the current stream (asynchronous: returns before it runs)."""
        for segment in self._segments:
            segment.replay()

    def reset(self) -> None:
        """Drops the captured graph and its reference to the memory pool."""
        for segment in self._segments:
            segment.reset()
        self._segments = [self._graph]
        self._captured = False

    def pool(self) -> tuple[int, int]:
        """The memory pool's token, to share it with another capture."""
        return self._graph.pool()

    def update(self, cpu_update_input: list[dict]) -> None:
        """Rewrites the arguments of the ops captured through registered handlers (a capture with
        auto_dispatch_capture=True): one dict of update keys per recorded op (or one for all), applied as the
        handlers' UPDATE_SPECS say; each op's task group is replaced, for the replays launched after this call."""
        if not self.auto_dispatch_capture:
            raise RuntimeError("The current graph configuration does not support update, Try to capture by setting "
                               "auto_dispatch_capture=True during capture")
        self.graph_dispatch_mode.update_capture_record(cpu_update_input)

    def super_kernel_optimize(self, optimize_options: Optional[dict] = None,
                              debug_options: Optional[dict] = None) -> None:
        """torch_npu's super-kernel fusion of a captured graph: the options are checked as torch_npu checks them;
        the replay is already one submission of the kernels, so it runs as captured (super_kernel.py)."""
        super_kernel.validate_options("optimize_options", optimize_options)
        super_kernel.validate_options("debug_options", debug_options)
        if not self._captured:
            raise RuntimeError("Called NPUGraph::super_kernel_optimize without a preceding successful capture.")

    def debug_dump(self, debug_path: str) -> None:
        """torch_npu's: writes the captured graph to debug_path as a Chrome trace, and the aligned trace beside it
        (.aligned.json; a failure to align is logged, the raw dump kept). Without a capture, warns and writes
        nothing (_npugraph_utils.py has the format)."""
        if not self._captured:
            warnings.warn("Called NPUGraph::debug_dump without a preceding successful capture.")
            return
        _npugraph_utils.write_graph_json(debug_path, [segment.node_names() for segment in self._segments],
                                         *self._stream)
        try:
            _npugraph_utils.align_trace_json(debug_path, None)
        except Exception:  # the aligned view is optional: the raw dump stands
            logging.getLogger(__name__).warning("Failed to generate the aligned trace of %s", debug_path,
                                                exc_info=True)

    def _node_count(self) -> int:
        """Kernels, copies and memsets captured (softnpu's, for tests and benchmarks)."""
        return sum(segment.node_count() for segment in self._segments)

    def _replay_count(self) -> int:
        """Replays so far (softnpu's, for tests and benchmarks)."""
        return self._graph.replay_count()


class _TaskGroup:
    """The handle graph_task_group_end returns: a segment of a captured graph that graph_task_update_* rewrite."""

    def __init__(self, graph: NPUGraph, index: int):
        self.graph, self.index = graph, index

    def __repr__(self) -> str:
        return f"<torch.npu task group {self.index} of {self.graph!r}>"


def _capturing_graph(stream: torch.Stream, what: str) -> NPUGraph:
    graph = _capturing.get(_stream_key(stream))
    if graph is None:
        raise RuntimeError(f"{what}: the stream is not capturing an NPU graph")
    return graph


def graph_task_group_begin(stream: torch.Stream) -> None:
    """Opens a task group in the graph `stream` is capturing: the work launched until graph_task_group_end is kept as
    a unit that graph_task_update_begin/end can later replace (torch_npu's aclmdlRICaptureTaskGrpBegin)."""
    graph = _capturing_graph(stream, "graph_task_group_begin")
    with stream_context(stream):
        graph._next_segment()


def graph_task_group_end(stream: torch.Stream) -> _TaskGroup:
    """Closes the task group and returns its handle."""
    graph = _capturing_graph(stream, "graph_task_group_end")
    with stream_context(stream):
        index = len(graph._segments) - 1
        graph._next_segment()
    return _TaskGroup(graph, index)


def graph_task_update_begin(stream: torch.Stream, handle: _TaskGroup) -> None:
    """Begins rewriting a task group: the work launched on `stream` until graph_task_update_end is recorded (not run)
    and replaces the group's in every later replay. It must launch the same tasks with new arguments (vllm-ascend's
    attention with this step's sequence lengths). On Ascend the update applies in `stream`'s order; here it applies to
    the replays launched after graph_task_update_end."""
    if not isinstance(handle, _TaskGroup):
        raise TypeError(f"graph_task_update_begin: handle must be what graph_task_group_end returned, got "
                        f"{type(handle).__name__}")
    key = _stream_key(stream)
    if key in _updating:
        raise RuntimeError("graph_task_update_begin: the stream is already updating a task group")
    update = _C._NPUGraph()
    with stream_context(stream):
        update.capture_begin(handle.graph.pool(), _CAPTURE_MODES["thread_local"])
    _updating[key] = (handle, update)


def graph_task_update_end(stream: torch.Stream) -> None:
    """Ends the update begun on `stream`: the task group is replaced by the work recorded since."""
    key = _stream_key(stream)
    if key not in _updating:
        raise RuntimeError("graph_task_update_end: no graph_task_update_begin on this stream")
    handle, update = _updating.pop(key)
    with stream_context(stream):
        update.capture_end()
    old = handle.graph._segments[handle.index]
    launched, held = update.node_count(), old.node_count()
    if launched != held:
        update.reset()
        raise RuntimeError(f"graph_task_update_end: the update launched {launched} tasks, the task group holds "
                           f"{held}; an update must launch the same tasks")
    handle.graph._segments[handle.index] = update
    old.reset()  # replays already launched keep the old tasks until they ran


def _weak_ref_tensor(tensor):
    """A tensor with t's sizes, strides, dtype, format and memory that does not own that memory (valid only while
    something else keeps it alive: a captured graph's pool, or `tensor` itself), as torch_npu._C._weak_ref_tensor.
    Anything but a tensor is returned as it is."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    storage = tensor.untyped_storage()
    alias = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), tensor.device, storage.nbytes())
    weak = torch.empty((0,), dtype=tensor.dtype, device=tensor.device).set_(
        alias, tensor.storage_offset(), tensor.size(), tensor.stride())
    # torch_npu copies the storage's descriptor (its format) to the alias; here the format is the tensor's backend
    # metadata (csrc/backend/format.cpp).
    metadata = torch._utils.get_tensor_metadata(tensor) if tensor.device.type == "npu" else None
    if metadata:
        torch._utils.set_tensor_metadata(weak, metadata)
    return weak


def _weak_npu(value):
    """npu tensors as weak references (the graph's pool keeps their memory); anything else as it is."""
    return _weak_ref_tensor(value) if isinstance(value, torch.Tensor) and value.device.type == "npu" else value


@dataclasses.dataclass
class _GraphDispatchRecord:
    """An op recorded through its handler: its task group and the call that replays it with updated arguments."""

    event: Any
    handle: _TaskGroup
    args: list
    kwargs: dict
    op_cache_entry: Any


class _GraphDispatchMode(TorchDispatchMode):
    """While a graph captures with auto_dispatch_capture=True: each op that has a registered NpuGraphOpHandler is
    captured in a task group of its own and recorded, so NPUGraph.update can launch it again with new arguments.
    npu tensors are kept as weak references (the graph's pool keeps their memory)."""

    update_stream: Optional[Stream] = None

    def __init__(self):
        super().__init__()
        self.graph_dispatch_records: list[_GraphDispatchRecord] = []

    @classmethod
    def is_infra_mode(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _NPU_GRAPH_OP_HANDLERS.get(func.__name__)
        if handler is None or (hasattr(handler, "should_handle") and not handler.should_handle(func, args, kwargs)):
            return func(*args, **kwargs)
        capture_stream = current_stream()
        event = ExternalEvent()
        event.wait(capture_stream)
        func, args, kwargs = handler.prepare_capture(func, args, kwargs)
        graph_task_group_begin(capture_stream)
        result = func(*args, **kwargs)
        handle = graph_task_group_end(capture_stream)
        self.graph_dispatch_records.append(_GraphDispatchRecord(
            event, handle, [_weak_npu(a) for a in args], {k: _pytree.tree_map(_weak_npu, v) for k, v in kwargs.items()},
            func))
        return handler.postprocess_result(result, kwargs)

    def update_capture_record(self, cpu_update_input: list[dict]) -> None:
        records = self.graph_dispatch_records
        if len(cpu_update_input) == 1:
            cpu_update_input = [dict(cpu_update_input[0]) for _ in records]
        if len(cpu_update_input) != len(records):
            raise RuntimeError(f"Currently, there are {len(records)} operators that need to be updated by capture, "
                               f"and there are only {len(cpu_update_input)} elements in the incoming "
                               "cpu_update_input list")
        if _GraphDispatchMode.update_stream is None:
            _GraphDispatchMode.update_stream = Stream()
        update_stream = _GraphDispatchMode.update_stream
        with stream_context(update_stream):
            for record, update_input in zip(records, cpu_update_input):
                handler = _NPU_GRAPH_OP_HANDLERS.get(record.op_cache_entry.__name__)
                if handler is None:
                    raise RuntimeError(f"No handler for recorded op: {record.op_cache_entry.__name__}")
                graph_task_update_begin(update_stream, record.handle)
                for key, value in update_input.items():
                    if key in record.kwargs:
                        record.kwargs[key] = value
                handler.update_args(record, update_input)
                record.op_cache_entry(*record.args, **record.kwargs)
                graph_task_update_end(update_stream)
                record.event.record(update_stream)


def _check_scope_name(scope_name: Optional[str]) -> None:
    if scope_name is not None and (not isinstance(scope_name, str) or not scope_name.strip()):
        raise RuntimeError("scope_name should be None or a non-empty string.")


def super_kernel_scope_begin(scope_name: Optional[str] = None) -> None:
    """torch_npu: the kernels captured until super_kernel_scope_end are fused into one launch on Ascend. softnpu
    replays a graph as one launch already; the scope is validated and its work runs as captured."""
    _check_scope_name(scope_name)


def super_kernel_scope_end(scope_name: Optional[str] = None) -> None:
    _check_scope_name(scope_name)


class graph:
    """Context manager that captures the npu work inside it into an NPUGraph, as torch.cuda.graph: the device is
    synchronized and the cache emptied first, and the work is captured on a side stream (or `stream`)."""

    default_capture_stream: Optional[Stream] = None

    def __init__(self, npu_graph: NPUGraph, pool: Optional[tuple[int, int]] = None,
                 stream: Optional[Stream] = None, auto_dispatch_capture: bool = False,
                 capture_error_mode: str = "global"):
        if stream is None and graph.default_capture_stream is None:
            graph.default_capture_stream = Stream()
        self.pool = pool
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = stream_context(self.capture_stream)
        self.npu_graph = npu_graph
        self.capture_error_mode = capture_error_mode
        npu_graph.auto_dispatch_capture = auto_dispatch_capture

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
        if self.npu_graph.auto_dispatch_capture:
            self.npu_graph.graph_dispatch_mode.__enter__()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.npu_graph.auto_dispatch_capture:
            self.npu_graph.graph_dispatch_mode.__exit__(exc_type, exc, tb)
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


__all__ = ["NPUGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables",
           "graph_task_group_begin", "graph_task_group_end", "graph_task_update_begin", "graph_task_update_end",
           "super_kernel_scope_begin", "super_kernel_scope_end"]
