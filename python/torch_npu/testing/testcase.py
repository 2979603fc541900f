"""TestCase and run_tests for tests written the torch_npu way, over PyTorch's own test base class.

torch_npu's TestCase adds to PyTorch's: assertRtolEqual (a relative comparison whose tolerance is also the share of
elements allowed to miss it, the way torch_npu judges an op against the CPU), assertEqual with a `prec` (an absolute
tolerance, float dtypes compared loosely: cpu float16 against npu float32 is allowed), assertAlmostEqual as that
assertEqual within `delta` or 10**-places, and assertTensorsSlowEqual, a seed per test ($SEED, else 666) and the
device under test set once per class ($SET_NPU_DEVICE).
"""

import random
from collections.abc import Sequence
from numbers import Number

import numpy as np
import torch
from torch.testing._internal import common_utils as _torch_testing

from .common_utils import iter_indices, set_npu_device, test_seed

__all__ = ["TestCase", "run_tests"]

# The smallest magnitude a relative error is measured against, per dtype family (float16's subnormal range).
_MINIMUM = {np.dtype(np.float16): 6e-8}
_DEFAULT_MINIMUM = 1e-9
_COMPARABLE = (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64)


def run_tests():
    """Runs the calling module's tests with PyTorch's test runner (its flags: -k, --repeat, ...)."""
    _torch_testing.run_tests()


def _as_numpy(x, like_dtype=None):
    if isinstance(x, torch.Tensor):
        if like_dtype is not None:
            x = x.to(like_dtype)
        x = x.detach().cpu()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    return np.asarray(x)


class TestCase(_torch_testing.TestCase):
    _precision = 1e-5
    exact_dtype = False

    @property
    def precision(self):
        return self._precision

    @precision.setter
    def precision(self, prec):
        self._precision = prec

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.npu_device = set_npu_device()

    def setUp(self):
        super().setUp()
        # PyTorch's setUp turns on the invariant checks of every sparse tensor built; torch_npu's TestCase (over
        # expecttest's) leaves them as they were, and its tests build tensors those checks refuse.
        if not self._check_invariants:
            torch.sparse.check_sparse_tensor_invariants.disable()
        seed = test_seed()
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)

    def assertRtolEqual(self, x, y, prec=1.0e-4, prec16=1.0e-3, auto_trans_dtype=False, message=None):
        """x and y (tensors on any device, numpy arrays, numbers or sequences of them) have the same shape and dtype
        and agree: every element within `prec` absolutely, or every element within `prec` relatively, or at most a
        `prec` share of the elements outside both (float16: `prec16`). NaNs must sit in the same places."""
        if isinstance(x, Sequence) and isinstance(y, Sequence) and not isinstance(x, (str, bytes)):
            self.assertEqual(len(x), len(y), message)
            for a, b in zip(x, y):
                self.assertRtolEqual(a, b, prec, prec16, auto_trans_dtype, message)
            return
        if isinstance(x, torch.Tensor) and isinstance(y, Sequence):
            y = torch.as_tensor(y, dtype=x.dtype)
        elif isinstance(y, torch.Tensor) and isinstance(x, Sequence):
            x = torch.as_tensor(x, dtype=y.dtype)
        like = y.dtype if auto_trans_dtype and isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else None
        a, b = _as_numpy(x, like), _as_numpy(y)
        why = f": {message}" if message else ""
        if a.shape != b.shape:
            self.fail(f"shape error: {a.shape} against {b.shape}{why}")
        if a.dtype != b.dtype:
            self.fail(f"dtype error: {a.dtype} against {b.dtype}{why}")
        if a.dtype.type not in _COMPARABLE:
            self.fail(f"assertRtolEqual compares {[t.__name__ for t in _COMPARABLE]}, not {a.dtype}{why}")
        if a.dtype == np.bool_:
            if not np.array_equal(a, b):
                self.fail(f"result error: {np.sum(a != b)} of {a.size} booleans differ{why}")
            return
        tolerance = prec16 if a.dtype == np.float16 else prec
        minimum = _MINIMUM.get(a.dtype, _DEFAULT_MINIMUM)
        a, b = a.astype(np.float64), b.astype(np.float64)
        nan = np.isnan(a)
        if not np.array_equal(nan, np.isnan(b)):
            self.fail(f"result error: NaNs in different places{why}")
        a, b = np.where(nan, 0, a), np.where(nan, 0, b)
        with np.errstate(invalid="ignore"):
            diff = np.where(a == b, 0.0, np.abs(a - b))  # equal infinities agree
        relative = diff / (np.maximum(np.abs(a), np.abs(b)) + minimum)
        off_abs, off_rel = np.sum(~(diff <= tolerance)), np.sum(~(relative <= tolerance))
        if off_abs and off_rel and off_abs > a.size * tolerance and off_rel > a.size * tolerance:
            self.fail(f"result error: {off_rel} of {a.size} elements off by more than {tolerance} relatively "
                      f"(largest difference {np.nanmax(diff)}){why}")

    def assertEqual(self, x, y, prec=None, message="", allow_inf=False, exact_dtype=None, **kwargs):
        """PyTorch's assertEqual, with torch_npu's spelling: a third positional `prec` (absolute tolerance; a string
        there is the message), dtypes compared only if exact_dtype (the class default is False). allow_inf is
        accepted for torch_npu's callers: equal infinities always compare equal here."""
        if isinstance(prec, str) and not message:
            prec, message = None, prec
        if exact_dtype is None:
            exact_dtype = self.exact_dtype
        if prec is not None and "atol" not in kwargs:
            kwargs.update(atol=prec, rtol=0)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and not exact_dtype and x.dtype != y.dtype:
            y = y.to(x.dtype)
        if isinstance(x, Number) and isinstance(y, torch.Tensor):
            y = y.item()
        elif isinstance(y, Number) and isinstance(x, torch.Tensor):
            x = x.item()
        super().assertEqual(x, y, msg=message or None, exact_dtype=exact_dtype, exact_device=False, **kwargs)

    def assertAlmostEqual(self, x, y, places=None, msg=None, delta=None, allow_inf=False):
        """torch_npu's: assertEqual within an absolute `delta` or 10**-places (else the class precision), so tensors on
        different devices (a CPU reference against an npu result) and of different float dtypes compare; unittest's
        version subtracts them as they are."""
        if delta is not None and places is not None:
            raise TypeError("specify delta or places not both")
        prec = 10 ** -places if places is not None else delta if delta is not None else self.precision
        self.assertEqual(x, y, prec, msg or "", allow_inf)

    def assertTensorsSlowEqual(self, x, y, prec=None, message=""):
        """Element by element: the same size and dtype, every difference at most `prec`."""
        self.assertEqual(x.size(), y.size())
        self.assertEqual(x.dtype, y.dtype)
        y = y.type_as(x)
        if x.dtype == torch.bool:
            self.assertTrue(torch.equal(x.cpu(), y.cpu()), message)
            return
        worst = max((abs(float(x[i]) - float(y[i])) for i in iter_indices(x)), default=0.0)
        self.assertLessEqual(worst, prec if prec is not None else self.precision, message)
