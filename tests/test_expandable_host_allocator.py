# PYTORCH_NPU_ALLOC_CONF=pin_memory_expandable_segments:True: torch_npu's expandable pinned host allocator (one
# reserved range, 20 MiB granules mapped as blocks cover them). The mode is fixed for a process, so each check runs in
# a child with the variable set.
from conftest import run_many

EXPANDABLE = {"PYTORCH_NPU_ALLOC_CONF": "pin_memory_expandable_segments:True"}

STATS = """
import torch, torch_npu
MiB = 1 << 20
def stats():
    s = torch.npu.host_memory_stats()
    return s["active_bytes.current"], s["allocated_bytes.current"]

a = torch.empty(64 * MiB, dtype=torch.uint8).pin_memory()
assert stats() == (64 * MiB + 512, 80 * MiB), stats()  # request + 32 rounded to 512; 4 granules mapped
del a
assert stats() == (0, 80 * MiB), stats()  # freeing keeps the granules
small = [torch.empty(n * MiB, dtype=torch.uint8).pin_memory() for n in (4, 8, 16)]
assert stats() == (28 * MiB + 3 * 512, 80 * MiB), stats()  # cut from the mapped range
del small
torch.npu.host_empty_cache()
assert stats() == (0, 0), stats()

b1 = torch.empty(40 * MiB, dtype=torch.uint8).pin_memory()
b2 = torch.empty(40 * MiB, dtype=torch.uint8).pin_memory()
assert stats()[1] == 100 * MiB, stats()  # the second block starts inside the first's last granule
del b1, b2
c = torch.empty(64 * MiB, dtype=torch.uint8).pin_memory()  # the two freed blocks merged
assert stats() == (64 * MiB + 512, 100 * MiB), stats()
torch.npu.host_empty_cache()
assert stats() == (64 * MiB + 512, 80 * MiB), stats()  # only the granule no block uses is unmapped
del c
torch.npu.host_empty_cache()
assert stats() == (0, 0), stats()
s = torch.npu.host_memory_stats()
assert s["active_bytes.peak"] == 80 * MiB + 2 * 512 and s["allocated_bytes.peak"] == 100 * MiB, s
assert s["num_host_alloc"] == 4 + 5 and s["num_host_free"] == 4 + 1 + 4, s  # granules mapped, unmapped
print("ok")
"""

DATA = """
import torch, torch_npu
MiB = 1 << 20
torch.manual_seed(0)
# Blocks spanning granule boundaries, asynchronous copies both ways through them.
srcs = [torch.randn(n * MiB // 4) for n in (3, 30, 45)]
pinned = [s.pin_memory() for s in srcs]
assert all(p.is_pinned() for p in pinned)
dev = [p.to("npu", non_blocking=True) for p in pinned]
back = [torch.empty_like(s).pin_memory() for s in srcs]
for b, d in zip(back, dev):
    b.copy_(d * 2, non_blocking=True)
torch.npu.synchronize()
for s, b in zip(srcs, back):
    assert torch.equal(b, s * 2)

# A block freed while a non_blocking copy into it is queued stays active, and is not handed out, until the copy ran.
big = torch.randn(16 * MiB // 4, device="npu")
torch.npu._sleep(300_000_000)  # 0.3 s: the copy below is still queued while this process checks
dst = torch.empty(16 * MiB // 4).pin_memory()
dst.copy_(big, non_blocking=True)
ptr = dst.data_ptr()
active = torch.npu.host_memory_stats()["active_bytes.current"]
del dst
torch.npu.host_empty_cache()
other = torch.empty(16 * MiB // 4).pin_memory()
assert other.data_ptr() != ptr
assert torch.npu.host_memory_stats()["active_bytes.current"] == active + 16 * MiB + 512
torch.npu.synchronize()
assert torch.equal(other.zero_().add_(1), torch.ones(16 * MiB // 4))
del other
torch.npu.synchronize()
torch.npu.host_empty_cache()
again = torch.empty(16 * MiB // 4).pin_memory()
assert again.data_ptr() == ptr  # returned to the pool once the copy completed
print("ok")
"""

WARN = """
import torch
torch.empty(1024, dtype=torch.uint8).pin_memory()
print("ok")
"""


def test_expandable_host_allocator():
    results = run_many([
        (STATS, EXPANDABLE),
        (DATA, EXPANDABLE),
        (WARN, {"PYTORCH_NPU_ALLOC_CONF": "pin_memory_expandable_segments:True,pinned_max_cached_size_mb:32"}),
        (WARN, EXPANDABLE),
    ])
    assert [r.lines[-1] for r in results] == ["ok"] * 4
    # torch_npu's one-time warning: the pinned_max_* keys have no effect on the expandable allocator.
    assert results[2].stderr.count("do not take effect when `pin_memory_expandable_segments` is enabled") == 1
    assert "pinned_max" not in results[3].stderr
