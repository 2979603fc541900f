"""Device memory: the caching allocator's statistics under torch.cuda's names, mem_get_info, empty_cache, and
out-of-memory with recovery (in a child with a small device)."""

import gc

import pytest
import torch
from conftest import MEMORY_MB, MiB, run_python

# Large enough to be its own segment in the large pool.
SIZE = 64 * MiB
# The block it takes: torch_npu's allocator pads a request by 32 bytes, then rounds it to 512.
BLOCK = SIZE + 512


@pytest.fixture(autouse=True)
def _no_garbage():
    # Tensors kept alive by reference cycles of earlier tests would be freed at a random point of these.
    gc.collect()
    torch.npu.synchronize()


def _big(device="npu"):
    return torch.empty(SIZE, dtype=torch.uint8, device=device)


def test_memory_allocated_and_reserved_track_tensors():
    torch.npu.empty_cache()
    base_alloc = torch.npu.memory_allocated()
    base_reserved = torch.npu.memory_reserved()
    x = _big()
    assert torch.npu.memory_allocated() == base_alloc + BLOCK
    assert torch.npu.memory_reserved() >= base_reserved + SIZE
    assert torch.npu.memory_allocated(0) == torch.npu.memory_allocated("npu:0")
    assert torch.npu.memory_allocated(1) == torch.npu.memory_allocated(torch.device("npu", 1))
    del x
    assert torch.npu.memory_allocated() == base_alloc
    # Freed memory stays cached (reserved) until empty_cache, as with CUDA.
    assert torch.npu.memory_reserved() >= base_reserved + SIZE
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved() == base_reserved


def test_statistics_are_per_device():
    before = torch.npu.memory_allocated(0)
    x = _big("npu:1")
    assert torch.npu.memory_allocated(0) == before
    assert torch.npu.memory_allocated(1) >= SIZE
    with torch.npu.device(1):
        assert torch.npu.memory_allocated() >= SIZE  # None is the current device
    del x


def test_peaks_and_reset_peak_memory_stats():
    torch.npu.empty_cache()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    assert torch.npu.max_memory_allocated() == base
    x = _big()
    y = _big()
    del x, y
    assert torch.npu.max_memory_allocated() >= base + 2 * SIZE
    assert torch.npu.max_memory_reserved() >= base + 2 * SIZE
    torch.npu.empty_cache()
    torch.npu.reset_peak_memory_stats()
    assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()
    assert torch.npu.max_memory_reserved() == torch.npu.memory_reserved()


def test_reset_max_and_accumulated_stats():
    x = _big()
    del x
    assert torch.npu.max_memory_allocated() > torch.npu.memory_allocated()
    torch.npu.reset_max_memory_allocated()
    assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()
    assert torch.npu.memory_stats()["allocation.all.allocated"] > 0
    torch.npu.reset_accumulated_memory_stats()
    stats = torch.npu.memory_stats()
    assert stats["allocation.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0
    y = _big()
    stats = torch.npu.memory_stats()
    assert stats["allocation.all.allocated"] == 1 and stats["allocated_bytes.all.allocated"] == BLOCK
    del y


def test_memory_stats_use_cuda_key_names():
    x = _big()
    stats = torch.npu.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.large_pool.current",
        "allocated_bytes.small_pool.current",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
        "active_bytes.all.current",
        "inactive_split_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
        "segment.all.current",
        "num_alloc_retries",
        "num_ooms",
    ):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] == torch.npu.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.npu.memory_reserved()
    assert stats["allocated_bytes.large_pool.current"] >= SIZE
    assert stats["requested_bytes.all.current"] >= SIZE
    assert stats["allocation.all.current"] >= 1 and stats["segment.all.current"] >= 1
    del x


def test_mem_get_info_reports_the_device():
    torch.npu.empty_cache()
    free, total = torch.npu.mem_get_info()
    assert total == MEMORY_MB * MiB
    assert 0 < free <= total
    x = _big()
    free_after, _ = torch.npu.mem_get_info()
    assert free_after <= free - SIZE  # what the allocator reserved is no longer free on the device
    del x
    torch.npu.empty_cache()
    assert torch.npu.mem_get_info()[0] == free
    assert torch.npu.mem_get_info(1)[1] == MEMORY_MB * MiB


def test_empty_cache_waits_for_pending_work_before_returning_memory():
    # A block freed while its kernel is still queued must survive until the kernel ran: the result stays right.
    src = torch.arange(1 << 20, dtype=torch.float32, device="npu")
    torch.npu._sleep(300_000_000)
    dst = src.clone()
    del src
    torch.npu.empty_cache()
    assert torch.equal(dst.cpu(), torch.arange(1 << 20, dtype=torch.float32))


