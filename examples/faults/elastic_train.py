"""A rank killed mid-training under torchrun's elastic agent: the survivor raises within HCCL_EXEC_TIMEOUT, the agent
restarts the group (--max-restarts), and training resumes from the last checkpoint to the final loss of an undisturbed
run (issue 37). Run from the repository:

    HCCL_EXEC_TIMEOUT=5 python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 1 \
        examples/faults/elastic_train.py /tmp/ckpt_killed.pt 1      # rank 1 is SIGKILLed at step 3
    HCCL_EXEC_TIMEOUT=5 python -m torch.distributed.run --standalone --nproc-per-node 2 \
        examples/faults/elastic_train.py /tmp/ckpt_clean.pt 0       # undisturbed

Both print the same "final" line. Arguments: the checkpoint path, whether to kill rank 1.
"""
import os, signal, sys, time
import torch, torch_npu
import torch.distributed as dist
ckpt, kill = sys.argv[1], sys.argv[2] == "1"
rank = int(os.environ["RANK"]); restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("hccl")
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).npu()
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt, map_location="npu")
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
    print(f"rank {rank} attempt {restart} resumes at step {start}", flush=True)
for step in range(start, 6):
    g = torch.Generator().manual_seed(step * 2 + rank)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
    if kill and restart == 0 and step == 3 and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # dies before the step's all_reduce
    t = time.monotonic()
    try:
        loss = torch.nn.functional.mse_loss(ddp(x.npu()), y.npu())
        opt.zero_grad(); loss.backward(); opt.step()
        torch.npu.synchronize()
    except Exception as e:
        print(f"rank {rank} step {step} raised after {time.monotonic() - t:.2f} s: {type(e).__name__}", flush=True)
        raise
    if rank == 0:
        torch.save({"step": step + 1, "model": model.state_dict(), "opt": opt.state_dict()}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()
total = loss.detach().clone(); dist.all_reduce(total)
if rank == 0:
    print(f"final {total.item() / 2:.6f}", flush=True)
dist.destroy_process_group()
