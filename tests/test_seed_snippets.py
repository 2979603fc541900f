"""The snippets softnpu was asked to run, as users write them (README and the original request)."""

import re

import torch
from conftest import run_python

SNIPPET_DEVICE = """\
import torch; import torch_npu; print(torch.npu.is_available()); x = torch.randn(3, 3).npu(); print(x.device)
"""

SNIPPET_MATMUL = """\
a = torch.randn(1000, 1000).npu(); b = torch.randn(1000, 1000).npu(); c = torch.matmul(a, b); print(c.sum())
"""


def test_snippets_run_verbatim_and_print_the_cpu_result():
    # The snippets verbatim, then the CPU reference of the same matmul (a and b are unseeded, so only the child
    # knows them) and a bound for float32 summation error.
    reference = (
        "ref = torch.matmul(a.cpu().double(), b.cpu().double())\n"
        "print('REF', ref.sum().item(), ref.abs().sum().item())\n"
    )
    result = run_python(SNIPPET_DEVICE + SNIPPET_MATMUL + reference)
    lines = result.lines
    assert lines[0] == "True"
    assert lines[1] == "npu:0"
    m = re.fullmatch(r"tensor\((-?[\d.]+(?:e[+-]?\d+)?), device='npu:0'\)", lines[2])
    assert m, f"unexpected print of c.sum(): {lines[2]!r}"
    printed = float(m.group(1))
    _, ref_sum, ref_abs = lines[3].split()
    # float32 matmul and summation of 10^6 terms: errors far below 1e-5 of the sum of magnitudes; a wrong product
    # would be off by about the whole magnitude.
    assert abs(printed - float(ref_sum)) <= 1e-5 * float(ref_abs), (printed, ref_sum)


def test_amp_training_loop_lowers_the_loss():
    # The training loop of the request, on a small classification problem the model can learn.
    from torch.npu.amp import GradScaler, autocast

    torch.manual_seed(0)
    n, features, classes = 512, 16, 4
    centers = torch.randn(classes, features) * 3
    labels = torch.randint(0, classes, (n,))
    inputs = centers[labels] + torch.randn(n, features)
    batches = [(inputs[i : i + 64], labels[i : i + 64]) for i in range(0, n, 64)]

    model = torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes)).npu()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    scaler = GradScaler()

    epoch_losses = []
    for _epoch in range(6):
        total = 0.0
        for data, target in batches:
            data, target = data.npu(), target.npu()
            optimizer.zero_grad()
            with autocast():
                output = model(data)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item()
        epoch_losses.append(total / len(batches))

    assert output.dtype == torch.float16  # the linear layers ran in half precision
    assert all(p.dtype == torch.float32 and p.device.type == "npu" for p in model.parameters())
    assert epoch_losses[-1] < 0.5 * epoch_losses[0], epoch_losses
    assert scaler.get_scale() > 0 and torch.isfinite(torch.tensor(scaler.get_scale()))
