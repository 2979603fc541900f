"""Allocator control in torch.npu, as torch.cuda's: set_per_process_memory_fraction (enforced), MemPool /
use_mem_pool (also with an NPUPluggableAllocator), caching_allocator_alloc/delete, the *_cached aliases,
memory_stats_as_nested_dict, PYTORCH_NO_NPU_MEMORY_CACHING, PYTORCH_NPU_ALLOC_CONF's torch_npu keys and expandable
segments; the host allocator's statistics; set_sync_debug_mode."""

import gc
import warnings
from pathlib import Path

import pytest
import torch
from conftest import MiB, run_many, run_python


def test_memory_fraction_is_enforced():
    assert torch.npu.get_per_process_memory_fraction() == 1.0
    torch.npu.empty_cache()
    torch.npu.set_per_process_memory_fraction(0.05)  # 102.4 MiB of 2048 MiB
    try:
        assert torch.npu.get_per_process_memory_fraction() == 0.05
        keep = torch.ones(64 * MiB, dtype=torch.uint8, device="npu")
        with pytest.raises(torch.OutOfMemoryError, match="allowed by set_per_process_memory_fraction"):
            torch.empty(64 * MiB, dtype=torch.uint8, device="npu")
        # The failed allocation lost nothing: the live tensor is intact and smaller allocations still work.
        assert keep.sum().item() == 64 * MiB
        torch.ones(16 * MiB, dtype=torch.uint8, device="npu")
    finally:
        torch.npu.set_per_process_memory_fraction(1.0)
    torch.empty(64 * MiB, dtype=torch.uint8, device="npu")  # allowed again


def test_memory_fraction_checks_its_argument():
    with pytest.raises(TypeError):
        torch.npu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Allowed range"):
        torch.npu.set_per_process_memory_fraction(1.5)


def test_mem_pool_routes_allocations_and_frees_them_when_deleted():
    torch.npu.empty_cache()
    pool = torch.npu.MemPool()
    assert pool.id[0] == 0 and pool.id[1] > 0 and pool.use_count() == 1
    outside = torch.ones(4 * MiB, dtype=torch.uint8, device="npu")
    with torch.npu.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = torch.full((3 * MiB,), 7, dtype=torch.uint8, device="npu")
    assert pool.use_count() == 1
    segments = pool.snapshot()
    assert len(segments) == 1 and segments[0]["segment_pool_id"] == pool.id
    seg = segments[0]
    assert seg["address"] <= inside.data_ptr() < seg["address"] + seg["total_size"]
    assert not seg["address"] <= outside.data_ptr() < seg["address"] + seg["total_size"]
    assert inside.sum().item() == 7 * 3 * MiB
    reserved = torch.npu.memory_reserved()
    del inside
    assert torch.npu.memory_reserved() == reserved  # cached in the pool while the pool lives
    del pool
    assert torch.npu.memory_reserved() == reserved - seg["total_size"]


def test_mem_pool_segment_freed_with_its_last_tensor():
    pool = torch.npu.MemPool()
    with torch.npu.use_mem_pool(pool):
        t = torch.ones(2 * MiB, dtype=torch.uint8, device="npu")
    (seg,) = pool.snapshot()
    del pool  # a tensor still lives in it
    reserved = torch.npu.memory_reserved()
    assert t.sum().item() == 2 * MiB
    del t
    assert torch.npu.memory_reserved() == reserved - seg["total_size"]


def test_caching_allocator_alloc_and_delete():
    gc.collect()  # earlier tests' garbage would be freed at a random point
    before = torch.npu.memory_allocated()
    ptr = torch.npu.caching_allocator_alloc(10000, device=1, stream=torch.npu.current_stream(1))
    assert ptr != 0 and torch.npu.memory_allocated(1) >= 10000
    torch.npu.caching_allocator_delete(ptr)
    assert torch.npu.memory_allocated() == before
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        torch.npu.caching_allocator_delete(ptr)
    with pytest.raises(TypeError):
        torch.npu.caching_allocator_alloc(10, stream=3)


