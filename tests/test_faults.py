"""Faults on demand (torch.npu._fault) and torch_npu's recovery hooks against them (issue 37).

Each fault fails as on torch_npu: a kernel error is a RuntimeError with Ascend's code and "EZ9999: Inner Error!"
(torch_npu's NPUException after a failed aclrtSynchronizeStream), a UCE "UCE ERROR" (ACL_ERROR_RT_DEVICE_MEM_ERROR,
507053; torch_npu's handleDeviceMemError), a stopped device "FORCE STOP" (ACL_ERROR_RT_DEVICE_TASK_ABORT, 107022;
handleDeviceTaskAbort), an OOM torch.OutOfMemoryError; check_uce_in_memory answers 0-3 as torch_npu documents it."""
import gc
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch_npu  # noqa: F401
from softnpu import _C as softnpu_C


@pytest.fixture(autouse=True)
def clean_device():
    # An injected OOM fails the device's allocations, as a full device does: a block the caching allocator kept from
    # earlier work would serve the request without one, so each test starts from an empty cache.
    gc.collect()
    torch.npu.synchronize()
    torch.npu.empty_cache()
    yield
    torch.npu._fault.clear()
    for d in range(torch.npu.device_count()):
        torch.npu.restart_device(d)
    torch.npu.synchronize()


def test_a_kernel_error_fires_at_the_chosen_op_with_ascends_code_and_the_stream_goes_on():
    x = torch.randn(64, 64, device="npu")
    torch.npu.synchronize()
    torch.npu._fault.inject("kernel_error", at=2)
    a = x + 1
    b = x * 2  # the second kernel: fails
    with pytest.raises(RuntimeError) as info:
        torch.npu.synchronize()
    text = str(info.value)
    assert "EZ9999: Inner Error!" in text and "error code:507015" in text and "aten::mul" in text, text
    torch.testing.assert_close(a.cpu(), x.cpu() + 1)  # the first ran; later work runs as usual
    torch.testing.assert_close((x @ x).cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)
    del b


def test_a_kernel_error_on_one_stream_leaves_the_others():
    x = torch.ones(8, device="npu")
    s = torch.npu.Stream()
    torch.npu.synchronize()
    torch.npu._fault.inject("kernel_error", stream=s, code=507035, message="vector core exception")
    y = x + 1  # the default stream: untouched
    torch.npu.current_stream().synchronize()
    with torch.npu.stream(s):
        x.add(1)
    with pytest.raises(RuntimeError, match="vector core exception"):
        s.synchronize()
    assert y.sum().item() == 16


@pytest.mark.parametrize("device", [0, 1])
def test_a_stream_fault_names_the_stream_torch_gave_whatever_streams_came_before(device):
    """torch's stream ids and the runtime's differ once other streams exist (streams of other devices, of earlier
    work): the fault must fire on the stream the user named, not on the runtime stream that has its torch id."""
    if device >= torch.npu.device_count():
        pytest.skip("one device")
    others = [torch.npu.Stream(device=d) for d in range(torch.npu.device_count()) for _ in range(3)]
    s = torch.npu.Stream(device=device)
    with torch.npu.device(device):
        x = torch.ones(8, device="npu")
        torch.npu.synchronize()
        torch.npu._fault.inject("kernel_error", stream=s, message="on the named stream")
        for o in others:
            if o.device_index == device:
                with torch.npu.stream(o):
                    x.add(1)
                o.synchronize()  # the other streams of the device run untouched
        with torch.npu.stream(s):
            x.add(1)
        with pytest.raises(RuntimeError, match="on the named stream"):
            s.synchronize()


def test_an_injected_oom_raises_torchs_out_of_memory_and_the_process_goes_on():
    keep = torch.arange(1000.0, device="npu")
    torch.npu._fault.inject("oom", size=8 << 20)
    with pytest.raises(torch.OutOfMemoryError, match=r"NPU out of memory. Tried to allocate .*16.00 MiB"):
        torch.empty(4 << 20, device="npu")
    small = torch.ones(1000, device="npu")  # smaller: goes through, and the device is no longer full
    assert small.sum().item() == 1000
    assert keep.sum().item() == sum(range(1000))


