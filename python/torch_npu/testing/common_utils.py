"""Inputs and device selection for tests written the torch_npu way.

Each input maker returns the same values twice, a CPU tensor and an npu tensor, so a test runs the op on both and
compares. The npu copy is cast to the requested format with npu_format_cast (-1 keeps it as it is).
"""

import contextlib
import functools
import itertools
import os
import unittest
from functools import wraps

import numpy as np
import torch

__all__ = [
    "get_npu_device",
    "test_seed",
    "set_npu_device",
    "create_common_tensor",
    "create_dtype_tensor",
    "iter_indices",
    "check_operators_in_prof",
    "SupportedDevices",
    "freeze_rng_state",
    "SkipIfNotGteCANNVersion",
    "get_cycles_per_ms",
]


def get_npu_device() -> str:
    """The device under test: npu:$SET_NPU_DEVICE, else npu:0."""
    index = os.environ.get("SET_NPU_DEVICE")
    if not index:
        return "npu:0"
    if not index.isdigit():
        raise ValueError(f"SET_NPU_DEVICE={index!r}: expected a device index (0, 1, ...)")
    return f"npu:{index}"


def test_seed() -> int:
    """The seed every test starts from: $SEED, else 666 (torch_npu's)."""
    seed = os.environ.get("SEED")
    if not seed:
        return 666
    try:
        return int(seed)
    except ValueError:
        raise ValueError(f"SEED={seed!r}: expected an integer seed") from None


def set_npu_device() -> str:
    device = get_npu_device()
    torch.npu.set_device(device)
    return device


def _pair(values: np.ndarray, npu_format: int, device):
    from softnpu.fused import npu_format_cast

    cpu = torch.from_numpy(values)
    npu = cpu.to(device or get_npu_device())
    if npu_format != -1:
        npu = npu_format_cast(npu, npu_format)
    return cpu, npu


def create_common_tensor(item, minValue, maxValue, device=None):
    """item = [numpy dtype, npu format, shape]: uniform values in [minValue, maxValue) as (cpu, npu) tensors."""
    dtype, npu_format, shape = item[0], item[1], item[2]
    return _pair(np.random.uniform(minValue, maxValue, shape).astype(dtype), npu_format, device)


def create_dtype_tensor(shape, dtype, npu_format=-1, min_value=-5, max_value=5, no_zero=False, device=None):
    """A (cpu, npu) pair of a torch dtype: booleans, uniform floats for float16/float32, integers otherwise (int32);
    no_zero replaces zeros by ones (divisors). Only floating tensors are format-cast."""
    if dtype == torch.bool:
        values = np.random.randint(0, 2, size=shape).astype(bool)
    elif dtype in (torch.half, torch.float):
        values = np.random.uniform(min_value, max_value, shape).astype(np.float16 if dtype == torch.half else np.float32)
    else:
        values = np.random.randint(min_value, max_value + 1, size=shape).astype(np.int32)
    if no_zero:
        values = np.where(values != 0, values, np.ones_like(values))
    return _pair(values, npu_format if dtype in (torch.half, torch.float) else -1, device)


def iter_indices(tensor):
    """Every index of a tensor, for element-by-element comparisons."""
    if tensor.dim() == 0:
        return range(0)
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return itertools.product(*(range(s) for s in tensor.size()))


def check_operators_in_prof(expected_operators, prof, unexpected_operators=None):
    """Whether a profile ran every expected operator and none of the unexpected ones."""
    seen = {item.key for item in prof.key_averages()}
    if seen & set(unexpected_operators or ()):
        return False
    return set(expected_operators) <= seen


class SupportedDevices:
    """Runs a test only on the named device types (torch.npu.get_device_name() starting with one of them); softnpu's
    device is the chip SOFTNPU_SOC_VERSION selects (Ascend910B3 by default), so they run or skip as on that chip."""

    def __init__(self, devices):
        self.devices = list(devices)

    def __call__(self, fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            name = torch.npu.get_device_name()
            if not any(name.startswith(d) for d in self.devices):
                raise unittest.SkipTest(f"runs on {self.devices}; this device is {name}")
            return fn(*args, **kwargs)

        return wrapper


@contextlib.contextmanager
def freeze_rng_state():
    """Restores the CPU generator's state after the block (torch_npu's: the CPU's only)."""
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


class SkipIfNotGteCANNVersion:
    """Runs a test only when the CANN component's version is `base_version` or later (softnpu's CANN tree's, see
    torch_npu.npu.utils.get_cann_version)."""

    def __init__(self, base_version, module="CANN"):
        self.base_version = base_version
        self.module = module

    def __call__(self, fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            from softnpu.npu.utils import _is_gte_cann_version, get_cann_version

            if not _is_gte_cann_version(self.base_version, module=self.module):
                raise unittest.SkipTest(f"Only run on {self.base_version} or greater, current cann version is "
                                        f"{get_cann_version(module=self.module)}.")
            return fn(*args, **kwargs)

        return wrapper


@functools.lru_cache
def get_cycles_per_ms() -> float:
    """Cycles of torch.npu._sleep per millisecond, measured on the device (the median of 10)."""

    def measure() -> float:
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        torch.npu._sleep(1_000_000)
        end.record()
        end.synchronize()
        return 1_000_000 / start.elapsed_time(end)

    return sorted(measure() for _ in range(10))[5]
