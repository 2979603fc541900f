"""torch.compile(mode="reduce-overhead") on npu: the compiled graph replayed as an NPU graph, as CUDA graphs replay it
for CUDA.

Inductor's CUDA graph trees are CUDA-only (torch.cuda graphs, pools and memory checks), so npu does not use them.
Inductor 2.13 has a seam for this: ``config.cudagraph_policy``, whose ``cudagraphify`` wraps each compiled graph
(forward, backward, inference) when the mode asks for graphs. Two things are made to hold for npu:

- ``cudagraph_utils.check_multiple_devices_or_any_cpu_nodes`` refuses graphs unless the graph's one device is
  "cuda"; a graph whose one device is npu is accepted too.
- ``config.cudagraph_policy`` is an ``NpuGraphPolicy``: for a compiled graph with npu inputs it returns a callable
  that runs the graph eagerly once (warm-up: lazy initializations happen outside capture), captures it into a
  ``torch.npu.NPUGraph`` on the second call from static copies of the inputs that change between calls, and from
  then on copies the new inputs into them and replays: one launch per call. Other graphs go to Inductor's own
  wrapping.

As with CUDA graphs (Inductor's non-tree wrapping), the outputs are the graph's static tensors: a later call
overwrites them, so a caller that keeps outputs across calls clones them. Inputs must keep their shapes (dynamic
shapes recompile, and each compiled graph captures its own NPU graph).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch._inductor.config as inductor_config
import torch._inductor.cudagraph_utils as cudagraph_utils

# Every NPU graph captured for reduce-overhead in this process: for tests and benchmarks (replay counts).
GRAPHS: list = []

_check_devices = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes


def _check_devices_npu(device_node_mapping: dict) -> str | None:
    devices = [d for d in device_node_mapping if d.type != "meta"]
    if len(devices) == 1 and devices[0].type == "npu":
        return None
    return _check_devices(device_node_mapping)


class _Replayed:
    """The compiled graph behind an NPU graph: warm-up, capture, then replays."""

    def __init__(self, model: Callable, static_input_idxs: Sequence[int], device_index: int):
        self.model = model
        self.static_input_idxs = set(static_input_idxs)
        self.device = torch.device("npu", device_index)
        self.calls = 0
        self.graph = None
        self.static_inputs: list = []
        self.static_outputs: Any = None

    def __call__(self, inputs: list) -> Any:
        self.calls += 1
        if self.calls == 1:
            return self.model(inputs)
        if self.graph is None:
            return self._capture(inputs)
        for i, (static, new) in enumerate(zip(self.static_inputs, inputs)):
            if i not in self.static_input_idxs and isinstance(new, torch.Tensor) and \
                    static.data_ptr() != new.data_ptr():
                static.copy_(new)
        inputs.clear()  # Inductor's boxed calling convention: the callee owns the list
        self.graph.replay()
        return self.static_outputs

    def _capture(self, inputs: list) -> Any:
        # Inputs that change between calls get static copies the graph reads; parameters and buffers (static inputs)
        # keep their storage, as CUDA graphs assume.
        self.static_inputs = [
            x if i in self.static_input_idxs or not isinstance(x, torch.Tensor) else x.clone()
            for i, x in enumerate(inputs)
        ]
        inputs.clear()
        graph = torch.npu.NPUGraph()
        with torch.npu.device(self.device), torch.npu.graph(graph):
            self.static_outputs = self.model(list(self.static_inputs))
        self.graph = graph
        GRAPHS.append(graph)
        graph.replay()
        return self.static_outputs


class NpuGraphPolicy(cudagraph_utils.CUDAGraphPolicy):
    """Wraps compiled graphs of npu tensors in NPU graphs; leaves the others to Inductor's CUDA graph wrapping."""

    def cudagraphify(self, model: Callable, example_inputs: Sequence[Any], static_input_idxs: Sequence[int], *,
                     device_index: int, is_backward: bool, is_inference: bool, **kwargs: Any) -> Callable:
        if any(isinstance(x, torch.Tensor) and x.device.type == "npu" for x in example_inputs):
            return _Replayed(model, static_input_idxs, device_index)
        return super().cudagraphify(model, example_inputs, static_input_idxs, device_index=device_index,
                                    is_backward=is_backward, is_inference=is_inference, **kwargs)


def apply() -> None:
    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = _check_devices_npu
    if inductor_config.cudagraph_policy is None:
        inductor_config.cudagraph_policy = NpuGraphPolicy()
