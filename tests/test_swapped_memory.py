"""torch_npu.empty_with_swapped_memory: npu tensors in host memory the device addresses directly (the runtime's
mapped host memory, csrc/backend/swapped_memory_allocator.cpp). Ops read and write them as device memory (checked
against the CPU), they are not counted as device memory, their memory outlives the work queued on them, and the
deterministic fill applies as to every factory."""

import gc
import weakref

import pytest
import torch
import torch_npu


def test_ops_read_and_write_swapped_tensors():
    t = torch_npu.empty_with_swapped_memory([64, 32], dtype=torch.float32, device="npu:0")
    assert t.device == torch.device("npu:0") and t.dtype == torch.float32 and t.shape == (64, 32)
    src = torch.randn(64, 32)
    t.copy_(src)
    result = (t.abs() * 1.5 + 2).sqrt_()
    torch.testing.assert_close(result.cpu(), (src.abs() * 1.5 + 2).sqrt())
    t.mul_(3)
    torch.testing.assert_close(t.cpu(), src * 3)
    ordinary = torch.ones(64, 32).npu()
    ordinary.copy_(t)
    torch.testing.assert_close(ordinary.cpu(), src * 3)


def test_defaults_to_the_current_device_and_float32():
    with torch.npu.device(1):
        t = torch_npu.empty_with_swapped_memory([3])
    assert t.device == torch.device("npu:1") and t.dtype == torch.float32
    t.fill_(4)
    assert t.cpu().tolist() == [4.0, 4.0, 4.0]


def test_not_counted_as_device_memory():
    torch.npu.synchronize()
    before = torch.npu.memory_allocated()
    t = torch_npu.empty_with_swapped_memory([1 << 20], dtype=torch.float32)  # 4 MiB
    assert torch.npu.memory_allocated() == before
    del t


def test_memory_outlives_the_work_queued_on_it():
    t = torch_npu.empty_with_swapped_memory([256, 256], dtype=torch.float32)
    t.fill_(1.0)
    for i in range(10):
        t = t * 1.1 + i * 0.1  # each step frees the previous swapped tensor while later work may be queued
    ref = torch.ones(256, 256)
    for i in range(10):
        ref = ref * 1.1 + i * 0.1
    torch.testing.assert_close(t.cpu(), ref)

    s = torch_npu.empty_with_swapped_memory([1 << 16], dtype=torch.float32)
    s.fill_(2.0)
    total = s.sum()  # queued; the tensor goes before it runs
    alive = weakref.ref(s)
    del s
    gc.collect()
    assert alive() is None
    assert total.item() == 2.0 * (1 << 16)


@pytest.fixture
def deterministic_fill():
    was = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was[0])
    torch.utils.deterministic.fill_uninitialized_memory = was[1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.bool])
def test_deterministic_fill(deterministic_fill, dtype):
    t = torch_npu.empty_with_swapped_memory((10, 9), dtype=dtype)
    if dtype.is_floating_point:
        assert t.isnan().all().item()
    else:
        assert t.eq(True if dtype == torch.bool else torch.iinfo(dtype).max).all().item()


def test_only_npu_devices():
    with pytest.raises(RuntimeError, match="Expected NPU tensor"):
        torch_npu.empty_with_swapped_memory([4], device="cpu")
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch_npu.empty_with_swapped_memory([-1], device="npu")
    assert torch_npu.empty_with_swapped_memory([0], device="npu").numel() == 0
