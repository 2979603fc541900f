"""Estimating a step without running it: the program runs on fake tensors on the npu device (torch's FakeTensorMode:
shapes, dtypes and devices, no memory, no computation), and a dispatch mode under the user's code sees each op as the
op path would, asking the cost model (the same C++ the profiler asks) what its kernel costs on the SoC.

    with softnpu.cost.estimate(dp=8) as est:
        model = build_model()             # tensors land on npu (the default device inside the context)
        with softnpu.cost.step():         # only the step's kernels count (without it: everything)
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()
    print(est.result)                     # a StepEstimate: step time, MFU, bound, op types

The layout's communication: with ``dp`` > 1, each gradient of the parameters the context created is all-reduced in
DDP-sized buckets after the backward (overlapping it); the script's own collectives (``torch.distributed.all_reduce``
and friends, e.g. tensor parallelism's) are recorded over ``tp`` ranks and wait for their inputs. Inside the context
``torch.distributed`` answers as one rank of a ``tp``-rank group.

With ``pp`` > 1 the step is one micro-batch's forward and backward of the whole model (and the optimizer step, if it
runs inside): ``est.result.pipeline`` turns it into one device's iteration of ``pp`` stages over ``micro_batches``
under the 1F1B schedule (report.Pipeline). What crosses a stage boundary is the tensor the model passes to
``softnpu.cost.pipeline_boundary()`` (the hidden states between layers), or ``activation_bytes``.
"""

import contextlib
import functools
import math
import weakref

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .model import KernelEstimate, chip, estimate_collective, estimate_copy, estimate_op
from .report import Kernel, StepEstimate

