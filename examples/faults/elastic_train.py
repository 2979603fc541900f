"""A rank killed mid-all_reduce under torchrun's elastic agent: the survivor raises within HCCL_EXEC_TIMEOUT, the agent
restarts the group (--max-restarts), and training resumes from the last checkpoint to the final loss of an undisturbed
run (issue 37). Run from the repository:

    HCCL_EXEC_TIMEOUT=5 python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 1 \
        examples/faults/elastic_train.py /tmp/ckpt_killed.pt 1      # rank 1 dies in step 3's all_reduce
    HCCL_EXEC_TIMEOUT=5 python -m torch.distributed.run --standalone --nproc-per-node 2 \
        examples/faults/elastic_train.py /tmp/ckpt_clean.pt 0       # undisturbed

Both print the same "final" line. Arguments: the checkpoint path, whether rank 1 dies. It dies by an injected
dead_peer fault (torch.npu._fault) in its 4th all_reduce, DDP's gradient all_reduce of step 3 (one bucket a step), on
the first attempt only: the process is SIGKILLed inside the collective, as a crashed rank is.
"""
import os
import sys
import time

import torch
import torch_npu  # noqa: F401
import torch.distributed as dist

STEPS = 6
ckpt, kill = sys.argv[1], sys.argv[2] == "1"
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("hccl")
if kill and attempt == 0:
    torch.npu._fault.inject("dead_peer", op="all_reduce", at=4, rank=1)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).npu()
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt, map_location="npu")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
    print(f"rank {rank} attempt {attempt} resumes at step {start}", flush=True)
for step in range(start, STEPS):
    g = torch.Generator().manual_seed(step * 2 + rank)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
    t = time.monotonic()
    try:
        loss = torch.nn.functional.mse_loss(ddp(x.npu()), y.npu())
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.npu.synchronize()
    except Exception as e:
        first = str(e).splitlines()[0]
        print(f"rank {rank} step {step} raised after {time.monotonic() - t:.2f} s: {type(e).__name__}: {first}",
              flush=True)
        raise
    if rank == 0:
        torch.save({"step": step + 1, "model": model.state_dict(), "opt": opt.state_dict()}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()
total = loss.detach().clone()
dist.all_reduce(total)
if rank == 0:
    print(f"final {total.item() / 2:.6f}", flush=True)
dist.destroy_process_group()
