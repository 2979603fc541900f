"""The cost model's entry points: thin wrappers over its C++ (``csrc/backend/cost/``), the one model the profiler and
the estimator share. Every estimate is a ``KernelEstimate``; ``soc`` names a row of the SoC table (None: the chip the
device presents as, ``SOFTNPU_SOC_VERSION``), or is a dict of a chip's figures in the table's fields (a chip the
device cannot present as, such as the first Ascend 910 a published result was measured on)."""

from dataclasses import dataclass

from .. import _C


@dataclass(frozen=True)
class KernelEstimate:
    """One kernel (or copy, or collective) on the SoC."""

    us: float  # duration on the device
    flops: float  # arithmetic counted: the cube's for cube kernels, element work for vector kernels
    model_flops: float  # the op's FLOPs as torch's flop counter counts them (cube ops only): what MFU counts
    bytes: float  # device memory (or link) traffic
    bound: str  # "compute", "memory", "launch" or "communication"
    unit: str  # "cube", "vector", "copy" or "collective"


def _soc(soc: str | dict | None) -> str | dict | None:
    return soc or None


def estimate_op(op: str, args: tuple, kwargs: dict, outputs: list, soc: str | dict | None = None) -> KernelEstimate | None:
    """The kernel the op path launches for ``op`` ("aten::mm", "aten::add.Tensor") called with ``args``/``kwargs``
    (tensors may be fake) and producing the fresh tensors ``outputs``; None for an op that launches none (a view, an
    allocation)."""
    e = _C._cost_estimate_op(op, tuple(args), dict(kwargs), list(outputs), _soc(soc))
    return None if e is None else KernelEstimate(**e)


def estimate_copy(nbytes: float, kind: str, soc: str | dict | None = None, *, pageable: bool = False
                  ) -> KernelEstimate:
    """A copy of ``nbytes``: ``kind`` "HtoD", "DtoH" (over the SoC's host link) or "DtoD" (on HBM); ``pageable``: the
    host side is not pinned (staged through a pinned buffer by the host)."""
    return KernelEstimate(**_C._cost_estimate_copy(float(nbytes), kind, bool(pageable), _soc(soc)))


def estimate_collective(kind: str, nbytes: float, ranks: int, link: str = "hccs", soc: str | dict | None = None
                        ) -> KernelEstimate:
    """A collective (``kind``: "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
    of each rank's ``nbytes`` over ``ranks`` ranks, on ``link`` ("hccs" within a server, "roce" between servers)."""
    return KernelEstimate(**_C._cost_estimate_collective(kind, float(nbytes), int(ranks), link, _soc(soc)))


def chip(soc: str | dict | None = None) -> dict:
    """The chip's figures as the model uses them (per second, bytes)."""
    return _C._cost_chip(_soc(soc))


def factors() -> list[tuple[str, float, str, str]]:
    """The model's global factors: (name, value, unit, source), from ``csrc/common/cost_factors.def``."""
    return [tuple(row) for row in _C._cost_factors()]


def soc_table() -> str:
    """The SoC table (``csrc/common/soc_profiles.def``) and the global factors, as text, with their sources."""
    lines = [f"{'SoC':<16}{'cores':>6}{'MHz':>6}{'fp16 TF':>9}{'fp32 TF':>9}{'int8 TO':>9}{'vec TF':>8}"
             f"{'HBM GiB':>8}{'HBM GB/s':>9}{'L2 MiB':>7}{'HCCS GB/s':>10}{'RoCE GB/s':>10}{'host GB/s':>10}  source"]
    for p in _C._soc_profiles():
        lines.append(f"{p['name']:<16}{p['ai_cores']:>6}{p['clock_mhz']:>6}{p['cube_fp16_tflops']:>9.1f}"
                     f"{p['cube_fp32_tflops']:>9.1f}{p['cube_int8_tops']:>9.1f}{p['vector_fp16_tflops']:>8.2f}"
                     f"{p['hbm_bytes'] / 2**30:>8.0f}{p['hbm_gbps']:>9.0f}{p['l2_bytes'] / 2**20:>7.0f}"
                     f"{p['hccs_gbps']:>10.0f}{p['roce_gbps']:>10.0f}{p['host_link_gbps']:>10.0f}  {p['source']}")
    lines.append("")
    lines.append("global factors (csrc/common/cost_factors.def):")
    for name, value, unit, source in factors():
        lines.append(f"  {name:<22}{value:>8g} {unit:<20} {source}")
    return "\n".join(lines)
