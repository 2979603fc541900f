"""hccl's failures on demand (torch.npu._fault's hccl_timeout and dead_peer) and ProcessGroupHCCL's abort/shutdown
(issue 37), each on two spawned ranks.

On Ascend a rank that is stuck or dead makes its peers' collective fail when HCCL_EXEC_TIMEOUT runs out with
"EI0002: The wait execution of the Notify register times out" and error code 507048 (torch_npu's troubleshooting case
HCCL_timeout.md; its test_fault_mode.py looks for "EI0002"); HCCL's heartbeat adds "Heartbeat Lost Occurred ...
Process has exited" when the peer's process is gone.
"""
import ast
import os
import subprocess
import sys

import pytest
import torch
import torch_npu  # noqa: F401

EXEC_TIMEOUT = 3


@pytest.fixture(autouse=True)
def disarm():
    yield
    torch.npu._fault.clear()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "SOFTNPU_FAULT"}
    env.update({"HCCL_EXEC_TIMEOUT": str(EXEC_TIMEOUT), "SOFTNPU_DEVICE_COUNT": "2"}, **extra)
    return env


def _run_ranks(code, tmp_path, env_of_rank=lambda rank: {}, timeout=60):
    """Runs `code` as ranks 0 and 1 (argv: rank, a scratch directory); returns their (returncode, stdout, stderr)."""
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(RANK=str(r), **env_of_rank(r)))
             for r in (0, 1)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return results


def _report(line_prefix, out):
    """The fields of the line starting with `line_prefix`: elapsed seconds, exception type, message."""
    for line in out.splitlines():
        if line.startswith(line_prefix):
            _, elapsed, kind, message = line.split(" ", 3)
            return float(elapsed), kind, ast.literal_eval(message)
    raise AssertionError(f"no {line_prefix!r} line in {out!r}")


# Both ranks all_reduce once, then again; rank 1's second all_reduce is the faulty one (armed by SOFTNPU_FAULT or in
# the script). Each rank prints how long its second all_reduce took to raise, and what it raised.
TWO_ALL_REDUCES = r"""
import os, sys, time
import torch, torch_npu
import torch.distributed as dist
rank, tmp = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("hccl", init_method=f"file://{tmp}/store", rank=rank, world_size=2)
torch.npu.set_device(rank)
if os.environ.get("ARM_IN_SCRIPT"):
    torch.npu._fault.inject("hccl_timeout", at=2, rank=1)  # the 2nd collective of any op
x = torch.ones(1024, device=f"npu:{rank}")
dist.all_reduce(x)
assert x[0].item() == 2
start = time.monotonic()
try:
    dist.all_reduce(x)
    torch.npu.synchronize()
    print("completed", flush=True)
except Exception as e:
    print(f"raised {time.monotonic() - start:.2f} {type(e).__name__} {str(e)!r}", flush=True)
os._exit(0)
"""


def test_an_hccl_timeout_fails_every_rank_at_hccl_exec_timeout_with_ei0002(tmp_path):
    results = _run_ranks(TWO_ALL_REDUCES, tmp_path, lambda rank: {"ARM_IN_SCRIPT": "1"})
    for rank, (code, out, err) in enumerate(results):
        elapsed, kind, message = _report("raised", out)
        # Not before the timeout (the peer waited for the stuck rank), and within it (plus a noisy host's margin).
        assert EXEC_TIMEOUT - 0.5 < elapsed < EXEC_TIMEOUT + 4, (rank, out, err[-2000:])
        assert kind == "RuntimeError"
        assert f"[Rank {rank}] hccl:all_reduce failed, error code is 507048" in message
        assert "EI0002: The wait execution of the Notify register times out" in message
        assert f"timeout[{EXEC_TIMEOUT} s]" in message
        assert "ERR02200 DIST call hccl api failed" in message  # torch_npu's DIST_ERROR(ErrCode::HCCL)
        assert "Heartbeat Lost" not in message  # the peer is alive, only stuck
    assert "injected hccl_timeout" in _report("raised", results[1][1])[2]


