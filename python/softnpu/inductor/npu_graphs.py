"""torch.compile(mode="reduce-overhead") on npu: each compiled graph wrapped by the NPU graph trees
(``softnpu/npu/_graph_tree.py``, torch_npu.npu._graph_tree), as Inductor wraps CUDA's in its CUDA graph trees.

Inductor 2.13 wraps a compiled graph (forward, backward, inference) through ``config.cudagraph_policy`` when the mode
asks for graphs; its own wrapping (``compile_fx.cudagraphify``) calls CUDA's trees. Three things are made to hold for
npu:

- ``cudagraph_utils.check_multiple_devices_or_any_cpu_nodes`` refuses graphs unless the graph's one device is
  "cuda"; a graph whose one device is npu is accepted too.
- ``config.cudagraph_policy`` is an ``NpuGraphPolicy``: a compiled graph with npu inputs is wrapped as
  ``compile_fx.cudagraphify`` wraps CUDA's, through ``npugraphify_impl`` (its tree function made at the first call,
  once per thread, under the caller's RNG state); other graphs go to Inductor's own wrapping.
- Inductor's runtime finds a device's tree manager through ``cudagraph_trees.get_manager(index)``; without CUDA,
  that is the NPU graph trees' (as torch_npu makes it).

So reduce-overhead has CUDA graph trees' contract: the first call of a function warms it up in the tree's memory pool,
the next records; the graphs of a step (forward, backward, graphs across graph breaks) share one pool, each recorded
from the allocator state the previous one left (a checkpoint when a new branch of the tree starts); inputs that are
not static are copied into the pool; a moved static input records again, past
``triton.cudagraph_unexpected_rerecord_limit`` the function runs without graphs; a graph mutating an input that is
not static is not graphed; outputs are the pool's memory, which the next step (a new torch.compile invocation, or
``torch.compiler.npugraph_mark_step_begin()``) reuses: reading an output kept from a freed recording raises. The ops
recorded through an NpuGraphOpHandler take each call's arguments by the ACL graph update plan Inductor wrote beside
the compiled graph (``NPUGraphNode``, ``softnpu/npu/_aclgraph_update_plan/``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import torch
import torch._inductor.config as inductor_config
import torch._inductor.cudagraph_utils as cudagraph_utils
from torch._dynamo import utils as dynamo_utils

_check_devices = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes


def _check_devices_npu(device_node_mapping: dict) -> str | None:
    devices = [d for d in device_node_mapping if d.type != "meta"]
    if len(devices) == 1 and devices[0].type == "npu":
        return None
    return _check_devices(device_node_mapping)


def _tree_wrapped(model: Callable, static_input_idxs: Sequence[int], **kwargs: Any) -> Callable:
    import torch._inductor.cudagraph_trees as cuda_trees

    from ..npu._graph_tree import get_manager, npugraphify_impl

    if not torch.cuda.is_available():
        # Inductor's runtime reaches the trees' manager of a device by its index alone (a backward left ungraphed
        # tells the forward's manager that the backward runs: output_code.maybe_handle_backward_generation). Without
        # CUDA, every graphed device is npu: those are the NPU graph trees' managers (as torch_npu makes them).
        cuda_trees.get_manager = get_manager

    compile_id = torch._guards.CompileContext.current_compile_id()
    thread_local = threading.local()

    def run(new_inputs: list) -> Any:
        fn = getattr(thread_local, "fn", None)
        if fn is None:
            with dynamo_utils.preserve_rng_state():
                fn = thread_local.fn = npugraphify_impl(model, new_inputs, static_input_idxs, compile_id=compile_id,
                                                        **kwargs)
        return fn(new_inputs)

    return run


class NpuGraphPolicy(cudagraph_utils.CUDAGraphPolicy):
    """Wraps compiled graphs of npu tensors in the NPU graph trees; leaves the others to Inductor's own wrapping."""

    def cudagraphify(self, model: Callable, example_inputs: Sequence[Any], static_input_idxs: Sequence[int], *,
                     device_index: int, is_backward: bool, is_inference: bool, **kwargs: Any) -> Callable:
        if any(isinstance(x, torch.Tensor) and x.device.type == "npu" for x in example_inputs):
            return _tree_wrapped(model, static_input_idxs, device_index=device_index, is_backward=is_backward,
                                 is_inference=is_inference, **kwargs)
        return super().cudagraphify(model, example_inputs, static_input_idxs, device_index=device_index,
                                    is_backward=is_backward, is_inference=is_inference, **kwargs)


def apply() -> None:
    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = _check_devices_npu
    if inductor_config.cudagraph_policy is None:
        inductor_config.cudagraph_policy = NpuGraphPolicy()

