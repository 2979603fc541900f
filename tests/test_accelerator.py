"""torch.accelerator, PyTorch's device-generic API, sees npu as the current accelerator."""

import pytest
import torch
from conftest import DEVICE_COUNT, MiB


def test_current_accelerator_is_npu():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("npu")
    assert torch.accelerator.device_count() == DEVICE_COUNT


def test_device_index():
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.npu.current_device() == 1  # one notion of the current device
    torch.npu.set_device(0)
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(1):
        assert torch.npu.current_device() == 1
    assert torch.npu.current_device() == 0


def test_streams():
    assert torch.accelerator.current_stream() == torch.npu.current_stream()
    s = torch.npu.Stream()
    torch.accelerator.set_stream(s)
    assert torch.npu.current_stream() == s
    assert torch.accelerator.current_stream() == s
    torch.accelerator.set_stream(torch.npu.default_stream())
    assert torch.accelerator.current_stream(1) == torch.npu.current_stream(1)
    # A generic torch.Stream / torch.Event works on npu too.
    generic = torch.Stream(device="npu")
    with generic:
        torch.npu._sleep(300_000_000)
    event = generic.record_event()
    assert not event.query()
    event.synchronize()
    assert generic.query()


def test_synchronize_waits():
    torch.npu._sleep(300_000_000)
    event = torch.npu.current_stream().record_event()
    assert not event.query()
    torch.accelerator.synchronize()
    assert event.query()
    with torch.npu.device(1):
        torch.npu._sleep(300_000_000)
    torch.accelerator.synchronize(1)
    assert torch.npu.current_stream(1).query()


def test_memory_functions_match_torch_npu():
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="npu")
    assert torch.accelerator.memory_allocated() == torch.npu.memory_allocated() >= 8 * MiB
    assert torch.accelerator.memory_reserved() == torch.npu.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == torch.npu.max_memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == torch.npu.memory_allocated()
    assert torch.accelerator.get_memory_info() == torch.npu.mem_get_info()
    del x
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.npu.memory_allocated()
    assert torch.accelerator.memory_allocated(1) == torch.npu.memory_allocated(1)


def test_device_module_and_autocast_generic_names():
    assert torch.get_device_module("npu") is torch.npu
    assert torch.amp.is_autocast_available("npu")


def test_get_device_capability_lists_supported_dtypes():
    caps = torch.accelerator.get_device_capability("npu:0")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool):
        assert dtype in caps["supported_dtypes"]