def test_an_oom_at_step_n_is_handled_by_halving_the_batch():
    """The demonstration: step 3 brings a batch four times the usual, its activations need new device memory, and
    the device is out of it (the injected OOM: 16 MiB and more); the script halves that batch until it fits."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1)).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(1024, 64), torch.randn(1024, 1)
    sizes = [256, 256, 256, 1024, 256, 256]  # the batch each step asks for
    losses, tried = [], []
    for step, batch in enumerate(sizes):
        if step == 3:
            torch.npu._fault.inject("oom", size=16 << 20)
        while True:
            tried.append((step, batch))
            try:
                x, y = data[:batch].npu(), target[:batch].npu()
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                break
            except torch.OutOfMemoryError:
                batch //= 2
        losses.append(loss.item())
    halved = [b for s, b in tried if s == 3]
    assert halved[0] == 1024 and halved[-1] < 1024 and len(halved) >= 2, tried
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))


def test_a_uce_fails_reads_of_its_range_is_reported_and_restored_from_a_replica():
    w = torch.randn(1000, device="npu")
    other = torch.randn(1000, device="npu")
    replica = w.cpu()
    torch.npu.synchronize()
    assert torch.npu.check_uce_in_memory(0) == 0
    torch.npu._fault.inject("uce", tensor=w, at=10**9)
    assert torch.npu.check_uce_in_memory(0) == 3  # memory of a live tensor
    assert torch.npu._fault.tensors_hit([other, w]) == [1]
    with pytest.raises(RuntimeError, match="UCE ERROR"):
        w.cpu()
    torch.testing.assert_close(other.cpu(), other.cpu())  # the rest of memory reads fine
    # MindSpeed-LLM's flow: stop, check, restart, rebuild what was hit.
    assert torch.npu.stop_device(0) == 0
    torch.npu._recovery.mark_all_npu_tensor_unsafe(0)
    assert not torch.npu._recovery.check_npu_tensor_is_safe(w)
    torch.npu.restart_device(0)
    assert torch.npu.check_uce_in_memory(0) == 0
    w.copy_(replica)
    torch.npu._recovery.update_npu_tensor_to_safe(w)
    assert torch.npu._recovery.check_npu_tensor_is_safe(w)
    torch.testing.assert_close(w.cpu(), replica)


def test_a_uce_in_cached_free_memory_is_temporary():
    t = torch.empty(1 << 18, device="npu")
    torch.npu._fault.inject("uce", tensor=t, at=10**9)
    del t  # its block stays cached by the allocator, unallocated
    assert torch.npu.check_uce_in_memory(0) == 2


def test_a_uce_fails_the_kernel_that_reads_it():
    x = torch.randn(16, device="npu")
    torch.npu.synchronize()
    torch.npu._fault.inject("uce", tensor=x, at=1)
    y = x * 2
    with pytest.raises(RuntimeError, match="UCE ERROR"):
        torch.npu.synchronize()
    del y


def test_a_hung_device_blocks_until_stop_device_which_raises_force_stop_then_restart_recovers():
    x = torch.ones(4, device="npu")
    torch.npu.synchronize()
    torch.npu._fault.inject("hang")
    y = x * 3
    time.sleep(0.3)
    assert not torch.npu.current_stream().query()  # nothing completes
    timer = threading.Timer(0.3, torch.npu.stop_device, args=(0,))
    timer.start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="FORCE STOP"):
        torch.npu.synchronize()
    assert time.monotonic() - start < 5
    timer.join()
    torch.npu.restart_device(0)
    assert (x * 3).sum().item() == 12
    del y


def test_a_slow_device_delays_its_kernels():
    x = torch.ones(4, device="npu")
    torch.npu.synchronize()
    torch.npu._fault.inject("slow", delay=0.05)
    start = time.monotonic()
    for _ in range(4):
        x = x + 1
    torch.npu.synchronize()
    assert time.monotonic() - start >= 0.2
    torch.npu._fault.clear()
    assert x.sum().item() == 20


def test_bad_injections_are_refused():
    with pytest.raises(ValueError, match="unknown kind 'meteor'"):
        torch.npu._fault.inject("meteor")
    with pytest.raises(ValueError, match="a uce needs"):
        torch.npu._fault.inject("uce")
    with pytest.raises(ValueError, match="at counts from 1"):
        torch.npu._fault.inject("kernel_error", at=0)


def _run(code, env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_softnpu_fault_injects_at_initialization_and_names_bad_values():
    code = ("import torch, torch_npu\nx = torch.ones(3, device='npu')\ny = x + 1\n"
            "try:\n    torch.npu.synchronize()\nexcept RuntimeError as e:\n    print('raised', 'EZ9999' in str(e))\n")
    out = _run(code, {"SOFTNPU_FAULT": "kernel_error,at=2"})
    assert "raised True" in out.stdout, out.stderr[-2000:]
    out = _run(code, {"SOFTNPU_FAULT": "kernel_error,at=2,rank=1", "RANK": "0"})  # another rank's
    assert "raised" not in out.stdout and out.returncode == 0, out.stderr[-2000:]
    out = _run(code, {"SOFTNPU_FAULT": "kernel_error,when=2"})
    assert "SOFTNPU_FAULT='kernel_error,when=2' is not valid" in out.stderr, out.stderr[-2000:]


# Two ranks of an hccl group with HCCL_EXEC_TIMEOUT=3: rank 1 dies (SIGKILL) or stops answering (sleeps) instead of
# joining an all_reduce; rank 0 prints how long its all_reduce took to raise and what it raised.
PEER_CHILD = r"""
import os, signal, sys, time
import torch, torch_npu
import torch.distributed as dist
rank, mode, store = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("hccl", init_method=f"file://{store}", rank=rank, world_size=2)
torch.npu.set_device(rank)
x = torch.ones(1024, device=f"npu:{rank}")
dist.all_reduce(x)
assert x[0].item() == 2
if rank == 1:
    if mode == "dead":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(20)
    os._exit(0)