_COPIES = {"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}
_active: "estimate | None" = None


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _on_npu(t: torch.Tensor) -> bool:
    return t.device.type == "npu"


@functools.cache
def _composite_on_npu(func) -> bool:
    """Whether npu runs the op's CompositeExplicitAutograd kernel (the op has no npu kernel of its own, where the op
    path's fallback would launch it as one kernel)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(func.name(), torch._C.DispatchKey.CompositeExplicitAutograd) and \
        not has(func.name(), torch._C.DispatchKey.PrivateUse1)


def _hccs_domain(soc) -> int:
    """How many NPUs HCCS connects: an Atlas A2 server's 8 (its full mesh); on A3, the CloudMatrix 384 supernode's
    384 NPUs share one HCCS domain."""
    return 384 if chip(soc)["name"].startswith("Ascend910_93") else 8


def _list_length(args: tuple) -> int:
    return max((len(a) for a in args if isinstance(a, (list, tuple))), default=0)


def _wrap_numbers(func, args: tuple) -> tuple:
    """The arguments with Python numbers where the schema takes a Tensor (``x.mul_(0.5)`` reaches dispatch as
    ``mul_.Tensor(x, 0.5)``) as the 0-dim CPU tensors the op path gets."""
    schema_args = func._schema.arguments
    if not any(isinstance(a, (int, float, bool)) for a in args):
        return args
    wrapped = list(args)
    with torch._C._DisableTorchDispatch():
        for i, a in enumerate(args):
            if i < len(schema_args) and isinstance(a, (int, float, bool)) and \
                    isinstance(schema_args[i].type, torch._C.TensorType):
                wrapped[i] = torch.tensor(a)
    return tuple(wrapped)


class _Recorder(TorchDispatchMode):
    """Sees every op under the user's code (below autograd, so composites arrive decomposed as on the op path) and
    records the kernel each launches."""

    def __init__(self, owner: "estimate"):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name == "aten::_local_scalar_dense" and _on_npu(args[0]):
            # .item() waits for the device on the chip; here the value is unknowable: zero (or False).
            self.owner.sync_points += 1
            return False if args[0].dtype == torch.bool else 0
        if not name.startswith(("aten::", "npu::")):
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        inputs = _tensors((args, kwargs))
        outputs = _tensors(out)
        if not any(_on_npu(t) for t in inputs + outputs):
            return out
        if name in _COPIES:
            src, dst = (args[0], outputs[0] if outputs else None) if name == "aten::_to_copy" else (args[1], args[0])
            if dst is not None and _on_npu(src) != _on_npu(dst):
                kind = "HtoD" if _on_npu(dst) else "DtoH"
                self.owner._record(f"Memcpy {kind}", estimate_copy(dst.numel() * dst.element_size(), kind,
                                                                   self.owner.soc))
                return out
        ids = {id(t) for t in inputs}
        fresh = [t for t in outputs if id(t) not in ids]
        overload = func._overloadname
        qualified = name if overload == "default" else f"{name}.{overload}"
        args = _wrap_numbers(func, args)
        if name.startswith("aten::_foreach_") and _composite_on_npu(func):
            # npu runs the foreach op's composite, one kernel per tensor of the lists: estimated one by one.
            for i in range(_list_length(args)):
                one = tuple([a[i]] if isinstance(a, (list, tuple)) else a for a in args)
                e = estimate_op(qualified, one, kwargs, [fresh[i]] if len(fresh) > i else [], self.owner.soc)
                if e is not None:
                    self.owner._record(name, e)
            return out
        e = estimate_op(qualified, args, kwargs, fresh, self.owner.soc)
        if e is not None:
            self.owner._record(name, e)
        return out


class _FakeWork:
    """What a collective with async_op=True returns here: already complete."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class estimate(contextlib.ContextDecorator):
    """Runs the code inside on fake npu tensors and estimates its kernels on the SoC; ``result`` (a StepEstimate)
    once the context exits.

    soc: a SoC table row ("Ascend910B3"); None: the chip the device presents as (SOFTNPU_SOC_VERSION); or a dict
        of a chip's figures (softnpu.cost.model).
    dp, tp: the data- and tensor-parallel degrees of the layout this rank is part of.
    pp, micro_batches: the pipeline-parallel stages and the micro-batches of an iteration (1F1B schedule).
    activation_bytes: what crosses a pipeline stage boundary per micro-batch; None: the last tensor the model gave
        ``pipeline_boundary()``.
    link: "hccs" or "roce" for the collectives; None: HCCS while dp x tp x pp fits one HCCS domain (an 8-NPU Atlas A2
        server; an A3 supernode's 384 NPUs), else RoCE.
    graph: the step is replayed from a graph (NPUGraph, aclgraph, MindIE): the host pays no launches.
    grad_bucket_mb: the size of DDP's gradient buckets (its default, 25 MB).
    """

    def __init__(self, soc: str | dict | None = None, *, dp: int = 1, tp: int = 1, pp: int = 1,
                 micro_batches: int = 1, activation_bytes: float | None = None, link: str | None = None,
                 graph: bool = False, grad_bucket_mb: float = 25.0):
        if dp < 1 or tp < 1 or pp < 1 or micro_batches < 1:
            raise ValueError(f"dp, tp, pp and micro_batches must be at least 1, got dp={dp}, tp={tp}, pp={pp}, "
                             f"micro_batches={micro_batches}")
        if link not in (None, "hccs", "roce"):
            raise ValueError(f"link must be 'hccs', 'roce' or None, got {link!r}")
        self.soc = soc
        self.dp = dp
        self.tp = tp
        self.pp = pp
        self.micro_batches = micro_batches
        self.activation_bytes = activation_bytes
        self.link = link or ("hccs" if dp * tp * pp <= _hccs_domain(soc) else "roce")
        self.graph = graph
        self.grad_bucket_bytes = grad_bucket_mb * 1e6
        self.kernels: list[Kernel] = []
        self.sync_points = 0
        self.result: StepEstimate | None = None
        self._step_kernels: list[Kernel] | None = None
        self._params: list = []
        self._restore: list = []
        self._in_optimizer = 0
        self.boundary_bytes: float | None = None

    # ------------------------------------------------------------------------------------------------ recording

    def _record(self, op: str, e: KernelEstimate, launched: bool = True, backward: bool | None = None) -> None:
        if backward is None:
            backward = torch._C._current_autograd_node() is not None
        self.kernels.append(Kernel(op, e, backward=backward, launched=launched, optimizer=self._in_optimizer > 0))

    def _boundary(self, tensor: torch.Tensor) -> None:
        self.boundary_bytes = tensor.numel() * tensor.element_size()

    def _split_into_stages(self, result: StepEstimate) -> None:
        activation = self.activation_bytes if self.activation_bytes is not None else self.boundary_bytes
        if activation is None:
            raise RuntimeError("softnpu.cost.estimate(pp=...) needs what crosses a stage boundary: pass "
                               "activation_bytes=, or have the model call softnpu.cost.pipeline_boundary(hidden)")
        p2p = estimate_collective("send_recv", activation, 2, self.link, self.soc)
        result.split_into_stages(self.pp, self.micro_batches, activation, p2p.us)

    def _collective(self, kind: str, tensor: torch.Tensor, ranks: int | None = None) -> None:
        self._record(f"hccl:{kind}", estimate_collective(kind, tensor.numel() * tensor.element_size(),
                                                         ranks or self.tp, self.link, self.soc), backward=False)

    def _reduce_gradients(self) -> None:
        """DDP's gradient all-reduce over the dp ranks, in buckets, for the parameters the context created."""
        if self.dp == 1:
            return
        grads = [p.grad for p in (ref() for ref in self._params) if p is not None and p.grad is not None]
        total = sum(g.numel() * g.element_size() for g in grads)
        buckets = math.ceil(total / self.grad_bucket_bytes)
        for _ in range(buckets):
            e = estimate_collective("all_reduce", total / buckets, self.dp, self.link, self.soc)
            self._record("hccl:all_reduce (gradients)", e, launched=False, backward=True)

    @contextlib.contextmanager
    def step(self):
        """Counts only the kernels launched inside (the last such block when there are several)."""
        start = len(self.kernels)
        yield self
        self._reduce_gradients()
        self._step_kernels = self.kernels[start:]

    # ------------------------------------------------------------------------------------------------ the context

    def _patch(self, owner, name: str, value) -> None:
        self._restore.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def _patch_distributed(self) -> None:
        def collective(kind, position):
            def call(*args, async_op=False, **kwargs):
                self._collective(kind, args[position] if len(args) > position else kwargs["tensor"])
                return _FakeWork() if async_op else None
            return call

        # The message each rank contributes (ranks x it for all_gather's output).
        self._patch(dist, "all_reduce", collective("all_reduce", 0))
        self._patch(dist, "broadcast", collective("broadcast", 0))
        self._patch(dist, "all_gather_into_tensor", collective("all_gather", 0))
        self._patch(dist, "reduce_scatter_tensor", collective("reduce_scatter", 1))
        self._patch(dist, "all_to_all_single", collective("all_to_all", 1))
        self._patch(dist, "is_initialized", lambda: True)
        self._patch(dist, "get_world_size", lambda group=None: self.tp)
        self._patch(dist, "get_rank", lambda group=None: 0)

    def __enter__(self):
        global _active
        if _active is not None:
            raise RuntimeError("softnpu.cost.estimate contexts do not nest")
        self._fake = FakeTensorMode(allow_non_fake_inputs=True)
        self._recorder = _Recorder(self)
        self._device = torch.device("npu")  # the default device inside, as a context so it nests
        self._fake.__enter__()
        self._recorder.__enter__()
        self._device.__enter__()
        # Module.to()/.half() of a fake parameter swaps tensors, which fake parameters refuse (the fake mode holds a
        # weak reference to each); their storage-less data can be replaced in place instead.
        swap = torch.utils.swap_tensors

        def swap_or_set(t1, t2):
            try:
                swap(t1, t2)
            except RuntimeError:
                t1.data = t2
        self._patch(torch.utils, "swap_tensors", swap_or_set)
        self._patch_distributed()
        self._param_hook = torch.nn.modules.module.register_module_parameter_registration_hook(
            lambda module, name, param: self._params.append(weakref.ref(param)) if param is not None else None)

        def optimizer_enters(*_):
            self._in_optimizer += 1

        def optimizer_leaves(*_):
            self._in_optimizer -= 1
        self._optimizer_hooks = [register_optimizer_step_pre_hook(optimizer_enters),
                                 register_optimizer_step_post_hook(optimizer_leaves)]
        _active = self
        return self

    def __exit__(self, *exc):
        global _active
        _active = None
        self._param_hook.remove()
        for hook in self._optimizer_hooks:
            hook.remove()
        for owner, name, value in reversed(self._restore):
            setattr(owner, name, value)
        self._restore.clear()
        self._device.__exit__(*exc)
        self._recorder.__exit__(*exc)
        self._fake.__exit__(*exc)
        if self._step_kernels is None:
            self._reduce_gradients()
        kernels = self.kernels if self._step_kernels is None else self._step_kernels
        self.result = StepEstimate(kernels, soc=self.soc, graph=self.graph)
        self._params.clear()
        if self.pp > 1 and exc[0] is None:
            self._split_into_stages(self.result)
        return False


@contextlib.contextmanager
def step():
    """Marks the step of the active ``estimate`` context (only its kernels count); outside one, does nothing, so a
    script marks its step once and runs unchanged on the device."""
    if _active is None:
        yield None
    else:
        with _active.step() as est:
            yield est


def pipeline_boundary(tensor: torch.Tensor) -> torch.Tensor:
    """Marks ``tensor`` as what crosses a pipeline stage boundary (the hidden states a layer passes to the next) for
    an estimate with ``pp`` > 1; returns it. Outside an estimate it does nothing, so a model marks it once."""
    if _active is not None:
        _active._boundary(tensor)
    return tensor


def active() -> "estimate | None":
    """The estimate context the program runs in, if any."""
    return _active
