"""torch.compile for npu: Dynamo's device interface and Inductor's backend for the npu device.

Importing Dynamo and Inductor costs seconds, so softnpu does not import them: ``install()`` (called when softnpu
loads) registers npu's device interface when ``torch._dynamo.device_interface`` is first imported, and npu's Inductor
backend when ``torch._inductor.graph`` is (Inductor imports it before it lowers a graph). See README.md in this folder
for what each file holds.
"""

import importlib.abc
import importlib.util
import sys

import torch

# The Inductor this backend is written against: its CppScheduling's kernel loading (codegen.py), its C++ bindings'
# template (launch.py) and the CPU-only assumptions worked around in cpu_assumptions.py.
SUPPORTED_TORCH = (2, 13)


def torch_release() -> tuple:
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def register_device_interface() -> None:
    from torch._dynamo.device_interface import register_interface_for_device

    from .device_interface import NpuInterface

    register_interface_for_device("npu", NpuInterface)
    for index in range(torch.npu.device_count()):
        register_interface_for_device(f"npu:{index}", NpuInterface)


def trace_stream_contexts() -> None:
    # Dynamo turns `with torch.cuda.stream(s):` into its stream context (the block's nodes annotated with the stream)
    # because its trace rules list torch.cuda.stream as an in-graph function, whose handler then builds the context
    # for each registered device interface's `stream`. npu's gets the same rule; without it Dynamo inlines
    # torch.npu.stream as user code and breaks the graph inside it.
    from torch._dynamo.decorators import allow_in_graph

    from .. import npu

    allow_in_graph(npu.stream)


def register_backend() -> None:
    from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

    from . import cpu_assumptions, npu_graphs
    from .cache_key import CodegenFingerprint
    from .codegen import NpuCppScheduling, NpuDeviceOpOverrides, NpuWrapperCodegen

    register_backend_for_device("npu", NpuCppScheduling, NpuWrapperCodegen, device_custom_pass=CodegenFingerprint())
    register_device_op_overrides("npu", NpuDeviceOpOverrides())
    cpu_assumptions.apply()
    npu_graphs.apply()


def compile_npu_randoms_with_aten() -> None:
    from . import fallback_random

    fallback_random.apply()


# module -> what to do once it has been executed
_AFTER_IMPORT = {
    "torch._dynamo.device_interface": register_device_interface,
    "torch._dynamo.decorators": trace_stream_contexts,
    "torch._inductor.graph": register_backend,
    "torch._inductor.compile_fx": compile_npu_randoms_with_aten,
}


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of _AFTER_IMPORT as the other finders do, and runs their action once each is executed."""

    def __init__(self):
        self._loaders = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in _AFTER_IMPORT:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                self._loaders[fullname] = spec.loader
                spec.loader = self
                return spec
        return None

    def create_module(self, spec):
        return self._loaders[spec.name].create_module(spec)

    def exec_module(self, module):
        loader = self._loaders.pop(module.__name__)
        module.__loader__ = module.__spec__.loader = loader  # the module's own, for get_source, reload, ...
        loader.exec_module(module)
        _AFTER_IMPORT[module.__name__]()


def npugraph_mark_step_begin() -> None:
    """torch_npu's torch.compiler.npugraph_mark_step_begin (CUDA's cudagraph_mark_step_begin): a new iteration begins,
    so the NPU graph trees (torch_npu.npu._graph_tree, loaded on first use) no longer keep the last one's outputs."""
    from ..npu._graph_tree import mark_step_begin

    mark_step_begin()


def install() -> None:
    if torch_release() != SUPPORTED_TORCH:
        import warnings

        warnings.warn(f"softnpu's Inductor backend is written for torch {SUPPORTED_TORCH[0]}.{SUPPORTED_TORCH[1]}, "
                      f"not {torch.__version__}: torch.compile of npu tensors is unavailable", stacklevel=2)
        return
    torch.compiler.npugraph_mark_step_begin = npugraph_mark_step_begin
    pending = False
    for name, action in _AFTER_IMPORT.items():
        if name in sys.modules:
            action()
        else:
            pending = True
    if pending:
        sys.meta_path.insert(0, _AfterImport())
