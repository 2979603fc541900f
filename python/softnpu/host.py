"""The host CPU under the software NPU: its model, the instruction-set features that decide how half precision
computes (csrc/backend/ops/cube.h), and the choice made. Printed by `softnpu report` and `softnpu doctor`, and recorded
with every benchmark, since figures from hosts with and without native half-precision units differ by orders of
magnitude."""

import os
import platform

import torch

from . import _C

# The features ATen's half-precision kernels use where present.
HALF_PRECISION_FEATURES = ("avx512_fp16", "amx_fp16", "avx512_bf16", "amx_bf16", "amx_tile")


def _cpuinfo(field: str) -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_vendor() -> str:
    """"GenuineIntel", "AuthenticAMD", ... or "" where the kernel does not say."""
    return _cpuinfo("vendor_id") or ""


def features() -> dict:
    """Each feature of HALF_PRECISION_FEATURES: whether this host has it (as ATen's cpuinfo detects it)."""
    caps = torch.cpu.get_capabilities()
    return {name: bool(caps.get(name, False)) for name in HALF_PRECISION_FEATURES}


def half_compute() -> dict:
    """dtype name -> how matrix and convolution ops compute in it here, with why: {"float16": "float32 compute (the
    host has no avx512_fp16 or amx_fp16)", ...}. Raises RuntimeError for a malformed SOFTNPU_HALF_COMPUTE."""
    return dict(line.split(": ", 1) for line in _C._cube_compute().splitlines())


def describe() -> dict:
    """What a benchmark records of its host."""
    return {"cpu": cpu_model(), "vendor": cpu_vendor(), "cores": os.cpu_count(),
            "features": features(), "half_compute": half_compute()}