def test_aliases_and_nested_stats():
    x = torch.empty(MiB, dtype=torch.uint8, device="npu")
    with pytest.warns(FutureWarning):
        assert torch.npu.memory_cached() == torch.npu.memory_reserved()
    with pytest.warns(FutureWarning):
        assert torch.npu.max_memory_cached() == torch.npu.max_memory_reserved()
    with pytest.warns(FutureWarning):
        torch.npu.reset_max_memory_cached()
    nested = torch.npu.memory_stats_as_nested_dict()
    flat = torch.npu.memory_stats()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] >= MiB
    assert nested["num_ooms"] == flat["num_ooms"]
    assert torch.npu.get_allocator_backend() == "native"
    del x


def test_no_memory_caching_returns_memory_at_once():
    code = """
import torch, torch_npu
x = torch.ones(3 << 20, dtype=torch.uint8, device="npu")
print(torch.npu.memory_reserved() == (3 << 20) + 512, torch.npu.memory_stats()["num_device_alloc"])
del x
print(torch.npu.memory_reserved())
y = torch.ones(1000, device="npu")
print(torch.npu.memory_reserved(), int(y.sum().item()))
"""
    r = run_python(code, env={"PYTORCH_NO_NPU_MEMORY_CACHING": "1"})
    assert r.lines == ["True 1", "0", "4096 1000"], r.describe()


def test_host_memory_stats():
    torch.npu.host_empty_cache()
    torch.npu.reset_accumulated_host_memory_stats()
    pinned = torch.ones(MiB, dtype=torch.uint8).pin_memory()
    stats = torch.npu.host_memory_stats()
    nested = torch.npu.host_memory_stats_as_nested_dict()
    assert stats["allocations.current"] >= 1 and stats["allocated_bytes.current"] >= MiB
    assert stats["active_requests.current"] >= 1 and nested["active_bytes"]["current"] >= MiB
    assert stats["num_host_alloc"] >= 1
    d = pinned.npu(non_blocking=True)
    assert d.sum().item() == MiB
    del pinned
    torch.npu.synchronize()
    torch.npu.reset_peak_host_memory_stats()
    torch.npu.host_empty_cache()
    after = torch.npu.host_memory_stats()
    assert after["allocated_bytes.current"] < stats["allocated_bytes.current"]
    assert after["num_host_free"] >= 1
    assert after["allocated_bytes.peak"] >= stats["allocated_bytes.current"]  # peaks are kept until reset
    torch.npu.reset_peak_host_memory_stats()
    assert torch.npu.host_memory_stats()["allocated_bytes.peak"] == after["allocated_bytes.current"]


@pytest.fixture
def sync_mode():
    yield
    torch.npu.set_sync_debug_mode(0)