def test_a_dead_peer_dies_in_its_collective_and_the_survivor_raises_at_once(tmp_path):
    # Armed from the environment, by op name, on rank 1 only: its 2nd all_reduce.
    results = _run_ranks(TWO_ALL_REDUCES, tmp_path,
                         lambda rank: {"SOFTNPU_FAULT": "dead_peer,op=all_reduce,at=2,rank=1"})
    code, out, err = results[1]
    assert code == -9, (code, out, err[-2000:])  # SIGKILLed, as a rank the OOM killer or a crash takes down
    assert "softnpu: rank 1 dies in hccl:all_reduce (an injected dead_peer fault)" in err
    assert "completed" not in out and "raised" not in out
    elapsed, kind, message = _report("raised", results[0][1])
    assert elapsed < 2, results[0]  # the closed connection tells at once: no wait for HCCL_EXEC_TIMEOUT
    assert kind == "RuntimeError"
    assert "[Rank 0] hccl:all_reduce failed, error code is 507048" in message and "EI0002" in message
    assert "Cluster Exception Location[rank]:[1]" in message
    assert "ExceptionType:[Heartbeat Lost Occurred], Possible Reason:1. Process has exited" in message


# Three groups in one process, each on a store of its own:
#  1. shutdown (destroy_process_group) flushes: a pending all_reduce completes first;
#  2. _abort_process_group: rank 1's all_reduce never starts (hccl_timeout), so both ranks' are pending; the abort
#     fails them at once, far from the 30 s timeout;
#  3. a new group works; torch_npu's abort_hccl_comm(reason) closes it: the next collective names the reason.
ABORT = r"""
import datetime, os, sys, time
import torch, torch_npu
import torch.distributed as dist
rank, tmp = int(sys.argv[1]), sys.argv[2]
torch.npu.set_device(rank)
timeout = datetime.timedelta(seconds=30)

def group(n):
    dist.init_process_group("hccl", init_method=f"file://{tmp}/store{n}", rank=rank, world_size=2, timeout=timeout)
    return torch.ones(256, device=f"npu:{rank}")

x = group(1)
work = dist.all_reduce(x, async_op=True)
dist.destroy_process_group()
work.wait()
print(f"shutdown flushed {x[0].item()}", flush=True)

x = group(2)
torch.npu._fault.inject("hccl_timeout", op="all_reduce", rank=1)
work = dist.all_reduce(x, async_op=True)
start = time.monotonic()
dist.distributed_c10d._abort_process_group()
try:
    work.wait()
    print("abort: completed", flush=True)
except RuntimeError as e:
    print(f"aborted {time.monotonic() - start:.2f} {type(e).__name__} {str(e)!r}", flush=True)

x = group(3)
dist.all_reduce(x)
print(f"new group {x[0].item()}", flush=True)
dist.group.WORLD._get_backend(torch.device("npu")).abort_hccl_comm("reinit")
try:
    dist.all_reduce(x)
except RuntimeError as e:
    print(f"closed 0 {type(e).__name__} {str(e)!r}", flush=True)
dist.destroy_process_group()
os._exit(0)
"""


def test_abort_fails_pending_collectives_at_once_and_a_new_group_works(tmp_path):
    for rank, (code, out, err) in enumerate(_run_ranks(ABORT, tmp_path)):
        assert code == 0, (rank, out, err[-3000:])
        assert "shutdown flushed 2.0" in out, (rank, out)
        elapsed, kind, message = _report("aborted", out)
        assert elapsed < 2 and kind == "RuntimeError", (rank, out)
        assert f"[Rank {rank}] the ProcessGroupHCCL was aborted, so its pending collective failed" in message
        assert "new group 2.0" in out, (rank, out)
        _, kind, message = _report("closed", out)
        assert kind == "RuntimeError"
        assert "the ProcessGroupHCCL was aborted: reinit; destroy it and create a new group" in message


def test_hccl_faults_are_checked_and_disarmed():
    with pytest.raises(ValueError, match="unknown hccl op 'allreduce'; expected one of all_reduce, "):
        torch.npu._fault.inject("hccl_timeout", op="allreduce")
    with pytest.raises(ValueError, match="op= applies to the hccl kinds"):
        torch.npu._fault.inject("oom", op="all_reduce")
    torch.npu._fault.inject("dead_peer", op="broadcast", at=3, rank=7)  # another rank's: not armed here
    torch.npu._fault.inject("dead_peer", op="broadcast", at=3)  # disarmed by the fixture, whatever happens


def test_softnpu_fault_names_a_bad_hccl_op(tmp_path):
    code = "import torch, torch_npu; torch.ones(1, device='npu')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=_env(SOFTNPU_FAULT="dead_peer,op=all-reduce"))
    assert "SOFTNPU_FAULT='dead_peer,op=all-reduce' is not valid: unknown hccl op 'all-reduce'" in out.stderr, \
        out.stderr[-2000:]
