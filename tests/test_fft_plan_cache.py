"""torch.npu.backends.fft_plan_cache (torch_npu's, CUDA's cufft_plan_cache): one plan per FFT geometry, prepared by
the host at the first transform of that geometry and reused after; max_size bounds the plans, clear() drops them.
Results stay those of the CPU whatever the cache holds."""

import pytest
import torch

cache = torch.npu.backends.fft_plan_cache


@pytest.fixture(autouse=True)
def restore_max_size():
    saved = cache.max_size
    cache.clear()
    yield
    cache.max_size = saved
    cache.clear()


def test_a_plan_per_geometry_reused_and_cleared():
    sig = torch.randn(3, 7, dtype=torch.complex64)
    out = torch.fft.ifft(sig.npu())
    assert cache.size == 1
    torch.fft.ifft(torch.randn(3, 7, dtype=torch.complex64).npu())  # same geometry: the same plan
    assert cache.size == 1
    torch.fft.fft(sig.npu())  # the other direction is another plan, as is a real transform
    real = torch.randn(2, 16)
    spectrum = torch.fft.rfft(real.npu())
    assert cache.size == 3
    torch.testing.assert_close(out.cpu(), torch.fft.ifft(sig))
    torch.testing.assert_close(spectrum.cpu(), torch.fft.rfft(real))
    cache.clear()
    assert cache.size == 0


def test_max_size_bounds_the_plans_and_zero_keeps_none():
    cache.max_size = 2
    assert cache.max_size == 2
    for n in (5, 6, 7):
        torch.fft.fft(torch.randn(n, dtype=torch.complex64).npu())
        assert cache.size <= 2
    cache.max_size = 0
    assert cache.size == 0
    x = torch.randn(9, dtype=torch.complex64)
    torch.testing.assert_close(torch.fft.fft(x.npu()).cpu(), torch.fft.fft(x))
    assert cache.size == 0
    with pytest.raises(ValueError):
        cache.max_size = -1
    with pytest.raises(RuntimeError, match="read-only"):
        cache.size = 1
