"""Parametrizing tests by dtype and npu format, torch_npu's way.

    @instantiate_tests
    class TestAdd(TestCase):
        @Dtypes(torch.float, torch.half)
        @Formats(0, 2)
        def test_add(self, device, dtype, npu_format): ...

makes one test per (dtype, format): test_add_float32_0, test_add_float32_2, test_add_float16_0, ...; each argument is matched by name
(the one whose name contains "dtype", the one containing "format", and "device" gets "npu").
"""

import functools
import inspect
import itertools

import torch

__all__ = ["Dtypes", "Formats", "instantiate_tests"]


class Dtypes:
    def __init__(self, *dtypes):
        if not dtypes or not all(isinstance(d, torch.dtype) for d in dtypes):
            raise TypeError(f"Dtypes takes one or more torch.dtype, got {dtypes}")
        self.dtypes = dtypes

    def __call__(self, fn):
        fn.dtypes = self.dtypes
        return fn


class Formats:
    def __init__(self, *formats):
        if not formats:
            raise TypeError("Formats takes one or more npu formats")
        self.formats = formats

    def __call__(self, fn):
        fn.formats = self.formats
        return fn


def _argument_for(key, names):
    matches = [n for n in names if key in n]
    if len(matches) != 1:
        raise TypeError(f"expected one argument whose name contains {key!r}, found {matches}")
    return matches[0]


def _bind(fn, name, kwargs):
    @functools.wraps(fn)
    def test(self):
        return fn(self, **kwargs)

    test.__name__ = test.__qualname__ = name
    return test


def instantiate_tests(cls):
    for name, fn in list(cls.__dict__.items()):
        axes = {key: getattr(fn, attr) for key, attr in (("dtype", "dtypes"), ("format", "formats"))
                if hasattr(fn, attr)}
        if not axes:
            continue
        names = inspect.getfullargspec(fn).args
        targets = {key: _argument_for(key, names) for key in axes}
        for values in itertools.product(*axes.values()):
            kwargs = {"device": "npu"} if "device" in names else {}
            suffix = ""
            for key, value in zip(axes, values):
                kwargs[targets[key]] = value
                suffix += "_" + (str(value).split(".")[-1] if key == "dtype" else str(value))
            setattr(cls, name + suffix, _bind(fn, name + suffix, kwargs))
        delattr(cls, name)
    return cls
