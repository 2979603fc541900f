"""softnpu demo (`make demo`): train a small model on the npu device with mixed precision.

The training loop is the one torch_npu users write for Ascend (torch.npu.amp's autocast and GradScaler); nothing in
it is specific to softnpu. Halfway through, `npu-smi info` shows the device at work: its AI cores busy, and this
process holding device memory.
"""

import subprocess
import sys
import time
from pathlib import Path

import torch
import torch_npu  # noqa: F401  (optional: `import torch` alone registers the npu device)
import softnpu.host
from torch import nn
from torch.npu.amp import GradScaler, autocast
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, CLUSTERS_PER_CLASS, HIDDEN = 32, 10, 4, 1024
TRAIN_SAMPLES, TEST_SAMPLES, BATCH_SIZE, EPOCHS = 32768, 4096, 256, 6
NPU_SMI_EPOCH = 2  # npu-smi runs in the middle of this epoch


def make_task(generator):
    """A synthetic but learnable task: points around random centres in FEATURES dimensions, each class made of
    CLUSTERS_PER_CLASS clusters (so no linear boundary separates the classes: a linear model gets about 70%).
    Returns the training and test sets, on the host."""
    centres = torch.randn(CLASSES * CLUSTERS_PER_CLASS, FEATURES, generator=generator)

    def dataset(n):
        cluster = torch.randint(0, len(centres), (n,), generator=generator)
        points = centres[cluster] + torch.randn(n, FEATURES, generator=generator)
        return TensorDataset(points, cluster % CLASSES)

    return dataset(TRAIN_SAMPLES), dataset(TEST_SAMPLES)


class ProgressBar:
    """A minimal tqdm: `for item in ProgressBar(items, label)`, then `close(figures)` ends the line.

    On a terminal the bar is redrawn in place (at most ten times a second); otherwise only its final line is printed.
    """

    def __init__(self, iterable, label, width=24):
        self.iterable, self.label, self.width = iterable, label, width
        self.total, self.count = len(iterable), 0
        self.start = self.last_draw = time.perf_counter()
        self.live = sys.stdout.isatty()
        self.fill, self.empty = ("█", "░") if sys.stdout.encoding.lower().startswith("utf") else ("#", "-")

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.count += 1
            if self.live and time.perf_counter() - self.last_draw > 0.1:
                self._draw()

    def close(self, figures=""):
        self._draw(figures, end="\n")

    def _draw(self, figures="", end=""):
        elapsed = time.perf_counter() - self.start
        done = self.width * self.count // self.total
        bar = self.fill * done + self.empty * (self.width - done)
        rate = self.count / elapsed if elapsed > 0 else 0.0
        print(f"\r{self.label} |{bar}| {self.count}/{self.total} [{elapsed:4.1f}s, {rate:5.1f} it/s] {figures}",
              end=end, flush=True)
        self.last_draw = time.perf_counter()


def start_npu_smi():
    """Starts `npu-smi info` in the background (it samples the devices for 150 ms while training goes on)."""
    npu_smi = Path(sys.executable).with_name("npu-smi")
    if not npu_smi.exists():
        return None
    return subprocess.Popen([str(npu_smi), "info"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device="npu")
    for data, target in loader:
        data, target = data.npu(), target.npu()
        with autocast():
            correct += (model(data).argmax(1) == target).sum()
    model.train()
    return correct.item() / len(loader.dataset)


def main():
    torch.manual_seed(0)  # seeds the npu devices too
    train_set, test_set = make_task(torch.Generator().manual_seed(0))
    train_loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=1024)

    props = torch.npu.get_device_properties(0)
    with autocast():
        amp_dtype = str(torch.get_autocast_dtype("npu")).removeprefix("torch.")
    print(f"Training on npu:0 ({props.name}, {props.total_memory >> 20} MiB, {props.multi_processor_count} AI cores)"
          f" with mixed precision ({amp_dtype}: its matrix ops {softnpu.host.half_compute()[amp_dtype]})")
    print(f"Task: {TRAIN_SAMPLES} points in {FEATURES} dimensions, {CLASSES} classes of {CLUSTERS_PER_CLASS} clusters "
          f"each; model: MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}\n")

    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    ).npu()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    scaler = GradScaler()

    start = time.perf_counter()
    for epoch in range(1, EPOCHS + 1):
        # Loss and accuracy add up on the device: reading them each batch would wait for it.
        loss_sum = torch.zeros((), device="npu")
        correct = torch.zeros((), dtype=torch.long, device="npu")
        npu_smi = None
        bar = ProgressBar(train_loader, f"epoch {epoch}/{EPOCHS}")
        for step, (data, target) in enumerate(bar):
            data, target = data.npu(), target.npu()
            optimizer.zero_grad()
            with autocast():
                output = model(data)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

            loss_sum += loss.detach() * len(target)
            correct += (output.argmax(1) == target).sum()
            if epoch == NPU_SMI_EPOCH and step == len(train_loader) // 2:
                npu_smi = start_npu_smi()

        train_loss = loss_sum.item() / TRAIN_SAMPLES
        train_acc = correct.item() / TRAIN_SAMPLES
        test_acc = evaluate(model, test_loader)
        bar.close(f"loss {train_loss:.3f}  accuracy {train_acc:6.1%}  test {test_acc:6.1%}")
        if npu_smi is not None:
            print(f"\n$ npu-smi info    (taken during epoch {epoch})\n{npu_smi.communicate()[0]}")
    elapsed = time.perf_counter() - start

    # Sync points: ops that had to wait for the device (their output's shape depends on data, or they have no
    # asynchronous path yet). A training loop that avoids them keeps the host ahead of the device.
    sync = torch.npu.sync_points()
    by_op = ", ".join(f"{op} x{n}" for op, n in sorted(sync["by_op"].items(), key=lambda kv: -kv[1]))
    print(f"\nDone in {elapsed:.1f} s ({EPOCHS * TRAIN_SAMPLES / elapsed:,.0f} samples/s, AMP {amp_dtype}): "
          f"final loss {train_loss:.3f}, "
          f"accuracy {train_acc:.1%}, test accuracy {test_acc:.1%}")
    print(f"Peak device memory {torch.npu.max_memory_allocated() / 2**20:.1f} MiB; "
          f"sync points {sync['total']}" + (f" ({by_op})" if by_op else ""))
    if test_acc < 0.9:
        sys.exit(f"demo: the model did not learn the task (test accuracy {test_acc:.1%})")


if __name__ == "__main__":
    main()
