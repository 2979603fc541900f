"""torch_npu.testing.common_distributed: skipIfUnsupportMultiNPU, for tests that need several npu devices."""

import unittest
from functools import wraps

import torch

__all__ = ["skipIfUnsupportMultiNPU"]


def skipIfUnsupportMultiNPU(npu_number_needed):
    """Skips the test unless npu has at least `npu_number_needed` devices (SOFTNPU_DEVICE_COUNT)."""

    def decorator(fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            if not torch.npu.is_available() or torch.npu.device_count() < npu_number_needed:
                raise unittest.SkipTest(f"Multi-NPU {npu_number_needed} condition not satisfied")
            return fn(*args, **kwargs)

        return wrapper

    return decorator
