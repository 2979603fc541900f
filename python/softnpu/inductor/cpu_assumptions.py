"""What Inductor (torch 2.13) assumes only of the "cpu" device, made to hold for npu too.

npu kernels are Inductor's C++ CPU kernels, so wherever Inductor asks "is this the CPU?" to decide how C++ kernels
are scheduled (rather than Triton ones), an npu node must answer as a CPU node does. Each entry names the place; each
has a test in tests/test_compile.py (the model that fails to compile without it).

- ``BaseSchedulerNode.is_cpu``: the scheduler keeps CPU nodes out of loop reordering and of reindexing a pointwise
  node to a reduction's loops (``_try_reindex_pointwise_for_reduction``: it reads Triton-style ``(numel, rnumel)``
  groups, while C++ nodes' groups are tuples of sizes). Without it, fusing a batch norm's backward fails with
  ``TypeError: can't multiply sequence by non-int of type 'tuple'``.
- ``utils.get_current_backend`` (and the copies codegen/common.py and scheduler.py import): any device but cpu, mps,
  xpu and tpu is taken to generate Triton (``config.cuda_backend``), so the kernel's ops handler propagates dtypes
  the Triton way and C++ casts lose their source dtype (``KeyError: None`` in ``get_to_dtype_expr``, for scaled
  dot-product attention's backward). npu answers "cpp".

- Fake tensors' convolution (``torch._subclasses.fake_impls.conv``): the memory format of the outputs is the one
  ``torch._C._select_conv_backend`` picks for the device, and npu's is ``Overrideable``, for which torch predicts
  contiguous outputs. npu's convolution runs ATen's ``convolution`` / ``convolution_backward`` on the generic path,
  whose outputs are laid out as their Meta kernels say (channels last in, channels last out, as on the CPU). Without
  it, a compiled ResNet's backward (Inductor lays convolutions out channels last) fails at Inductor's stride check of
  ``convolution_backward``'s gradients. npu's fake convolutions are their Meta kernels.

- ``utils.device_need_guard`` (as scheduler.py imports it): only GPU types get a device guard in the wrapper, and the
  guard is where Inductor's multi-stream code declares the streams of a graph's ``with torch.npu.stream(s):``
  blocks (``default_stream = ...``, ``stream1 = ...``), which its stream switches then enter. Without it such a
  graph fails at run time with ``NameError: name 'stream1' is not defined``. npu graphs with side streams get the
  guard; the others stay without it (their kernels find their device themselves, and the guard costs every call).

In codegen.py, npu's own wrapper handles the assumption of ``PythonWrapperCodegen._generate_kernel_call_helper``
(only "cpu" and "mps" kernels are called directly; any other device without Triton raises "device npu nyi").
"""

import torch
import torch._inductor.codegen.common as codegen_common
import torch._subclasses.fake_impls as fake_impls
from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager
import torch._inductor.scheduler as scheduler
import torch._inductor.utils as utils
from torch._inductor.scheduler import BaseSchedulerNode
from torch._inductor.virtualized import V

_CPU_LIKE = ("cpu", "npu")


def _is_cpu(self: BaseSchedulerNode) -> bool:
    device = self.get_device()
    return device is not None and device.type in _CPU_LIKE


_get_current_backend = utils.get_current_backend


def _current_backend(device_type=None) -> str:
    if (device_type or V.graph.get_current_device_or_throw().type) == "npu":
        return "cpp"
    return _get_current_backend(device_type)


_CONVOLUTIONS = (torch.ops.aten.convolution.default, torch.ops.aten._convolution.default,
                 torch.ops.aten._convolution.deprecated, torch.ops.aten.convolution_backward.default)
_fake_convolution = fake_impls.op_implementations_dict[torch.ops.aten.convolution.default]


def _fake_convolution_as_npu_runs_it(fake_mode, func, *args, **kwargs):
    device = args[0].fake_device if args and hasattr(args[0], "fake_device") else None
    if device is None or device.type != "npu":
        return _fake_convolution(fake_mode, func, *args, **kwargs)
    with in_kernel_invocation_manager(fake_mode):
        out = func(*args, **kwargs)
    if isinstance(out, tuple):
        return tuple(None if t is None else FakeTensor(fake_mode, t, device) for t in out)
    return FakeTensor(fake_mode, out, device)


_device_need_guard = scheduler.device_need_guard


def _device_need_guard_with_streams(device: str) -> bool:
    if device == "npu":
        graph_scheduler = getattr(V.graph, "scheduler", None)
        return graph_scheduler is not None and graph_scheduler._has_multi_stream_nodes()
    return _device_need_guard(device)


def apply() -> None:
    scheduler.device_need_guard = _device_need_guard_with_streams
    BaseSchedulerNode.is_cpu = _is_cpu
    for module in (utils, codegen_common, scheduler):
        module.get_current_backend = _current_backend
    for op in _CONVOLUTIONS:
        fake_impls.op_implementations_dict[op] = _fake_convolution_as_npu_runs_it
