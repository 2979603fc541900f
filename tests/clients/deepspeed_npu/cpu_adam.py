"""DeepSpeed's CPU Adam (ZeRO-Offload's optimizer) built by its npu op builder -- compiled against torch_npu's headers
(torch_npu/include, ASCEND_HOME_PATH/include) and linked -ltorch_npu -lascendcl -- and run against torch.optim.Adam
on the CPU. Prints one JSON line: {"builder", "sources", "steps", "loss_diff", "param_diff"}."""
import json

import torch
import torch_npu  # noqa: F401
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.adam import DeepSpeedCPUAdam

STEPS = 5


def train(make_optimizer):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, list(model.parameters())


def main():
    builder = get_accelerator().create_op_builder("CPUAdamBuilder")
    ds_losses, ds_params = train(lambda p: DeepSpeedCPUAdam(p, lr=1e-2, adamw_mode=False, weight_decay=0.0))
    ref_losses, ref_params = train(lambda p: torch.optim.Adam(p, lr=1e-2))
    print(json.dumps({
        "builder": f"{type(builder).__module__}.{type(builder).__name__}",
        "include_paths": builder.include_paths(),
        "ldflags": builder.extra_ldflags(),
        "steps": STEPS,
        "loss_diff": max(abs(a - b) for a, b in zip(ds_losses, ref_losses)),
        "param_diff": max((p - q).abs().max().item() for p, q in zip(ds_params, ref_params)),
    }), flush=True)


if __name__ == "__main__":
    main()
