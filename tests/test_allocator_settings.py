"""The caching allocators as torch_npu's: block sizes padded by 32 bytes then rounded to 512 (what memory_allocated()
reports), and the configuration changed at run time (torch.npu.memory._set_allocator_settings, the keys torch_npu
allows there: max_split_size_mb with max_non_split_rounding_mb, throw_on_npumalloc_oom with num_oom_rejections, the
pinned thresholds). Settings are process-wide, so they are changed in child processes only."""

import gc

import torch
from conftest import MiB, run_python


def test_blocks_are_padded_by_32_bytes_then_rounded_to_512():
    gc.collect()
    torch.npu.synchronize()

    def added(nbytes):
        before = torch.npu.memory_allocated()
        t = torch.empty(nbytes, dtype=torch.uint8, device="npu")
        return torch.npu.memory_allocated() - before, t

    # torch_npu's formula: ceil((n + 32) / 512) * 512.
    assert added(1)[0] == 512
    assert added(480)[0] == 512
    assert added(481)[0] == 1024
    assert added(512)[0] == 1024  # a float32 tensor of 128 elements takes two 512-byte units on a 910B
    assert added(2048)[0] == 2560
    assert added(40 * MiB)[0] == 40 * MiB + 512
    # The bytes asked for are still the tensor's: requested_bytes counts them.
    before = torch.npu.memory_stats()["requested_bytes.all.current"]
    t = torch.empty(1000, dtype=torch.uint8, device="npu")
    assert torch.npu.memory_stats()["requested_bytes.all.current"] - before == 1000
    del t


SETTINGS_PROBE = """
import torch, torch_npu
MiB = 1 << 20
set_settings = torch.npu.memory._set_allocator_settings
assert torch_npu._C._npu_npuCachingAllocator_set_allocator_settings is set_settings

def reserved_growth(large, small):
    # A freed block of `large` bytes (unsplittable beyond max_split_size_mb), then a request of `small`.
    torch.npu.empty_cache()
    t = torch.empty(large, dtype=torch.uint8, device="npu")
    del t
    before = torch.npu.memory_reserved()
    t = torch.empty(small, dtype=torch.uint8, device="npu")
    grown = torch.npu.memory_reserved() - before
    del t
    torch.npu.empty_cache()
    return grown // MiB

set_settings("max_split_size_mb:30,max_non_split_rounding_mb:20")
print("split", torch.npu.memory_stats()["max_split_size"] // MiB)
print("rounding20", reserved_growth(64 * MiB, 40 * MiB))
set_settings("max_non_split_rounding_mb:30")
print("rounding30", reserved_growth(64 * MiB, 40 * MiB))

for bad in ("throw_on_npumalloc_oom:maybe", "max_non_split_rounding_mb:5", "segment_size_mb:4", "no_such_key:1"):
    try:
        set_settings(bad)
        print("accepted", bad)
    except Exception as e:
        print(type(e).__name__, bad.split(":")[0] in str(e))

set_settings("throw_on_npumalloc_oom:True,per_process_memory_fraction:0.25")
print("rejections", torch.npu.memory_stats()["num_oom_rejections"])
x = torch.ones(10, device="npu")
try:
    torch.empty(700 * MiB, dtype=torch.uint8, device="npu")
except torch.OutOfMemoryError as e:
    print("rejected", "throw_on_npumalloc_oom" in str(e), torch.npu.memory_stats()["num_oom_rejections"])
set_settings("throw_on_npumalloc_oom:False")
print("allowed", torch.empty(700 * MiB, dtype=torch.uint8, device="npu").numel() // MiB)
torch.npu.reset_accumulated_memory_stats()
print("reset", torch.npu.memory_stats()["num_oom_rejections"])

def pinned(nbytes, keep=True):
    torch.npu.host_empty_cache()
    t = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    held = torch.npu.host_memory_stats()["allocated_bytes.current"] // MiB
    del t
    cached = torch.npu.host_memory_stats()["allocated_bytes.current"] // MiB
    torch.npu.host_empty_cache()
    return held, cached

print("pinned", *pinned(80 * MiB))
set_settings("pinned_max_round_threshold_mb:64,pinned_max_cached_size_mb:64")
print("pinned", *pinned(80 * MiB))
"""


def test_settings_change_at_run_time():
    r = run_python(SETTINGS_PROBE)
    assert r.lines[0] == "split 30", r.describe()
    # A 40 MiB request reuses a free 64 MiB block only if that wastes less than max_non_split_rounding_mb; else it
    # takes a segment of its own (40 MiB + 32 bytes, segments of large requests rounded to 2 MiB).
    assert r.lines[1:3] == ["rounding20 42", "rounding30 0"], r.describe()
    # A bad value is a RuntimeError naming the key; a key torch_npu fixes at start-up or does not know, ValueError.
    assert r.lines[3:7] == ["RuntimeError True", "RuntimeError True", "ValueError True", "ValueError True"], \
        r.describe()
    # throw_on_npumalloc_oom: beyond the fraction, OutOfMemoryError at once, counted; off again, the memory is there.
    assert r.lines[7:11] == ["rejections 0", "rejected True 1", "allowed 700", "reset 0"], r.describe()
    # Pinned memory: rounded to a power of 2 and cached by default; above the thresholds, neither.
    assert r.lines[11:13] == ["pinned 128 128", "pinned 80 0"], r.describe()


def test_host_statistics_time_the_runtime_calls_and_need_no_device():
    torch.npu.host_empty_cache()
    before = torch.npu.host_memory_stats()
    t = torch.empty(3 << 20, dtype=torch.uint8).pin_memory()
    after = torch.npu.host_memory_stats()
    assert after["num_host_alloc"] == before["num_host_alloc"] + 1
    assert after["host_alloc_time.count"] == before["host_alloc_time.count"] + 1
    del t
    torch.npu.host_empty_cache()
    assert torch.npu.host_memory_stats()["host_free_time.count"] == after["host_free_time.count"] + 1
    # torch_npu answers before the device is initialized (torch.cuda's answer is empty then).
    r = run_python("import torch, torch_npu\nt = torch.ones(1000).pin_memory()\n"
                   "print(torch.npu.is_initialized(), torch.npu.host_memory_stats()['allocations.current'])")
    assert r.lines == ["False 1"], r.describe()