def test_sync_debug_mode_warns_naming_the_op(sync_mode):
    x = torch.arange(6.0).npu()
    assert torch.npu.get_sync_debug_mode() == 0
    torch.npu.set_sync_debug_mode("warn")
    assert torch.npu.get_sync_debug_mode() == 1
    for what, fn in (("_local_scalar_dense", lambda: x.sum().item()), ("nonzero", lambda: torch.nonzero(x)),
                     ("device to host", lambda: x.cpu()), ("host to device", lambda: torch.ones(3).npu())):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn()
        assert any(what in str(m.message) and "synchronizing" in str(m.message) for m in w), (what, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = x * 2  # asynchronous ops do not warn
        torch.npu.synchronize()  # nor does an explicit synchronization
        pinned = torch.ones(3).pin_memory()
        pinned.npu(non_blocking=True)


def test_sync_debug_mode_error_raises_and_the_device_stays_usable(sync_mode):
    x = torch.arange(6.0).npu()
    torch.npu.set_sync_debug_mode(2)
    with pytest.raises(RuntimeError, match="_local_scalar_dense.*synchronizing"):
        x.sum().item()
    with pytest.raises(RuntimeError, match="nonzero"):
        torch.nonzero(x)
    torch.npu.set_sync_debug_mode("default")
    assert x.sum().item() == 15.0
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.npu.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.npu.set_sync_debug_mode(3)


PLUGGABLE_C = r"""
#include <stddef.h>
extern int snpuMalloc(void** ptr, size_t size);
extern int snpuFree(void* ptr);
static long allocs, frees;
void* my_alloc(size_t size, int device, void* stream) {
  void* p = 0;
  allocs++;
  return snpuMalloc(&p, size) == 0 ? p : 0;
}
void my_free(void* ptr, size_t size, int device, void* stream) {
  frees++;
  snpuFree(ptr);
}
long alloc_calls(void) { return allocs; }
long free_calls(void) { return frees; }
"""


def test_pluggable_allocator(tmp_path):
    so = _compile_pluggable(tmp_path)
    code = f"""
import ctypes, torch, torch_npu
alloc = torch.npu.NPUPluggableAllocator({str(so)!r}, "my_alloc", "my_free")
torch.npu.memory.change_current_allocator(alloc)
lib = ctypes.CDLL({str(so)!r})
a = torch.randn(64, 64)
b = a.npu() @ a.npu()
print(torch.allclose(b.cpu(), a @ a, rtol=1e-5, atol=1e-5), lib.alloc_calls() >= 2)
n = lib.free_calls()
del b
print(lib.free_calls() == n + 1, torch.npu.memory_reserved())
try:
    torch.npu.memory.change_current_allocator(alloc)
except RuntimeError as e:
    print("RuntimeError", "already initialized" in str(e))
"""
    r = run_python(code)
    assert r.lines == ["True True", "True 0", "RuntimeError True"], r.describe()


def test_pluggable_allocator_only_before_the_first_allocation():
    code = """
import torch, torch_npu
x = torch.ones(3, device="npu")
try:
    torch.npu.memory.change_current_allocator(torch.npu.NPUPluggableAllocator("libc.so.6", "malloc", "free"))
except RuntimeError as e:
    print("already initialized" in str(e), x.sum().item())
"""
    r = run_python(code)
    assert r.lines == ["True 3.0"], r.describe()


def test_mem_pool_routes_only_the_calling_thread():
    import threading

    pool = torch.npu.MemPool()
    other = {}

    def allocate():
        other["t"] = torch.empty(MiB, dtype=torch.uint8, device="npu")

    with torch.npu.use_mem_pool(pool):
        mine = torch.empty(MiB, dtype=torch.uint8, device="npu")
        th = threading.Thread(target=allocate)
        th.start()
        th.join()
    inside = lambda t: any(s["address"] <= t.data_ptr() < s["address"] + s["total_size"] for s in pool.snapshot())
    assert inside(mine) and not inside(other["t"])
    del mine, pool


ALLOC_CONF_PROBE = """
import os, torch, torch_npu
MiB = 1 << 20
torch.ones(1, device="npu")
def allocated(n):
    before = torch.npu.memory_allocated()
    t = torch.empty(n, dtype=torch.uint8, device="npu")
    return (torch.npu.memory_allocated() - before, t)
small, t1 = allocated(1000)
large, t2 = allocated(5 * MiB)
print("reserved", torch.npu.memory_reserved() // MiB)
print("rounded", allocated(MiB + 1)[0], allocated(3 * MiB + 1)[0], allocated(9 * MiB + 1)[0])
print("fraction", torch.npu.get_per_process_memory_fraction())
try:
    torch.empty(700 * MiB, dtype=torch.uint8, device="npu")
    print("no OOM")
except torch.OutOfMemoryError as e:
    print("OOM", "allowed by set_per_process_memory_fraction" in str(e))
threads = len(os.listdir("/proc/self/task"))
p = torch.empty(1000, pin_memory=True)
print("pinned threads", len(os.listdir("/proc/self/task")) - threads)
"""


def test_alloc_conf_keys_of_torch_npu():
    default, configured = run_many([
        (ALLOC_CONF_PROBE, {}),
        (ALLOC_CONF_PROBE, {"PYTORCH_NPU_ALLOC_CONF": "large_segment_size_mb:32,"
                                                      "per_process_memory_fraction:0.25,"
                                                      "roundup_power2_divisions:[2:1,8:4,>:2],"
                                                      "pinned_use_background_threads:True"}),
    ])
    MiB = 1 << 20
    assert default.lines[0] == "reserved 22", default.describe()  # 2 MiB small segment + 20 MiB large one
    assert default.lines[1] == f"rounded {MiB + 512} {3 * MiB + 512} {9 * MiB + 512}"
    assert default.lines[2:4] == ["fraction 1.0", "no OOM"]
    # large_segment_size_mb: the segments large blocks are carved from (small ones: 2 MiB, as torch_npu's).
    assert configured.lines[0] == "reserved 34", configured.describe()
    # The list form as c10 reads it: 2:1 sets sizes below 4 MiB (512-byte rounding), 8:4 the sizes from 8 to 16 MiB
    # (4 divisions: 9 MiB + 1 takes 10 MiB), >:2 those above; 4 to 8 MiB, between two boundaries, keep 0.
    assert configured.lines[1] == f"rounded {MiB + 512} {3 * MiB + 512} {10 * MiB}"
    # per_process_memory_fraction: 512 of the 2048 MiB, enforced as set_per_process_memory_fraction.
    assert configured.lines[2:4] == ["fraction 0.25", "OOM True"]
    # pinned_use_background_threads: a thread processes the pinned blocks' completed uses.
    assert int(configured.lines[4].split()[-1]) == int(default.lines[4].split()[-1]) + 1


@pytest.mark.parametrize("conf,why", [
    ("segment_size_mb:0", "bad segment_size_mb"),
    ("segment_size_mb:4", "20 to 512 MiB"),
    ("large_segment_size_mb:4", "bad large_segment_size_mb"),
    ("per_process_memory_fraction:1.5", "bad per_process_memory_fraction"),
    ("per_process_memory_fraction:x", "bad per_process_memory_fraction"),
    ("pinned_use_background_threads:maybe", "bad pinned_use_background_threads"),
    ("roundup_power2_divisions:[256:1,512:3]", "power of 2"),
    ("roundup_power2_divisions:[300:1]", "not a power of 2"),
    ("roundup_power2_divisions:[512:1,256:2]", "must increase"),
    ("roundup_power2_divisions:[256:1,>:2", "no closing"),
    ("roundup_power2_divisions:[256:1;>:2]", "bad roundup_power2_divisions"),
    ("expandable_segments:yes", "bad expandable_segments"),
])
def test_alloc_conf_malformed_keys_are_clear_errors(conf, why):
    r = run_python("import torch, torch_npu\ntry:\n    torch.ones(1, device='npu')\n"
                   "except RuntimeError as e:\n    print(str(e).splitlines()[0])",
                   env={"PYTORCH_NPU_ALLOC_CONF": conf})
    assert "PYTORCH_NPU_ALLOC_CONF" in r.stdout and conf in r.stdout and why in r.stdout, r.describe()


EXPANDABLE_PAGES_PROBE = """
import torch, torch_npu
MiB = 1 << 20
x = torch.ones(8 * MiB, dtype=torch.uint8, device="npu")
small = torch.ones(1000, dtype=torch.uint8, device="npu")
print(torch.npu.memory_reserved() // MiB, x.sum().item() == 8 * MiB, small.sum().item())
"""


def test_expandable_segments_map_large_pool_pages_of_torch_npu_sizes():
    # torch_npu's page of an expandable segment's large pool: large_segment_size_mb when set, else its deprecated
    # segment_size_mb; softnpu's default, the runtime's 2 MiB. The small pool maps 2 MiB pages.
    default, segment, both = run_many([
        (EXPANDABLE_PAGES_PROBE, {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}),
        (EXPANDABLE_PAGES_PROBE, {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True,segment_size_mb:128"}),
        (EXPANDABLE_PAGES_PROBE, {"PYTORCH_NPU_ALLOC_CONF":
                                  "expandable_segments:True,segment_size_mb:50,large_segment_size_mb:100"}),
    ])
    assert default.lines == ["12 True 1000"], default.describe()  # 8 MiB + pad in 2 MiB pages (10), 2 MiB small
    assert segment.lines == ["130 True 1000"], segment.describe()
    assert both.lines == ["102 True 1000"], both.describe()


FRAGMENTATION = """
import torch, torch_npu
MiB = 1 << 20
kept = [torch.full((16 * MiB,), i, dtype=torch.uint8, device="npu") for i in range(8)]
del kept[::2]
grown = [torch.full((32 * MiB,), 10 + i, dtype=torch.uint8, device="npu") for i in range(4)]
ok = all((t.cpu() == v).all().item() for t, v in zip(kept + grown, [1, 3, 5, 7, 10, 11, 12, 13]))
segments = torch.npu.memory._snapshot()["segments"]
print(ok, torch.npu.max_memory_reserved(), torch.npu.max_memory_allocated(), torch.npu.memory_reserved(),
      all(s["is_expandable"] for s in segments), sum(s["total_size"] for s in segments))
del kept, grown
torch.npu.empty_cache()
print(torch.npu.memory_reserved(), torch.npu.memory_stats()["segment.all.current"])
"""


def test_expandable_segments_do_not_fragment():
    plain, expandable = run_many([(FRAGMENTATION, {}),
                                  (FRAGMENTATION, {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})])
    granularity = 2 * MiB
    ok, peak_reserved, peak_allocated, reserved, all_expandable, in_segments = expandable.lines[0].split()
    assert ok == "True" and all_expandable == "True", expandable.describe()
    rounded_peak = -(-int(peak_allocated) // granularity) * granularity
    # Blocks are not whole pages (torch_npu's 32-byte pad): each of the 8 live blocks may keep one partly used page
    # beside a hole.
    assert int(peak_reserved) <= rounded_peak + 8 * granularity, expandable.describe()
    assert int(in_segments) == int(reserved)  # the snapshot's segments are the mapped memory
    assert expandable.lines[1] == "0 0"  # empty_cache unmapped everything and released the segment
    # Without expandable segments the freed 16 MiB segments cannot hold 32 MiB blocks: reserved grows past the peak.
    ok, peak_reserved, peak_allocated, *_ = plain.lines[0].split()
    assert ok == "True" and int(peak_reserved) >= int(peak_allocated) + 64 * MiB, plain.describe()


def test_expandable_segment_grows_in_place_and_shrinks_on_empty_cache():
    code = """
import torch, torch_npu
MiB = 1 << 20
a = torch.ones(4 * MiB, dtype=torch.uint8, device="npu")
b = torch.full((5 * MiB,), 2, dtype=torch.uint8, device="npu")
s1 = [(s["address"], s["total_size"]) for s in torch.npu.memory._snapshot()["segments"] if s["segment_type"] == "large"]
print(len(s1), b.data_ptr() == a.data_ptr() + 4 * MiB + 512, torch.npu.memory_reserved() // MiB)
del b
torch.npu.empty_cache()   # the free end is unmapped, a stays
print(torch.npu.memory_reserved() // MiB, a.sum().item() == 4 * MiB)
try:
    torch.empty(3000 * MiB, dtype=torch.uint8, device="npu")
except torch.OutOfMemoryError as e:
    print("OOM", a.sum().item() == 4 * MiB)
"""
    r = run_python(code, env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    # One large segment: b was mapped right after a's block (4 MiB + torch_npu's 32-byte pad, rounded to 512), in
    # whole 2 MiB pages; on empty_cache the pages b alone used go (a keeps the 3 its block touches).
    assert r.lines == ["1 True 10", "6 True", "OOM True"], r.describe()


def test_expandable_segments_under_a_random_workload_keep_data_and_statistics():
    code = """
import random, torch, torch_npu
MiB = 1 << 20
random.seed(0)
side = torch.npu.Stream()
live = []
for i in range(1500):
    if live and random.random() < 0.45:
        t = live.pop(random.randrange(len(live)))
        if random.random() < 0.1:
            t.record_stream(side)
        del t
    else:
        n = random.choice([100, 4000, 300_000, 1_500_000, 3 * MiB, 12 * MiB, 25 * MiB])
        with torch.npu.stream(side if random.random() < 0.2 else torch.npu.current_stream()):
            live.append(torch.full((n,), i % 250, dtype=torch.uint8, device="npu"))
    if i % 400 == 0:
        torch.npu.empty_cache()
torch.npu.synchronize()
print(all((t.cpu() == t[0].item()).all().item() for t in live))
segments = torch.npu.memory._snapshot()["segments"]
print(sum(s["total_size"] for s in segments) == torch.npu.memory_reserved(),
      sum(s["allocated_size"] for s in segments) == torch.npu.memory_allocated())
pool = torch.npu.MemPool()
with torch.npu.use_mem_pool(pool):
    inside = torch.full((5 * MiB,), 9, dtype=torch.uint8, device="npu")
print(all(s["is_expandable"] for s in pool.snapshot()), inside.sum().item() == 45 * MiB)
del live, inside, pool
torch.npu.synchronize()
torch.npu.empty_cache()
print({k: v for k, v in torch.npu.memory_stats().items() if k.endswith(".current") and v != 0},
      torch.npu.mem_get_info()[0] == torch.npu.mem_get_info()[1])
"""
    r = run_python(code, env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert r.lines == ["True", "True True", "True True", "{} True"], r.describe()


def _compile_pluggable(tmp_path) -> Path:
    import subprocess

    import softnpu

    libdir = Path(softnpu.__file__).parent / "lib"
    src = tmp_path / "alloc.c"
    src.write_text(PLUGGABLE_C)
    so = tmp_path / "liballoc.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src), f"-L{libdir}", "-lsoftnpu_runtime",
                    f"-Wl,-rpath,{libdir}"], check=True)
    return so


def test_mem_pool_with_a_pluggable_allocator(tmp_path):
    so = _compile_pluggable(tmp_path)
    code = f"""
import ctypes, torch, torch_npu
MiB = 1 << 20
alloc = torch.npu.NPUPluggableAllocator({str(so)!r}, "my_alloc", "my_free")
lib = ctypes.CDLL({str(so)!r})
pool = torch.npu.MemPool(allocator=alloc)
print(pool.allocator is alloc)
outside = torch.ones(MiB, device="npu")
print(lib.alloc_calls())
a = torch.randn(256, 256)
with torch.npu.use_mem_pool(pool):
    x = a.npu()
    y = x @ x
print(lib.alloc_calls(), torch.allclose(y.cpu(), a @ a, rtol=1e-4, atol=1e-4))
(seg,) = [s for s in pool.snapshot() if s["segment_pool_id"] == pool.id]
print(seg["address"] <= y.data_ptr() < seg["address"] + seg["total_size"])
del x, y
print(lib.free_calls())  # cached in the pool while it lives
del pool
print(lib.free_calls(), outside.sum().item() == MiB)
try:
    torch.npu.MemPool(allocator="malloc")
except TypeError as e:
    print("TypeError")
"""
    r = run_python(code)
    # One 2 MiB segment from the user's alloc holds both 256 KiB tensors; deleting the pool frees it through free.
    assert r.lines == ["True", "0", "1 True", "True", "0", "1 True", "TypeError"], r.describe()


PLUGGABLE_STATS_CPP = r"""
#include <c10/core/CachingDeviceAllocator.h>
static long resets;
extern "C" c10::CachingDeviceAllocator::DeviceStats my_stats(c10::DeviceIndex device) {
  c10::CachingDeviceAllocator::DeviceStats stats;
  stats.allocated_bytes[0].current = 4242 + device;
  stats.num_alloc_retries = 7;
  return stats;
}
extern "C" void my_reset_peak(c10::DeviceIndex device) { resets++; }
extern "C" long reset_calls(void) { return resets; }
"""


def test_pluggable_allocator_statistics_functions(tmp_path):
    """NPUPluggableAllocator.allocator()'s set_get_device_stats_fn / set_reset_peak_status_fn (torch_npu's): while the
    allocator is current, torch.npu's statistics are the user's function's and resetting the peaks calls theirs."""
    import subprocess

    import torch.utils.cpp_extension as ext

    so = _compile_pluggable(tmp_path)
    src = tmp_path / "stats.cpp"
    src.write_text(PLUGGABLE_STATS_CPP)
    stats_so = tmp_path / "libstats.so"
    subprocess.run(["c++", "-std=c++17", "-shared", "-fPIC", "-o", str(stats_so), str(src),
                    *(f"-I{d}" for d in ext.include_paths())], check=True)
    code = f"""
import ctypes, torch, torch_npu
alloc = torch.npu.NPUPluggableAllocator({str(so)!r}, "my_alloc", "my_free")
lib = ctypes.CDLL({str(stats_so)!r})
address = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
alloc.allocator().set_get_device_stats_fn(address("my_stats"))  # before it is current
torch.npu.memory.change_current_allocator(alloc)
x = torch.ones(1000, device="npu")
print(torch.npu.memory_allocated(), torch.npu.memory_stats()["num_alloc_retries"])
alloc.allocator().set_reset_peak_status_fn(address("my_reset_peak"))  # after
torch.npu.reset_peak_memory_stats()
print(lib.reset_calls(), x.sum().item())
"""
    r = run_python(code)
    assert r.lines == ["4242 7", "1 1000.0"], r.describe()
