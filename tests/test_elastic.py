"""torchrun's elastic restart after a rank dies mid-all_reduce (issue 37), with examples/faults/elastic_train.py:
rank 1 dies in step 3's all_reduce (an injected dead_peer), rank 0 raises within HCCL_EXEC_TIMEOUT, the agent
restarts both (--max-restarts 1), they resume from the last checkpoint, and the final loss is an undisturbed run's.

The restart used to fail one run in three: torchrun's agent keeps one TCPStore for every attempt of its workers, so
a restarted rank could read the dead worker's address and fail to connect to it (softnpu.distributed._attempt_store).
"""
import os
import pathlib
import re
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "faults" / "elastic_train.py"
EXEC_TIMEOUT = 5


def _torchrun(ckpt, kill, restarts):
    """Starts torchrun on the example; the result is awaited by _log."""
    env = {k: v for k, v in os.environ.items() if k != "SOFTNPU_FAULT"}
    env.update(HCCL_EXEC_TIMEOUT=str(EXEC_TIMEOUT), SOFTNPU_DEVICE_COUNT="2")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", str(restarts), str(EXAMPLE), str(ckpt), "1" if kill else "0"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _log(run):
    try:
        log, _ = run.communicate(timeout=120)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 0, log[-4000:]
    return log


def _final(log):
    finals = re.findall(r"^final (\S+)$", log, re.M)
    assert len(finals) == 1, log[-4000:]
    return finals[0]


def test_a_rank_killed_mid_all_reduce_is_restarted_by_torchrun_and_resumes_to_the_same_loss(tmp_path):
    # The undisturbed run alongside (each torchrun on a free port of its own): the two take the time of one.
    runs = [_torchrun(tmp_path / "killed.pt", kill=True, restarts=1), _torchrun(tmp_path / "clean.pt", kill=False,
                                                                                 restarts=0)]
    killed, clean = [_log(run) for run in runs]
    assert "softnpu: rank 1 dies in hccl:all_reduce (an injected dead_peer fault)" in killed
    raised = re.search(r"^rank 0 step 3 raised after (\S+) s: RuntimeError: \[Rank 0\] hccl:all_reduce failed, "
                       r"error code is 507048$", killed, re.M)
    assert raised, killed[-4000:]
    assert float(raised.group(1)) < EXEC_TIMEOUT
    assert "Heartbeat Lost Occurred" in killed
    for rank in (0, 1):  # both restarted, from the checkpoint of the last step completed
        assert f"rank {rank} attempt 1 resumes at step 3" in killed, killed[-4000:]
    assert "resumes" not in clean and "raised" not in clean
    assert _final(killed) == _final(clean)
