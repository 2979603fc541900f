"""torch_npu.utils.FlopsCounter (and its older name torch_npu.utils.flops_count.FlopsCounter): counts the floating
point operations of the matrix ops run on npu (matmuls, convolutions, attention, forward and backward), as torch_npu
counts them in its op adapters.

start() turns counting on, pause()/resume() suspend it, get_flops() returns [recorded, traversed]: the flops counted
while not paused, and all the flops seen since start() (paused or not); stop() turns counting off and clears both.

The count is the cost model's (csrc/backend/cost: the model FLOPs of each cube op, the figure the profiler's and the
estimator's MFU divide by), so the two cannot disagree. Its formulas are torch.utils.flop_counter's: 2 flops per
multiply-add of an op's products, attention without a causal discount, its backward with the scores' recomputation
(5 products; torch_npu's adapter counts 4); npu_fusion_attention counts as scaled_dot_product_attention of the same
shapes. Counting happens on the host when an op is launched, through a dispatch mode of the thread that called
start() (the autograd engine's threads inherit it in backward)."""

import functools
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["FlopsCounter"]


@functools.cache
def _counted_ops() -> frozenset:
    """The ops the cost model runs on the cube, by schema name ("aten::mm", "npu::npu_fusion_attention")."""
    from softnpu import _C

    return frozenset(_C._cost_cube_ops())


def _tensors(tree) -> list:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _FlopsCountMode(TorchDispatchMode):
    def __init__(self, counter: "_FlopsCounter"):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.counter._enabled:
            flops = self._flops(func, args, kwargs, out)
            if flops:
                self.counter._traversed += flops
                if not self.counter._paused:
                    self.counter._recorded += flops
        return out

    @staticmethod
    def _flops(func, args, kwargs, out) -> int:
        name = func._schema.name
        if name not in _counted_ops():
            return 0
        inputs = _tensors((args, kwargs))
        if not any(t.device.type == "npu" for t in inputs):
            return 0
        from softnpu import _C

        ids = {id(t) for t in inputs}
        overload = func._overloadname
        qualified = name if overload == "default" else f"{name}.{overload}"
        e = _C._cost_estimate_op(qualified, tuple(args), dict(kwargs), [t for t in _tensors(out) if id(t) not in ids],
                                 None)
        return int(e["model_flops"]) if e is not None else 0


class _FlopsCounter:
    def __init__(self):
        self._enabled = self._paused = False
        self._recorded = self._traversed = 0
        self._mode = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        self._enabled = True
        if self._mode is None:
            self._mode = _FlopsCountMode(self)
            self._mode.__enter__()

    def stop(self) -> None:
        """Turns counting off and clears the counts (as torch_npu's)."""
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        self._enabled = self._paused = False
        self._recorded = self._traversed = 0

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def get_flops(self) -> list[int]:
        """[recorded, traversed]."""
        return [self._recorded, self._traversed]


class FlopsCounter(_FlopsCounter):
    """torch_npu.utils.flops_count.FlopsCounter: the deprecated name, with torch_npu's FutureWarning."""

    def __init__(self):
        super().__init__()
        warnings.warn("torch_npu.utils.flops_count.FlopsCounter() will be deprecated. If necessary, please use "
                      "torch_npu.utils.FlopsCounter().", FutureWarning)