start = time.monotonic()
try:
    dist.all_reduce(x)
    torch.npu.synchronize()
    print("completed")
except Exception as e:
    print(f"raised {time.monotonic() - start:.2f} {type(e).__name__}: {str(e)[:200]!r}", flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("mode", ["dead", "silent"])
def test_a_rank_whose_peer_died_or_went_silent_raises_within_hccl_exec_timeout(mode, tmp_path):
    env = {**os.environ, "HCCL_EXEC_TIMEOUT": "3", "SOFTNPU_DEVICE_COUNT": "2"}
    procs = [subprocess.Popen([sys.executable, "-c", PEER_CHILD, str(r), mode, str(tmp_path / "store")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for r in (0, 1)]
    try:
        out, err = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert out.startswith("raised"), out + err[-2000:]
    elapsed = float(out.split()[1])
    assert elapsed < 3 + 4, out  # within the timeout (plus a noisy host's margin); never the group's 30 minutes


def test_hccl_timeouts_are_parsed_with_clear_errors(monkeypatch):
    from softnpu.distributed import _hccl_timeout

    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "7")
    assert _hccl_timeout("HCCL_EXEC_TIMEOUT", 1836).total_seconds() == 7
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="HCCL_EXEC_TIMEOUT='soon' is not valid"):
        _hccl_timeout("HCCL_EXEC_TIMEOUT", 1836)
    monkeypatch.delenv("HCCL_EXEC_TIMEOUT")
    assert _hccl_timeout("HCCL_EXEC_TIMEOUT", 1836).total_seconds() == 1836


# The demonstration: two DDP ranks train; after step 2 rank 1's first weight takes a UCE (reads of it fail). Before
# each step the ranks compare check_uce_in_memory; a rank with a UCE in live memory stops and restarts its device
# (MindSpeed-LLM's flow), and the weights hit (tensors_hit) are restored from the healthy rank's replica (broadcast).
# Prints the final loss and whether both ranks' parameters agree.
DDP_UCE_CHILD = r"""
import sys
import torch, torch_npu
import torch.distributed as dist
rank, store, inject = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
dist.init_process_group("hccl", init_method=f"file://{store}", rank=rank, world_size=2)
torch.npu.set_device(rank)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).npu()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
data = [(torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)) for _ in range(6)]
params = list(model.parameters())
for step, (x, y) in enumerate(data):
    code = torch.tensor([torch.npu.check_uce_in_memory(rank)], device="npu")
    codes = [torch.zeros_like(code) for _ in range(2)]
    dist.all_gather(codes, code)
    if any(c.item() == 3 for c in codes):  # a UCE in live memory somewhere: recover before going on
        hit = torch.npu._fault.tensors_hit(params) if code.item() == 3 else []
        if hit:
            try:
                params[hit[0]].cpu()
                print("read the hit weight")
            except RuntimeError as e:
                print("reading it raised", "UCE ERROR" in str(e), flush=True)
            torch.npu.stop_device(rank)
            torch.npu.restart_device(rank)
        healthy = next(r for r, c in enumerate(codes) if c.item() == 0)
        hits = [torch.zeros(len(params), device="npu") for _ in range(2)]
        mine = torch.zeros(len(params), device="npu")
        mine[hit] = 1
        dist.all_gather(hits, mine)
        for i, p in enumerate(params):
            if any(h[i].item() for h in hits):
                dist.broadcast(p.data, src=healthy)  # from the replica
        print(f"rank {rank} recovered at step {step}: restored {hit}", flush=True)
    loss = torch.nn.functional.mse_loss(ddp(x.npu()), y.npu())
    opt.zero_grad()
    loss.backward()
    opt.step()
    if inject and step == 2 and rank == 1:
        torch.npu.synchronize()
        torch.npu._fault.inject("uce", tensor=params[0], at=10**9)
total = loss.detach().clone()
dist.all_reduce(total)
flat = torch.cat([p.detach().flatten() for p in params])
other = flat.clone()
dist.broadcast(other, src=0)
print(f"final {total.item() / 2:.6f} agree {torch.equal(flat, other)}", flush=True)
dist.destroy_process_group()
"""


def _ddp_run(tmp_path, inject):
    store = tmp_path / f"store{inject}"
    procs = [subprocess.Popen([sys.executable, "-c", DDP_UCE_CHILD, str(r), str(store), str(int(inject))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "SOFTNPU_DEVICE_COUNT": "2"}) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err[-3000:]
    return [out for out, _ in outs]


def test_ddp_survives_a_uce_by_restoring_the_weights_from_the_replica(tmp_path):
    faulty = _ddp_run(tmp_path, True)
    clean = _ddp_run(tmp_path, False)
    assert "reading it raised True" in faulty[1] and "rank 1 recovered at step 3: restored [0]" in faulty[1], faulty
    final = [line for line in faulty[0].splitlines() if line.startswith("final")][0]
    assert final.endswith("agree True"), faulty
    # The same training as an undisturbed run: the weights restored are those the UCE hit.
    assert final == [line for line in clean[0].splitlines() if line.startswith("final")][0], (faulty, clean)



@pytest.fixture
def unsafe_check_off_after():
    yield
    torch.npu._recovery.set_npu_tensor_unsafe_check_flag(False)
    for segment in torch.npu.memory_snapshot():  # the marks left on other tests' live tensors
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                softnpu_C._update_npu_data_ptr(block["address"])


def test_after_a_rebuilding_restart_ops_refuse_unsafe_inputs_until_a_copy_restores_them(unsafe_check_off_after):
    """torch_npu's NPURecovery: restart_device(rebuild_all_resources=True) marks every live tensor of the device
    unsafe and turns the check on; an op reading one raises, a copy into it (or a freed and reallocated block) is safe."""
    a = torch.randn(2, 255, 255, device="npu")
    b = torch.randn(2, 255, 255, device="npu")
    replica = a.cpu()
    torch.npu.synchronize()
    torch.npu.restart_device(0, rebuild_all_resources=True)
    assert torch.npu._recovery.get_npu_tensor_unsafe_check_flag()
    assert not torch.npu._recovery.check_npu_tensor_is_safe(a)
    for read in (lambda: a + b, lambda: a.add_(1), lambda: a[0].sum(), lambda: torch.mm(a[0], b[0]),
                 lambda: torch.add(b, 1, out=a)):  # the last reads b
        with pytest.raises(RuntimeError, match="There is unsafe data in the input tensor"):
            read()
    with pytest.raises(RuntimeError, match="There is unsafe data in the input tensor"):
        a.cpu()
    fresh = torch.ones(3, device="npu")  # new memory is safe
    assert (fresh * 2).sum().item() == 6
    a.copy_(replica)  # rebuilt from the replica
    assert torch.npu._recovery.check_npu_tensor_is_safe(a)
    torch.testing.assert_close(a.cpu(), replica)
    del b
    b = torch.randn(2, 255, 255, device="npu")  # the freed block again, with new data
    assert torch.npu._recovery.check_npu_tensor_is_safe(b)
    torch.testing.assert_close((a + b).cpu(), replica + b.cpu())


def test_the_unsafe_check_can_be_disabled_and_a_plain_restart_marks_nothing(unsafe_check_off_after):
    t = torch.randn(2, 3, device="npu")
    torch.npu.restart_device(0)
    assert torch.npu._recovery.check_npu_tensor_is_safe(t) and not torch.npu._recovery.get_npu_tensor_unsafe_check_flag()
    torch.npu.restart_device(0, rebuild_all_resources=True, disable_tensor_unsafe_check=True)
    assert torch.npu._recovery.check_npu_tensor_is_safe(t) and not torch.npu._recovery.get_npu_tensor_unsafe_check_flag()
    torch.npu._recovery.mark_all_npu_tensor_unsafe(0)
    assert not torch.npu._recovery.check_npu_tensor_is_safe(t)
    torch.testing.assert_close((t * 2).cpu(), t.cpu() * 2)  # marked, but the check is off: ops run
    torch.npu._recovery.set_npu_tensor_unsafe_check_flag(True)
    with pytest.raises(RuntimeError, match="There is unsafe data in the input tensor"):
        t * 2
    torch.npu._recovery.update_npu_tensor_to_safe(t)
    torch.testing.assert_close((t * 2).cpu(), t.cpu() * 2)
    with pytest.raises(RuntimeError, match="param type should be Tensor"):
        torch.npu._recovery.check_npu_tensor_is_safe("invalid_tensor")
