"""DeepSpeed's ZeRO training steps on npu (DS_ACCELERATOR=npu, the hccl backend) against the same training on the
CPU with torch.optim.Adam. Started once per rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set
(tests/test_deepspeed_npu.py, run.py); rank 0 prints one JSON line per case:
{"case", "steps", "npu_losses", "cpu_losses", "loss_diff", "param_diff"}.

    zero_train.py CASE [CASE ...]    cases: zero1, zero2, zero3, zero2_offload (CPU Adam), fused_adam (ZeRO-2)
"""
import json
import os
import sys

import torch
import torch_npu  # noqa: F401  (DeepSpeed's npu accelerator imports it too)
import deepspeed
from deepspeed.accelerator import get_accelerator

STEPS = 4
MICRO_BATCH = 8
LR = 1e-2


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batches(world_size):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(MICRO_BATCH * world_size, 16, generator=g), torch.randn(MICRO_BATCH * world_size, 4,
                                                                                  generator=g))
            for _ in range(STEPS)]


def config(case):
    stage = {"zero0": 0, "zero1": 1, "zero2": 2, "zero3": 3, "zero2_offload": 2, "fused_adam": 2}[case]
    zero = {"stage": stage}
    if case == "zero2_offload":
        zero["offload_optimizer"] = {"device": "cpu"}  # DeepSpeedCPUAdam: the op builder compiled for npu
    # Adam (not AdamW), no weight decay: torch.optim.Adam's update, which the CPU reference runs, both through the
    # foreach implementation (the same order of operations). torch_adam picks torch's Adam over the accelerator's
    # FusedAdam, except in the fused_adam case.
    params = {"lr": LR, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "adam_w_mode": False}
    if case not in ("fused_adam", "zero2_offload"):
        params.update(torch_adam=True, foreach=True)
    # DeepSpeed clips the gradient norm to 1.0 unless told otherwise; the reference does not clip.
    return {"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
            "optimizer": {"type": "Adam", "params": params}, "zero_optimization": zero, "steps_per_print": 10 ** 6}


def cpu_reference(world_size):
    """Data-parallel training as the ranks do it, on the CPU: each rank's micro-batch loss, their gradients averaged
    (the all-reduce), then torch.optim.Adam."""
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=True)
    losses = []
    for x, y in batches(world_size):
        optimizer.zero_grad()
        rank_losses = []
        for rank in range(world_size):
            part = slice(rank * MICRO_BATCH, (rank + 1) * MICRO_BATCH)
            loss = torch.nn.functional.mse_loss(model(x[part]), y[part])
            (loss / world_size).backward()
            rank_losses.append(loss.item())
        optimizer.step()
        losses.append(sum(rank_losses) / world_size)
    return losses, model


def run_case(case, rank, world_size):
    engine, _, _, _ = deepspeed.initialize(model=make_model(), model_parameters=None, config=config(case))
    engine.module.train()
    device = engine.device
    losses = []
    for x, y in batches(world_size):
        part = slice(rank * MICRO_BATCH, (rank + 1) * MICRO_BATCH)
        loss = torch.nn.functional.mse_loss(engine(x[part].to(device)), y[part].to(device))
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        losses.append(mean.item() / world_size)
    # The full parameters (ZeRO-3 gathers its partitions).
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), modifier_rank=None):
        params = [p.detach().cpu().clone() for p in engine.module.parameters()]
    engine.destroy()
    return losses, params


def main():
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert get_accelerator().device_name() == "npu", get_accelerator().device_name()
    get_accelerator().set_device(int(os.environ["LOCAL_RANK"]))
    deepspeed.init_distributed(dist_backend="hccl")
    cpu_losses, cpu_model = cpu_reference(world_size)
    for case in sys.argv[1:]:
        npu_losses, params = run_case(case, rank, world_size)
        if rank == 0:
            param_diff = max((p - q).abs().max().item() for p, q in zip(params, cpu_model.parameters()))
            print(json.dumps({"case": case, "steps": len(npu_losses), "npu_losses": npu_losses,
                              "cpu_losses": cpu_losses,
                              "loss_diff": max(abs(a - b) for a, b in zip(npu_losses, cpu_losses)),
                              "param_diff": param_diff}), flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
