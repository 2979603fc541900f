"""torch.compile(mode="reduce-overhead") on npu: the compiled graph replayed as an NPU graph, as CUDA graphs replay it
for CUDA.

Inductor's CUDA graph trees are not reused: they run on the CUDA caching allocator's private hooks
(``torch._C._cuda_beginAllocateCurrentThreadToPool`` / ``_cuda_endAllocateToPool`` / ``_cuda_releasePool``, the
allocator checkpoints ``_cuda_getCheckpointState`` / ``_cuda_setCheckpointPoolState``,
``_cuda_checkPoolLiveAllocations``, ``_construct_CUDA_Tensor_From_Storage_And_Metadata``), which have no npu
counterpart. Inductor 2.13 has a seam instead: ``config.cudagraph_policy``, whose ``cudagraphify`` wraps each
compiled graph (forward, backward, inference) when the mode asks for graphs. Two things are made to hold for npu:

- ``cudagraph_utils.check_multiple_devices_or_any_cpu_nodes`` refuses graphs unless the graph's one device is
  "cuda"; a graph whose one device is npu is accepted too.
- ``config.cudagraph_policy`` is an ``NpuGraphPolicy``: a compiled graph with npu inputs gets a ``_Replayed``; other
  graphs go to Inductor's own wrapping.

``_Replayed`` keeps the contract of CUDA graph trees (``cudagraph_trees.py``, ``cudagraph_utils.py``):

- Warm-up: the first call runs the graph eagerly (lazy initializations happen outside capture); the next records.
- Inputs that change between calls (not static) are copied into the graph's own static copies before each replay.
  Static inputs (parameters, buffers, ``torch._dynamo.mark_static_address``) are read and written in place, at the
  addresses the recording saw.
- Mutated inputs (``check_for_mutation``): a graph that mutates an input that is not static is never recorded (it
  would mutate its copy); the compiled code runs without a graph on every call, logged and counted as a cudagraph
  skip.
- Static input addresses (``check_invariants``' StaticInputIdxMismatch) and int inputs (sizes under dynamic shapes,
  ``cudagraphify_impl``'s int key): a call with new ones replays the recording made with them or records a new one.
  The recordings hold no reference to static inputs, so a replay always runs against the caller's live tensors.
  Past ``config.triton.cudagraph_unexpected_rerecord_limit`` recordings (CUDA does not count static-address
  re-records; here they are counted because each recording keeps its pool), the graph runs without one, logged as
  a skip.

- ACL graph update plans (torch_npu's): a recording is captured with ``auto_dispatch_capture=True``, so the ops that
  have an NpuGraphOpHandler (the attention ops) are recorded in task groups of their own; the plan Inductor wrote
  beside the compiled graph (``_aclgraph_update_plan/codegen.py``) is checked against those records after the
  capture, and before every replay resolved against the call's inputs and applied with ``NPUGraph.update``, so the
  replayed ops take that call's arguments (``softnpu/npu/_aclgraph_update_plan/``). An update equal to the one the
  recording holds is skipped (a compiled attention call took 503 us with the relaunch of its op, 196 us without, on
  the shared 2-core host).

As with CUDA graphs, the outputs are the recording's static tensors: a later replay of the same recording overwrites
them, so a caller that keeps outputs across calls clones them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch._inductor.config as inductor_config
import torch._inductor.cudagraph_utils as cudagraph_utils
from torch.utils import _pytree

from ..npu._aclgraph_update_plan import (
    ACLGRAPH_UPDATE_PLAN_GLOBAL,
    resolve_aclgraph_update_plan,
    update_aclgraph_records_for_graph,
    validate_aclgraph_update_plan_for_graph,
)

# Every NPU graph captured for reduce-overhead in this process: for tests and benchmarks (replay counts).
GRAPHS: list = []

_check_devices = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes


def _check_devices_npu(device_node_mapping: dict) -> str | None:
    devices = [d for d in device_node_mapping if d.type != "meta"]
    if len(devices) == 1 and devices[0].type == "npu":
        return None
    return _check_devices(device_node_mapping)


class _Recording:
    """One NPU graph of a compiled graph, recorded at one set of static input addresses."""

    def __init__(self, graph: Any, copies: list, outputs: Any, applied: list):
        self.graph = graph
        self.copies = copies  # the graph's copies of the inputs that are not static (None for static ones)
        self.outputs = outputs
        self.applied = applied  # the ACL graph update last applied to the graph's recorded ops

    def update(self, cpu_update_input: list) -> bool:
        """Applies the plan's resolved update, unless it holds only plain values equal to those the recorded ops
        already have (a relaunch of the op into its task group costs more than the replay); whether it did.
        Tensors are always applied: their contents may have changed in place."""
        if cpu_update_input == self.applied and not any(isinstance(x, torch.Tensor)
                                                        for x in _pytree.tree_leaves(cpu_update_input)):
            return False
        self.applied = cpu_update_input
        return update_aclgraph_records_for_graph(cpu_update_input, self.graph)


class _Replayed:
    """The compiled graph behind NPU graphs: warm-up, then a recording per set of static input addresses, replayed."""

    def __init__(self, model: Callable, static_input_idxs: Sequence[int], device_index: int,
                 mutated_input_idxs: Sequence[int], placeholders: Sequence[Any]):
        self.model = model
        self.plan = getattr(model, ACLGRAPH_UPDATE_PLAN_GLOBAL, None) or []
        self.static_input_idxs = set(static_input_idxs)
        self.device = torch.device("npu", device_index)
        self.warmed_up = False
        self.recordings: dict[tuple, _Recording] = {}
        self.eager = False
        mutated = [i for i in mutated_input_idxs if i not in self.static_input_idxs]
        if mutated:
            self._fall_back(cudagraph_utils.get_mutation_stack_trace(placeholders, mutated))

    def _fall_back(self, reason: str) -> None:
        self.eager = True
        self.recordings.clear()
        cudagraph_utils.log_cudagraph_skip_and_bump_counter(reason)

    def __call__(self, inputs: list) -> Any:
        if self.eager or not self.warmed_up:
            self.warmed_up = True
            return self.model(inputs)
        key = tuple(self._key(i, x) for i, x in enumerate(inputs))
        recording = self.recordings.get(key)
        if recording is None:
            if len(self.recordings) >= inductor_config.triton.cudagraph_unexpected_rerecord_limit:
                self._fall_back(cudagraph_utils.format_default_skip_message(
                    f"static input addresses changing more than "
                    f"cudagraph_unexpected_rerecord_limit={len(self.recordings)} times"))
                return self.model(inputs)
            recording = self.recordings[key] = self._record(inputs)
            return recording.outputs
        for static, new in zip(recording.copies, inputs):
            if static is not None and static.data_ptr() != new.data_ptr():
                static.copy_(new)
        updated = recording.update(resolve_aclgraph_update_plan(self.plan, inputs))
        inputs.clear()  # Inductor's boxed calling convention: the callee owns the list
        recording.graph.replay()
        if updated:
            # The next update records the ops' events again: only after this replay has waited on them.
            recording.graph.graph_dispatch_mode.update_stream.wait_stream(torch.npu.current_stream())
        return recording.outputs

    def _key(self, i: int, x: Any) -> Any:
        # A recording is valid for the addresses of the static inputs and the values of the int inputs (sizes under
        # dynamic shapes, which CUDA graph trees also key recordings on); the other inputs are copied in.
        if isinstance(x, torch.Tensor):
            return x.data_ptr() if i in self.static_input_idxs else None
        return x if isinstance(x, int) else None

    def _record(self, inputs: list) -> _Recording:
        copies = [x.clone() if i not in self.static_input_idxs and isinstance(x, torch.Tensor) else None
                  for i, x in enumerate(inputs)]
        graph_inputs = [x if c is None else c for x, c in zip(inputs, copies)]
        cpu_update_input = resolve_aclgraph_update_plan(self.plan, inputs)
        inputs.clear()
        graph = torch.npu.NPUGraph()
        with torch.npu.device(self.device), torch.npu.graph(graph, auto_dispatch_capture=True):
            outputs = self.model(graph_inputs)
        del graph_inputs  # the static inputs: the recording keeps their addresses, never the tensors
        validate_aclgraph_update_plan_for_graph(self.plan, graph)
        update_aclgraph_records_for_graph(cpu_update_input, graph)
        GRAPHS.append(graph)
        graph.replay()
        return _Recording(graph, copies, outputs, cpu_update_input)


class NpuGraphPolicy(cudagraph_utils.CUDAGraphPolicy):
    """Wraps compiled graphs of npu tensors in NPU graphs; leaves the others to Inductor's CUDA graph wrapping."""

    def cudagraphify(self, model: Callable, example_inputs: Sequence[Any], static_input_idxs: Sequence[int], *,
                     device_index: int, is_backward: bool, is_inference: bool, **kwargs: Any) -> Callable:
        if any(isinstance(x, torch.Tensor) and x.device.type == "npu" for x in example_inputs):
            return _Replayed(model, static_input_idxs, device_index, kwargs["mutated_input_idxs"],
                             kwargs["placeholders"])
        return super().cudagraphify(model, example_inputs, static_input_idxs, device_index=device_index,
                                    is_backward=is_backward, is_inference=is_inference, **kwargs)


def apply() -> None:
    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = _check_devices_npu
    if inductor_config.cudagraph_policy is None:
        inductor_config.cudagraph_policy = NpuGraphPolicy()
