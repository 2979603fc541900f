"""Timing: each configuration (CPU eager, softnpu, the copy-through-CPU baseline) is measured in rounds that alternate
between configurations, so a noisy neighbour slows them alike; the result is the median over rounds."""

import statistics
import time
from contextlib import contextmanager

import torch

import softnpu


def synchronize(device: str) -> None:
    if device.startswith("npu"):
        torch.npu.synchronize()


@contextmanager
def copy_through_cpu(enabled: bool):
    """The baseline: every op as PyTorch's generic CPU fallback runs it (inputs to the host and back, synchronously)."""
    softnpu._C._set_copy_through_cpu(enabled)
    try:
        yield
    finally:
        softnpu._C._set_copy_through_cpu(False)


def measure(configs: dict, rounds: int = 7, min_seconds: float = 0.2) -> dict:
    """configs: name -> (device, fn) where fn(iterations) runs the workload; returns name -> seconds per iteration.
    Each config first calibrates an iteration count that takes about min_seconds."""
    counts = {}
    for name, (device, fn, baseline) in configs.items():
        with copy_through_cpu(baseline):
            fn(1)  # warm up: allocations, shape inference caches, lazy init
            synchronize(device)
            n = 1
            while True:
                start = time.perf_counter()
                fn(n)
                synchronize(device)
                if time.perf_counter() - start >= min_seconds or n >= 1 << 20:
                    break
                n *= 2
            counts[name] = n
    samples = {name: [] for name in configs}
    for _ in range(rounds):
        for name, (device, fn, baseline) in configs.items():
            with copy_through_cpu(baseline):
                synchronize(device)
                start = time.perf_counter()
                fn(counts[name])
                synchronize(device)
                samples[name].append((time.perf_counter() - start) / counts[name])
    return {name: statistics.median(s) for name, s in samples.items()}
