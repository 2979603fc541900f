"""
NPU graph trees (torch_npu.npu._graph_tree): Inductor's CUDA graph trees for npu.

Derived from PyTorch's torch/_inductor/cudagraph_trees.py (BSD-3-Clause, Copyright (c) Meta Platforms, Inc. and
affiliates), under torch_npu's names: NPUGraphTreeManager, NPUGraphNode, NPUWarmupNode, npugraphify, ... The
device-independent parts are torch's own, imported (StorageWeakRefWrapper, FunctionID, WrappedFunction, the
CompilationMode and ExecutionState enums, format_tb). What differs from CUDA's:

- The private-pool hooks are the npu caching allocator's, called through torch_npu._C where torch_npu's graph trees
  call them (_npu_beginAllocateCurrentThreadToPool, _npu_getCheckpointState, _npu_setCheckpointPoolState,
  _npu_checkPoolLiveAllocations, _construct_NPU_Tensor_From_Storage_And_Metadata, ...; csrc/backend/python/graph_tree.cpp).
- There is no cuBLAS workspace nor cuDNN benchmark cache on npu: clear_cublass_cache and disable_conv_cache_emptying
  have nothing to clear.
- Broken invariants raise RuntimeError ("check ... fail"), as torch_npu's port does, rather than assert (which -O
  strips).
- The tree managers of npu live in their own thread-local slots (npu_tree_manager_containers), apart from CUDA's, and
  torch_npu's npugraph_mark_step_begin marks steps for them.

What follows is CUDA's own description.

CUDA graph trees are a safety abstraction over NPUGraphs, similar to make_graph_callables,
which share the same memory pool.  Sharing a memory pool is an extremely
important optimization when chaining multiple CUDA graphs together, as it
prevents you from needing to copy intermediate tensors from one graph to the
next, and reduces overall memory usage by allowing dead memory from the first
pool to be reused in the second.

The standard graph/make_graph_callables support sharing memory pool, but
with a lot of caveats.  CUDA graph trees remove these restrictions:

* Previously, if you recorded graphs A, B, you had to replay A, B in that
  order.  With CUDA graph trees, after replaying A, you can change your
  mind and record/replay a different graph B'; we will support efficient
  execution of both A, B and A, B', using only max(mem(A, B), mem(A, B')).  In
  other words: we support arbitrary trees of CUDA graph operations, not just
  sequences (this is why this feature is called CUDA graph trees.)

* Previously, if you executed graph A, some non-CUDA graph code, and then
  graph B, after executing graph B, it was not safe to retain any references
  to intermediates produced by A.  With CUDA graph trees, we track if any
outputs of graph A are still live by the time graph B is run, and make
  sure graph B doesn't clobber there memory when reusing the CUDA graphs
  pool.  You'll get a separate recording of B depending on what tensors
  stay live or dead.

CUDA graph trees are flexible enough to be used in Dynamo across graph breaks,
which is their primary use case.

The ability to switch from replay to record is fairly nontrivial: remember that
when you replay a CUDA graph, you only replay CUDA operations; no CPU side state
is updated.  In particular, the CPU-side book-keeping for the allocator is not
reconstructed.  However, to record a new child CUDA graph, we must restore this
book-keeping.  This is what checkpoint pool state is used for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import itertools
import logging
import operator
import sys
import threading
import traceback
import warnings
import weakref
from collections import defaultdict
from contextlib import AbstractContextManager
from enum import auto, Enum
from typing import Any, cast, TYPE_CHECKING, TypeVar

import torch.fx
from torch import Tensor
from torch._dynamo.callback import CallbackTrigger
from torch._dynamo.graph_bytecode_inputs import (
    CURRENT_STREAM_INDEX,
    set_external_object_by_index,
)
from torch._dynamo.mutation_guard import GenerationTracker
from torch._dynamo.utils import counters, dynamo_timed, preserve_rng_state
from torch._inductor import config
from torch._inductor.compile_fx import (
    align_inputs_from_check_idxs,
    copy_misaligned_inputs,
    copy_strided_storage_,
    get_expanded_dims,
    get_input_idxs_to_check,
    index_expanded_dims,
    remove_unaligned_input_idxs,
    static_input,
)
from torch._inductor.cudagraph_trees import (
    CompilationMode,
    ExecutionState,
    format_tb,
    GraphID,
    is_live,
    map_to_ref,
    maybe_deref,
    OutputAliasInfo,
    StorageWeakRefWrapper,
)
from torch._inductor.cudagraph_utils import (
    check_for_mutation,
    CheckInvariantStatus,
    collect_cuda_data_ptrs,
    FunctionID,
    log_cudagraph_skip_and_bump_counter,
    log_data_ptr_mismatch,
    maybe_warning_due_to_dynamic_shape,
    ModelType,
    OutputType,
    PlaceholderInfo,
    WrappedFunction,
)
from torch._library.opaque_object import is_opaque_value
from torch._opaque_base import OpaqueBase
from torch.multiprocessing.reductions import StorageWeakRef
from torch.storage import UntypedStorage
from torch.utils import _pytree as pytree
from torch.utils._ordered_set import OrderedSet
from torch.utils.weak import TensorWeakRef

import torch_npu._C

from ._aclgraph_update_plan import (
    ACLGRAPH_UPDATE_PLAN_GLOBAL,
    resolve_aclgraph_update_plan,
    update_aclgraph_records_for_graph,
    validate_aclgraph_update_plan_for_graph,
)
from ._npugraph_conditional_nodes import ControlFlowOpWarmupDispatchMode, NPUGraphCaptureControlFlowOpDispatchMode


if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator, Sequence

    from torch._guards import CompileId
    from torch._inductor.utils import InputType
    from torch.types import _bool

StorageWeakRefPointer = int
StorageDataPtr = int
NBytes = int
S = TypeVar("S", bound="StorageWeakRefWrapper")


_POOL_HANDLE = tuple[int, int]
AllocatorState = torch_npu._C._npu_NPUAllocator_AllocatorState

# One module under both of its names (softnpu.npu._graph_tree, torch_npu.npu._graph_tree): one set of tree managers.
sys.modules.setdefault("softnpu.npu._graph_tree", sys.modules[__name__])
sys.modules.setdefault("torch_npu.npu._graph_tree", sys.modules[__name__])

log = torch._logging.getArtifactLogger(__name__, "cudagraphs")


def format_inputs_log(inputs: list[Any]) -> str:
    def format_item(i: int, inp: Any) -> str:
        if isinstance(inp, torch.Tensor):
            return (
                f"[{i}]: Tensor(size={list(inp.size())}, stride={inp.stride()}, "
                f"dtype={inp.dtype}, data_ptr=0x{inp.data_ptr():X})"
            )
        elif inp is None:
            return f"[{i}]: None"
        else:
            return f"[{i}]: {type(inp).__name__}({inp})"

    n = len(inputs)
    if n == 0:
        return "[]"

    # Only display the first 10 inputs if the input list is too long
    max_items = 10
    parts = [format_item(i, inp) for i, inp in enumerate(inputs[:max_items])]
    if n > max_items:
        parts.append(f"... ({n - max_items} more items)")

    return ", ".join(parts)


def clear_cublass_cache() -> None:
    """CUDA clears cuBLAS's persistent workspaces here, so that a workspace allocated during warm-up or recording is
    not in use in two places once the pool's memory is reused; npu's matmuls keep no workspace between calls."""


@contextlib.contextmanager
def clear_cublas_manager() -> Generator[None, None, None]:
    "Context manager around clearing cublas caches that will clear on enter and exit"
    clear_cublass_cache()
    try:
        yield
    finally:
        clear_cublass_cache()


@contextlib.contextmanager
def disable_conv_cache_emptying() -> Generator[None, None, None]:
    """CUDA keeps cuDNN's benchmark from emptying the cache while recording; npu's convolutions have no benchmark."""
    yield


@contextlib.contextmanager
def enable_history_recording() -> Generator[None, None, None]:
    "Turns on history recording in the npu caching allocator"
    enabled = torch_npu._C._npu_isHistoryEnabled()
    try:
        if not enabled:
            torch.npu.memory._record_memory_history()
        yield
    finally:
        if not enabled:
            torch.npu.memory._record_memory_history(None)


def get_history_recording() -> AbstractContextManager[None]:
    # TODO - remove, prevents cleanup
    if not config.triton.cudagraph_trees_history_recording:
        return contextlib.nullcontext()
    return enable_history_recording()


class TreeManagerContainer:
    """
    Manages the lifetime of the tree manager. Like `PrivatePool` in cuda caching allocator,
    the tree and its corresponding memory pool should be kept alive as long as any outstanding
    graph or tensor which is an output of a graph remains alive.

    There is a single tree manager container per device.

    The lifecycle of a tree_manager is:
    -  Is constructed, no graph, no fns, no tensors
    -  Tree manager is fetched, resulting in tree manager being allocated
    -  We generate a bunch of functions, calling add_strong_reference
    -  These functions die, calling finalize_reference
    -  When all the functions die, we finalize_tree_manager.

    TODO: in the future, we would like to do the following once storage weak refs land
    -  We look for all the live storages and add references to THOSE
    -  We count as storages die
    -  All the storages are dead, we deallocate the tree manager
    """

    def __init__(self, device_index: int) -> None:
        # This class keeps a strong reference to tree_manager,
        # but upon all other strong references to the tree_manager will reset it to None.
        # We need a strong reference so that we can still access its attributes upon cleanup.
        self.tree_manager: NPUGraphTreeManager | None = None

        # Number of outstanding references to the current tree manager
        self.live_npugraphify_fns = 0

        self.device_index = device_index

        # Following two objects are only set in the case that Tensor outputs outlive
        # the cudagraphify_fns. Reference to the Graph is needed to keep the private pool from
        # deallocation.
        self.live_storages_count = 0
        self.graph: torch.npu.NPUGraph | None = None

        self.lock = threading.Lock()

    def _finalize_tensor(self) -> None:
        with self.lock:
            self.live_storages_count -= 1
            if self.live_storages_count == 0:
                self.graph = None

                # manager was used again after existing cleanup,
                # we shouldn't set it to None
                if self.live_npugraphify_fns == 0:
                    self.tree_manager = None

    def finalize_npugraphify_fn(self) -> None:
        with self.lock:
            self.live_npugraphify_fns -= 1
            if self.live_npugraphify_fns == 0:
                self._finalize_tree_manager()

    def _finalize_tree_manager(self) -> None:
        if not (self.lock.locked()):
            raise RuntimeError("check self.lock.locked() fail")
        self.tree_manager = None

        # TODO - when issue #91395 is landed, we can set a weakref on
        # storages and trigger a deallocation when all outputs of the
        # cudagraph are dead.

        # live_storages = list(
        #     tree_manager.live_npugraph_pool_storages_in_curr_execution()
        # )

        # # Maintain reference to graph to keep tensors alive
        # assert len(tree_manager.roots) > 0, "expected at least one use"
        # root = next(tree_manager.get_roots())
        # self.graph = root.graph
        # seen_storages = set()
        # for stor in live_storages:
        #     if stor in seen_storages:
        #         continue
        #     seen_storages.add(stor)
        #     self.live_storages_count += 1
        # .   weakref.finalize(stor, self._finalize_tensor)

    def add_strong_reference(self, fn: Callable[..., Any]) -> None:
        with self.lock:
            self.live_npugraphify_fns += 1

        weakref.finalize(fn, self.finalize_npugraphify_fn)

    def get_tree_manager(self) -> NPUGraphTreeManager:
        with self.lock:
            if self.tree_manager is None:
                self.tree_manager = NPUGraphTreeManager(self.device_index)
            return self.tree_manager


def _initialize_tls(local: threading.local) -> None:
    # one tree manager per device
    local.npu_tree_manager_containers = {}
    local.npu_tree_manager_locks = defaultdict(threading.Lock)

    # We need to register this as an object that will be copied over as TLS when new
    # threads are created in autograd
    torch._C._stash_obj_in_tls("npu_tree_manager_containers", local.npu_tree_manager_containers)
    torch._C._stash_obj_in_tls("npu_tree_manager_locks", local.npu_tree_manager_locks)


local = threading.local()
_initialize_tls(local)


# CUDA graph capture and private-pool warmup are process-wide CUDA states.  Keep
# them serialized across Python threads so a synchronize or allocator-pool switch
# in one thread does not invalidate another thread's capture.
graph_capture_lock = threading.Lock()


# only incremented by user call of mark_step_begin
class MarkStepBox:
    mark_step_counter = 0


def mark_step_begin() -> None:
    "Indicates that a new iteration of inference or training is about to begin."

    # iterate down to distinguish from GenerationTracking counter
    MarkStepBox.mark_step_counter -= 1


def reset_npugraph_trees() -> None:
    "Clear all npugraph trees"
    # see shutdown below for why this is necessary
    # Note: get_obj may fail if called from a thread that wasn't spawned by
    # autograd (e.g., test threads). In that case, there's nothing to reset.
    if not torch._C._is_key_in_tls("npu_tree_manager_containers"):
        # TLS not set up for this thread, nothing to reset
        return
    container_dict = get_obj(local, "npu_tree_manager_containers")
    locks_dict = get_obj(local, "npu_tree_manager_locks")
    for device, lock in locks_dict.items():
        with lock:
            container = container_dict.get(device)
            if not container or not container.tree_manager:
                continue

            container.tree_manager.shutdown()

    torch_npu._C._set_cached_tensors_enabled(False)
    container_dict.clear()

    MarkStepBox.mark_step_counter = 0


def get_obj(local: Any, attr_name: str) -> Any:
    if hasattr(local, attr_name):
        return getattr(local, attr_name)
    if not torch._C._is_key_in_tls(attr_name):
        _initialize_tls(local)
        return getattr(local, attr_name)
    return torch._C._get_obj_in_tls(attr_name)


def get_container(device_index: int) -> TreeManagerContainer:
    container_dict = get_obj(local, "npu_tree_manager_containers")
    lock = get_obj(local, "npu_tree_manager_locks")[device_index]

    with lock:
        if device_index not in container_dict:
            container_dict[device_index] = TreeManagerContainer(device_index)

        return container_dict[device_index]


def get_manager(
    device_index: int, create_if_none_exists: bool = True
) -> NPUGraphTreeManager | None:
    if create_if_none_exists:
        return get_container(device_index).get_tree_manager()
    return get_container(device_index).tree_manager


def is_cudagraph_capture_sizes(int_key: int | tuple[int, ...]) -> bool:
    """
    Returns true if all dynamic shapes should be captured or the dynamic shape
    int_key should be captured.
    """
    return (
        config.triton.cudagraph_capture_sizes is None
        or int_key in config.triton.cudagraph_capture_sizes
    )


def npugraphify_impl(
    model: ModelType,
    inputs: list[InputType],
    static_input_idxs: Sequence[int],
    *args: Any,
    **kwargs: Any,
) -> ModelType:
    fn_cache: dict[tuple[int, ...], Callable[..., Any]] = {}

    # Detect int inputs: we need to index on these
    int_key = [i for i, v in enumerate(inputs) if isinstance(v, int)]
    get_ints: Any = operator.itemgetter(*int_key) if int_key else lambda _: None

    has_warn = False

    del inputs

    def deferred_npugraphify(inputs: list[InputType]) -> OutputType:
        nonlocal has_warn

        int_key = get_ints(inputs)

        if not is_cudagraph_capture_sizes(int_key):
            return model(inputs)

        fn = fn_cache.get(int_key)
        if fn is not None:
            return fn(inputs)
        compile_id = kwargs.get("compile_id", "")
        if int_key is None:
            log.info(
                "[%s] Recording npugraph tree for graph without symints", compile_id
            )
        else:
            log.info(
                "[%s] Recording npugraph tree for symint key %s", compile_id, int_key
            )

        if not has_warn:
            has_warn = maybe_warning_due_to_dynamic_shape(fn_cache, int_key)

        # first get indices we need to check to align, then update our static inputs,
        # and finally copy
        check_input_idxs = get_input_idxs_to_check(inputs, static_input_idxs)
        new_static_input_idxs = remove_unaligned_input_idxs(inputs, static_input_idxs)
        copy_misaligned_inputs(inputs, check_input_idxs)

        fn, out = npugraphify(model, inputs, new_static_input_idxs, *args, **kwargs)
        # cudagraph will already clones input locally, no need to copy back
        mutated_input_idxs: OrderedSet[int] = OrderedSet()
        fn = align_inputs_from_check_idxs(
            fn, inputs_to_check=check_input_idxs, mutated_input_idxs=mutated_input_idxs
        )

        fn_cache[int_key] = fn

        return out

    return deferred_npugraphify


@contextlib.contextmanager
def dynamo_timed_npugraph(
    name: str,
    compile_id: CompileId | None,
    mode: CompilationMode | None,
) -> Generator[Any, None, None]:
    """
    Makes usages of dynamo_timed in this file less verbose. NOTE: This CM sums
    all durations into a single column in the dynamo_compile table. Use only if
    you consider the timed region to be part of the runtime overhead associated
    with the compiler.
    """
    with dynamo_timed(
        name,
        log_pt2_compile_event=True,
        compile_id=compile_id,
        is_backward=mode == CompilationMode.BACKWARD,
        dynamo_compile_column_us="runtime_cudagraphify_time_us",
    ):
        yield


def npugraphify(
    model: ModelType,
    inputs: list[InputType],
    static_input_idxs: Sequence[int] = (),
    *,
    device_index: int,
    is_backward: bool,
    is_inference: bool,
    stack_traces: StackTraces | None = None,
    constants: tuple[torch.Tensor, ...] = (),
    placeholders: tuple[PlaceholderInfo, ...] = (),
    mutated_input_idxs: tuple[int, ...] = (),
    compile_id: CompileId | None = None,
) -> tuple[ModelType, OutputType]:
    if not (not (is_backward and is_inference)):
        raise RuntimeError("check not (is_backward and is_inference) fail")
    mode = (
        CompilationMode.BACKWARD
        if is_backward
        else (CompilationMode.INFERENCE if is_inference else CompilationMode.FORWARD)
    )

    with dynamo_timed_npugraph("npugraphify.get_container", compile_id, mode):
        manager = get_container(device_index).get_tree_manager()

    return manager.add_function(
        model,
        inputs,
        static_input_idxs,
        stack_traces,
        mode,
        constants,
        placeholders,
        mutated_input_idxs,
    )


@contextlib.contextmanager
def _use_npu_memory_pool_manager(
    device: int, mem_pool: tuple[int, int], stream: torch.npu.Stream
) -> Generator[None, None, None]:
    """
    Context manager to use cuda graph pool for new allocations. If you use this manager
    all cudagraph tensors in use should be reflected in the allocator or they will be overwritten.
    existing_graph should already have been used in a capture, and the mem_pool must already exist,
    because this manager will not preserve a reference to the pool which keeps it alive.
    """
    torch.npu.synchronize()
    stream.wait_stream(torch.npu.current_stream())

    with torch.npu.stream(stream), torch.device(device):
        # Begin allocate to mem pool for all memory allocation on the current thread.
        # This is thread safe since a thread can only warmup or record 1 cudagraph
        # at the same time.
        torch_npu._C._npu_beginAllocateCurrentThreadToPool(device, mem_pool)
        try:
            yield
        finally:
            torch_npu._C._npu_endAllocateToPool(device, mem_pool)
            torch_npu._C._npu_releasePool(device, mem_pool)

    torch.npu.current_stream().wait_stream(stream)


@contextlib.contextmanager
def _update_current_stream_external_object() -> Generator[None, None, None]:
    """Update the external object registry so custom ops see the capture stream.

    During cudagraph recording/warmup the current stream differs from the
    trace-time default stream.  The external object at CURRENT_STREAM_INDEX
    must reflect the actual current stream so that custom ops (e.g. event
    record/wait) executed during capture use the right stream.
    """
    set_external_object_by_index(CURRENT_STREAM_INDEX, torch.npu.current_stream())
    yield


PathOutputIndex = tuple[int, int]

# For each node in the path, for each output, is the output alive
PathLiveness = list[list[bool]]

StackTraces = list[str | None]


class NPUWarmupNode:
    """
    Simplified Wrapper around A CUDA Model that wraps outputs in storage refs and exposes
    apis to get the live storages in the current chain of warmup.

    A NPUWarmupNode may have either NPUGraphNode or NPUWarmupNode as a parent, but may only have
    NPUWarmupNode as children, because we cannot record or execute with tensors which do not have stable
    memory addresses.

    NPUWarmupNode and NPUGraphNode have a number of differences that make it easier to use separate classes.
    - Much of the NPUGraphNode logic & initialization is based on the tensor properties of first recording. In the
    first instance of warmup, these are not finalized yet.
    - All Inputs to the RecordedFunction must be copied over to the cuda graph memory pool, this is unnecessary in warmup.
    - CUDAWarmup is only used once and so does not need to optimize as much bookkeeping. It is much simpler.

    NB: this class and NPUGraphNode need to expose `path_live_weakrefs`, `all_outputs_are_dead`, and
    `self.outputs_weakrefs`, `stack_traces`, and `tensor_weakrefs` for compatibility.
    """

    def __init__(
        self,
        wrapped_function: WrappedFunction,
        parent: NPUGraphNode | NPUWarmupNode | None,
        npu_graphs_pool: tuple[int, int],
        existing_npu_graph: torch.npu.NPUGraph | None,
        device_index: int,
        stack_traces: StackTraces | None,
        stream: torch.npu.Stream,
        already_warm: bool,
        graph_id: GraphID,
    ) -> None:
        self.wrapped_function = wrapped_function
        self.parent: NPUGraphNode | NPUWarmupNode | None = parent
        self.npu_graphs_pool = npu_graphs_pool
        self.outputs_weakrefs: list[StorageWeakRefWrapper | None] = []
        self.tensor_weakrefs: list[TensorWeakRef | None] = []
        self.existing_npu_graph = existing_npu_graph
        self.has_run = False
        self.device_index = device_index
        self.stack_traces = stack_traces
        self.stream = stream
        self.already_warm = already_warm
        self.id = graph_id

    def run(self, new_inputs: Any) -> OutputType:
        if not (not self.has_run):
            raise RuntimeError("Wrapped function should never be run twice")

        # See: output_is_alias_of_persistent_static_inputs below. We should only be returning freshly created
        # storages in path_live_weakrefs.
        existing_path_data_ptrs = OrderedSet(
            [t.data_ptr() for t in self.path_live_weakrefs() if t()]
        )

        def get_non_cudagraph_inps() -> list[weakref.ReferenceType[UntypedStorage]]:
            non_cudagraph_inps = [
                weakref.ref(t.untyped_storage())
                for t in itertools.chain(new_inputs, self.wrapped_function.constants)
                if isinstance(t, torch.Tensor)
                and t.untyped_storage().data_ptr() not in existing_path_data_ptrs
            ]
            return non_cudagraph_inps

        non_cudagraph_inps_storages = get_non_cudagraph_inps()

        if config.triton.slow_path_cudagraph_asserts and not self.already_warm:
            refs = list(self.path_live_weakrefs())
            check_memory_pool(self.device_index, self.npu_graphs_pool, refs)

        with (
            torch.npu.device(self.device_index),
            disable_conv_cache_emptying(),
            clear_cublas_manager(),
            _use_npu_memory_pool_manager(
                self.device_index, self.npu_graphs_pool, self.stream
            ),
            # NB: must go after _use_npu_memory_pool_manager which switches the stream
            _update_current_stream_external_object(),
            ControlFlowOpWarmupDispatchMode(),
            get_history_recording(),
        ):
            out = self.wrapped_function.model(new_inputs)

        # We need to know which outputs are allocated within the cudagraph pool
        # so that we can deallocate them at the beginning of the next cudagraph step,
        # and set their access to error.
        # We use a weakref to the inputs storage, in case a block which was previously
        # allocated to the general caching allocator pool gets reallocated to a private pool.

        non_cudagraph_inps_storage_ptrs = OrderedSet[Any]()
        for storage in non_cudagraph_inps_storages:
            s = storage()
            if s is not None:
                non_cudagraph_inps_storage_ptrs.add(s._cdata)

        if not (len(new_inputs) == 0):
            raise RuntimeError("check len(new_inputs) == 0 fail")

        # sdpa returns cpu tensors when not recording cuda graph
        def add_ref(o: Any) -> bool:
            return (
                isinstance(o, torch.Tensor)
                and o.is_npu
                and o.untyped_storage()._cdata not in non_cudagraph_inps_storage_ptrs
                and o.untyped_storage().data_ptr() != 0
            )

        self.outputs_weakrefs.extend(
            [map_to_ref(o) if add_ref(o) else None for o in out]
        )
        self.tensor_weakrefs.extend(
            [TensorWeakRef(o) if add_ref(o) else None for o in out]
        )

        if config.triton.slow_path_cudagraph_asserts and not self.already_warm:
            out_refs = list(self.path_live_weakrefs())
            check_memory_pool(self.device_index, self.npu_graphs_pool, out_refs)

        return out

    @property
    def _path_from_root(
        self,
    ) -> Generator[NPUGraphNode | NPUWarmupNode, None, None]:
        nodes = []
        node: NPUGraphNode | NPUWarmupNode = self
        while node:
            nodes.append(node)
            node = node.parent  # type: ignore[assignment]

        yield from reversed(nodes)

    def path_live_weakrefs(self) -> Iterator[StorageWeakRefWrapper]:
        "Returns all live storages weakrefs that created by nodes in this path"
        for node in self._path_from_root:
            for output in node.outputs_weakrefs:
                if is_live(output):
                    yield output  # type: ignore[misc]

    def all_outputs_are_dead(self) -> bool:
        return not list(self.path_live_weakrefs())

    def _is_npu_graph_recorded_tensor(self, t: torch.Tensor) -> bool:
        for storage_weak_ref in self.path_live_weakrefs():
            if t.untyped_storage().data_ptr() == storage_weak_ref.data_ptr():
                return True
        return False


# Aliases for List that say what the indices denote
InputList = list  # input indexes
OutputList = list  # output indexes
LevelList = list  # levels (distance from root of tree)


class _UnaliasedStorage(OutputAliasInfo):
    "Singleton to mark that the graph output constructs a new alias or is None"


UnaliasedStorage = _UnaliasedStorage()


class AliasesPriorGraphOutput(OutputAliasInfo):
    "Marks that the graph output aliases an output of a prior graph"

    __slots__ = ["index"]

    index: PathOutputIndex

    def __init__(self, index: PathOutputIndex) -> None:
        if not (isinstance(index, tuple)):
            raise RuntimeError("check isinstance(index, tuple) fail")
        self.index = index


class AliasesNewOutput(OutputAliasInfo):
    "Marks that the graph output aliases an index in the new, returned outputs"

    __slots__ = ["index"]

    index: int

    def __init__(self, index: int) -> None:
        if not (isinstance(index, int)):
            raise RuntimeError("check isinstance(index, int) fail")
        self.index = index


class NPUGraphNode:
    """
    A single recording of a function into a CUDA Graph. Recordings of CUDA Graphs share a single memory pool
    and are structured into a tree, where there is a single recording that can precede it (parent) and multiple
    subsequent recordings that may follow (children). A node will have no parent if it is the first recording
    in a tree; i.e., when it is first recorded, there are no live tensors from a previous recording which
    would force a dependency.

    On first recording, all of the live tensors in the current CUDA Graph Node path will be
    reflected in the corresponding private pool. On subsequent executions, the caching allocator
    is unaffected when the graph is replayed.

    In order to support recording a subsequent cuda graph recording after execution of this graph,
    we checkpoint the state of the memory pool so that it may later be resumed.

    WrappedFunction should have already been warmed up prior to invocation.

    See [setCheckpointPoolState] for further explanation, as well as
    https://user-images.githubusercontent.com/13564/222815509-374f3400-f83d-4f7d-8fa6-4a092b3250bb.png
    """

    def __init__(
        self,
        wrapped_function: WrappedFunction,
        graph_id: GraphID,
        parent: NPUGraphNode | None,
        inputs: list[InputType],
        npu_graphs_pool: _POOL_HANDLE,
        device_index: int,
        stack_traces: StackTraces | None,
        stream: torch.npu.Stream,
        mode: CompilationMode | None = None,
        compile_id: CompileId | None = None,
    ) -> None:
        if not (isinstance(inputs, (list, tuple))):
            raise RuntimeError("check isinstance(inputs, (list, tuple)) fail")

        self.wrapped_function = wrapped_function
        self.id = graph_id
        self.device = device_index
        self.stack_traces = stack_traces
        self.stream = stream

        # Enable re-record a cudagraph when static tensor address changed.
        # if not we should error when it changed.
        self.rerecord_if_static_inputs_change = True

        # if this is a root parent will be None. use weakref to prevent reference cycle
        self._parent = weakref.ref(parent) if parent is not None else None
        # reference to the shared memory pool for the entire cuda graphs tree
        self.npu_graphs_pool = npu_graphs_pool

        # A single wrapped function may be recorded multiple times if memory patterns or
        # invariants change from one execution to the next
        self.children: dict[FunctionID, list[NPUGraphNode]] = defaultdict(list)

        # StorageWeakRef maintains whether the Storage C++ object remains allocated,
        # not whether the corresponding memory has been deallocated. In order
        # to use them to track memory deallocations we must maintain a single StorageWeakRef
        # for all Storages that reference that memory (even if we are constructing Storages
        # that do not have a deallocator function). We maintain one single storage_cache
        # as we execute any tree path. When we retrieve a storage from the cache we
        # check that it is still alive, and we hash based on observed recording data ptr
        # and storage cdata.

        # we preserve a single reference to executed outputs that is then referenced
        # in children to avoid children having to chase parent pointers in the hot path
        # DO NOT reassign output_weakrefs, only call `clear()`
        # Path is a series of nodes from root to the current node
        self.outputs_weakrefs: OutputList[StorageWeakRefWrapper | None] = []
        self.path_weakrefs: LevelList[OutputList[StorageWeakRefWrapper | None]] = [
            node.outputs_weakrefs for node in self._path_from_root
        ]
        self.path_stacktraces: LevelList[StackTraces | None] = [
            node.stack_traces for node in self._path_from_root
        ]
        self.tensor_weakrefs: OutputList[TensorWeakRef | None] = []

        # tensors which are outputs of previous graphs in the tree
        self.npugraph_managed_idxs: list[int] = [
            idx
            for idx, t in enumerate(inputs)
            if isinstance(t, torch.Tensor) and self._is_npu_graph_recorded_tensor(t)
        ]

        # (depth, offset) of live tensors which are alias of previous graph outputs
        self.live_npugraph_managed_path_refs: InputList[PathOutputIndex | None] = [
            (
                self._is_alias_of_live_recorded_tensor(t)
                if isinstance(t, torch.Tensor)
                else None
            )
            for t in inputs
        ]

        # when replay, preserve the liveness of an input if it AliasesPriorGraphOutput
        # and also aliases an output of the current NPUGraphNode
        self.preserved_aliased_inputs: InputList[bool] = [False] * len(inputs)

        # Opaque values (e.g. DeviceMesh, ProcessGroup) are non-tensor
        # inputs that cannot be copied like tensors. We include them in
        # static_input_idxs to keep them out of non_static_input_idx
        # (which drives the tensor-copy path during replay). "Static"
        # here just means "don't try to copy this as a tensor" — it
        # does NOT mean the object is semantically immutable.
        #
        # Opaque indices must also be excluded from any list passed to
        # _tensors_data_ptrs_at_indices_equal (the C++ data-pointer
        # stability check), because opaque objects have no data_ptr.
        # That is why tensor_static_input_idxs and
        # non_managed_static_input_idxs filter them out below.
        opaque_input_idxs = OrderedSet(
            i for i, inp in enumerate(inputs) if is_opaque_value(inp)
        )
        static_input_idxs = OrderedSet(wrapped_function.static_input_idxs)
        npugraph_managed_idxs = OrderedSet(self.npugraph_managed_idxs)

        self.static_input_idxs: list[int] = list(
            static_input_idxs | npugraph_managed_idxs | opaque_input_idxs
        )

        self.non_static_input_idx: LevelList[int] = [
            i for i in range(len(inputs)) if i not in self.static_input_idxs
        ]

        counters["inductor"]["cudagraph_recorded_non_static_inputs"] += len(
            self.non_static_input_idx
        )

        self.non_managed_static_input_idxs: LevelList[int] = LevelList(
            static_input_idxs - npugraph_managed_idxs - opaque_input_idxs
        )

        self.tensor_static_input_idxs: list[int] = list(
            static_input_idxs | npugraph_managed_idxs
        )

        def maybe_get_static_data_ptr(
            idx: int,
            inputs: list[InputType],
            static_input_idxs: list[int],
        ) -> int | None:
            inp = inputs[idx]
            if isinstance(inp, torch.Tensor) and idx in static_input_idxs:
                return inp.data_ptr()
            return None

        self.static_input_data_ptrs: InputList[int | None] = [
            maybe_get_static_data_ptr(i, inputs, self.static_input_idxs)
            for i in range(len(inputs))
        ]

        # When we checkpoint, and free generations, we will be manually freeing the outputs
        # of NPUGraphNodes. We should not be freeing parameters, not do we need to account for
        # their liveness (they are static), so we need to compute which outputs are aliases of
        # parameters. Some static inputs are saved tensors from the forward that die in the backward.
        # Their locations are static but lifetimes are not. We only include the persistent static
        # data ptrs below because the non persistent data ptrs may be outputs of this record and
        # fresh allocations.

        # precompute expanded dims to avoid computing in the hot path
        self.expanded_dims: list[list[int]] = [
            get_expanded_dims(x)
            if isinstance(x, torch.Tensor) and idx not in self.static_input_idxs
            else []
            for idx, x in enumerate(inputs)
        ]

        # For each node in path, which outputs were observed to be live
        # before invoking graph recording, and after graph recording
        self.recorded_liveness_before_graph: LevelList[OutputList[bool]] = []
        self.recorded_liveness_after_graph: LevelList[OutputList[bool]] = []

        # List of tuples of (depth, output_index) that index into node at depth
        # number of nodes from root and output_index of outputs. Will index into
        # path_weakrefs.
        self.expected_dead_indices_before_graph: list[PathOutputIndex] = []
        self.expected_dead_indices_after_graph: list[PathOutputIndex] = []

        # all live indices after graph recording
        self.live_indices_after_graph: list[PathOutputIndex] = []

        if self.parent is not None:
            previous_liveness = self.parent.recorded_liveness_after_graph
            curr_liveness = self._get_liveness(self.path_weakrefs)

            different_indices = self._get_different_indices(
                previous_liveness, curr_liveness
            )

            self.recorded_liveness_before_graph = curr_liveness
            self.expected_dead_indices_before_graph = different_indices

        rng_states = [inp for inp in inputs if isinstance(inp, torch.Generator)]

        recording_inputs = self._allocate_and_copy_recording_inputs(inputs)
        # recording inputs will copy over memory, so we can free non recording inputs

        inputs.clear()
        del inputs

        # graph used for recording model invocation
        self.graph: torch.npu.NPUGraph | None = torch.npu.NPUGraph()

        # TODO: register_generator_state should potentially take explicit device
        with torch.npu.device(self.device):
            for rng_state in rng_states:
                self.graph.register_generator_state(rng_state)

        # we allocate non-static inputs within the same memory pool as the CUDAGraph
        # which we will record the model with. For memory efficiency, it is important
        # to reclaim the input memory when the inputs are no longer live. To accomplish this,
        # we reconstruct tensors at the correct data pointers of our inputs which are
        # non owning and do not prevent deallocation. On subsequent executions, input values
        # will be copied over to these tensors.
        self.reconstructed_inputs: list[InputType] = [
            self._reconstruct_from_tensor_metadata(self._tensor_metadata(x))
            if isinstance(x, torch.Tensor)
            else x
            for x in recording_inputs
        ]

        # DO THE RECORDING!!!
        # We record the CUDA graph in the constructor of NPUGraphNode, which
        # gives you what the CPU side compute of the function would do.  We
        # don't throw the recording outputs away: their memory is
        # correctly accounted for in the NPUGraphs caching allocator.  This
        # means on the very FIRST run of the CUDA graph node, we can directly
        # do more recording, because we have a valid caching allocator state.
        # NB: This relies on run() being called immediately after the
        # constructor, otherwise this optimization would not be valid.

        # initialized below in _record

        self.checkpointed_caching_state: AllocatorState | None = None

        # Output Storage Alias information, can be:
        # - A new, unaliased storage, or the output is None
        # - An alias of an output of a prior graph
        # - An alias of an output already created in the reconstructed outputs
        # This is None if the output in question is an int
        self.output_storage_alias: OutputList[OutputAliasInfo | None] = []

        # is the output Storage unaliased in subsequent outputs, of all subsequent paths
        # if it is, we cached the output tensor and adjust storage liveness tracking to also
        # check if the output tensor does not have an additional python reference.
        # If a descendant node discovers it has an alias of a prior output, then the output
        # will no longer be cached in the ancestor.
        # The large majority of tensors are unaliased, and preserving aliased output tensors would add
        # significant additional complexity with marginal gains
        # The cached tensor outputs are added on the first execution, and cleared whenever we need
        # to do subsequent recording
        self.unaliased_in_all_paths: OutputList[bool] = []
        self.cached_tensor_outputs: OutputList[Tensor | None] = []

        # if an output aliases a static, persistent input then the corresponding Tensor will
        # be set here. These are different than cached tensors, because they are tensors that
        # are aliases of parameters that are always live.
        self.static_output_tensors: OutputList[Tensor | None] = []

        # torch_npu's ACL graph update plan Inductor wrote beside the compiled graph (a list; none without one): the
        # arguments of the ops recorded through their NpuGraphOpHandlers that each replay takes from its inputs.
        plan = getattr(wrapped_function.model, ACLGRAPH_UPDATE_PLAN_GLOBAL, None)
        self.aclgraph_update_plan: list[dict[str, Any]] = plan if isinstance(plan, list) else []
        self.aclgraph_applied_update: list[dict[str, Any]] | None = []  # none applied: an empty update needs none

        # Cleared after recording
        with dynamo_timed_npugraph("NPUGraphNode.record", compile_id, mode):
            self.recording_outputs: OutputType | None = self._record(
                wrapped_function.model, recording_inputs
            )
        self.outputs_metadata: OutputList[dict[str, Any] | int | None] = []

        # As with inputs, we do not want to keep the outputs permanently alive because that would prevent
        # their memory being reclaimed in subsequent cuda graph recordings. We record the tensor metadata
        # needed to reconstruct instead.
        if not (self.recording_outputs is not None):
            raise RuntimeError("check self.recording_outputs is not None fail")
        for out in self.recording_outputs:
            if isinstance(out, torch.Tensor):
                self.outputs_metadata.append(
                    self._tensor_metadata(out, ignore_storage_offset=False)
                )
            else:
                if not (isinstance(out, (int, type(None)))):
                    raise RuntimeError(type(out))
                self.outputs_metadata.append(out)

        self.graph.replay()

    def _copy_inputs_and_remove_from_src(
        self, dsts: list[InputType], srcs: list[InputType]
    ) -> None:
        dst_tensors = []
        src_tensors = []
        for idx in self.non_static_input_idx:
            if not isinstance(srcs[idx], torch.Tensor):
                continue
            expanded_dims = self.expanded_dims[idx]
            indexed_dst = index_expanded_dims(dsts[idx], expanded_dims)  # type: ignore[arg-type]
            if torch._debug_has_internal_overlap(indexed_dst) != 0:
                # rare path: dst still self-overlaps after dropping expanded dims
                copy_strided_storage_(dsts[idx], srcs[idx])  # type: ignore[arg-type]
                srcs[idx] = None  # type: ignore[call-overload]
                continue
            dst_tensors.append(indexed_dst)
            src_tensors.append(index_expanded_dims(srcs[idx], expanded_dims))  # type: ignore[arg-type]
            srcs[idx] = None  # type: ignore[call-overload]
        # Fails on empty lists
        if dst_tensors:
            torch._foreach_copy_(dst_tensors, src_tensors)

    def check_static_inputs_are_stable(self, new_inputs: list[InputType]) -> None:
        # avoid checking managed tensor static points since we already checked those in check_invariants
        if (
            not self.rerecord_if_static_inputs_change
            and not torch_npu._C._tensors_data_ptrs_at_indices_equal(
                new_inputs,  # type: ignore[arg-type]
                self.static_input_data_ptrs,
                self.non_managed_static_input_idxs,
            )
        ):
            # this should error
            error_msg = log_data_ptr_mismatch(
                self.wrapped_function.placeholders,
                new_inputs,
                self.static_input_data_ptrs,
                self.non_managed_static_input_idxs,
                CheckInvariantStatus.StaticInputIdxMismatch,
            )
            torch._check(False, lambda: error_msg)

    def run_first_inputs(self, new_inputs: list[InputType]) -> OutputType:
        if config.triton.fast_path_cudagraph_asserts:
            self.debug_check_invariants_before_invocation()

        # graph is already invoked in the __init__
        # inputs are copied over in _allocate_recording_inputs and subsequently cleared
        if not (len(new_inputs) == 0):
            raise RuntimeError("check len(new_inputs) == 0 fail")
        outputs = self.recording_outputs
        self.recording_outputs = None
        if not (outputs is not None):
            raise RuntimeError("check outputs is not None fail")
        return outputs

    def run(self, new_inputs: list[InputType]) -> OutputType:
        self.check_static_inputs_are_stable(new_inputs)

        cpu_update_input = resolve_aclgraph_update_plan(self.aclgraph_update_plan, new_inputs)

        self._copy_inputs_and_remove_from_src(self.reconstructed_inputs, new_inputs)

        updated = self._apply_aclgraph_update(cpu_update_input)
        self.run_graph()
        if updated:
            # The next update records the ops' events again: only after this replay has waited on them.
            self.graph.graph_dispatch_mode.update_stream.wait_stream(torch.npu.current_stream())

        outputs = self.reconstruct_outputs()
        new_inputs.clear()

        if config.triton.fast_path_cudagraph_asserts:
            self.debug_check_invariants_after_invocation()

        if config.triton.force_cudagraph_sync:
            torch.npu.synchronize()

        # Reset this to run the check in the future
        self.static_inputs_stable = False

        return outputs

    def reconstruct_outputs(self) -> OutputType:
        "Reconstruct output tensors according to their saved metadata and alias information"

        # Cached tensors will not yet be set on the first execution
        # They are also cleared in checkpointing, so if we checkpoint this node
        # and then execute it again we will need to repopulate cached tensors
        if not self.cached_tensor_outputs:
            self._initialize_cached_tensors()

        outputs: OutputType = []

        for i, (storage_info, metadata) in enumerate(
            zip(self.output_storage_alias, self.outputs_metadata)
        ):
            if not isinstance(metadata, dict):  # tensor metadata
                if not (isinstance(metadata, (int, type(None)))):
                    raise RuntimeError("check isinstance(metadata, (int, type(None))) fail")
                outputs.append(metadata)
                continue

            cached_t = self.cached_tensor_outputs[i]
            if cached_t is not None:
                # this output represents a fresh allocated tensor.
                # We return the same TensorImpl from run to run to avoid overhead.
                # autograd.Function will reset the Autograd meta of output tensors
                # as part of aot_autograd, but _backward_hooks are stored on tensors separately,
                # so we need to manually reset hooks.
                if cached_t._backward_hooks is not None:
                    cached_t._backward_hooks = None

                # No need to update weakrefs, already correctly initialized
                outputs.append(cached_t)
                continue

            static_t = self.static_output_tensors[i]
            if static_t is not None:
                if not (self.outputs_weakrefs[i] is None):
                    raise RuntimeError("check self.outputs_weakrefs[i] is None fail")
                outputs.append(static_t)
                continue

            storage = self.prepare_alias_info_for_tensor_construction(
                storage_info, metadata
            )

            if isinstance(storage, UntypedStorage) or storage is None:
                out = self._reconstruct_from_tensor_metadata(metadata, storage)
            else:
                if not (isinstance(storage, int)):
                    raise RuntimeError("check isinstance(storage, int) fail")
                out = self._reconstruct_from_tensor_metadata(
                    metadata, cast(torch.Tensor, outputs[storage]).untyped_storage()
                )

            outputs.append(out)
            w = self.outputs_weakrefs[i]
            if not (w is not None):
                raise RuntimeError("check w is not None fail")
            w.swap_weakref(out.untyped_storage()._weak_ref())

        return outputs

    def prepare_alias_info_for_tensor_construction(
        self,
        out_alias_info: OutputAliasInfo | None,
        metadata: dict[str, Any] | int | None,
    ) -> UntypedStorage | None | int:
        if (
            isinstance(metadata, (int, type(None)))
            or out_alias_info is UnaliasedStorage
        ):
            return None

        if isinstance(out_alias_info, AliasesPriorGraphOutput):
            depth, existing_output_index = out_alias_info.index
            ref = self.path_weakrefs[depth][existing_output_index]
            if not (ref is not None):
                raise RuntimeError("check ref is not None fail")
            return torch.UntypedStorage._new_with_weak_ptr(ref())

        if not (isinstance(out_alias_info, AliasesNewOutput)):
            raise RuntimeError("check isinstance(out_alias_info, AliasesNewOutput) fail")
        return out_alias_info.index

    def prepare_storages_for_construction(
        self,
    ) -> list[UntypedStorage | None | int]:
        output_storages = []
        for output_storage_alias, metadata in zip(
            self.output_storage_alias, self.outputs_metadata
        ):
            output_storages.append(
                self.prepare_alias_info_for_tensor_construction(
                    output_storage_alias, metadata
                )
            )

        return output_storages

    def _apply_aclgraph_update(self, cpu_update_input: list[dict[str, Any]]) -> bool:
        """Applies the plan's resolved update (NPUGraph.update), unless it holds only plain values equal to those the
        recorded ops already have: relaunching an op into its task group costs more than the replay (190 us against
        44 us a call). Tensors are always applied, their contents may have changed in place. Whether it did."""
        plain = not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(cpu_update_input))
        if plain and cpu_update_input == self.aclgraph_applied_update:
            return False
        self.aclgraph_applied_update = cpu_update_input if plain else None
        return update_aclgraph_records_for_graph(cpu_update_input, self.graph)

    def run_graph(self) -> None:
        if not (self.graph is not None):
            raise RuntimeError("check self.graph is not None fail")
        self.graph.replay()

    def all_outputs_are_dead(self) -> bool:
        "All outputs of the path from this node to its root are dead"
        for depth, output_index in self.live_indices_after_graph:
            if is_live(self.path_weakrefs[depth][output_index]):
                return False
        return True

    def _record(self, model: ModelType, inputs: list[InputType]) -> OutputType:
        "Record the model"
        if not (self.graph is not None):
            raise RuntimeError("check self.graph is not None fail")

        def static_input_iter() -> Generator[torch.Tensor, None, None]:
            for i in self.wrapped_function.static_input_idxs:
                _inp = inputs[i]
                if isinstance(
                    _inp, torch.Tensor
                ) and not self._is_npu_graph_recorded_tensor(_inp):
                    yield _inp

        # see: output_is_alias_of_persistent_static_inputs above
        static_input_persistent_storage_ptrs: dict[int, StorageWeakRefWrapper] = {
            inp.untyped_storage().data_ptr(): StorageWeakRefWrapper(inp)
            for inp in itertools.chain(
                static_input_iter(), self.wrapped_function.constants
            )
        }

        if config.triton.slow_path_cudagraph_asserts:
            # need to use parent live weakrefs because live_indices isn't set yet
            memory = (
                [] if self.parent is None else list(self.parent.path_live_weakrefs())
            )
            memory += [
                StorageWeakRefWrapper(elem)
                for i, elem in enumerate(inputs)
                if isinstance(elem, torch.Tensor)
                and i not in self.wrapped_function.static_input_idxs
                and elem.untyped_storage().data_ptr() != 0
            ]
            check_memory_pool(self.device, self.npu_graphs_pool, memory)

        with (
            preserve_rng_state(),
            torch.npu.device(self.device),
            clear_cublas_manager(),
            torch.npu.graph(
                self.graph,
                stream=self.stream,
                pool=self.npu_graphs_pool,
                capture_error_mode="thread_local",
                # the ops with an NpuGraphOpHandler in task groups of their own, which an update plan can update
                auto_dispatch_capture=True,
            ),
            # NB: must go after torch.npu.graph which switches the stream
            _update_current_stream_external_object(),
            NPUGraphCaptureControlFlowOpDispatchMode(),
            get_history_recording(),
        ):
            cpu_update_input = resolve_aclgraph_update_plan(self.aclgraph_update_plan, inputs)
            static_outputs = model(inputs)
        validate_aclgraph_update_plan_for_graph(self.aclgraph_update_plan, self.graph)
        self._apply_aclgraph_update(cpu_update_input)

        # running model should reclaim memory
        if not (len(inputs) == 0):
            raise RuntimeError("check len(inputs) == 0 fail")

        if not isinstance(static_outputs, (list, tuple)):
            static_outputs = (static_outputs,)

        # pyrefly: ignore [bad-argument-type]
        self._add_first_outputs(static_outputs, static_input_persistent_storage_ptrs)

        # pyrefly: ignore [bad-return]
        return static_outputs

    def _add_first_outputs(
        self,
        outputs: OutputType,
        static_input_persistent_storage_ptrs: dict[int, StorageWeakRefWrapper],
    ) -> None:
        "Add the outputs from the first invocation of the node and set up metadata"

        # getting liveness before we have added the outputs to path, so the length
        # of the two lists is equal
        prev_liveness = self.recorded_liveness_before_graph
        curr_liveness = self._get_liveness(self.path_weakrefs)

        delta = self._get_different_indices(prev_liveness, curr_liveness)
        self.expected_dead_indices_after_graph = delta

        if not (len(self.outputs_weakrefs) == 0):
            raise RuntimeError("check len(self.outputs_weakrefs) == 0 fail")
        # index from data pointer to index in outputs
        output_new_storages_index: dict[StorageDataPtr, int] = {}

        self.unaliased_in_all_paths = [False for _ in range(len(outputs))]
        self.static_output_tensors = [None for _ in range(len(outputs))]

        for i, o in enumerate(outputs):
            if o is None or not isinstance(o, torch.Tensor):
                self.output_storage_alias.append(UnaliasedStorage)
                continue

            torch._check(
                o.is_npu or o.untyped_storage().data_ptr() == 0,
                lambda: (
                    "Expected all npu outputs in npu graph recording. Non npu output "
                    f"from {self.stack_traces[i] if self.stack_traces else '(unknown)'}"
                ),
            )

            ref = static_input_persistent_storage_ptrs.get(
                o.untyped_storage().data_ptr()
            )
            # also treat empty storages as static outputs because we do not need to manage their lifetime
            # and they should not participate in checkpointing
            is_empty_storage = o.untyped_storage().data_ptr() == 0
            if (ref and ref() is not None) or is_empty_storage:
                self.output_storage_alias.append(None)
                self.static_output_tensors[i] = o
                continue

            path_ref = self._is_alias_of_live_recorded_tensor(o)
            if path_ref is not None:
                self._mark_prior_graph_output_as_aliased(path_ref)

                for idx, inp_path_ref in enumerate(
                    self.live_npugraph_managed_path_refs
                ):
                    if path_ref == inp_path_ref:
                        self.preserved_aliased_inputs[idx] = True
                self.output_storage_alias.append(AliasesPriorGraphOutput(path_ref))
                continue

            if o.untyped_storage().data_ptr() in output_new_storages_index:
                index = output_new_storages_index[o.untyped_storage().data_ptr()]
                self.unaliased_in_all_paths[index] = False
                self.output_storage_alias.append(AliasesNewOutput(index))
                continue

            output_new_storages_index[o.untyped_storage().data_ptr()] = i
            self.output_storage_alias.append(UnaliasedStorage)
            self.unaliased_in_all_paths[i] = True

        if self.stack_traces is None:
            self.stack_traces = [None for _ in range(len(outputs))]
        else:
            if not (len(self.stack_traces) == len(outputs)):
                raise RuntimeError("Wrong number of stack traces passed in")

        if not (not self.outputs_weakrefs):
            raise RuntimeError("check not self.outputs_weakrefs fail")
        for out, static_output_tensor in zip(outputs, self.static_output_tensors):
            if not isinstance(out, torch.Tensor) or static_output_tensor is not None:
                self.outputs_weakrefs.append(None)
                self.tensor_weakrefs.append(None)
            else:
                self.outputs_weakrefs.append(StorageWeakRefWrapper(out))
                self.tensor_weakrefs.append(TensorWeakRef(out))

        self.recorded_liveness_after_graph = self._get_liveness(self.path_weakrefs)
        self.checkpointed_caching_state = torch_npu._C._npu_getCheckpointState(
            self.device, self.npu_graphs_pool
        )

        # now, get liveness with outputs added
        for depth in range(len(self.path_weakrefs)):
            for output_index in range(len(self.path_weakrefs[depth])):
                if is_live(self.path_weakrefs[depth][output_index]):
                    self.live_indices_after_graph.append((depth, output_index))

        self.debug_check_invariants_after_invocation()
        if config.triton.slow_path_cudagraph_asserts:
            check_memory_pool(
                self.device, self.npu_graphs_pool, list(self.path_live_weakrefs())
            )

    def _mark_prior_graph_output_as_aliased(self, index: PathOutputIndex) -> None:
        "Remove a graph output from the unaliased, cached tensors in an ancestor node"
        depth, output_index = index
        node = list(self._path_from_root)[depth]
        node.unaliased_in_all_paths[output_index] = False
        x = self.path_weakrefs[depth][output_index]
        if not (x is not None):
            raise RuntimeError("check x is not None fail")
        x.remove_extra_reference()

    def _initialize_cached_tensors(self) -> None:
        # we should not be clearing output_weakrefs, and they should be set in the first
        # record run
        if not (len(self.outputs_weakrefs) == len(self.outputs_metadata)):
            raise RuntimeError("check len(self.outputs_weakrefs) == len(self.outputs_metadata) fail")

        for i, (storage_info, metadata, make_cached) in enumerate(
            zip(
                self.output_storage_alias,
                self.outputs_metadata,
                self.unaliased_in_all_paths,
            )
        ):
            if not make_cached:
                self.cached_tensor_outputs.append(None)
                continue

            if not (storage_info is UnaliasedStorage):
                raise RuntimeError("check storage_info is UnaliasedStorage fail")
            if not (isinstance(metadata, dict)):
                raise RuntimeError("check isinstance(metadata, dict) fail")
            s = self.create_storage(metadata)
            out = self._reconstruct_from_tensor_metadata(metadata, storage=s)  # type: ignore[arg-type]

            # XXX: let autograd know that there will be an additional reference to the tensor
            # that can be ignored when deciding whether to do gradient buffer inplacing.
            # Otherwise, inplacing could differ between tracing and subsequent execution.
            # For some models we tested this led to inputs no longer being in cudagraph pools,
            # leading to spurious re-recordings.
            # It also tells AMP cache that even though the tensor impls cannot be cached
            # in dtype conversions.

            torch_npu._C._add_cached_tensor(out)

            self_ref = weakref.ref(self)

            # one reference in our array, and calling sys.getrefcount bumps the refcount by one
            def check_refcount(i: int) -> bool:
                self_loc = self_ref()
                if self_loc is None:
                    return False
                refcount = self_loc.get_output_refcount(i)
                # pyrefly: ignore
                if self_loc.cached_tensor_outputs[i]._use_count() > 1:
                    # c10::Tensor may also holds one reference count
                    if not (refcount >= 3):
                        raise RuntimeError("check refcount >= 3 fail")
                    return refcount == 3
                else:
                    if not (refcount >= 2):
                        raise RuntimeError("check refcount >= 2 fail")
                    return refcount == 2

            check = functools.partial(check_refcount, i=i)

            self.outputs_weakrefs[i] = StorageWeakRefWrapper(out, extra_ref_check=check)
            self.cached_tensor_outputs.append(out)

    def get_output_refcount(self, index: int) -> int:
        return sys.getrefcount(self.cached_tensor_outputs[index])

    @property
    def parent(self) -> NPUGraphNode | None:
        "unwraps the weakref to _parent"
        return self._parent() if self._parent is not None else None

    @property
    def _path_to_root(self) -> Generator[NPUGraphNode, None, None]:
        "Returns all nodes in the path starting at self and ending at root"
        node = self
        # pyrefly: ignore [bad-assignment]
        while node:
            yield node
            node = node.parent  # type: ignore[assignment]

    @property
    def _path_from_root(self) -> Generator[NPUGraphNode, None, None]:
        "Returns all nodes in the path starting at the root and ending at self"
        nodes = reversed(list(self._path_to_root))
        yield from nodes

    def _is_npu_graph_recorded_tensor(self, t: torch.Tensor) -> bool:
        "Is this tensor an output of a node in this path"
        for output_refs in self.path_weakrefs:
            for storage_weak_ref in output_refs:
                if storage_weak_ref is None:
                    continue
                # don't need to check liveness of storage since the cuda graph managed
                # memory is never released.
                data_ptr = storage_weak_ref.data_ptr()
                if t.untyped_storage().data_ptr() == data_ptr:
                    return True

        return False

    def _is_alias_of_live_recorded_tensor(
        self, t: torch.Tensor
    ) -> PathOutputIndex | None:
        for depth, output_refs in enumerate(self.path_weakrefs):
            for output_index, storage_ref in enumerate(output_refs):
                if (storage_and_ptr := maybe_deref(storage_ref)) is not None:
                    _storage, ptr = storage_and_ptr
                    if ptr == t.untyped_storage().data_ptr():
                        return (depth, output_index)

        return None

    @staticmethod
    def _check_liveness(
        indices: list[PathOutputIndex],
        output_refs: list[list[StorageWeakRefWrapper | None]],
    ) -> bool:
        "Check that all of the indices specified are dead references"
        for depth, output_index in indices:
            w = output_refs[depth][output_index]
            if not (w is not None):
                raise RuntimeError("check w is not None fail")
            if w() is not None:
                return False
        return True

    def add_child(self, function_id: FunctionID, node: NPUGraphNode) -> None:
        "Adds node as a child of self"
        self.children[function_id].append(node)

    @staticmethod
    def _get_different_indices(
        prev: list[list[bool]], curr: list[list[bool]]
    ) -> list[PathOutputIndex]:
        "Find indices where the two lists differ."
        dead_indices = []
        if not (len(prev) <= len(curr)):
            raise RuntimeError("check len(prev) <= len(curr) fail")
        for i, (outputs1, outputs2) in enumerate(zip(prev, curr)):
            if not (len(outputs1) == len(outputs2)):
                raise RuntimeError("check len(outputs1) == len(outputs2) fail")
            for j, (output1, output2) in enumerate(zip(outputs1, outputs2)):
                if output1 != output2:
                    dead_indices.append((i, j))

        return dead_indices

    @staticmethod
    def _get_liveness(
        weakrefs: list[list[StorageWeakRefWrapper | None]],
    ) -> list[list[bool]]:
        "Maps weakrefs to true if the reference is alive and false otherwise"
        if len(weakrefs) == 0:
            return []

        return [pytree.tree_map(is_live, outputs) for outputs in weakrefs]

    def debug_assert_invariants(
        self, expected_liveness: list[list[bool]], newly_dead: list[PathOutputIndex]
    ) -> None:
        if not config.triton.fast_path_cudagraph_asserts:
            return

        for i, node in enumerate(self._path_from_root):
            if not (self.path_weakrefs[i] is node.outputs_weakrefs):
                raise RuntimeError("check self.path_weakrefs[i] is node.outputs_weakrefs fail")

        nodes = list(self._path_from_root)

        live_blocks = get_block_addrs(self.npu_graphs_pool)

        live_storage_data_ptrs = OrderedSet[Any]()
        live_storage_weak_ptrs = OrderedSet[Any]()

        for depth, outputs_liveness in enumerate(expected_liveness):
            for output_idx, output_liveness in enumerate(outputs_liveness):
                # tensor can die early, but it can't be alive when it should be dead
                w = self.path_weakrefs[depth][output_idx]
                if (stor_weak_ptr_and_data_ptr := maybe_deref(w)) is not None:
                    if not (output_liveness):
                        raise RuntimeError("check output_liveness fail")
                    stor_weak_ptr, stor_data_ptr = stor_weak_ptr_and_data_ptr
                    if not ((stor_data_ptr in live_storage_data_ptrs) == (
                        stor_weak_ptr in live_storage_weak_ptrs
                    )):
                        raise RuntimeError("check (stor_data_ptr in live_storage_data_ptrs) == (stor_weak_ptr in live_storage_weak_ptrs) fail")
                    live_storage_data_ptrs.add(stor_data_ptr)
                    live_storage_weak_ptrs.add(stor_weak_ptr)

                    is_persistent_alias = (
                        nodes[depth].static_output_tensors[output_idx] is not None
                    )

                    if is_persistent_alias:
                        if not (stor_data_ptr not in live_blocks):
                            raise RuntimeError("check stor_data_ptr not in live_blocks fail")

        for depth, output_index in newly_dead:
            if not (not is_live(self.path_weakrefs[depth][output_index])):
                raise RuntimeError("check not is_live(self.path_weakrefs[depth][output_index]) fail")

    def debug_check_invariants_before_invocation(self) -> None:
        self.debug_assert_invariants(
            self.recorded_liveness_before_graph, self.expected_dead_indices_before_graph
        )

    def debug_check_invariants_after_invocation(self) -> None:
        self.debug_assert_invariants(
            self.recorded_liveness_before_graph, self.expected_dead_indices_after_graph
        )

    def data_ptrs_dead_since_invocation(self) -> list[int]:
        """
        Since this node was invoked, return data ptrs of all tensor outputs that have died
        in the current executing tree path.
        """
        curr_liveness = self._get_liveness(self.path_weakrefs)
        _get_different_indices = self._get_different_indices(
            self.recorded_liveness_after_graph, curr_liveness
        )

        path = list(self._path_from_root)
        ptrs_to_deallocate = []
        for depth, output_index in _get_different_indices:
            ptrs_to_deallocate.append(
                path[depth].outputs_metadata[output_index]["data_ptr"]  # type: ignore[index]
            )

        return ptrs_to_deallocate

    def path_live_weakrefs(self) -> Iterator[StorageWeakRefWrapper]:
        for i, j in self.live_indices_after_graph:
            out = self.path_weakrefs[i][j]
            if out is not None and is_live(out):
                yield out

    def remove_node_cached_tensors(self) -> None:
        for t in self.cached_tensor_outputs:
            if t is not None:
                torch_npu._C._remove_cached_tensor(t)
        self.cached_tensor_outputs.clear()

        for i, unaliased in enumerate(self.unaliased_in_all_paths):
            if unaliased:
                n = self.outputs_weakrefs[i]
                if not (n is not None):
                    raise RuntimeError("check n is not None fail")
                n.remove_extra_reference()

    def remove_path_cached_tensors(self) -> None:
        for node in self._path_from_root:
            node.remove_node_cached_tensors()

    def clear_path_state(self) -> None:
        "Clear the path state in this current executing node"
        # this doesn't actually do anything right now, leaving it as placeholder

    @staticmethod
    def _tensor_metadata(
        x: torch.Tensor, ignore_storage_offset: bool = True
    ) -> dict[str, Any]:
        if not (isinstance(x, torch.Tensor)):
            raise RuntimeError("check isinstance(x, torch.Tensor) fail")
        # We ignore the storage offset for inputs, but not for outputs
        # TODO: - should we make the storage resizable ?
        return {
            "nbytes": x.untyped_storage().nbytes(),
            "data_ptr": x.untyped_storage().data_ptr(),
            "size": x.shape,
            "stride": x.stride(),
            "dtype": x.dtype,
            "device": x.device,
            "storage_offset": x.storage_offset() if not ignore_storage_offset else 0,
            # the private format (metadata on softnpu), which a reconstructed output keeps
            "npu_format": int(torch.ops.npu.get_npu_format(x)) if x.device.type == "npu" else None,
        }

    def _reconstruct_from_tensor_metadata(
        self, metadata: dict[str, Any], storage: UntypedStorage | None = None
    ) -> Tensor:
        s = self.create_storage(metadata) if storage is None else storage
        return torch_npu._C._construct_NPU_Tensor_From_Storage_And_Metadata(metadata, s)  # type: ignore[arg-type]

    def create_storage(self, metadata: dict[str, Any]) -> torch.types.Storage:
        return torch_npu._C._construct_storage_from_data_pointer(
            metadata["data_ptr"], metadata["device"], metadata["nbytes"]
        )

    def _allocate_and_copy_recording_inputs(
        self, inputs: list[InputType]
    ) -> list[InputType]:
        """
        Allocate inputs for non static, non cudagraph managed tensors in the memory pool
        and copy over the tensor values.
        """

        torch.npu.synchronize()
        self.stream.wait_stream(torch.npu.current_stream())
        recording_inputs: list[InputType] = []

        with (
            warnings.catch_warnings(record=True),
            torch.npu.device(self.device),
            _use_npu_memory_pool_manager(
                self.device,
                mem_pool=self.npu_graphs_pool,
                stream=self.stream,
            ),
        ):
            for i, inp in enumerate(inputs):
                if not isinstance(inp, torch.Tensor):
                    if not (isinstance(inp, (int, torch.Generator, OpaqueBase))):
                        raise RuntimeError("check isinstance(inp, (int, torch.Generator, OpaqueBase)) fail")

                    recording_inputs.append(inp)
                elif i not in self.static_input_idxs:
                    # static_input does an allocation!
                    recording_inputs.append(static_input(inp))
                else:
                    recording_inputs.append(inp)

            self._copy_inputs_and_remove_from_src(recording_inputs, inputs)

        return recording_inputs

    def check_invariants(
        self, inputs: list[InputType]
    ) -> tuple[CheckInvariantStatus, Callable[..., str]]:
        """
        Checks if this node can be run. The same pattern of tensor liveness, static inputs,
        and tensors managed in the cudagraph private pool must remain stable.
        """

        _logger = functools.partial(
            log_data_ptr_mismatch,
            self.wrapped_function.placeholders,
            inputs,
            self.static_input_data_ptrs,
        )

        # previously managed data pointers remain stable
        # this is on the hot path so moved to C++. equivalent to:
        # return all(t.data_ptr() == data_ptr for (t, data_ptr) in zip(tensors, data_ptrs))
        if not torch_npu._C._tensors_data_ptrs_at_indices_equal(
            inputs,  # type: ignore[arg-type]
            self.static_input_data_ptrs,
            self.npugraph_managed_idxs,
        ):
            status = CheckInvariantStatus.CudagraphManagedIdxMismatch
            _logger = functools.partial(
                _logger,
                self.npugraph_managed_idxs,
                status,
            )
            return status, _logger

        if not self._check_liveness(
            self.expected_dead_indices_before_graph, self.path_weakrefs
        ):
            status = CheckInvariantStatus.ExpectedDeadIndicesBeforeGraphMismatch
            return status, lambda: f"{status}"

        # static input data pointers should remain stable
        # if we are inlining builtin nn modules we re-record in this case
        # if we are not inlining builtin nn modules, we check this in check_static_inputs_are_stable
        # and error if they are not stable
        if (
            self.rerecord_if_static_inputs_change
            and not torch_npu._C._tensors_data_ptrs_at_indices_equal(
                inputs,  # type: ignore[arg-type]
                self.static_input_data_ptrs,
                self.tensor_static_input_idxs,
            )
        ):
            status = CheckInvariantStatus.StaticInputIdxMismatch
            _logger = functools.partial(
                _logger,
                self.tensor_static_input_idxs,
                status,
            )
            return status, _logger

        # the cudagraph managed tensors which died upon recording must also die upon
        # this invocation. it is too late to check after we've replayed the graph,
        # because we would have already written over their memory.
        for idx in self.npugraph_managed_idxs:
            if not self.preserved_aliased_inputs[idx]:
                inputs[idx] = None  # type: ignore[call-overload]

        torch._check(
            self._check_liveness(
                self.expected_dead_indices_after_graph, self.path_weakrefs
            ),
            lambda: "TODO: graph recording observed an input tensor deallocate during graph "
            " recording that did not occur during replay. Please file an issue.",
        )
        return CheckInvariantStatus.SUCCESS, lambda: f"{CheckInvariantStatus.SUCCESS}"

    def num_descendants(self) -> int:
        "Total number of descendents of this node"
        num_desc = 0
        for children in self.children.values():
            for child in children:
                num_desc += 1
                num_desc += child.num_descendants()
        return num_desc


def get_npugraph_segments(pool_id: tuple[int, int]) -> Any:
    segments = torch.npu.memory_snapshot()
    return [segment for segment in segments if segment["segment_pool_id"] == pool_id]


def get_block_addrs(pool_id: tuple[int, int], live_only: bool = True) -> list[int]:
    blocks = []

    for segment in get_npugraph_segments(pool_id):
        addr = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" or not live_only:
                blocks.append(addr)

            addr += block["size"]

    return blocks


def check_memory_pool(
    device: int,
    pool_id: tuple[int, int],
    live_storages_ptrs: list[StorageWeakRefWrapper],
) -> None:
    """Validate npugraph pool allocations against tracked live storages and surface leaks."""
    if not (all(isinstance(elem, StorageWeakRefWrapper) for elem in live_storages_ptrs)):
        raise RuntimeError("check all(isinstance(elem, StorageWeakRefWrapper) for elem in live_storages_ptrs) fail")
    unique_storages = {stor.data_ptr() for stor in live_storages_ptrs if stor()}  # noqa: set_linter

    # check if there is a divergence first, then do the expensive snapshot call after
    # we know it will error
    if torch_npu._C._npu_checkPoolLiveAllocations(device, pool_id, unique_storages):
        return

    # at this point we are past the fast-path. we have seen rare cases where a dead tensor is dead,
    # but hasn't been gc'd yet, and gives false positive for allocated_not_in_live_storages
    gc.collect()
    torch.npu.synchronize()

    segments = get_npugraph_segments(pool_id)

    allocated_not_in_live_storages = {}

    for segment in segments:
        addr = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                if addr not in unique_storages:
                    allocated_not_in_live_storages[addr] = block
                else:
                    unique_storages.remove(addr)

            addr += block["size"]

    torch._check(
        len(unique_storages) == 0,
        lambda: (
            f"These storage data ptrs are not allocated in pool {pool_id} but should be {unique_storages}. "
            f"This could be a bug in inductor aliasing tracking or in a custom op's meta function. Please file an issue."
        ),
    )

    if len(allocated_not_in_live_storages) != 0:
        formatted = []
        for dp, block in allocated_not_in_live_storages.items():
            trace = format_tb(block.get("frames", []))
            # pyrefly: ignore [bad-argument-type]
            formatted.append(f"Data Pointer: {dp}, history: \n{trace}")
        formatted_s = "\n".join(formatted)

        history_hint = ""
        if not config.triton.cudagraph_trees_history_recording:
            history_hint = "- Set torch._inductor.config.triton.cudagraph_trees_history_recording = True for allocation origins\n"

        objgraph_hint = (
            (
                "- Objgraph backrefs disabled; set torch._inductor.config.triton.cudagraph_trees_objgraph = True "
                "(refs_live_tensor_{index}.svg)\n"
            )
            if not config.triton.cudagraph_trees_objgraph
            else ""
        )
        objgraph_files_hint = ""

        if config.triton.cudagraph_trees_objgraph:
            # pyrefly: ignore  # import-error
            import objgraph

            generated_files: list[str] = []

            tensors = objgraph.by_type("torch.Tensor")
            for index, bad_dp in enumerate(allocated_not_in_live_storages):
                bad_tensor = next(
                    (t for t in tensors if bad_dp in collect_cuda_data_ptrs(t)), None
                )
                if bad_tensor is None:
                    continue
                filename = f"refs_live_tensor_{index}.svg"
                objgraph.show_backrefs(bad_tensor, filename=filename, max_depth=5)
                generated_files.append(filename)
            if generated_files:
                objgraph_files_hint = (
                    f"- Objgraph backrefs written: {', '.join(generated_files)}\n"
                )

        dangling_addrs = OrderedSet(allocated_not_in_live_storages.keys())
        msg = (
            f"These live storage data ptrs are in the npugraph pool but not accounted for as outputs of npugraph "
            f"trees ({len(allocated_not_in_live_storages)}). All live allocations must be tracked for correctness.\n"
            f"Debugging:\n"
            f"{history_hint}"
            f"{objgraph_hint}"
            f"- Search gc.get_objects() for tensors with data_ptr() in {dangling_addrs}\n"
            f"- Use refcycle to find what is preventing cleanup\n"
            f"{objgraph_files_hint}"
            f"Allocations:\n{formatted_s}"
        )
        raise RuntimeError(msg)


class NPUGraphTreeManager:
    """
    Groups individual recordings or executions of cuda graphs into a tree of recordings,
    and checks required invariants, and manages warmups of graphs.

    When graphs are recorded in the same tree, it enforces subsequent execution
    to follow the same order and have the same output tensor livespans. To remove
    unnecessary coupling of cuda graphs (and additional imposed invariants),
    the tree manager will end a currently recording tree whenever it is valid - when
    the memory pool no longer has any live allocations.

    We ignore outputs from a previous generation that correspond to prior model outputs.
    Currently this is hardcoded `GenerationTracker.generation` tracked in torch dynamo.
    # TODO: make generation increment configurable, warn on overwrite.

    We run graph warmups in the cudagraph memory pool and return the result on the first invocation
    of a function. For many models it is important to reclaim activations as you run the backward.
    If we were to warm up the model and keep an extra copy of the inputs around to subsequently
    use for recording, we would incur a memory penalty. Additionally, if we are part way through training
    your model and need to recompile, memory will be allocated to the cuda graph pool, so we run this
    warmup run in the cuda graph memory pool. As for recording, warm up needs the state of live tensors
    to be accurately reflected so we checkpoint the allocator state if we need to warm up following graph
    replay.
    """

    def __init__(self, device_index: int) -> None:
        # roots are functions which have no dependencies on an other node. I.e.,
        # when they are first invoked, none of their inputs are outputs are outputs
        # of another node, nor are there any live outputs of another node whose
        # liveness would create a dependency.
        self.roots: dict[FunctionID, list[NPUGraphNode]] = defaultdict(list)

        # mapping from function id to wrapped function
        self.ids_to_funcs: dict[FunctionID, WrappedFunction] = {}

        self.ids_to_stack_traces: dict[FunctionID, StackTraces | None] = {}

        self.warmed_up_functions: OrderedSet[FunctionID] = OrderedSet()
        # if we fail to increment generation, and are stuck warming up,
        # only warn on each function once
        self.warned_functions: OrderedSet[FunctionID] = OrderedSet()
        torch_npu._C._set_cached_tensors_enabled(True)

        # warn only once if a function mutates inputs
        self.warned_mutation: OrderedSet[FunctionID] = OrderedSet()

        # NB: cuda caching allocator will remember the stream a segment is allocated to
        # and only allocate that segment to the same stream. we need to use a single stream
        # for all allocations to the memory pool, otherwise the allocations to separate streams
        # will not be reused; separate recordings would have use the same memory pool, but not
        # the same memory.

        with graph_capture_lock, torch.npu.device(device_index):
            torch.npu.synchronize()
            self.stream = torch.npu.Stream()
            self.stream.wait_stream(torch.npu.current_stream())

            # Keeps Memory Pool Alive
            self.graph: torch.npu.NPUGraph | None = torch.npu.NPUGraph()
            self.npu_graphs_thread_pool = torch.npu.graph_pool_handle()

            with (
                warnings.catch_warnings(record=True),
                torch.npu.graph(
                    self.graph,
                    pool=self.npu_graphs_thread_pool,
                    stream=self.stream,
                    capture_error_mode="thread_local",
                ),
            ):
                pass

        self.graph_counter = itertools.count(0)
        self.func_counter = itertools.count(0)

        # mapping from graph_id to (function id to mutation type hint) since we are
        # specializing on a particular combination of Parent Node -> Function ID.
        self.non_cudagraph_managed_mutation_hint: dict[
            GraphID | None, dict[FunctionID, bool]
        ] = defaultdict(dict)
        self.warmup_node_counter = itertools.count(start=-1, step=-1)

        # mapping from graph_id to (function id to re-record count). We fall back to
        # eager function if a function is re-recorded frequently on a node.
        self.num_rerecord: dict[GraphID | None, dict[FunctionID, int]] = defaultdict(
            lambda: defaultdict(lambda: 0)
        )

        # whether we the current node is in a state of warmup, recording, execution. If
        # there is no current node the state will be ExecutionState.None.
        self.path_state = ExecutionState.NONE
        self.device_index = device_index

        # the most recently invoked cudagraph wrapping of a function. Will be None
        # when there is no output from a previous recording or execution whose memory
        # we need to respect in the cuda caching allocation. If you incremented generation,
        # this will also be none, as ignore those allocations.
        self.current_node: NPUGraphNode | NPUWarmupNode | None = None

        # current generation of cudagraph invocations. when torch.compile is run
        # we increment the current generation. are willing to ignore live outputs
        # of a previous generation in checking liveness.
        self.current_gen: int = -1

        # number of instances we are in execution and failed to match to an
        # existing child
        self.debug_fail_counter = 0
        # number of instances we had to checkpoint the function
        self.debug_checkpointing_counter = 0

        self.id_to_mode: dict[FunctionID, CompilationMode] = {}
        self.id_to_compile_id: dict[FunctionID, CompileId | None] = {}

        # Note: [Backward Generation Handling]
        # We generally perform a sequence of forward executions followed by backward executions.
        # If multiple torch.compile wrapped forwards are executed with their backwards pending,
        # we should not disregard the outputs from a prior torch.compile since the entire training
        # loop hasn't completed.  Occasionally, a backward pass corresponding to a forward pass may
        # not be executed, so we cannot wait for all pending forward pass backward completions, so
        # we cannot wait for all backwards to have been invoked. Instead we wait for a single backward
        # invocation. Triggering a backward pass typically doesn't lead to another torch.compile
        # invocation, making it less likely for the generation to increase between multiple
        # backward calls. The following use case is covered by this approach:
        # mod1 = torch.compile(...)
        # mod2 = torch.compile(...)
        # mod2(mod1(x)).sum().backward()

        self.running_forwards_with_pending_backwards = False
        self.mode: CompilationMode | None = None
        self.compile_id: CompileId | None = None

        self.disable_invalidate_aliases = (
            False
            if not torch._environment.is_fbcode()
            else torch._utils_internal.justknobs_check(
                "pytorch/inductor:disable_cudagraph_alias_invalidation"
            )
        )

    def run(self, new_inputs: list[InputType], function_id: FunctionID) -> OutputType:
        if not (self.graph is not None):
            raise RuntimeError("Running NPUGraph after shutdown")
        self.mode = self.id_to_mode[function_id]
        self.compile_id = self.id_to_compile_id.get(function_id)
        out = self._run(new_inputs, function_id)

        # The forwards are only pending following invocation, not before
        if self.mode == CompilationMode.FORWARD:
            self.running_forwards_with_pending_backwards = True
        elif self.mode == CompilationMode.BACKWARD:
            self.running_forwards_with_pending_backwards = False

        return out

    def set_to_running_backward(self) -> None:
        self.running_forwards_with_pending_backwards = False
        self.mode = CompilationMode.BACKWARD

    def _get_cuda_graph_recorded_tensor_checker(self) -> Callable[[Tensor], bool]:
        return (
            self.current_node._is_npu_graph_recorded_tensor
            if isinstance(self.current_node, (NPUGraphNode, NPUWarmupNode))
            else lambda _: False
        )

    def new_warmup_node_id(self) -> GraphID:
        return GraphID(next(self.warmup_node_counter))

    def _update_non_cudagraph_managed_mutation(
        self, function_id: FunctionID, inputs: list[InputType]
    ) -> None:
        node_id = self._get_node_id()
        if maybe_mutation_str := check_for_mutation(
            self.ids_to_funcs[function_id],
            inputs,
            self._get_cuda_graph_recorded_tensor_checker(),
        ):
            self.non_cudagraph_managed_mutation_hint[node_id][function_id] = True
            # warn once per function_id
            if function_id in self.warned_mutation:
                return
            self.warned_mutation.add(function_id)
            log_cudagraph_skip_and_bump_counter(maybe_mutation_str)
        else:
            self.non_cudagraph_managed_mutation_hint[node_id][function_id] = False

    def _get_node_id(self) -> GraphID | None:
        if self.current_node is None:
            return None
        elif isinstance(self.current_node, (NPUGraphNode, NPUWarmupNode)):
            return self.current_node.id
        else:
            raise RuntimeError(f"Unknown node type {type(self.current_node)}")

    def exceed_rerecord_limit(
        self, node_id: GraphID | None, function_id: FunctionID
    ) -> bool:
        return (
            self.num_rerecord[node_id][function_id]
            > torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit
        )

    def _run(self, new_inputs: list[InputType], function_id: FunctionID) -> OutputType:
        # we will try to end the current execution lazily, since
        # we dont want to do unnecessary checking of the existing outputs
        # on the hot path, but both recording and warmup only happen once
        # so we check up front
        if self.in_recording:
            self.try_end_curr_recording(function_id)

        if self.in_warmup:
            self.try_end_curr_warmup(function_id)

        node_id = self._get_node_id()
        if function_id not in self.non_cudagraph_managed_mutation_hint[node_id]:
            self._update_non_cudagraph_managed_mutation(function_id, new_inputs)

        # Early exit if the function mutates inputs which are neither parameters/buffers nor
        # cudagraph recorded tensors. This check should happen after `try_end_curr_recording`
        # and `try_end_curr_warmup` which may change self.current_node.
        if self.non_cudagraph_managed_mutation_hint[node_id][
            function_id
        ] or self.exceed_rerecord_limit(node_id, function_id):
            return self.ids_to_funcs[function_id].model(new_inputs)

        # warming up a function and subsequentally recording may use different memory addresses
        # because both depend on the state of the caching allocator. if we warm up graph A,
        # then warm up graph B and make more allocations, the subsequent recording of A will not
        # necessarily use the same addresses as in the warm up. Thus any warm up of a node can only
        # be followed by warm up runs.
        if (
            (
                not (
                    function_id in self.warmed_up_functions
                    or config.triton.skip_cudagraph_warmup
                )
            )
            or self.in_warmup
            or config.triton.force_cudagraphs_warmup
        ):
            # If we are in the middle of executing cuda graphs, then we need to checkpoint memory state.
            # Both Recording and Warmup will be reflected in the allocator and dont need changes
            if self.path_state == ExecutionState.EXECUTION:
                self.apply_checkpoint_execution_state_in_allocator()

            with graph_capture_lock:
                return self.run_eager(new_inputs, function_id)

        if not (not isinstance(self.current_node, NPUWarmupNode)):
            raise RuntimeError("check not isinstance(self.current_node, NPUWarmupNode) fail")
        child_nodes = (
            self.roots if self.current_node is None else self.current_node.children
        )

        if not self.in_recording:
            unexpected_rerecord = False
            unexpected_rerecord_reason = None
            for child in child_nodes[function_id]:
                # here we are checking memory consistency between recording and execution,
                # as well as things like stability of tensor locations, etc
                # and other
                status, status_logger = child.check_invariants(new_inputs)
                if status == CheckInvariantStatus.SUCCESS:
                    return self.execute_node(child, new_inputs)

                if status != CheckInvariantStatus.SUCCESS:
                    # StaticInputIdxMismatch fires on non-cudagraph-managed
                    # static inputs (nn parameters and mark_static_address
                    # tensors) whose identity can churn under
                    # inline_inbuilt_nn_modules. We re-record but don't count
                    # those toward cudagraph_unexpected_rerecord_limit. All
                    # other mismatch reasons do count.
                    if status != CheckInvariantStatus.StaticInputIdxMismatch:
                        unexpected_rerecord = True
                    # Only compute detailed reason when debug logging is enabled
                    if log.isEnabledFor(logging.DEBUG):
                        unexpected_rerecord_reason = status_logger()
                        log.debug(
                            "[%s] Re-recording function=%s, mode=%s, reason=%s",
                            self.compile_id,
                            self.get_func_name(function_id),
                            self.id_to_mode[function_id].name,
                            unexpected_rerecord_reason,
                        )
                    else:
                        # Defer reason computation until needed (for exceed_rerecord_limit)
                        unexpected_rerecord_reason = status_logger

            # now that we know the new function can't be run as a child of the
            # current node, if it is a root, try to end the current execution.
            # as noted above, we want to do this lazily to avoid having to
            # check all existing outputs
            if self.current_node is not None and function_id in self.roots:
                self.try_end_curr_execution()

                # run again to hit the root matching case which must succeed
                if self.current_node is None:
                    return self.run(new_inputs, function_id)

            if len(self.ids_to_funcs[function_id].mutated_input_idxs) > 0:
                self._update_non_cudagraph_managed_mutation(function_id, new_inputs)
                if self.non_cudagraph_managed_mutation_hint[self._get_node_id()][
                    function_id
                ]:
                    return self.ids_to_funcs[function_id].model(new_inputs)

            # nb: run before checkpointing because checkpointing is slow, and we will
            # be using the eager caching allocator pool which does not require live
            # accounting of tensors in cudagraph allocator
            if unexpected_rerecord:
                curr_node_id = self._get_node_id()
                self.num_rerecord[curr_node_id][function_id] += 1
                if self.exceed_rerecord_limit(curr_node_id, function_id):
                    _id = curr_node_id.id if curr_node_id else None
                    # unexpected_rerecord_reason is either a string (if debug was enabled)
                    # or a callable (if debug was disabled)
                    if not (unexpected_rerecord_reason is not None):
                        raise RuntimeError("check unexpected_rerecord_reason is not None fail")
                    reason = (
                        unexpected_rerecord_reason
                        if isinstance(unexpected_rerecord_reason, str)
                        else unexpected_rerecord_reason()
                    )
                    log_cudagraph_skip_and_bump_counter(
                        f"skipping npugraph due to function {function_id.id} exceeding max "
                        f"re-recording limit "
                        f"(={torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit}) "
                        f"on npugraph node {_id} due to {reason}."
                    )
                    return self.ids_to_funcs[function_id].model(new_inputs)

            # at this point, we necessarily will do a new recording
            self.debug_fail_counter += 1

            self.try_end_curr_execution()
            if self.current_node is not None:
                self.apply_checkpoint_execution_state_in_allocator()

        # now, we are in a recording state !
        with graph_capture_lock:
            return self.record_function(new_inputs, function_id)

    def shutdown(self) -> None:
        """
        Remove all cached tensors in all nodes. Because cached tensors can hold gradients which in turn
        might reference a backward which invokes a CUDA Graph Node, we have to manually clear them on shutdown
        to avoid a reference cycle.
        """
        nodes = []
        for roots in self.roots.values():
            nodes.extend(roots)

        while nodes:
            node = nodes.pop()
            for children in node.children.values():
                nodes.extend(children)
            node.remove_node_cached_tensors()
            node.graph = None

        self.graph = None
        self.roots = None  # type: ignore[assignment]
        self.current_node = None

    def record_function(
        self, new_inputs: list[InputType], function_id: FunctionID
    ) -> OutputType:
        if not (not isinstance(self.current_node, NPUWarmupNode)):
            raise RuntimeError("check not isinstance(self.current_node, NPUWarmupNode) fail")
        with torch._dynamo.callback_handler.install_callbacks(
            CallbackTrigger.CUDAGRAPH_RECORDING, str(self.compile_id)
        ):
            graph_id = self.new_graph_id()
            log.debug(
                "[%s] Recording function=%s, mode=%s, npu_graph_id=%d, inputs: %s",
                self.compile_id,
                self.get_func_name(function_id),
                self.id_to_mode.get(function_id),
                graph_id.id,
                format_inputs_log(new_inputs),
            )
            torch.npu.synchronize()
            node = NPUGraphNode(
                self.ids_to_funcs[function_id],
                graph_id,
                self.current_node,
                new_inputs,
                self.npu_graphs_thread_pool,
                self.device_index,
                self.ids_to_stack_traces[function_id],
                self.stream,
            )
            if self.current_node is None:
                self.roots[function_id].append(node)
            else:
                self.current_node.add_child(function_id, node)
            self.current_node = node
            self.path_state = ExecutionState.RECORDING
            self.update_generation()
            torch.npu.synchronize()
            return node.run_first_inputs(new_inputs)

    def execute_node(
        self, node: NPUGraphNode, new_inputs: list[InputType]
    ) -> OutputType:
        self.current_node = node
        self.path_state = ExecutionState.EXECUTION
        self.update_generation()
        return node.run(new_inputs)

    def run_eager(
        self, new_inputs: list[InputType], function_id: FunctionID
    ) -> OutputType:
        # this is only stored on current node, because when we start a new path,
        # we will deallocate it
        already_warm = function_id in self.warmed_up_functions
        func_name = self.get_func_name(function_id)
        if not already_warm:
            log.debug(
                "[%s] Running warmup function=%s, mode=%s",
                self.compile_id,
                func_name,
                self.id_to_mode.get(function_id),
            )
        else:
            log.debug(
                "[%s] Running eager function=%s",
                self.compile_id,
                func_name,
            )
        self.warmed_up_functions.add(function_id)
        node = NPUWarmupNode(
            self.ids_to_funcs[function_id],
            self.current_node,
            self.npu_graphs_thread_pool,
            self.graph,
            self.device_index,
            self.ids_to_stack_traces[function_id],
            self.stream,
            already_warm,
            self.new_warmup_node_id(),
        )
        self.current_node = node
        self.path_state = ExecutionState.WARMUP
        self.update_generation()
        return node.run(new_inputs)

    def new_graph_id(self) -> GraphID:
        return GraphID(next(self.graph_counter))

    def new_func_id(self) -> FunctionID:
        return FunctionID(next(self.func_counter))

    def get_func_name(self, function_id: FunctionID) -> str:
        return getattr(self.ids_to_funcs[function_id].model, "__name__", "unknown")

    def add_function(
        self,
        model: ModelType,
        inputs: list[InputType],
        static_input_idxs: Sequence[int],
        stack_traces: StackTraces | None,
        mode: CompilationMode,
        constants: tuple[torch.Tensor, ...],
        placeholders: tuple[PlaceholderInfo, ...],
        mutated_input_idxs: tuple[int, ...],
        compile_id: CompileId | None = None,
    ) -> tuple[
        ModelType,
        OutputType,
    ]:
        id = self.new_func_id()
        self.ids_to_stack_traces[id] = stack_traces
        self.ids_to_funcs[id] = WrappedFunction(
            model,
            list(static_input_idxs),
            id,
            tuple(t for t in constants if isinstance(t, torch.Tensor) and t.is_npu),
            placeholders,
            mutated_input_idxs,
        )
        self.id_to_mode[id] = mode
        self.id_to_compile_id[id] = compile_id
        fn = functools.partial(self.run, function_id=id)

        # container needs to set clean up when fn dies
        get_container(self.device_index).add_strong_reference(fn)
        return fn, fn(inputs)

    @property
    def in_recording(self) -> bool:
        return self.path_state == ExecutionState.RECORDING

    @property
    def in_warmup(self) -> bool:
        return self.path_state == ExecutionState.WARMUP

    def get_roots(self) -> Iterator[NPUGraphNode]:
        for nodes in self.roots.values():
            yield from nodes

    @property
    def current_node(self) -> NPUGraphNode | NPUWarmupNode | None:
        return self._current_node

    @current_node.setter
    def current_node(self, value: NPUGraphNode | NPUWarmupNode | None) -> None:
        self._current_node = value
        if value is None:
            self.path_state = ExecutionState.NONE

    def update_generation(self) -> None:
        self.current_gen = self.get_curr_generation()

    @staticmethod
    def get_curr_generation() -> int:
        if MarkStepBox.mark_step_counter != 0:
            return MarkStepBox.mark_step_counter

        return GenerationTracker.generation

    @staticmethod
    def user_invoked_mark_step() -> bool:
        return MarkStepBox.mark_step_counter != 0

    def can_start_new_generation(self) -> bool:
        if not self.in_new_torch_compile_invocation():
            return False

        if self.user_invoked_mark_step():
            return True

        return not self.running_forwards_with_pending_backwards

    def in_new_torch_compile_invocation(self) -> bool:
        return self.current_gen != self.get_curr_generation()

    def try_end_curr_recording(self, function_id: FunctionID) -> None:
        """
        Check if the current recording can be terminated, either because all outputs of the
        previously recorded node are dead or because it was executed in a different
        generation. Will set current_node to None and in_recording to False if successful.
        """
        if not (self.in_recording):
            raise RuntimeError("check self.in_recording fail")
        if not (self.current_node is not None):
            raise RuntimeError("check self.current_node is not None fail")

        # multiple invocations, allow overwriting the previous generation
        if self.can_start_new_generation():
            self.dealloc_current_path_weakrefs()
            self.clear_current_path_state_and_set_to_none()
            return

        if self.current_node.all_outputs_are_dead():
            self.clear_current_path_state_and_set_to_none()
            return

        self.check_warn_on_unable_to_start_executing(function_id)

    def try_end_curr_execution(self) -> None:
        """
        Check if the current executing node can be terminated, either because all outputs of the
        previously executed node are dead or because it was executed in a different generation.
        Will set current_node to None if successful.
        """

        if not (not self.in_recording):
            raise RuntimeError("check not self.in_recording fail")
        if self.current_node is None:
            return

        if self.can_start_new_generation():
            self.clear_current_path_state_and_set_to_none()
            return

        if self.current_node.all_outputs_are_dead():
            self.clear_current_path_state_and_set_to_none()

    def try_end_curr_warmup(self, function_id: FunctionID) -> None:
        if self.can_start_new_generation():
            self.dealloc_current_path_weakrefs()
            self.current_node = None
            return

        if not (self.current_node is not None):
            raise RuntimeError("check self.current_node is not None fail")
        if self.current_node.all_outputs_are_dead():
            self.current_node = None
            return

        self.check_warn_on_unable_to_start_executing(function_id)

    def check_warn_on_unable_to_start_executing(self, function_id: FunctionID) -> None:
        "Warn if we in a potential loop where we are unable to hit fast path"
        if (
            function_id in self.warned_functions
            or not self.in_new_torch_compile_invocation()
        ):
            return

        if not (self.current_node is not None):
            raise RuntimeError("check self.current_node is not None fail")
        existing_nodes = [
            node
            for node in self.current_node._path_from_root
            if node.wrapped_function.id == function_id
        ]

        if len(existing_nodes) <= 1:
            return

        # repeated same pattern
        parents = OrderedSet(
            [
                n.parent.wrapped_function.id
                for n in itertools.chain(existing_nodes, (self.current_node,))
                if n.parent is not None
            ]
        )
        if len(parents) == len(existing_nodes):
            return

        self.warned_functions.add(function_id)
        warnings.warn(
            "Unable to hit fast path of NPUGraphs because of pending, uninvoked backwards. "
            "Consider running with torch.no_grad() or using torch.compiler.npugraph_mark_step_begin() "
            "before each model invocation"
        )

    @staticmethod
    def format_dealloc_msg(
        stack_trace: str | None, *, is_grad_output: bool = False
    ) -> str:
        stack_trace = (
            stack_trace.strip() if stack_trace else "[Could not find stack trace]"
        )
        if is_grad_output:
            return (
                "Error: accessing gradient tensor output of NPUGraphs that has been overwritten "
                f"by a subsequent run. Stack trace: {stack_trace}. "
                "This can happen with torch.compile(mode='reduce-overhead') and gradient "
                "accumulation when a .grad tensor is allocated during NPUGraph capture. "
                "If you need gradient accumulation, allocate stable .grad buffers outside "
                "NPUGraph capture before the compiled backward runs, for example by running "
                "an eager warmup iteration or by preallocating zeroed .grad tensors. "
                "If you do not need gradient accumulation, set .grad to None before each backward."
            )
        return (
            "Error: accessing tensor output of NPUGraphs that has been overwritten by a subsequent run. "
            f"Stack trace: {stack_trace}. "
            "To prevent overwriting, clone the tensor outside of torch.compile() "
            "or call torch.compiler.npugraph_mark_step_begin() before each model invocation."
        )

    def dealloc_current_path_weakrefs(self) -> None:
        if not (self.current_node is not None):
            raise RuntimeError("check self.current_node is not None fail")
        # TODO: we could also allow the these weak refs to continue to be allocated,
        # but that adds some complications.

        stor_dealloc_info: dict[int, tuple[str | None, bool]] = {}
        for node in self.current_node._path_from_root:
            if not (node.stack_traces is not None):
                raise RuntimeError("check node.stack_traces is not None fail")
            # tensor_weakrefs and stack_traces are paired below with zip(),
            # matching the defensive handling for outputs_weakrefs and
            # stack_traces.
            if len(node.tensor_weakrefs) != len(node.stack_traces):
                log.warning(
                    "tensor_weakrefs length (%d) != stack_traces length (%d)",
                    len(node.tensor_weakrefs),
                    len(node.stack_traces),
                )
            is_grad_output = (
                self.id_to_mode[node.wrapped_function.id] == CompilationMode.BACKWARD
            )
            for t, stack_trace in zip(node.tensor_weakrefs, node.stack_traces):
                ten = None if t is None else t()
                if ten is None:
                    continue

                torch_npu._C._set_storage_access_error_msg(
                    ten,
                    self.format_dealloc_msg(stack_trace, is_grad_output=is_grad_output),
                )

            # we would to enable the following assertion, but an internal model failed with a command
            # that does not repro. len(node.outputs_weakrefs) == len(node.stack_traces)
            # so, pessimistically assume that they might differ by doing the debug info
            # loop separately from the dealloc loop
            if self.disable_invalidate_aliases:
                continue

            for storage_ref, stack_trace in zip(
                node.outputs_weakrefs, node.stack_traces
            ):
                if not storage_ref:
                    continue

                stor_dealloc_info[storage_ref.data_ptr()] = (
                    stack_trace,
                    is_grad_output,
                )

        deleted = OrderedSet[Any]()
        for storage_ref in self.current_node.path_live_weakrefs():
            _storage_deref = storage_ref()
            if _storage_deref and storage_ref.data_ptr() not in deleted:
                deleted.add(storage_ref.data_ptr())

                stack_trace, is_grad_output = stor_dealloc_info.get(
                    storage_ref.data_ptr(), (None, False)
                )
                msg = self.format_dealloc_msg(
                    stack_trace, is_grad_output=is_grad_output
                )
                torch_npu._C._free_And_Remove_DeleterFn(_storage_deref)

                if self.disable_invalidate_aliases:
                    continue

                torch_npu._C._set_storage_data_ptr_access_error_msg(_storage_deref, msg)

    def clear_current_path_state_and_set_to_none(self) -> None:
        if not (isinstance(self.current_node, NPUGraphNode)):
            raise RuntimeError("check isinstance(self.current_node, NPUGraphNode) fail")
        self.current_node.clear_path_state()
        self.current_node = None

    def apply_checkpoint_execution_state_in_allocator(self) -> None:
        """
        Checkpoint the current execution state in the caching allocator so that
        additional cudagraph recordings can be made respecting existent live storages.
        """
        if not (isinstance(self.current_node, NPUGraphNode)):
            raise RuntimeError("check isinstance(self.current_node, NPUGraphNode) fail")
        self.debug_checkpointing_counter += 1
        log.debug(
            "Checkpointing npu caching allocator state. Number of checkpoints %d",
            self.debug_checkpointing_counter,
        )

        state = self.current_node.checkpointed_caching_state
        device = self.current_node.device
        if not (state is not None and device is not None):
            raise RuntimeError("check state is not None and device is not None fail")

        # currently we deallocate on instead of allowing stale recordings
        stale_storages: list[int] = []

        # remove cached tensors, otherwise they would prevent memory from being
        # reclaimed in subsequent recordings
        self.current_node.remove_path_cached_tensors()
        live_storages_wrappers = list(self.current_node.path_live_weakrefs())

        # path_live_weakrefs guarantees that t() will not be None
        live_storages_weak_refs: list[int] = [t() for t in live_storages_wrappers]  # type: ignore[misc]
        ptrs_to_deallocate = self.current_node.data_ptrs_dead_since_invocation()
        torch_npu._C._npu_setCheckpointPoolState(
            device,
            # pyrefly: ignore [bad-argument-type]
            state,
            stale_storages,
            live_storages_weak_refs,
        )

        # NB: deduplicate aliased outputs
        for ptr in OrderedSet(ptrs_to_deallocate):
            torch_npu._C._npu_npuCachingAllocator_raw_delete(ptr)

        # Now the live blocks should be exactly equal to the live storages in private pool
        if config.triton.slow_path_cudagraph_asserts:
            check_memory_pool(
                self.device_index, self.npu_graphs_thread_pool, live_storages_wrappers
            )
            for wrapper in live_storages_wrappers:
                storage_ptr = wrapper()
                if not (storage_ptr is not None):
                    raise RuntimeError("check storage_ptr is not None fail")
                if not (torch_npu._C._has_Standard_Deleter(storage_ptr)):
                    raise RuntimeError("check torch_npu._C._has_Standard_Deleter(storage_ptr) fail")
                if not (wrapper.data_ptr() not in ptrs_to_deallocate):
                    raise RuntimeError("check wrapper.data_ptr() not in ptrs_to_deallocate fail")

    def live_npugraph_pool_storages_in_curr_execution(
        self,
    ) -> list[StorageWeakRefPointer]:
        if self.current_node is None:
            return []
        # explicitly ignoring previous recorded outputs from past path
        # path_live_weakrefs() guarantees that t() will not be None
        return [t() for t in self.current_node.path_live_weakrefs()]  # type: ignore[misc]
