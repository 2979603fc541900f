"""npu's Inductor backend: Inductor's C++ (CPU) kernels, launched on the npu stream by npu's own Python wrapper.

- ``NpuCppScheduling`` is Inductor's ``CppScheduling``: the same fusion, vectorization and C++ source. It only notes,
  while a kernel is defined, which npu device the kernel is for, the bytes of its buffers and which of its arguments
  are CPU scalars (copied at the launch).
- ``NpuWrapperCodegen`` is Inductor's Python wrapper with one difference: an npu kernel is loaded through
  ``launch.npu_cpp_pybinding`` (a binding that enqueues the kernel on the current stream of its device) instead of
  ``async_compile.cpp_pybinding`` (one that runs it). Allocations, extern kernels (mm, convolution) and copies in the
  wrapper are eager npu ops, so they are on the same stream and ordered with the kernels.
- Both wrappers note the ACL graph update plan entry of each extern op call that has an NpuGraphOpHandler, and write
  the plan beside the launcher (``_aclgraph_update_plan/codegen.py``).
- ``NpuDeviceOpOverrides``: how generated code names torch.npu's device guard, synchronize and streams.
"""

import torch
from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from ._aclgraph_update_plan import (
    append_inductor_aclgraph_update_plan_for_codegen_node,
    emit_inductor_aclgraph_update_plan_for_wrapper,
)

_CPU_BINDING = "async_compile.cpp_pybinding("


def _work_bytes(args) -> int:
    """The bytes of the buffers a kernel reads and writes (sizes at their compile-time hints when dynamic)."""
    total = 0
    for name in {**args.input_buffers, **args.output_buffers, **args.inplace_buffers}:
        buffer = V.graph.try_get_buffer(name)
        if buffer is None or not hasattr(buffer, "get_numel"):  # removed, or not a tensor (a TorchBind object)
            continue
        numel = V.graph.sizevars.optimization_hint(buffer.get_numel(), fallback=8192)
        total += int(numel) * buffer.get_dtype().itemsize
    return total


def _host_scalars(args, nodes) -> tuple:
    """The positions of the kernel's arguments that are CPU tensors: the 0-dim scalars Inductor lets into device
    kernels (a constant saved for the backward, ...). Their memory is the CPU allocator's, which the host may reuse
    as soon as the wrapper frees them, before the queued kernel reads it: the binding copies their values when it
    enqueues the kernel."""
    outer_of = {inner: outer for outer, inner in args.input_buffers.items()}
    outer_of.update({inner: outer for outer, inner in args.output_buffers.items() if isinstance(inner, str)})
    outer_of.update({b.inner_name: b.other_names[-1] for b in args.inplace_buffers.values() if hasattr(b, "inner_name")})
    arg_defs, _, _ = args.cpp_argdefs()
    positions = []
    for position, arg_def in enumerate(arg_defs):
        outer = outer_of.get(arg_def.split()[-1])
        buffer = V.graph.try_get_buffer(outer) if outer is not None else None
        device = buffer.get_device() if buffer is not None and hasattr(buffer, "get_device") else None
        if device is None or device.type != "cpu":
            continue
        if not arg_def.startswith("const ") or V.graph.sizevars.optimization_hint(buffer.get_numel()) != 1:
            raise RuntimeError(f"softnpu: the npu kernel of {[n.get_name() for n in nodes]} takes the CPU tensor "
                               f"{outer} ({arg_def}); npu kernels only read CPU tensors of one element")
        positions.append(position)
    return tuple(positions)


class NpuCppScheduling(CppScheduling):
    def define_kernel(self, src_code, nodes, kernel_args=None):
        wrapper = V.graph.wrapper_code
        device = next((n.get_device() for n in nodes if n.get_device() is not None), None)
        wrapper.npu_kernel_device = device.index if device is not None and device.index is not None else \
            torch.npu.current_device()
        args = self.kernel_group.args if kernel_args is None else kernel_args
        wrapper.npu_kernel_work_bytes = _work_bytes(args)
        wrapper.npu_kernel_host_scalars = _host_scalars(args, nodes)
        try:
            return super().define_kernel(src_code, nodes, kernel_args)
        finally:
            wrapper.npu_kernel_device = None


class _NpuKernelDefinitions:
    """The part both npu wrappers (a graph's and a subgraph's) share."""

    npu_kernel_device = None
    npu_kernel_work_bytes = 0
    npu_kernel_host_scalars = ()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline("from softnpu.inductor.launch import npu_cpp_pybinding")

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None):
        if self.npu_kernel_device is not None:
            if not kernel_body.startswith(_CPU_BINDING):
                raise RuntimeError(f"softnpu: Inductor's C++ kernel {kernel_name} is not loaded through "
                                   f"{_CPU_BINDING!r}; this torch's CppScheduling is not the one softnpu supports")
            kernel_body = (f"npu_cpp_pybinding(async_compile, {kernel_name!r}, {self.npu_kernel_device}, "
                           f"{self.npu_kernel_work_bytes}, {self.npu_kernel_host_scalars!r}, "
                           + kernel_body[len(_CPU_BINDING):])
        super().define_kernel(kernel_name, kernel_body, metadata=metadata, gpu=gpu, cpp_definition=cpp_definition)


    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        # Inductor calls a C++ kernel directly only on "cpu" (and "mps"); an npu kernel's binding is called the same
        # way (it enqueues the kernel).
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == "npu":
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def generate_fallback_kernel(self, node) -> None:
        append_inductor_aclgraph_update_plan_for_codegen_node(self, node)
        super().generate_fallback_kernel(node)

    def generate_extern_kernel_alloc(self, node) -> None:
        append_inductor_aclgraph_update_plan_for_codegen_node(self, node)
        super().generate_extern_kernel_alloc(node)

    def generate_after_suffix(self, result) -> None:
        super().generate_after_suffix(result)
        emit_inductor_aclgraph_update_plan_for_wrapper(self, result, getattr(self, "partition_signatures", None)
                                                       is not None)


class NpuSubgraphWrapperCodegen(_NpuKernelDefinitions, SubgraphPythonWrapperCodegen):
    pass


class NpuWrapperCodegen(_NpuKernelDefinitions, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return NpuSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return NpuWrapperCodegen()


class NpuDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from softnpu.inductor.device_interface import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.npu.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.npu.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.npu.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.npu.current_stream()"