def test_out_of_memory_and_recovery():
    result = run_python(
        """
        import torch, torch_npu
        MiB = 1 << 20
        a = torch.empty(40 * MiB, dtype=torch.uint8, device="npu")
        try:
            b = torch.empty(40 * MiB, dtype=torch.uint8, device="npu")
        except torch.OutOfMemoryError as e:
            print("OOM", isinstance(e, RuntimeError))
            print(str(e).replace("\\n", " "))
        print("num_ooms", torch.npu.memory_stats()["num_ooms"])
        # Still usable: an allocation that fits works, and after freeing, the large one does.
        c = torch.ones(1024, device="npu")
        print("sum", (c + c).sum().item())
        del a
        b = torch.empty(40 * MiB, dtype=torch.uint8, device="npu")
        b.fill_(1)
        print("after free", b.sum().item() == 40 * MiB)
        # Cached blocks are freed and the allocation retried before giving up: 40 MiB cached + 50 MiB > 64 MiB.
        del b
        retries = torch.npu.memory_stats()["num_alloc_retries"]
        d = torch.empty(50 * MiB, dtype=torch.uint8, device="npu")
        print("retried", torch.npu.memory_stats()["num_alloc_retries"] > retries)
        del d
        # empty_cache gives the cached 50 MiB back to the device.
        cached_free = torch.npu.mem_get_info()[0]
        torch.npu.empty_cache()
        free, total = torch.npu.mem_get_info()
        print("returned", free - cached_free >= 50 * MiB, free == total - torch.npu.memory_reserved())
        """,
        env={"SOFTNPU_MEMORY_MB": 64},
    )
    lines = result.lines
    assert lines[0] == "OOM True"
    message = lines[1]
    # CUDA's kind of message: what was asked, the capacity, what is in use, and the allocator's variable.
    assert "40.00 MiB" in message
    assert "64.00 MiB" in message
    assert "PYTORCH_NPU_ALLOC_CONF" in message
    assert lines[2:] == ["num_ooms 1", "sum 2048.0", "after free True", "retried True", "returned True True"]


def test_out_of_memory_on_a_tensor_larger_than_the_device():
    result = run_python(
        """
        import torch, torch_npu
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device="npu")
        except torch.OutOfMemoryError as e:
            print("OOM", "GiB" in str(e) or "TiB" in str(e))
        print(torch.ones(3, device="npu").sum().item())
        """,
        env={"SOFTNPU_MEMORY_MB": 64},
    )
    assert result.lines == ["OOM True", "3.0"]


def test_an_impossible_size_is_refused_as_torch_npu_does():
    kept = torch.zeros(1024, device="npu")
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate more than 1EB memory"):
        torch.empty(1024 * 1024 * 1024 * 8000000000, dtype=torch.int8, device="npu")
    kept.fill_(1)  # the device keeps working
    assert bool((kept == 1).all())


def test_memory_summary_and_snapshot():
    x = _big()
    summary = torch.npu.memory_summary()
    # torch_npu's table: torch.cuda.memory_summary's layout, 75 columns between bars, NPU's names.
    lines = summary.splitlines()
    assert all(len(line) == 77 and line[0] == line[-1] == "|" for line in lines), summary
    assert "PyTorch NPU memory summary, device ID 0" in lines[1] and "npuMalloc retries:" in lines[3]
    allocated = next(line for line in lines if line.startswith("| Allocated memory"))
    value, unit = allocated.split("|")[2].split()
    scale = 1024 ** ["B", "KB", "MB", "GB"].index(unit)
    assert int(value) * scale <= torch.npu.memory_allocated() < (int(value) + 1) * scale, allocated
    assert len(torch.npu.memory_summary(abbreviated=True).splitlines()) < len(lines)
    segments = torch.npu.memory_snapshot()
    assert any(seg["total_size"] >= SIZE and seg["allocated_size"] >= SIZE for seg in segments)
    del x


# ---------------------------------------------------------------- storage resize (what FSDP does to its buffers)


def _storage_values(storage, dtype=torch.float32):
    return torch.empty(0, dtype=dtype, device=storage.device).set_(storage).cpu()


@pytest.mark.parametrize("device", ["npu:0", "npu:1"])
def test_storage_resize_keeps_the_device_and_the_data(device):
    values = torch.arange(8, dtype=torch.float32)
    for new_numel in [0, 3, 8, 12]:
        t = values.to(device)
        storage = t.untyped_storage()
        storage.resize_(new_numel * 4)
        expected = values.clone().untyped_storage()
        expected.resize_(new_numel * 4)
        assert storage.device == torch.device(device)
        assert storage.nbytes() == new_numel * 4
        assert t.device == torch.device(device)
        keep = min(new_numel, 8)  # beyond the old size the contents are undefined, as on the CPU
        torch.testing.assert_close(_storage_values(storage)[:keep], _storage_values(expected)[:keep])


def test_storage_freed_to_zero_and_regrown_as_fsdp_does():
    # FSDP frees a parameter's memory with storage().resize_(0) and brings it back with resize_(n) and a copy.
    t = torch.zeros(1024, 256, device="npu:1")
    torch.npu.synchronize(1)
    allocated = torch.npu.memory_allocated(1)
    t.untyped_storage().resize_(0)
    assert torch.npu.memory_allocated(1) == allocated - (t.numel() * 4 + 512)  # its block: torch_npu's 32-byte pad
    assert t.untyped_storage().device == torch.device("npu:1") and t.device == torch.device("npu:1")
    t.untyped_storage().resize_(t.numel() * 4)
    assert torch.npu.memory_allocated(1) == allocated
    src = torch.randn(1024, 256)
    t.copy_(src.to("npu:1"))
    torch.testing.assert_close(t.cpu(), src, rtol=0, atol=0)
    torch.testing.assert_close((t * 2).cpu(), src * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.complex64, torch.int32, torch.int64, torch.bool])
def test_deterministic_fill_of_new_memory_matches_the_cpu(dtype):
    import torch.utils.deterministic

    torch.empty(64, dtype=dtype, device="npu").fill_(1)  # leftovers the fill must hide
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        for make in (lambda d: torch.empty(5, dtype=dtype, device=d),
                     lambda d: torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=d),
                     lambda d: torch.zeros(2, dtype=dtype, device=d).resize_(7)):
            npu, cpu = make("npu").cpu(), make("cpu")
            assert torch.equal(npu.isnan(), cpu.isnan()) if dtype.is_floating_point or dtype.is_complex else \
                torch.equal(npu, cpu)
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = True
