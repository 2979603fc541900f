"""torch_npu.utils.FlopsCounter (and its older name torch_npu.utils.flops_count.FlopsCounter): counts the floating
point operations of the matrix ops run on npu (matmuls, convolutions, attention, forward and backward), as torch_npu
counts them in its op adapters.

start() turns counting on, pause()/resume() suspend it, get_flops() returns [recorded, traversed]: the flops counted
while not paused, and all the flops seen since start() (paused or not); stop() turns counting off and clears both.
The formulas are torch.utils.flop_counter's (2 flops per multiply-add); the fused attention npu_fusion_attention counts
as scaled_dot_product_attention of the same shapes. Counting happens on the host when an op is launched, through a
dispatch mode of the thread that called start() (the autograd engine's threads inherit it in backward)."""

import warnings

import torch
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["FlopsCounter"]


def _bnsd(shape, layout: str, heads: int):
    """(batch, heads, sequence, head_dim) of an npu_fusion_attention operand given in `layout`."""
    if layout == "BNSD":
        return tuple(shape)
    if layout == "BSND":
        b, s, n, d = shape
        return b, n, s, d
    if layout == "BSH":
        b, s, h = shape
        return b, heads, s, h // heads
    if layout == "SBH":
        s, b, h = shape
        return b, heads, s, h // heads
    raise ValueError(f"FlopsCounter: npu_fusion_attention layout {layout!r} is not counted")


def _fusion_attention_flops(func_name, args, kwargs):
    q, k, v, heads, layout = args[0], args[1], args[2], args[3], args[4]
    heads, layout = kwargs.get("head_num", heads), kwargs.get("input_layout", layout)
    shapes = [_bnsd(t.shape, layout, heads) for t in (q, k, v)]
    if func_name == "npu_fusion_attention":
        return flop_counter.sdpa_flop_count(*shapes)
    return flop_counter.sdpa_backward_flop_count(shapes[0], *shapes)  # dy has q's shape


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
        on_npu = any(isinstance(a, torch.Tensor) and a.device.type == "npu" for a in args)
        if not on_npu:
            return 0
        packet = func.overloadpacket
        if packet in flop_counter.flop_registry:
            return int(flop_counter.flop_registry[packet](*args, **kwargs, out_val=out))
        if func.namespace == "npu" and packet.__name__ in ("npu_fusion_attention", "npu_fusion_attention_grad"):
            return int(_fusion_attention_flops(packet.__name__, args, kwargs))
        return 0


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
